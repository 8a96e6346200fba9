"""What ``cupool share`` and ``cupool broker`` do, as functions of plain arguments (the CLI
in :mod:`cupool.cli` only parses argv and prints)."""

from __future__ import annotations

import signal
import threading

from cupool.core.units import format_bytes
from cupool.sharing.broker import Broker
from cupool.sharing.client import broker_request
from cupool.sharing.config import BrokerConfig
from cupool.sharing.errors import AdmissionError, SharingArgumentError
from cupool.sharing.layout import Geometry, place_slot, slots_overlap
from cupool.sharing.measure import needs_from_trace


def share_layout(traces, capacity_bytes: int | None = None, gap_bytes: int = 0,
                 alignment: int = 512, scale: int = 1) -> tuple[dict, list[str]]:
    """Lay out the jobs of ``traces`` (:class:`~cupool.core.Trace`, admitted in order) on one
    device. Returns ``(document, lines)``; ``document["all_admitted"]`` says whether every
    job fits, ``document["jobs"]`` gives each job's slot, or why it was refused."""
    if not isinstance(scale, int) or scale < 1:
        raise SharingArgumentError("share_layout", "scale", scale, "must be an int >= 1")
    needs = []
    for index, trace in enumerate(traces):
        name = trace.name if all(t.name != trace.name for t in traces[:index]) \
            else f"{trace.name}#{index}"
        needs.append(needs_from_trace(trace, job=name).scaled(scale))
    geometry = Geometry.for_jobs(needs, capacity_bytes, gap_bytes, alignment)
    slots, jobs = [], []
    for job in needs:
        entry = {"job": job.job, "persistent_bytes": job.persistent_bytes,
                 "temporary_bytes": job.temporary_bytes}
        try:
            slot = place_slot(geometry, job, slots)
        except AdmissionError as error:
            entry.update(admitted=False, reason=str(error))
        else:
            entry.update(admitted=True, persistent_offset=slot.offset)
            slots.append(slot)
        jobs.append(entry)
    for entry in jobs:
        if entry["admitted"]:
            mine = next(s for s in slots if s.job == entry["job"])
            entry["exclusive"] = not any(slots_overlap(mine, other, alignment)
                                         for other in slots if other is not mine)
    document = {"capacity_bytes": geometry.capacity_bytes,
                "persistent_area_bytes": geometry.persistent_area_bytes,
                "temporary_offset": geometry.temporary_offset,
                "temporary_region_bytes": geometry.temporary_region_bytes,
                "gap_bytes": gap_bytes, "alignment": alignment, "scale": scale, "jobs": jobs,
                "all_admitted": all(j["admitted"] for j in jobs),
                "all_resident": all(j.get("exclusive", False) for j in jobs)}
    lines = [f"device {format_bytes(geometry.capacity_bytes)}: persistent area "
             f"{format_bytes(geometry.persistent_area_bytes)}, temporary region "
             f"{format_bytes(geometry.temporary_region_bytes)} at {geometry.temporary_offset}"]
    for entry in jobs:
        if not entry["admitted"]:
            lines.append(f"  {entry['job']}: REFUSED: {entry['reason']}")
            continue
        where = "resident" if entry["exclusive"] else "evicted while not scheduled"
        lines.append(f"  {entry['job']}: persistent {format_bytes(entry['persistent_bytes'])} "
                     f"at {entry['persistent_offset']} ({where}), temporary "
                     f"{format_bytes(entry['temporary_bytes'])}")
    return document, lines


def run_broker(config: BrokerConfig, announce) -> dict:
    """Run a broker in the foreground until SIGINT / SIGTERM or a ``shutdown`` request;
    ``announce(broker)`` is called once it accepts clients. Returns its final statistics."""
    broker = Broker(config).start()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(
                number, lambda *_: threading.Thread(target=broker.stop).start())
    try:
        announce(broker)
        while not broker.wait(0.2):  # short waits: signal handlers run between them
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        stats = broker.stats()
        broker.stop()
    return stats


def broker_status(op: str, device: str, runtime_dir: str | None) -> dict:
    """``stats`` or ``shutdown`` for the running broker of ``device``."""
    return broker_request(op, device=device, runtime_dir=runtime_dir)
