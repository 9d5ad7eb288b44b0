"""forestcc-perf COLL [flags]: nccl-tests' flags and table, on forestcc or a peer library.

Run under any launcher: ``forestcc-run -n 4 forestcc-perf all_reduce -b 8 -e 64M -f 2``,
``mpirun -n 4 forestcc-perf all_gather --backend mpi``, ``torchrun ... --backend gloo``.
Rank 0 prints the table; usage errors print one line on stderr and exit 2; a #wrong above 0
exits 1; a rank that fails prints its error and ends the run with exit 1.
``forestcc-perf --tune`` sweeps forestcc's algorithms instead (see forestcc_perf.tune).
"""
from __future__ import annotations

import argparse
import os
import sys

from forestcc_perf import __version__, check, table
from forestcc_perf.backends import BACKENDS, Backend, BackendUnavailable, create, creation_order
from forestcc_perf.backends.base import launcher_rank
from forestcc_perf.backends.forestcc_backend import MEMORY_KINDS
from forestcc_perf.collectives import (
    COLLECTIVES,
    DATATYPES,
    OPS,
    Collective,
    find_collective,
    find_datatype,
)
from forestcc_perf.runner import AVERAGE_MODES, Progress, Runner, Settings, spread_cpu
from forestcc_perf.sizes import format_size, parse_size, size_steps


