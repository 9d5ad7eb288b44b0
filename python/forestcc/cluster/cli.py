"""forestcc-cluster: make emulated hosts (network, UTS and mount namespaces on a bridge) and run
commands on them. The subcommands are thin: the work is in cluster.py, run_command.py and
rsh_agent.py."""
from __future__ import annotations

import argparse
import os
import sys

from . import names
from .cluster import Cluster, clean, list_clusters
from .run_command import parse_cut, run_on_cluster
from .shaping import Shaping
from .system import ClusterError

__all__ = ["main"]

_DESCRIPTION = """\
Emulated hosts on this machine, for running forestcc (and mpirun, torch.distributed) across
"machines". Each host is a network namespace joined to one Linux bridge by a veth link (eth0,
an IPv4 address in a private 10.x.y.0/24 and an IPv6 one in fd46:6363::/32), with its own hostname
(h0, h1, ...; every host's /etc/hosts names them all) and its own /dev/shm (so forestcc sees
separate nodes). This machine is .1 on the bridge. Links can be shaped (tc tbf or htb) and cut.
Needs root, iproute2 and util-linux.

Names are unique per cluster (<prefix><6 hex>, e.g. fcc3f9a1c), so several clusters and jobs
share the machine; `run` always takes its cluster down, and a cluster whose owning process died
is taken down by the next one made, or by `clean`."""

_EPILOG = """\
examples:
  forestcc-cluster run --hosts 2 --ranks-per-host 2 --label -- python prog.py
  forestcc-cluster run --hosts 2 --ranks-per-host 1 --rate 1gbit --cut h1@3.5 -- python prog.py
  forestcc-cluster run --hosts 2 --outside -- mpirun --host h0:2,h1:2 \\
      --mca plm_rsh_agent "forestcc-cluster rsh-agent" hostname
  id=$(forestcc-cluster up --hosts 3 --rate 10gbit)     # then, as often as needed:
  forestcc-cluster exec $id h1 -- ip addr
  forestcc-run --cluster $id --hosts h0:2,h1:2,h2:2 python prog.py
  forestcc-cluster down $id"""


def _shaping_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("shaping of every host link (both directions)")
    g.add_argument("--rate", help="e.g. 1gbit, 500mbit (tc rate in bits per second)")
    g.add_argument("--burst", help="bucket size, e.g. 512kb (default 2 ms of the rate, at "
                                   "least 256kb: it must hold a 64 KiB offload packet)")
    g.add_argument("--latency", default="50ms",
                   help="tbf's queue limit: how long a packet may wait before it is dropped "
                        "(default 50ms; this is not added delay, which needs netem, absent here)")
    g.add_argument("--qdisc", choices=("tbf", "htb"), default="tbf",
                   help="token bucket (default) or one htb class")


