"""The command line: ``main(argv) -> int``, the only place touching argv, stdout and exit codes.

Exit codes: 0 success; 1 a well-formed question with a negative answer (the plan is
invalid; no plan fits the budget); 2 bad input, with one line on stderr naming the
item and the value. ``--json`` prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

from cupool.core.units import format_bytes, parse_budget
from cupool.core.vocabulary import PERSISTENT, SolveStatus
from cupool.errors import CupoolError, InputError
from cupool.io import load_trace, save_plan, save_trace
from cupool.planning import SOLVER_NAMES, SolverParams
from cupool.planning.planned import PlannedTrace, make_plan, read_plan

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT = 0, 1, 2


class _UsageError(CupoolError):
    """argparse's complaint, turned into our one-line bad-input error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(f"{self.prog}: {message}")


def _number(kind, minimum, what, exclusive=False):
    """An argparse type: a finite ``kind`` (int or float) >= ``minimum`` (> when
    ``exclusive``); the message quotes the bad text (``(='-1') must be an integer >= 0``)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"(={text!r}) is not {what}") from None
        if not math.isfinite(value) or value < minimum or (exclusive and value == minimum):
            relation = ">" if exclusive else ">="
            raise argparse.ArgumentTypeError(f"(={text!r}) must be {what} {relation} {minimum}")
        return value

    return parse


_seconds = _number(float, 0, "a number of seconds", exclusive=True)
_non_negative_float = _number(float, 0, "a number")
_positive_int = _number(int, 1, "an integer")
_seed = _number(int, 0, "an integer")
_minutes = _number(float, 0, "a number of minutes", exclusive=True)


def _model_names() -> tuple[str, ...]:
    from cupool.capture import MODEL_NAMES

    return MODEL_NAMES


def _policy_names() -> tuple[str, ...]:
    from cupool.planning.budget import POLICY_NAMES

    return POLICY_NAMES


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cupool", description="Planned GPU memory for repeating workloads.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = commands.add_parser("plan", help="plan offsets for every buffer of a trace")
    p.add_argument("trace", nargs="+", help="trace v1 .json/.json.gz or MiniMalloc .csv "
                   "(several only with --solver blocks: models sharing one pool)")
    p.add_argument("--solver", default="auto", choices=(*SOLVER_NAMES, BLOCKS_SOLVER))
    p.add_argument("--budget", help="capacity: bytes, 4GiB, or 70%% of the lower bound")
    p.add_argument("--time-limit", type=_seconds, help="seconds for search solvers")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--out", help="write the plan: PLAN.json (plan format) or PLAN.csv")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--alignment", type=_positive_int, default=512,
                   help="--solver blocks: block and region alignment in bytes (default 512)")

    s = commands.add_parser("simulate", help="plan under a budget and replay it in the "
                            "discrete-event simulator")
    s.add_argument("trace")
    s.add_argument("--budget", required=True, help="bytes, 4GiB, or 70%% of the lower bound")
    s.add_argument("--policy", default="auto", choices=_policy_names())
    s.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    s.add_argument("--h2d-gbps", type=_seconds)
    s.add_argument("--d2h-gbps", type=_seconds)
    s.add_argument("--latency-us", type=_non_negative_float)
    s.add_argument("--plan", help="simulate this plan (JSON) instead of planning")
    s.add_argument("--seed", type=_seed, default=0)
    s.add_argument("--json", action="store_true")

    r = commands.add_parser("replay", help="run the swap runtime for a trace on a device and "
                            "check every byte")
    r.add_argument("trace")
    r.add_argument("--budget", required=True, help="bytes, 4GiB, or 70%% of the lower bound")
    r.add_argument("--device", default="emulated", choices=("emulated", "cuda"))
    r.add_argument("--iterations", type=_positive_int, default=3)
    r.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    r.add_argument("--size-scale", type=_positive_int, default=None,
                   help="divide every size by this (default 1024) so big traces fit in RAM")
    r.add_argument("--policy", default="auto", choices=_policy_names())
    r.add_argument("--seed", type=_seed, default=0)
    r.add_argument("--json", action="store_true")

    v = commands.add_parser("validate", help="check a plan against its trace")
    v.add_argument("trace")
    v.add_argument("plan", help="plan JSON, or MiniMalloc CSV with an offset column")
    v.add_argument("--json", action="store_true")

    i = commands.add_parser("info", help="describe a trace")
    i.add_argument("trace")
    i.add_argument("--top", type=_seed, default=5, help="how many of the biggest buffers")
    i.add_argument("--json", action="store_true")

    k = commands.add_parser("capture", help="record one training step or inference pass of a "
                            "PyTorch model as trace v1 (needs cupool[capture]: torch 2.13.0)")
    k.add_argument("model", choices=_model_names())
    k.add_argument("--mode", choices=("train", "infer"), default="train")
    k.add_argument("--batch", type=_positive_int, default=1)
    k.add_argument("--out", required=True, help="trace path: .json, .json.gz or .csv")
    k.add_argument("--device-preset", default="H100-SXM",
                   help="roofline preset for op durations (H100-SXM, A100-SXM, ...)")
    k.add_argument("--amp", action="store_true", help="bfloat16 autocast")
    k.add_argument("--small", action="store_true", help="the model's small test configuration")
    k.add_argument("--json", action="store_true")

    z = commands.add_parser("viz", help="draw a plan: address x time layout, memory over "
                            "time, or the simulated stream timeline (needs cupool[viz])")
    z.add_argument("trace")
    z.add_argument("plan", nargs="?", help="plan file; without it the trace is planned here")
    z.add_argument("--out", required=True, help="FILE.png or FILE.svg")
    z.add_argument("--kind", default="layout", choices=("layout", "memory", "timeline"))
    z.add_argument("--solver", default="auto", choices=SOLVER_NAMES)
    z.add_argument("--budget", help="plan swaps for this budget (bytes, 4GiB, 70%%)")
    z.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    z.add_argument("--json", action="store_true")

    c = commands.add_parser("convert", help="convert a trace (any readable format: trace v1, "
                            "MiniMalloc CSV, PyTorch memory snapshot, CuPy hook log) to trace "
                            "v1 (.json, .json.gz) or MiniMalloc CSV (.csv)")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--device", type=_seed, help="device index in a multi-device snapshot")
    c.add_argument("--json", action="store_true")

    d = commands.add_parser("demo", help="the main job: plan the bundled real traces")
    d.add_argument("--out", default="cupool-demo", help="directory for the plans")
    d.add_argument("--time-limit", type=_seconds, default=2.0,
                   help="seconds per search solver (genetic, exact) per trace")
    d.add_argument("--json", action="store_true")

    t = commands.add_parser("stress", help="the pool, swaps at 50%% budget, and concurrent "
                            "streams under random load for M minutes, every byte checked")
    t.add_argument("--device", required=True, choices=("cuda", "emulated"))
    t.add_argument("--minutes", type=_minutes, required=True,
                   help="how long to run (fractions allowed: 0.5 = 30 s)")
    t.add_argument("--seed", type=_seed, default=0)
    t.add_argument("--json", action="store_true")

    st = commands.add_parser("selftest", help="prove cupool on a device: GPU tests, stress, "
                             "replay against the simulator, pool against CuPy's, link and op "
                             "timings; writes selftest_<device>.json/.md")
    st.add_argument("--device", default="cuda", choices=("cuda", "emulated"))
    st.add_argument("--out", default="bench/results/gpu", help="directory of the two files")
    st.add_argument("--steps", help="comma-separated subset of the steps (default: all)")
    st.add_argument("--stress-minutes", type=_minutes, default=3.0)
    st.add_argument("--replay-traces", help="comma-separated bundled trace names")
    st.add_argument("--budgets", help="comma-separated replay budgets (default 70%%,50%%)")
    st.add_argument("--iterations", type=_positive_int, default=5,
                    help="replay iterations (> 2: the steady ones are the third on)")
    st.add_argument("--pool-traces", help="comma-separated bundled trace names (default all)")
    st.add_argument("--pool-rounds", type=_positive_int, default=9)
    st.add_argument("--json", action="store_true")

    # time-shared devices: cupool/sharing/
    sh = commands.add_parser("share", help="lay out several jobs (traces) on one time-shared "
                             "device: persistent slots, shared temporary region, admission")
    sh.add_argument("trace", nargs="+")
    sh.add_argument("--capacity", help="device bytes (default: enough for every slot)")
    sh.add_argument("--gap", default="0", help="bytes between persistent slots")
    sh.add_argument("--alignment", type=_positive_int, default=512)
    sh.add_argument("--scale", type=_positive_int, default=1, help="divide sizes by this")
    sh.add_argument("--json", action="store_true")
    br = commands.add_parser("broker", help="run the per-device broker of a time-shared "
                             "device (foreground), or query / stop the running one")
    br.add_argument("--capacity", help="arena bytes (required to run a broker)")
    br.add_argument("--temporary", help="shared temporary region bytes (required to run)")
    br.add_argument("--device", default="emulated:0", help="emulated:<i> or cuda:<i>")
    br.add_argument("--runtime-dir", help="directory of the socket, lock and key files")
    br.add_argument("--gap", default="0")
    br.add_argument("--alignment", type=_positive_int, default=512)
    br.add_argument("--slice-iterations", type=_positive_int, default=1)
    br.add_argument("--policy", choices=("resident", "naive"), default="resident")
    br.add_argument("--stats", action="store_true", help="print the running broker's stats")
    br.add_argument("--stop", action="store_true", help="stop the running broker")
    br.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        with contextlib.redirect_stdout(stdout):  # --help prints where the caller asked
            args = _build_parser().parse_args(argv)
        return _COMMANDS[args.command](args, stdout)
    except CupoolError as exc:
        print(f"cupool: error: {exc}", file=stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


def _emit(stdout, args, document: dict, lines: list[str]) -> None:
    if args.json:
        print(json.dumps(document), file=stdout)
    else:
        print("\n".join(lines), file=stdout)


def _cmd_plan(args, stdout) -> int:
    if args.solver == BLOCKS_SOLVER:
        return _cmd_plan_blocks(args, stdout)
    if len(args.trace) > 1:
        raise InputError(f"--solver {args.solver} plans one trace (got {len(args.trace)}); "
                         f"several traces share one pool only with --solver {BLOCKS_SOLVER}")
    args.trace = args.trace[0]
    trace = load_trace(args.trace)
    lower = trace.lower_bound_bytes()
    capacity = None if args.budget is None else parse_budget(args.budget, lower, "--budget")
    params = SolverParams(time_limit_s=args.time_limit, seed=args.seed)
    if args.out is not None and not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write the plan into does not exist", path=args.out)
    planned = _planned(make_plan(trace, capacity, solver=args.solver, cost=_cost_from(args),
                                 solver_params=params, seed=args.seed))
    result, trace, valid, fits = planned.plan, planned.trace, planned.valid, planned.fits
    if args.out is not None and valid and fits:
        save_plan(result, args.out, trace)
    document = {
        "trace": trace.name, "solver": args.solver, "buffers": len(trace.buffers),
        "arena_bytes": result.arena_bytes if result.placements or result.residencies else None,
        "lower_bound_bytes": lower,
        "ratio": round(result.ratio, 6) if result.placements or result.residencies else None,
        "solve_seconds": round(result.solve_seconds, 4), "valid": valid,
        "status": result.status.value, "budget_bytes": capacity,
        "out": args.out if args.out is not None and valid and fits else None,
    }
    lines = [
        f"trace        {trace.name} ({len(trace.buffers)} buffers, {trace.num_ops} ops)",
        f"solver       {args.solver}: {result.status.value} in {result.solve_seconds:.3f} s",
        f"lower bound  {lower} B ({format_bytes(lower)})",
    ]
    if result.actions:
        lines.append(f"actions      {len(result.actions)} (swaps and recomputes)")
    if result.placements or result.residencies:
        lines.append(f"arena        {result.arena_bytes} B ({format_bytes(result.arena_bytes)}), "
                     f"ratio {result.ratio:.4f}, {'valid' if valid else 'INVALID'}")
    if capacity is not None:
        lines.append(f"budget       {capacity} B: {'fits' if fits else 'does not fit'}")
    if document["out"]:
        lines.append(f"plan written to {args.out}")
    _emit(stdout, args, document, lines)
    return EXIT_OK if valid and fits else EXIT_NO


BLOCKS_SOLVER = "blocks"
"""``cupool plan T1 [T2 ...] --solver blocks``: several models in one pool of blocks
(:mod:`cupool.planning.blocks`); ``--budget`` (bytes, or % of the sum of the models' lower
bounds) caps the shared arena; ``--out DIR`` writes one plan per model into a directory."""


def _cmd_plan_blocks(args, stdout) -> int:
    from cupool.planning.blocks import BlockParams, check_pool, plan_shared

    traces = [load_trace(path) for path in args.trace]
    sum_peaks = sum(t.lower_bound_bytes() for t in traces)
    capacity = None if args.budget is None else parse_budget(args.budget, sum_peaks, "--budget")
    if args.out is not None and not Path(args.out).is_dir():
        raise InputError("--out with --solver blocks must be an existing directory (one plan "
                         "per model is written into it)", path=args.out)
    pool = plan_shared(traces, BlockParams(alignment=args.alignment))
    valid = check_pool(traces, pool).valid
    fits = capacity is None or pool.arena_bytes <= capacity
    written = []
    if args.out is not None and valid and fits:
        for index, (trace, planned) in enumerate(zip(traces, pool.plans, strict=True)):
            path = Path(args.out) / f"{index}-{trace.name}.plan.json"
            save_plan(planned, path, trace)
            written.append(str(path))
    summary = pool.summary()
    # the contract's fields, for the pool: lower bound = sum(persistent) + max(temporary peak)
    document = {"trace": "+".join(t.name for t in traces), "traces": [t.name for t in traces],
                "solver": BLOCKS_SOLVER, "buffers": sum(len(t.buffers) for t in traces),
                **summary, "lower_bound_bytes": pool.floor_bytes,
                "ratio": round(pool.arena_bytes / pool.floor_bytes, 6) if pool.floor_bytes
                else 1.0, "valid": valid, "status": "feasible" if fits else "over_capacity",
                "budget_bytes": capacity, "fits": fits, "out": written or None}
    lines = [f"{len(traces)} models in one pool of blocks "
             f"({'concurrent' if pool.concurrent else 'never concurrent'}):"]
    for row in summary["per_model"]:
        lines.append(f"  {row['trace']:<28} peak {format_bytes(row['peak_bytes']):>11}, "
                     f"persistent {format_bytes(row['persistent_bytes']):>11}, temporary "
                     f"{format_bytes(row['temporary_bytes']):>11} ({row['layout']} layout, "
                     f"{row['blocks']} blocks in {row['size_classes']} classes)")
    lines += [f"pool         {pool.arena_bytes} B ({format_bytes(pool.arena_bytes)}), "
              f"{'valid' if valid else 'INVALID'}",
              f"sum of peaks {pool.sum_peak_bytes} B ({format_bytes(pool.sum_peak_bytes)}): "
              f"ratio {summary['ratio_to_sum_of_peaks']:.4f}",
              f"target       max(peak) + sum(persistent) = {pool.target_bytes} B: "
              f"{'met' if summary['within_target'] else 'NOT met'}"]
    if capacity is not None:
        lines.append(f"budget       {capacity} B: {'fits' if fits else 'does not fit'}")
    if written:
        lines.append(f"plans written to {args.out} ({len(written)} files)")
    _emit(stdout, args, document, lines)
    return EXIT_OK if valid and fits else EXIT_NO


def _cmd_validate(args, stdout) -> int:
    trace = load_trace(args.trace)
    report = read_plan(trace, args.plan).check
    document = {"trace": trace.name, "valid": report.valid, "rule": report.rule or None,
                "message": report.message or None}
    _emit(stdout, args, document,
          ["valid" if report.valid else f"invalid ({report.rule}): {report.message}"])
    return EXIT_OK if report.valid else EXIT_NO


def _cost_from(args):
    from cupool.sim import cost_model

    return cost_model(getattr(args, "link", "gen5"), h2d_gbps=getattr(args, "h2d_gbps", None),
                      d2h_gbps=getattr(args, "d2h_gbps", None),
                      latency_us=getattr(args, "latency_us", None))


def _planned(planned: PlannedTrace) -> PlannedTrace:
    """``planned``, unless the budget planner found that no plan can exist (an op whose own
    working set exceeds the budget): that is bad input (exit 2) with its one-line reason."""
    if planned.plan.status == SolveStatus.INFEASIBLE and planned.budget is not None:
        raise InputError(planned.reason or f"no plan fits the budget "
                                           f"(={planned.plan.capacity_bytes} bytes)")
    return planned


def _cmd_simulate(args, stdout) -> int:
    from cupool.sim import overhead_lower_bound, simulate

    trace = load_trace(args.trace)
    lower = trace.lower_bound_bytes()
    budget = parse_budget(args.budget, lower, "--budget")
    cost = _cost_from(args)
    if args.plan is not None:
        given = read_plan(trace, args.plan)
        planned, sim_trace = given.plan, given.trace
        policy = f"plan:{planned.solver}"
        if planned.arena_bytes > budget:
            raise InputError(f"the plan needs {planned.arena_bytes} bytes, more than the "
                             f"budget (={budget})", path=args.plan)
    else:
        budgeted = _planned(make_plan(trace, budget, policy=args.policy, cost=cost,
                                      seed=args.seed))
        planned, sim_trace = budgeted.plan, budgeted.trace
        policy = args.policy
    report = simulate(sim_trace, planned, cost)
    bound = overhead_lower_bound(sim_trace, budget, cost)
    document = {"trace": trace.name, "policy": policy, "budget_bytes": budget,
                "link_gbps": cost.h2d_gbps, **report.summary(),
                "lower_bound_overhead": bound.overhead if bound.feasible else None,
                "lower_bound_method": bound.details.get("method")}
    if report.feasible:
        lines = [f"{trace.name} at {budget} B ({100 * budget / lower:.0f}% of the lower bound), "
                 f"{policy}, link {cost.h2d_gbps:g} GB/s:",
                 f"  iteration {report.iteration_us:.1f} us vs ideal {report.ideal_us:.1f} us: "
                 f"overhead {100 * report.overhead:.2f}% (no plan can beat "
                 f"{100 * bound.overhead:.2f}%)",
                 f"  stalls {report.stall_us:.1f} us, recompute {report.recompute_us:.1f} us, "
                 f"swapped {report.swapped_bytes} B, peak {report.peak_bytes} B"]
    else:
        lines = [f"{trace.name}: no feasible plan for {budget} B with {policy}: {report.reason}"]
    _emit(stdout, args, document, lines)
    return EXIT_OK if report.feasible else EXIT_NO


def _cmd_replay(args, stdout) -> int:
    from cupool.app.replay import DEFAULT_SIZE_SCALE, ReplaySettings, replay

    trace = load_trace(args.trace)
    size_scale = args.size_scale or DEFAULT_SIZE_SCALE
    settings = ReplaySettings(iterations=args.iterations, link=args.link,
                              size_scale=size_scale, policy=args.policy, seed=args.seed)
    result = replay(trace, args.budget, settings, device=args.device)
    lines = [f"{trace.name}: {result['iterations']} iterations on {args.device} "
             f"(sizes / {size_scale})",
             f"  mean iteration {result['mean_iteration_us']:.1f} us "
             f"(simulator: {result['sim_iteration_us']:.1f} us)",
             f"  late prefetches per iteration {result['late_prefetches']}",
             f"  stalls per iteration (us) {[round(s, 1) for s in result['stall_us']]}",
             f"  peak device {result['peak_device_bytes']} B",
             f"  bytes checked {result['bytes_checked']}, corrupt {result['corrupt_bytes']}"]
    _emit(stdout, args, result, lines)
    return EXIT_OK if result["corrupt_bytes"] == 0 else EXIT_NO


def _cmd_capture(args, stdout) -> int:
    from cupool.capture import CaptureOptions, RooflineModel, capture_model

    if not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.out)
    cost = RooflineModel.for_device(args.device_preset)
    trace = capture_model(args.model, CaptureOptions(args.mode, args.batch, small=args.small,
                                                     amp=args.amp, cost_model=cost))
    save_trace(trace, args.out)
    trace = load_trace(args.out)  # the strict reader checks what was written
    document = {"trace": trace.name, "out": args.out, "ops": trace.num_ops,
                "buffers": len(trace.buffers), "lower_bound_bytes": trace.lower_bound_bytes(),
                "persistent_bytes": sum(b.size for b in trace.buffers if b.kind == PERSISTENT)}
    _emit(stdout, args, document, [
        f"{trace.name}: {trace.num_ops} ops, {len(trace.buffers)} buffers, lower bound "
        f"{document['lower_bound_bytes']} B ({format_bytes(document['lower_bound_bytes'])}), "
        f"written to {args.out}"])
    return EXIT_OK


def _cmd_viz(args, stdout) -> int:
    from cupool.viz import viz

    if not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.out)
    info = viz(args.trace, args.plan, out=args.out, kind=args.kind, solver=args.solver,
               budget=args.budget, link=args.link)
    _emit(stdout, args, info, [f"{info['kind']} of {info['trace']} ({info['plan']}) written to "
                               f"{info['out']}"])
    return EXIT_OK


def _cmd_convert(args, stdout) -> int:
    from cupool.io import convert

    if not Path(args.output).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.output)
    trace = convert(args.input, args.output, device=args.device)
    document = {"input": args.input, "output": args.output, "trace": trace.name,
                "buffers": len(trace.buffers), "ops": trace.num_ops,
                "lower_bound_bytes": trace.lower_bound_bytes()}
    _emit(stdout, args, document, [f"{args.input} -> {args.output}: {len(trace.buffers)} "
                                   f"buffers, {trace.num_ops} ops"])
    return EXIT_OK


def _cmd_info(args, stdout) -> int:
    trace = load_trace(args.trace)
    buffers = trace.buffers
    persistent = sum(b.size for b in buffers if b.kind == PERSISTENT)
    durations = [op.duration_us for op in trace.ops if op.duration_us is not None]
    biggest = sorted(buffers, key=lambda b: (-b.size, b.id))[: args.top]
    document = {
        "trace": trace.name, "source": trace.source, "ops": trace.num_ops,
        "buffers": len(buffers), "lower_bound_bytes": trace.lower_bound_bytes(),
        "total_bytes": sum(b.size for b in buffers), "persistent_bytes": persistent,
        "persistent_buffers": sum(b.kind == PERSISTENT for b in buffers),
        "sum_op_us": round(sum(durations), 3) if durations else None,
        "biggest": [{"id": b.id, "size": b.size, "start": b.start, "end": b.end,
                     "kind": b.kind, "name": b.name} for b in biggest],
    }
    lines = [
        f"trace             {trace.name}",
        f"ops               {trace.num_ops}",
        f"buffers           {len(buffers)} ({document['persistent_buffers']} persistent)",
        f"lower bound       {document['lower_bound_bytes']} B "
        f"({format_bytes(document['lower_bound_bytes'])})",
        f"persistent bytes  {persistent} B ({format_bytes(persistent)})",
        f"sum of all sizes  {document['total_bytes']} B ({format_bytes(document['total_bytes'])})",
    ]
    if durations:
        lines.append(f"sum of op times   {document['sum_op_us']:.1f} us")
    lines.append(f"biggest {len(biggest)} buffers:")
    lines += [f"  {b.id:>6}  {format_bytes(b.size):>12}  ops [{b.start}, {b.end})  {b.name}"
              for b in biggest]
    _emit(stdout, args, document, lines)
    return EXIT_OK


def _cmd_demo(args, stdout) -> int:
    from cupool.app.demo import DemoOptions, run_demo

    def say(line: str) -> None:
        print(line, file=stdout)

    document = run_demo(DemoOptions(Path(args.out), args.time_limit),
                        None if args.json else say)
    if args.json:
        print(json.dumps(document), file=stdout)
    return EXIT_OK


_COMMANDS = {"plan": _cmd_plan, "validate": _cmd_validate, "info": _cmd_info,
             "simulate": _cmd_simulate, "replay": _cmd_replay, "convert": _cmd_convert,
             "capture": _cmd_capture, "viz": _cmd_viz,
             "demo": _cmd_demo}


def _cmd_stress(args, stdout) -> int:
    """Exit 0 when no byte was corrupt, no block leaked and no scenario failed, else 1;
    a device that cannot run (no GPU, no NVRTC) is bad input (2)."""
    from cupool import progress
    from cupool.stress import run_stress, summary_lines

    with progress.enabled():
        result = run_stress(args.device, args.minutes, args.seed)
    if args.json:
        print(json.dumps(result.summary()), file=stdout)
        for message in result.messages:
            print(f"cupool stress: {message}", file=sys.stderr)
    else:
        print("\n".join(summary_lines(result)), file=stdout)
    return EXIT_OK if result.passed else EXIT_NO


_COMMANDS["stress"] = _cmd_stress


def _names(text: str | None, what: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise InputError(f"{what} (={text!r}) names nothing")
    return names


def _cmd_selftest(args, stdout) -> int:
    """Exit 0 when every step that ran passed, 1 when a check failed or a step broke, 2
    when the device cannot run (``--device cuda`` without a GPU: one line saying so)."""
    from cupool.app.selftest import (
        DEFAULT_BUDGETS,
        DEFAULT_REPLAY_TRACES,
        STEP_NAMES,
        SelftestOptions,
        run_selftest,
    )
    from cupool.app.selftest.report import report_paths

    options = SelftestOptions(
        device=args.device, out_dir=Path(args.out),
        steps=_names(args.steps, "--steps") or STEP_NAMES,
        stress_minutes=args.stress_minutes,
        replay_traces=_names(args.replay_traces, "--replay-traces") or DEFAULT_REPLAY_TRACES,
        replay_budgets=_names(args.budgets, "--budgets") or DEFAULT_BUDGETS,
        replay_iterations=args.iterations,
        pool_traces=_names(args.pool_traces, "--pool-traces"), pool_rounds=args.pool_rounds)
    report = run_selftest(options, log=None if args.json else
                          (lambda line: print(line, file=stdout, flush=True)))
    document = report.document()
    json_path, md_path = report_paths(options.out_dir, options.device)
    lines = [f"cupool selftest on {options.device}: {report.verdict}"]
    lines += [f"  {step.name:12} {step.status:8} {step.seconds:7.1f} s  {step.message}"
              for step in report.steps]
    lines += [f"  target {'met' if t['met'] else 'MISSED' if t['met'] is False else 'not run'}"
              f": {t['target']} ({t['measured']})" for t in document["targets"]]
    lines += [f"wrote {json_path} and {md_path}"]
    _emit(stdout, args, document, lines)
    return EXIT_OK if report.passed else EXIT_NO


_COMMANDS["selftest"] = _cmd_selftest


def _gap_bytes(text: str) -> int:
    from cupool.core.units import parse_bytes

    return 0 if text.strip() == "0" else parse_bytes(text, "--gap")


def _cmd_share(args, stdout) -> int:
    """Exit 0 when every job is admitted, 1 when some job cannot fit even alone."""
    from cupool.core.units import parse_bytes
    from cupool.sharing.commands import share_layout

    capacity = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
    traces = [load_trace(path) for path in args.trace]
    document, lines = share_layout(traces, capacity, _gap_bytes(args.gap),
                                   args.alignment, args.scale)
    _emit(stdout, args, document, lines)
    return EXIT_OK if document["all_admitted"] else EXIT_NO


def _cmd_broker(args, stdout) -> int:
    from cupool.core.units import parse_bytes
    from cupool.sharing import BrokerConfig
    from cupool.sharing.commands import broker_status, run_broker

    if args.stats or args.stop:
        answer = broker_status("shutdown" if args.stop else "stats", args.device,
                               args.runtime_dir)
        document = {"stats": answer.get("stats"), "jobs": answer.get("jobs")} if args.stats \
            else {"stopped": True}
        lines = [f"{key} = {value}" for key, value in (document.get("stats") or {}).items()]
        _emit(stdout, args, document, lines or ["broker stopped"])
        return EXIT_OK
    if args.capacity is None or args.temporary is None:
        raise InputError("--capacity and --temporary are required to run a broker "
                         "(or pass --stats / --stop)", where="cupool broker")
    config = BrokerConfig(parse_bytes(args.capacity, "--capacity"),
                          parse_bytes(args.temporary, "--temporary"), device=args.device,
                          gap_bytes=_gap_bytes(args.gap), alignment=args.alignment,
                          slice_iterations=args.slice_iterations, policy=args.policy,
                          runtime_dir=args.runtime_dir)

    def announce(broker):
        print(f"cupool broker: device {config.device}, epoch {broker.epoch}, socket "
              f"{broker.address}; Ctrl-C to stop", file=stdout, flush=True)

    stats = run_broker(config, announce)
    _emit(stdout, args, {"stats": stats}, [f"cupool broker: stopped after "
                                           f"{stats['slices.granted']} slices"])
    return EXIT_OK


_COMMANDS["share"] = _cmd_share
_COMMANDS["broker"] = _cmd_broker
