"""``cupool share`` and ``broker``: jobs laid out on one time-shared device, and the
device's broker run, queried or stopped (:mod:`cupool.sharing.commands` does the work)."""

from __future__ import annotations

from cupool.cli.common import EXIT_NO, EXIT_OK, emit, gap_bytes
from cupool.errors import InputError
from cupool.io import load_trace


def cmd_share(args, stdout) -> int:
    """Exit 0 when every job is admitted, 1 when some job cannot fit even alone."""
    from cupool.core.units import parse_bytes
    from cupool.sharing.commands import share_layout

    capacity = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
    traces = [load_trace(path) for path in args.trace]
    document, lines = share_layout(traces, capacity, gap_bytes(args.gap),
                                   args.alignment, args.scale)
    emit(stdout, args, document, lines)
    return EXIT_OK if document["all_admitted"] else EXIT_NO


def cmd_broker(args, stdout) -> int:
    from cupool.core.units import parse_bytes
    from cupool.sharing import BrokerConfig
    from cupool.sharing.commands import broker_status, run_broker

    if args.stats or args.stop:
        answer = broker_status("shutdown" if args.stop else "stats", args.device,
                               args.runtime_dir)
        document = {"stats": answer.get("stats"), "jobs": answer.get("jobs")} if args.stats \
            else {"stopped": True}
        lines = [f"{key} = {value}" for key, value in (document.get("stats") or {}).items()]
        emit(stdout, args, document, lines or ["broker stopped"])
        return EXIT_OK
    if args.capacity is None or args.temporary is None:
        raise InputError("--capacity and --temporary are required to run a broker "
                         "(or pass --stats / --stop)", where="cupool broker")
    config = BrokerConfig(parse_bytes(args.capacity, "--capacity"),
                          parse_bytes(args.temporary, "--temporary"), device=args.device,
                          gap_bytes=gap_bytes(args.gap), alignment=args.alignment,
                          slice_iterations=args.slice_iterations, policy=args.policy,
                          runtime_dir=args.runtime_dir)

    def announce(broker):
        print(f"cupool broker: device {config.device}, epoch {broker.epoch}, socket "
              f"{broker.address}; Ctrl-C to stop", file=stdout, flush=True)

    stats = run_broker(config, announce)
    emit(stdout, args, {"stats": stats}, [f"cupool broker: stopped after "
                                          f"{stats['slices.granted']} slices"])
    return EXIT_OK

