"""``cupool plan``, ``validate`` and ``simulate``: a plan obtained, checked or run in the
simulator, each around one call into :mod:`cupool.planning` or :mod:`cupool.sim`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cupool.cli.common import (
    BLOCKS_SOLVER,
    EXIT_NO,
    EXIT_OK,
    cost_from,
    emit,
    require_possible,
)
from cupool.core.units import format_bytes, parse_budget
from cupool.errors import InputError
from cupool.io import load_trace, save_plan
from cupool.planning import SolverParams
from cupool.planning.planned import make_plan, read_plan


def cmd_plan(args, stdout) -> int:
    if args.solver == BLOCKS_SOLVER:
        return cmd_plan_blocks(args, stdout)
    if len(args.trace) > 1:
        raise InputError(f"--solver {args.solver} plans one trace (got {len(args.trace)}); "
                         f"several traces share one pool only with --solver {BLOCKS_SOLVER}")
    args.trace = args.trace[0]
    trace = load_trace(args.trace, read_only_state=args.read_only_state)
    lower = trace.lower_bound_bytes()
    capacity = None if args.budget is None else parse_budget(args.budget, lower, "--budget")
    params = SolverParams(time_limit_s=args.time_limit, seed=args.seed)
    if args.out is not None and not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write the plan into does not exist", path=args.out)
    planned = require_possible(make_plan(trace, capacity, solver=args.solver,
                                         cost=cost_from(args), solver_params=params,
                                         seed=args.seed, workers=args.workers))
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
    emit(stdout, args, document, lines)
    return EXIT_OK if valid and fits else EXIT_NO


def cmd_plan_blocks(args, stdout) -> int:
    from cupool.planning.blocks import BlockParams, check_pool, plan_shared

    traces = [load_trace(path, read_only_state=args.read_only_state) for path in args.trace]
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
    emit(stdout, args, document, lines)
    return EXIT_OK if valid and fits else EXIT_NO


def cmd_validate(args, stdout) -> int:
    trace = load_trace(args.trace, read_only_state=args.read_only_state)
    report = read_plan(trace, args.plan).check
    document = {"trace": trace.name, "valid": report.valid, "rule": report.rule or None,
                "message": report.message or None}
    emit(stdout, args, document,
         ["valid" if report.valid else f"invalid ({report.rule}): {report.message}"])
    return EXIT_OK if report.valid else EXIT_NO


def cmd_simulate(args, stdout) -> int:
    from cupool.sim import overhead_lower_bound, simulate

    trace = load_trace(args.trace, read_only_state=args.read_only_state)
    lower = trace.lower_bound_bytes()
    budget = parse_budget(args.budget, lower, "--budget")
    cost = cost_from(args)
    if args.plan is not None:
        given = read_plan(trace, args.plan)
        planned, sim_trace = given.plan, given.trace
        policy = f"plan:{planned.solver}"
        if planned.arena_bytes > budget:
            raise InputError(f"the plan needs {planned.arena_bytes} bytes, more than the "
                             f"budget (={budget})", path=args.plan)
    else:
        budgeted = require_possible(make_plan(trace, budget, policy=args.policy, cost=cost,
                                              seed=args.seed, workers=args.workers))
        planned, sim_trace = budgeted.plan, budgeted.trace
        policy = args.policy
    report = simulate(sim_trace, planned, cost)
    if not report.feasible and args.plan is None and budgeted.reason:
        report = replace(report, reason=budgeted.reason)  # the planner's why, not "no plan"
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
    emit(stdout, args, document, lines)
    return EXIT_OK if report.feasible else EXIT_NO

