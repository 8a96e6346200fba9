"""``cupool info``, ``convert``, ``capture`` and ``viz``: a trace described, converted,
recorded from a PyTorch model, or drawn with its plan."""

from __future__ import annotations

from pathlib import Path

from cupool.cli.common import EXIT_OK, emit
from cupool.core.units import format_bytes
from cupool.core.vocabulary import PERSISTENT
from cupool.errors import InputError
from cupool.io import is_regular_output, load_trace, save_trace


def cmd_info(args, stdout) -> int:
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
    emit(stdout, args, document, lines)
    return EXIT_OK


def cmd_convert(args, stdout) -> int:
    from cupool.io import convert

    if not Path(args.output).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.output)
    trace = convert(args.input, args.output, device=args.device)
    document = {"input": args.input, "output": args.output, "trace": trace.name,
                "buffers": len(trace.buffers), "ops": trace.num_ops,
                "lower_bound_bytes": trace.lower_bound_bytes()}
    emit(stdout, args, document, [f"{args.input} -> {args.output}: {len(trace.buffers)} "
                                  f"buffers, {trace.num_ops} ops"])
    return EXIT_OK


def cmd_capture(args, stdout) -> int:
    from cupool.capture import CaptureOptions, RooflineModel, capture_model

    if not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.out)
    cost = RooflineModel.for_device(args.device_preset)
    trace = capture_model(args.model, CaptureOptions(args.mode, args.batch, small=args.small,
                                                     amp=args.amp, cost_model=cost))
    save_trace(trace, args.out)
    if is_regular_output(args.out):  # a device or a pipe cannot be read back
        trace = load_trace(args.out)  # the strict reader checks what was written
    document = {"trace": trace.name, "out": args.out, "ops": trace.num_ops,
                "buffers": len(trace.buffers), "lower_bound_bytes": trace.lower_bound_bytes(),
                "persistent_bytes": sum(b.size for b in trace.buffers if b.kind == PERSISTENT)}
    emit(stdout, args, document, [
        f"{trace.name}: {trace.num_ops} ops, {len(trace.buffers)} buffers, lower bound "
        f"{document['lower_bound_bytes']} B ({format_bytes(document['lower_bound_bytes'])}), "
        f"written to {args.out}"])
    return EXIT_OK


def cmd_viz(args, stdout) -> int:
    from cupool.viz import viz

    if not Path(args.out).parent.resolve().is_dir():
        raise InputError("the directory to write into does not exist", path=args.out)
    info = viz(args.trace, args.plan, out=args.out, kind=args.kind, solver=args.solver,
               budget=args.budget, link=args.link)
    emit(stdout, args, info, [f"{info['kind']} of {info['trace']} ({info['plan']}) written to "
                              f"{info['out']}"])
    return EXIT_OK