class UsageError(Exception):
    """A bad command line: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:   # argparse's usage dump is not one line
        raise UsageError(message)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser(prog: str, preset: str | None) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Benchmark a collective with nccl-tests' flags and "
                "table, on forestcc or a peer library (mpi, gloo, nccl).",
                epilog="example: forestcc-run -n 2 forestcc-perf all_reduce -b 8 -e 64M -f 2")
    if preset is None:
        p.add_argument("collective", nargs="?", help="one of " + ", ".join(COLLECTIVES) +
                       " (nccl-tests binary names such as all_reduce_perf work too); with "
                       "--tune: the one to tune, or all (default)")
    a = p.add_argument
    # size defaults: 32M..32M (nccl-tests), or 16..64M by 4 with --tune (filled in by _resolve)
    a("-b", "--minbytes", type=_size, default=None, help="first size (32M; --tune: 16)")
    a("-e", "--maxbytes", type=_size, default=None, help="last size (32M; --tune: 64M)")
    a("-i", "--stepbytes", type=_size, default=1 << 20, help="additive step (1M)")
    a("-f", "--stepfactor", type=int, default=None, help="multiplicative step (off: 1; "
      "--tune: 4)")
    a("-o", "--op", default="sum", help="sum, prod, max, min, avg, mulsum or all (sum)")
    a("-d", "--datatype", default="float", help="int8 uint8 int32 uint32 int64 uint64 half "
      "float double bfloat16 f8e4m3 f8e5m2 or all (float)")
    a("-r", "--root", default="0", help="root of rooted collectives, or all (0)")
    a("-n", "--iters", type=int, default=20, help="timed iterations (20)")
    a("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations (5)")
    a("-m", "--agg_iters", type=int, default=1, help="operations per iteration (1)")
    a("-a", "--average", type=int, default=1, help="time across ranks: 0 rank 0, 1 avg, "
      "2 min, 3 max (1)")
    a("-c", "--check", type=int, default=1, help="checked iterations, 0 = off (1)")
    a("-z", "--blocking", type=int, default=0, help="1: synchronise after each operation (0)")
    a("-G", "--cudagraph", type=int, default=0, help="CUDA graph launches (not supported)")
    a("-J", "--output_file", help="write every row and the environment to this JSON file")
    a("-T", "--timeout", type=float, default=0.0, help="fail a measurement after this many "
      "seconds (0: never)")
    a("-t", "--nthreads", type=int, default=1, help="accepted for nccl-tests scripts: must be 1")
    a("-g", "--ngpus", type=int, default=1, help="accepted for nccl-tests scripts: must be 1")
    a("--backend", default="forestcc", help="library to measure: " + ", ".join(BACKENDS))
    a("--compare", default="", help="comma-separated peers measured at every size in the "
      "same launch; adds busbw ratio columns (this / peer)")
    a("--algo", default=None, help="forestcc algorithm (auto, ring, eager, ..., or a plan file); "
      "forestcc only; sizes a built-in algorithm does not serve are skipped")
    a("--memory", default="numpy", help="forestcc's buffers: numpy (ordinary arrays) or "
      "forestcc (forestcc.empty: shared memory, zero-copy between ranks) (numpy)")
    a("--plot", default=None, metavar="PNG", help="plot busbw against size (needs matplotlib)")
    a("--tune", action="store_true", help="sweep forestcc's built-in algorithms over the sizes "
      "and write the tuning table that algo='auto' reads (rules for the --memory kind swept: "
      "numpy -> private, forestcc -> shared)")
    a("--tune-output", "--tune_output", default=None, metavar="JSON", help="where --tune "
      "writes the table (default: forestcc.tuning.user_path(), ~/.config/forestcc/"
      "tuning.json); rules there for other rank counts or memory kinds are kept")
    a("--tune-ranks", "--tune_ranks", default=None, metavar="MIN:MAX", help="rank range the "
      "tuned rules apply to (default: the rank count measured)")
    a("--tune-repeats", "--tune_repeats", type=int, default=3, metavar="R", help="--tune "
      "repeats its whole sweep of sizes R times (algorithms interleaved) and keeps each "
      "algorithm's best time per size (3)")
    a("--version", action="version", version=f"forestcc-perf {__version__}")
    return p


def _resolve(args: argparse.Namespace, preset: str | None) -> dict:
    """Turn the flags into what to run, or raise UsageError naming the problem."""
    name = preset or args.collective
    coll, tuned = None, None
    if args.tune:
        from forestcc_perf.tune import TUNED, find_tuned
        tuned = find_tuned(name)
        if tuned is None:
            raise UsageError(f"--tune: cannot tune {name!r} (choose from {', '.join(TUNED)}, "
                             f"all)")
    elif name is None:
        raise UsageError("the following arguments are required: collective")
    else:
        coll = find_collective(name)
        if coll is None:
            raise UsageError(f"unknown collective {name!r} "
                             f"(choose from {', '.join(COLLECTIVES)})")
    # --tune: 16 B (the smallest size with an element per rank at 4 ranks) to 64M by 4
    defaults = ((16, 64 << 20, 4) if args.tune else (32 << 20, 32 << 20, 1))
    for key, value in zip(("minbytes", "maxbytes", "stepfactor"), defaults):
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.datatype.strip().lower() == "all":
        dtypes, explicit_dtype = list(DATATYPES.values()), False
    else:
        dt = find_datatype(args.datatype)
        if dt is None:
            raise UsageError(f"unknown datatype {args.datatype!r} "
                             f"(choose from {', '.join(DATATYPES)}, all)")
        dtypes, explicit_dtype = [dt], True
    op = args.op.strip().lower()
    if op != "all" and op not in OPS:
        raise UsageError(f"unknown op {args.op!r} (choose from {', '.join(OPS)}, all)")
    ops = list(OPS) if op == "all" else [op]
    if coll is not None and not coll.reduces:
        ops = ["sum"]   # not used; the redop column says "none"
    try:
        sizes = size_steps(args.minbytes, args.maxbytes, args.stepbytes, args.stepfactor)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if explicit_dtype:
        for flag, value in (("-b", args.minbytes), ("-e", args.maxbytes)):
            if value % dtypes[0].itemsize:
                raise UsageError(f"{flag} {value}: not a whole number of {dtypes[0].name} "
                                 f"elements ({dtypes[0].itemsize} bytes each)")
    for flag, value, low in (("-n", args.iters, 1), ("-w", args.warmup_iters, 0),
                             ("-m", args.agg_iters, 1), ("-c", args.check, 0),
                             ("-G", args.cudagraph, 0)):
        if value < low:
            raise UsageError(f"{flag} must be at least {low}, got {value}")
    if args.average not in AVERAGE_MODES:
        raise UsageError(f"-a must be 0, 1, 2 or 3, got {args.average}")
    if args.timeout < 0:
        raise UsageError(f"-T must be positive or 0, got {args.timeout:g}")
    if args.nthreads != 1 or args.ngpus != 1:
        raise UsageError("-t and -g must be 1: forestcc-perf runs one rank per process "
                         "(start more with the launcher's -n)")
    root = args.root.strip().lower()
    if root != "all" and not root.isdigit():
        raise UsageError(f"-r must be a rank or all, got {args.root!r}")
    backend = args.backend.strip().lower()
    peers = [p.strip().lower() for p in args.compare.split(",") if p.strip()]
    for name in [backend, *peers]:
        if name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if args.algo and backend != "forestcc":
        raise UsageError(f"--algo selects a forestcc algorithm; backend {backend} has none")
    args.memory = args.memory.strip().lower()
    if args.memory not in MEMORY_KINDS:
        raise UsageError(f"unknown --memory {args.memory!r} (choose from "
                         f"{', '.join(MEMORY_KINDS)})")
    if args.memory != "numpy" and "forestcc" not in (backend, *peers):
        raise UsageError(f"--memory {args.memory} selects forestcc's buffers; this run does "
                         f"not measure forestcc")
    tune_ranks = None
    if args.tune:
        if backend != "forestcc" or peers or args.algo:
            raise UsageError("--tune sweeps forestcc's algorithms: it takes no --backend "
                             "other than forestcc, no --compare and no --algo")
        if not explicit_dtype or op == "all" or root == "all":
            raise UsageError("--tune measures one datatype, op and root: -d, -o and -r "
                             "cannot be all")
        if args.tune_ranks is not None:
            tune_ranks = _rank_range(args.tune_ranks)
        if args.output_file or args.plot:
            raise UsageError("--tune writes a tuning table (--tune-output); -J and --plot "
                             "do not apply")
        if args.tune_repeats < 1:
            raise UsageError(f"--tune-repeats must be at least 1, got {args.tune_repeats}")
    elif args.tune_output or args.tune_ranks:
        raise UsageError("--tune-output and --tune-ranks go with --tune")
    if args.plot:
        from forestcc_perf.plot import PlotUnavailable, require_matplotlib
        try:
            require_matplotlib()
        except PlotUnavailable as e:
            raise UsageError(str(e)) from None
    return {"coll": coll, "dtypes": dtypes, "explicit_dtype": explicit_dtype, "ops": ops,
            "explicit_op": op != "all", "sizes": sizes, "root": root, "backend": backend,
            "peers": peers, "tuned": tuned, "tune_ranks": tune_ranks}


def _rank_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not (sep and lo.strip().isdigit() and hi.strip().isdigit()) or int(lo) > int(hi) \
            or int(lo) < 1:
        raise UsageError(f"--tune-ranks {text!r}: expected MIN:MAX with 1 <= MIN <= MAX, "
                         f"e.g. 2:2 or 2:8")
    return int(lo), int(hi)


def _combinations(plan: dict, backends: list[Backend]):
    """(dtype, op) pairs every backend can run; unsupported explicit choices are errors."""
    coll, out = plan["coll"], []
    for dtype in plan["dtypes"]:
        for op in plan["ops"]:
            reasons = [r for b in backends if (r := b.unsupported(coll, dtype, op))]
            if not reasons:
                out.append((dtype, op))
            elif plan["explicit_dtype"] and plan["explicit_op"]:
                raise UsageError(reasons[0])
    if not out:
        raise UsageError(f"no datatype and op of this run is supported by "
                         f"{', '.join(b.name for b in backends)}")
    return out


def _preamble(plan: dict, args: argparse.Namespace, primary: Backend, peers: list[Backend],
              labels: list[str], ranks: list[dict]) -> list[str]:
    coll = plan["coll"]
    measured = [primary.name, *(p.name for p in peers)]
    memory = f"memory: {args.memory}  " if "forestcc" in measured else ""
    step = (f"{args.stepfactor}(factor)" if args.stepfactor > 1 else f"{args.stepbytes}(bytes)")
    lines = [f"# forestcc-perf {__version__}: backend {primary.name} ({primary.version()})"]
    lines += [f"# compare: {label} ({p.version()})" for label, p in zip(labels, peers)]
    lines += [f"# Collective test starting: {coll.binary}",
              (f"# nThread 1 nGpus {0 if primary.device == 'cpu' else 1} minBytes "
               f"{args.minbytes} maxBytes {args.maxbytes} step: {step} warmup iters: "
               f"{args.warmup_iters} iters: {args.iters} agg iters: {args.agg_iters} "
               f"validation: {args.check} graph: 0"),
              (f"# algo: {args.algo or 'default'}  {memory}average: "
               f"{AVERAGE_MODES[args.average]}  blocking: {args.blocking}  timeout: "
               f"{args.timeout:g}"),
              "#", "# Using devices"]
    for r, info in enumerate(ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {info['pid']:6d} on {info['host']:>10} "
                     f"device {info['device']}")
    return lines + ["#"]


def _say(text: str, rank: int) -> None:
    if rank == 0:
        print(text, flush=True)


def main(argv: list[str] | None = None, preset: str | None = None) -> None:
    prog = COLLECTIVES[preset].binary if preset else "forestcc-perf"
    try:
        args = _parser(prog, preset).parse_args(argv)
        plan = _resolve(args, preset)
    except UsageError as e:
        _usage_exit(prog, str(e), launcher_rank())
    if args.cudagraph > 0 and launcher_rank() == 0:
        print(f"{prog}: note: -G {args.cudagraph} ignored: CUDA graphs are not supported "
              "on CPU", file=sys.stderr)

    instances: dict[str, Backend] = {}
    try:
        if "forestcc" in (plan["backend"], *plan["peers"]):
            # say so before joining any job (an MPI launcher check would otherwise speak first)
            from forestcc_perf.backends.forestcc_backend import unavailable_reason
            reason = unavailable_reason()
            if reason:
                raise BackendUnavailable(reason)
        for name in creation_order(list(dict.fromkeys([plan["backend"], *plan["peers"]]))):
            instances[name] = create(name, args.algo if name == "forestcc" else None,
                                     timeout_s=max(args.timeout, 300.0), memory=args.memory)
        primary = instances[plan["backend"]]
        # a peer named twice, or the primary itself, is measured again by the same instance
        peers = [instances[p] for p in plan["peers"]]
        roots = (list(range(primary.size)) if plan["root"] == "all" else [int(plan["root"])])
        if plan["tuned"] is None and not plan["coll"].rooted:
            roots = [0]   # unused; the root column says -1
        if any(r >= primary.size for r in roots):
            raise UsageError(f"-r {roots[0]}: the root must be a rank below {primary.size}")
        if plan["tuned"] is not None:
            reason = primary.unsupported(COLLECTIVES["all_reduce"], plan["dtypes"][0],
                                         plan["ops"][0])
            if reason:
                raise UsageError(reason)
            from forestcc_perf import tune
            code = tune.main(primary, plan, args, roots[0])
            primary.finalize()
            sys.exit(code)
        combos = _combinations(plan, [primary, *peers])
    except (UsageError, BackendUnavailable) as e:
        _usage_exit(prog, str(e), launcher_rank())
    code = _run(plan, args, primary, peers, roots, combos)
    for b in instances.values():
        b.finalize()
    sys.exit(code)


def _usage_exit(prog: str, message: str, rank: int) -> None:
    # Every rank says it: whichever exits first makes the launcher stop the others, so a message
    # printed by rank 0 alone could be lost. The lines are identical.
    del rank
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _run(plan: dict, args: argparse.Namespace, primary: Backend, peers: list[Backend],
         roots: list[int], combos: list) -> int:
    coll: Collective = plan["coll"]
    rank = primary.rank
    settings = Settings(iters=args.iters, warmup_iters=args.warmup_iters,
                        agg_iters=args.agg_iters, average=args.average,
                        check_iters=args.check, blocking=bool(args.blocking),
                        timeout_s=args.timeout)
    labels = _labels([primary.name] + [b.name for b in peers])
    rows: list[table.Row] = []
    peer_rows: dict[str, list[table.Row]] = {label: [] for label in labels[1:]}
    try:
        ranks = primary.all_gather_object(_rank_info(primary))
        settings.cpu = spread_cpu([info["host"] for info in ranks], rank)
        runners = [Runner(b, coll, settings, args.algo if b.name == "forestcc" else None, label)
                   for b, label in zip([primary, *peers], labels)]
        labels = labels[1:]
        for line in _preamble(plan, args, primary, peers, labels, ranks):
            _say(line, rank)
        for line in table.header_lines(labels):
            _say(line, rank)
        if check.CORRUPT_ENV in os.environ:
            _say(f"# test hook {check.CORRUPT_ENV} is set: results are corrupted on purpose",
                 rank)
        work = [(d, o, r, s) for d, o in combos for r in roots for s in plan["sizes"]]
        limit = _algorithm_limit(args.algo, coll, primary)
        if limit is not None:
            served = [w for w in work if runners[0].message_bytes(w[3], w[0]) <= limit]
            if len(served) < len(work):
                _say(f"# --algo {args.algo} serves {coll.name} messages up to {limit} bytes on "
                     f"{primary.size} ranks (its scratch bank): larger sizes are skipped", rank)
            work = served
        progress = Progress(len(work), enabled=rank == 0)
        if work:   # first calls pay for lazy setup (connections, caches): keep that out of row 1
            dtype, op, root, size = work[0]
            for runner in runners:
                runner.measure(size, dtype, op, root)
        for dtype, op, root, size in work:
            progress.step(f"{format_size(size)} {dtype.name} {op}")
            row = runners[0].measure(size, dtype, op, root)
            theirs = [runner.measure(size, dtype, op, root) for runner in runners[1:]]
            for label, prow in zip(labels, theirs):
                peer_rows[label].append(prow)
            rows.append(row)
            progress.clear()
            _say(table.format_row(row, theirs), rank)
        for line in table.footer_lines(coll.binary, rows, peer_rows):
            _say(line, rank)
        if rank == 0:
            _write_outputs(plan, args, primary, peers, ranks, rows, peer_rows)
    except KeyboardInterrupt:
        primary.abort(130)
    except Exception as e:   # one rank's failure ends the job, with the reason
        print(f"forestcc-perf: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr,
              flush=True)
        primary.abort(1)
    wrong = table.total_wrong(rows) + sum(table.total_wrong(r) for r in peer_rows.values())
    return 1 if wrong else 0


def _algorithm_limit(algo: str | None, coll: Collective, primary: Backend) -> int | None:
    """The largest message a named built-in forestcc algorithm serves (eager), else None."""
    if not algo or primary.name != "forestcc":
        return None
    from forestcc_perf.backends.forestcc_backend import algorithm_max_bytes
    return algorithm_max_bytes(algo, coll.name, primary.size)


def _labels(names: list[str]) -> list[str]:
    """Backend names made unique ("mpi", "mpi#2"): comparing a backend with itself measures
    run-to-run noise, and its rows must stay apart."""
    out: list[str] = []
    for name in names:
        label, k = name, 1
        while label in out:
            k += 1
            label = f"{name}#{k}"
        out.append(label)
    return out


def _rank_info(backend: Backend) -> dict:
    from forestcc_perf.results_json import rank_info
    return rank_info(backend.device_name())


def _write_outputs(plan, args, primary, peers, ranks, rows, peer_rows) -> None:
    if not (args.output_file or args.plot):
        return
    from forestcc_perf import results_json
    coll = plan["coll"]
    options = {k: v for k, v in vars(args).items() if k not in ("collective",)}
    labels = [rows[0].backend if rows else primary.name, *peer_rows]
    options.update(collective=coll.name, backend=primary.name, compare=[p.name for p in peers],
                   datatypes=sorted({r.dtype for r in rows}),
                   ops=sorted({r.redop for r in rows}), sizes=plan["sizes"])
    versions = {label: b.version() for label, b in zip(labels, [primary, *peers])}
    env = results_json.environment(ranks, versions)
    by_backend = {labels[0]: rows, **peer_rows}
    results = results_json.build(coll.name, coll.binary, options, env, by_backend)
    if args.output_file:
        results_json.write(args.output_file, results)
    if args.plot:
        from forestcc_perf.plot import plot_busbw
        plot_busbw(results, args.plot)


def _preset(name: str):
    def entry() -> None:
        main(preset=name)
    entry.__name__ = COLLECTIVES[name].binary
    entry.__doc__ = f"{COLLECTIVES[name].binary}: forestcc-perf {name}"
    return entry


# nccl-tests' binary names as console scripts (see perf/README.md for pyproject.toml)
all_reduce_perf = _preset("all_reduce")
all_gather_perf = _preset("all_gather")
reduce_scatter_perf = _preset("reduce_scatter")
alltoall_perf = _preset("all_to_all")
broadcast_perf = _preset("broadcast")
reduce_perf = _preset("reduce")
gather_perf = _preset("gather")
scatter_perf = _preset("scatter")
sendrecv_perf = _preset("sendrecv")

if __name__ == "__main__":
    main()
