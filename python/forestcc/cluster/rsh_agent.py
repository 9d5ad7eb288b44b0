"""An ssh stand-in that enters a host of an emulated cluster, for launchers that start remote
processes through ssh: Open MPI (`mpirun --mca plm_rsh_agent "forestcc-cluster rsh-agent"`, or
`-launch-agent`) and forestcc-run (`--launcher ssh --ssh "forestcc-cluster rsh-agent"`).

Called as ssh is: [ssh options] [user@]HOST COMMAND... The options are accepted and ignored; the
words of COMMAND are joined by spaces and run by `sh -c` inside HOST, as sshd runs them through
the login shell. stdin, stdout, stderr and the exit status pass through (the agent execs)."""
from __future__ import annotations

import os

from .cluster import Cluster
from .system import ClusterError

__all__ = ["agent_argv"]

# ssh's options that take a value (the rest are flags).
_SSH_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")


def agent_argv(args: list[str], cluster_id: str | None) -> list[str]:
    """The argv that runs an ssh-style command line `args` inside the named host."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        opt = args[i]
        if opt == "--cluster":
            cluster_id = args[i + 1] if i + 1 < len(args) else None
            i += 2
            continue
        i += 1
        # "-o X" takes the next word; "-oX" and flag clusters such as "-xT" do not.
        if len(opt) == 2 and opt[1] in _SSH_WITH_VALUE:
            i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if i >= len(args):
        raise ClusterError("rsh-agent: no host given (usage: rsh-agent [--cluster ID] "
                           "[ssh options] HOST COMMAND...)")
    host = args[i].rpartition("@")[2]
    command = " ".join(args[i + 1:])
    if not command:
        raise ClusterError(f"rsh-agent: no command for {host} (an interactive login is "
                           "`forestcc-cluster exec HOST`)")
    if not cluster_id:
        raise ClusterError("rsh-agent: which cluster? Give --cluster ID or set FORESTCC_CLUSTER "
                           "(forestcc-cluster run sets it for the command it runs)")
    return Cluster.attach(cluster_id).host(host).enter_argv() + ["sh", "-c", command]


def main(args: list[str]) -> None:
    try:
        argv = agent_argv(args, os.environ.get("FORESTCC_CLUSTER"))
    except ClusterError as exc:
        raise SystemExit(f"forestcc-cluster {exc}") from None
    os.execvp(argv[0], argv)