def _shaping(args: argparse.Namespace) -> Shaping | None:
    if args.rate is None:
        if args.burst is not None:
            raise ValueError("--burst needs --rate")
        return None
    return Shaping(args.rate, burst=args.burst, latency=args.latency, qdisc=args.qdisc)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="forestcc-cluster", description=_DESCRIPTION,
                                epilog=_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="make a cluster, run a command on it, take it down",
                         description="Make a cluster, run CMD on it, take the cluster down "
                                     "(also when CMD fails, or on Ctrl-C or SIGTERM). Exits "
                                     "with CMD's exit code.")
    run.add_argument("--hosts", type=int, required=True, help="number of hosts")
    mode = run.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ranks-per-host", type=int, metavar="R",
                      help="run CMD as R ranks on every host through forestcc-run (rank 0 on "
                           "h0, ranks filled host by host)")
    mode.add_argument("--outside", action="store_true",
                      help="run CMD once on this machine, outside the hosts, with "
                           "FORESTCC_CLUSTER set (for mpirun with the rsh agent, or scripts)")
    run.add_argument("--cut", action="append", default=[], metavar="HOST@SECONDS",
                     help="take HOST's link down SECONDS after CMD starts (repeatable)")
    run.add_argument("-l", "--label", action="store_true",
                     help="forestcc-run's --label: prefix output lines with [rank]")
    run.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="forestcc-run's --env: set a variable in every rank (repeatable)")
    run.add_argument("--prefix", default=names.DEFAULT_PREFIX,
                     help=f"the cluster's name prefix (default {names.DEFAULT_PREFIX})")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="say the cluster's id and addresses, and when CMD ended")
    _shaping_args(run)
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    up = sub.add_parser("up", help="make a cluster that stays until `down`; prints its id",
                        description="Make a cluster that stays until `forestcc-cluster down ID` "
                                    "(it has no owning process). Prints its id on stdout and "
                                    "its hosts on stderr.")
    up.add_argument("--hosts", type=int, required=True, help="number of hosts")
    up.add_argument("--prefix", default=names.DEFAULT_PREFIX,
                    help=f"the cluster's name prefix (default {names.DEFAULT_PREFIX})")
    _shaping_args(up)

    down = sub.add_parser("down", help="take clusters down", description="Take the clusters "
                          "down: stop what runs in their hosts, remove namespaces, links, mounts.")
    down.add_argument("ids", nargs="+", metavar="ID")

    ex = sub.add_parser("exec", help="run a command inside one host",
                        description="Run CMD inside HOST (its network, hostname and /dev/shm); "
                                    "without CMD, a shell. Exits with CMD's exit code.")
    ex.add_argument("--cluster", default=os.environ.get("FORESTCC_CLUSTER"),
                    help="the cluster's id (default $FORESTCC_CLUSTER)")
    ex.add_argument("host", help="h0, h1, ... or a host's address")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    for name, doc in (("cut", "take a host's link down (its packets are dropped)"),
                      ("restore", "bring a cut link back up")):
        c = sub.add_parser(name, help=doc, description=doc[0].upper() + doc[1:] + ".")
        c.add_argument("--cluster", default=os.environ.get("FORESTCC_CLUSTER"),
                       help="the cluster's id (default $FORESTCC_CLUSTER)")
        c.add_argument("host")

    sub.add_parser("list", help="list the clusters on this machine",
                   description="One line per cluster: id, hosts and addresses, owner (pid, "
                               "'persistent' for `up` ones, 'gone' for leftovers).")

    cl = sub.add_parser("clean", help="take down leftovers of crashed runs",
                        description="Take down clusters whose owning process is gone (and "
                                    "namespaces or links named like a cluster's without one); "
                                    "with --all, also persistent ones made by `up`.")
    cl.add_argument("--prefix", default=None, help="only clusters of this prefix family")
    cl.add_argument("--all", action="store_true", help="also clusters made by `up`")

    sub.add_parser("rsh-agent", add_help=False,
                   help="ssh stand-in entering a host: [--cluster ID] [ssh options] HOST CMD...",
                   description="For mpirun --mca plm_rsh_agent and forestcc-run --ssh.")
    return p


def _command(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _cluster_id(parser, value: str | None) -> str:
    if not value:
        parser.error("which cluster? give --cluster ID or set FORESTCC_CLUSTER")
    return value


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rsh-agent"]:  # its arguments are ssh's, not ours
        from .rsh_agent import main as agent
        agent(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        sys.exit(_dispatch(parser, args))
    except ClusterError as exc:
        raise SystemExit(f"forestcc-cluster: {exc}") from None
    except ValueError as exc:
        parser.error(str(exc))


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "run":
        cmd = _command(args.cmd)
        if not cmd:
            parser.error("run: no command given (after --)")
        if args.ranks_per_host is not None and args.ranks_per_host < 1:
            parser.error("--ranks-per-host must be at least 1")
        launcher_args = (["--label"] if args.label else []) + [f"--env={e}" for e in args.env]
        if args.outside and launcher_args:
            parser.error("--label and --env are forestcc-run's: not with --outside")
        return run_on_cluster(args.hosts, args.ranks_per_host, cmd, shaping=_shaping(args),
                              cuts=[parse_cut(c) for c in args.cut], launcher_args=launcher_args,
                              prefix=args.prefix, verbose=args.verbose)
    if args.command == "up":
        c = Cluster.create(args.hosts, shaping=_shaping(args), prefix=args.prefix,
                           persistent=True)
        for h in c.hosts:
            print(f"{h.name} {h.address} {h.address6} netns={h.netns}", file=sys.stderr)
        print(c.id)
        return 0
    if args.command == "down":
        for cid in args.ids:
            Cluster.attach(cid).destroy()
        return 0
    if args.command == "exec":
        c = Cluster.attach(_cluster_id(parser, args.cluster))
        cmd = _command(args.cmd) or [os.environ.get("SHELL", "/bin/sh")]
        argv = c.host(args.host).enter_argv() + cmd
        os.execvp(argv[0], argv)
    if args.command in ("cut", "restore"):
        c = Cluster.attach(_cluster_id(parser, args.cluster))
        (c.cut if args.command == "cut" else c.restore)(args.host)
        return 0
    if args.command == "list":
        for state in list_clusters():
            owner = state.get("owner")
            who = ("persistent" if owner is None else
                   f"pid {owner['pid']}" if state["alive"] else "gone")
            hosts = " ".join(f"{h['name']}={h['address']}" for h in state["hosts"])
            print(f"{state['id']} {state['subnet']} owner={who} {hosts}")
        return 0
    if args.command == "clean":
        for cid in clean(args.prefix, include_persistent=args.all):
            print(f"took down {cid}")
        return 0
    raise AssertionError(args.command)
