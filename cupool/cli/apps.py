"""``cupool replay``, ``demo``, ``stress`` and ``selftest``: the commands of
:mod:`cupool.app`, each one call and its printout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cupool.cli.common import EXIT_NO, EXIT_OK, emit, names
from cupool.io import load_trace


def cmd_replay(args, stdout) -> int:
    from cupool.app.replay import DEFAULT_SIZE_SCALE, ReplaySettings, replay

    trace = load_trace(args.trace, read_only_state=args.read_only_state)
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
    emit(stdout, args, result, lines)
    return EXIT_OK if result["corrupt_bytes"] == 0 else EXIT_NO


def cmd_demo(args, stdout) -> int:
    from cupool.app.demo import DemoOptions, run_demo

    def say(line: str) -> None:
        print(line, file=stdout)

    document = run_demo(DemoOptions(Path(args.out), args.time_limit),
                        None if args.json else say)
    if args.json:
        print(json.dumps(document), file=stdout)
    return EXIT_OK


def cmd_stress(args, stdout) -> int:
    """Exit 0 when no byte was corrupt, no block leaked and no scenario failed, else 1;
    a device that cannot run (no GPU, no NVRTC) is bad input (2)."""
    from cupool import progress
    from cupool.app.stress import run_stress, summary_lines

    with progress.enabled():
        result = run_stress(args.device, args.minutes, args.seed)
    if args.json:
        print(json.dumps(result.summary()), file=stdout)
        for message in result.messages:
            print(f"cupool stress: {message}", file=sys.stderr)
    else:
        print("\n".join(summary_lines(result)), file=stdout)
    return EXIT_OK if result.passed else EXIT_NO


def cmd_selftest(args, stdout) -> int:
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
        steps=names(args.steps, "--steps") or STEP_NAMES,
        stress_minutes=args.stress_minutes,
        replay_traces=names(args.replay_traces, "--replay-traces") or DEFAULT_REPLAY_TRACES,
        replay_budgets=names(args.budgets, "--budgets") or DEFAULT_BUDGETS,
        replay_iterations=args.iterations,
        pool_traces=names(args.pool_traces, "--pool-traces"), pool_rounds=args.pool_rounds)
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
    emit(stdout, args, document, lines)
    return EXIT_OK if report.passed else EXIT_NO

