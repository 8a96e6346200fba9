"""Where each job's memory lives on a time-shared device: pure arithmetic, no processes.

A device arena of ``capacity_bytes`` is split in two: the *persistent area* at the
bottom, where every job gets one *slot* for its persistent bytes (weights, optimizer
state), side by side with ``gap_bytes`` between them; and one *temporary region* at the
top, which the job holding the current time slice uses for its per-iteration bytes and
which is zeroed when the slice ends::

    offset 0                                     persistent_area_bytes      capacity
    |[ job a ]gap[ job b ]gap[  job c  ]    free   | gap |[  temporary region  ]|
     exclusive slots: never copied on a switch             one job at a time

When the slots do not all fit, a new slot overlaps earlier ones (the placement that
overlaps the fewest bytes). Of several overlapping slots only one is *resident* at a
time; the broker evicts the others to host memory and restores a job's slot — at the
same offset — before its slice, so a job's persistent bytes never move in the arena.

All sizes are bytes; every slot and the temporary region start at a multiple of
``alignment`` (a power of two). Ranges are half-open ``[offset, offset + size)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cupool.sharing.errors import AdmissionError, SharingArgumentError

RESIDENT = "resident"
"""Switch policy: persistent slots stay on the device; only overlapping slots are evicted."""
NAIVE = "naive"
"""Switch policy (the baseline): every slot at offset 0, so each switch copies the
outgoing job's whole footprint (persistent and temporary) out and the incoming one's in."""
POLICIES = (RESIDENT, NAIVE)


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` (a power of two) that is >= ``value``."""
    return (value + alignment - 1) & ~(alignment - 1)


def align_down(value: int, alignment: int) -> int:
    return value & ~(alignment - 1)


@dataclass(frozen=True)
class JobNeeds:
    """What one job asks for: ``persistent_bytes`` resident across its slices and
    ``temporary_bytes`` it uses during an iteration (cleared at the end of each slice)."""

    job: str
    persistent_bytes: int
    temporary_bytes: int

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise SharingArgumentError("JobNeeds", "job", self.job, "must be a non-empty string")
        for field in ("persistent_bytes", "temporary_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SharingArgumentError("JobNeeds", field, value, "must be an int >= 0")

    def scaled(self, factor: int) -> JobNeeds:
        """The needs divided by ``factor`` (rounded up): benchmarks shrink real traces so
        they fit in a small shared-memory arena."""
        return replace(self, persistent_bytes=-(-self.persistent_bytes // factor),
                       temporary_bytes=-(-self.temporary_bytes // factor))


@dataclass(frozen=True)
class Geometry:
    """The fixed split of the arena (see the module docstring)."""

    capacity_bytes: int
    temporary_bytes: int
    gap_bytes: int = 0
    alignment: int = 512

    def __post_init__(self) -> None:
        def check(field, ok, rule):
            if not ok:
                raise SharingArgumentError("Geometry", field, getattr(self, field), rule)

        for field in ("capacity_bytes", "temporary_bytes", "gap_bytes", "alignment"):
            value = getattr(self, field)
            check(field, isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                  "must be an int >= 0")
        check("alignment", self.alignment >= 1 and self.alignment & (self.alignment - 1) == 0,
              "must be a power of two")
        check("capacity_bytes", self.persistent_area_bytes >= 0,
              f"must hold the temporary region ({self.temporary_region_bytes} B) and the gap "
              f"({self.gap_bytes} B)")

    @property
    def temporary_region_bytes(self) -> int:
        return align_up(self.temporary_bytes, self.alignment)

    @property
    def temporary_offset(self) -> int:
        """Start of the temporary region: the top of the arena, aligned down."""
        return align_down(self.capacity_bytes - self.temporary_region_bytes, self.alignment)

    @property
    def persistent_area_bytes(self) -> int:
        """Bytes ``[0, persistent_area_bytes)`` available for persistent slots."""
        return self.temporary_offset - self.gap_bytes

    def check_admission(self, needs: JobNeeds) -> None:
        """Raise :class:`AdmissionError` with the numbers when ``needs`` cannot fit even
        with the device to itself."""
        if (align_up(needs.persistent_bytes, self.alignment) > self.persistent_area_bytes
                or needs.temporary_bytes > self.temporary_region_bytes):
            raise AdmissionError(needs.job, needs.persistent_bytes, needs.temporary_bytes,
                                 self.persistent_area_bytes, self.temporary_region_bytes)

    @classmethod
    def for_jobs(cls, jobs, capacity_bytes: int | None = None, gap_bytes: int = 0,
                 alignment: int = 512) -> Geometry:
        """A geometry for ``jobs`` (:class:`JobNeeds`): the temporary region holds the largest
        temporary need; ``capacity_bytes`` defaults to what keeps every slot exclusive."""
        jobs = list(jobs)
        temporary = max((j.temporary_bytes for j in jobs), default=0)
        if capacity_bytes is None:
            slots = sum(align_up(align_up(j.persistent_bytes, alignment) + gap_bytes, alignment)
                        for j in jobs)  # each slot and the gap after it, as place_slot lays them
            capacity_bytes = slots + align_up(temporary, alignment)
        return cls(capacity_bytes, temporary, gap_bytes, alignment)


@dataclass(frozen=True)
class Slot:
    """Job ``job``'s persistent bytes ``[offset, offset + size)``; ``size`` is the declared
    byte count (the slot reserves it rounded up to the alignment)."""

    job: str
    offset: int
    size: int

    def end(self, alignment: int) -> int:
        return self.offset + align_up(self.size, alignment)


def overlap_bytes(a_offset: int, a_end: int, b_offset: int, b_end: int) -> int:
    return max(0, min(a_end, b_end) - max(a_offset, b_offset))


def place_slot(geometry: Geometry, needs: JobNeeds, slots, policy: str = RESIDENT) -> Slot:
    """The slot for a new job given the existing ``slots``: the lowest aligned offset that
    overlaps no slot (first fit, keeping ``gap_bytes`` after every slot), else the one that
    overlaps the fewest bytes. ``naive`` puts every slot at 0. Raises
    :class:`AdmissionError` when the job cannot fit even alone."""
    geometry.check_admission(needs)
    if policy not in POLICIES:
        raise SharingArgumentError("place_slot", "policy", policy, f"must be one of {POLICIES}")
    if policy == NAIVE:
        return Slot(needs.job, 0, needs.persistent_bytes)
    a = geometry.alignment
    size = align_up(needs.persistent_bytes, a)
    candidates = sorted({0} | {align_up(s.end(a) + geometry.gap_bytes, a) for s in slots})
    best = None
    for offset in candidates:
        if offset + size > geometry.persistent_area_bytes:
            continue
        # the gap after an existing slot belongs to it: count it as overlap
        overlap = sum(overlap_bytes(offset, offset + size, s.offset,
                                    s.end(a) + geometry.gap_bytes) for s in slots)
        if best is None or overlap < best[0]:
            best = (overlap, offset)
        if overlap == 0:
            break
    # offset 0 always fits (admission checked), so best is set
    return Slot(needs.job, best[1], needs.persistent_bytes)


def slots_overlap(a: Slot, b: Slot, alignment: int) -> bool:
    return overlap_bytes(a.offset, a.end(alignment), b.offset, b.end(alignment)) > 0
