"""The cost model: how long copies and ops take.

Units: bandwidths in GB/s with GB = 10**9 bytes (so 1 GB/s moves 1000 bytes per
microsecond), times in microseconds. A copy of ``n`` bytes in one direction takes
``latency_us + n / (gbps * 1000)`` µs on one copy engine of that direction::

    55 GB/s, 3 µs:   1 MB -> 3 + 1e6 / 55e3 = 21.18 µs

Link presets (:data:`LINK_PRESETS`) are pinned-memory bandwidths of a x16 link:
PCIe Gen4 ≈ 25 GB/s, Gen5 ≈ 55 GB/s, both directions. An op's time is its trace
``duration_us``; an op without one takes ``default_op_us`` (10 µs unless set), and
reports count such ops so that a number built on the default says so.

Host levels (multi-level placement): a swap goes to *pinned* host memory (the
link bandwidths above) or to *pageable* host memory. A copy from or to pageable memory is
staged by the driver through its own pinned bounce buffer (a CPU memcpy plus the DMA,
in chunks), so it reaches only part of the link and pays more fixed cost. The defaults
are assumptions, overridable per model: ``pageable_*_gbps`` = :data:`PAGEABLE_FRACTION`
(0.5) of the pinned bandwidth of the same direction (``bandwidthTest --memory=pageable``
on PCIe Gen4/Gen5 hosts typically reports 40-60% of the pinned figure) and
``pageable_latency_us`` = :data:`DEFAULT_PAGEABLE_LATENCY_US` (10 µs: staging setup and the
synchronisation with the host thread), or the pinned fixed cost where that is higher (a
measured link, the emulated device's 50-90 µs: a pageable copy pays at least what a
pinned one does). Pageable copies use the same copy engine of their
direction (FIFO) as pinned ones::

    gen5 pinned:    1 MB -> 3 + 1e6 / 55e3   = 21.18 µs
    gen5 pageable:  1 MB -> 10 + 1e6 / 27.5e3 = 46.36 µs
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupool.core.vocabulary import HOST_LEVELS, PAGEABLE, PINNED, SwapIn, SwapOut, Trace
from cupool.errors import InputError

LINK_PRESETS = {"gen4": 25.0, "gen5": 55.0}
"""Pinned host<->device bandwidth in GB/s of PCIe Gen4 x16 and Gen5 x16."""
DEFAULT_LATENCY_US = 3.0
"""Fixed cost of every copy (launch and DMA setup), in µs."""
DEFAULT_OP_US = 10.0
"""Duration assumed for an op whose trace has no ``duration_us``."""

H2D = "h2d"
D2H = "d2h"
DIRECTIONS = (H2D, D2H)
PAGEABLE_FRACTION = 0.5
"""Default pageable-memory bandwidth as a fraction of the pinned bandwidth."""
DEFAULT_PAGEABLE_LATENCY_US = 10.0
"""Default fixed cost of a copy from or to pageable host memory, in µs."""


@dataclass(frozen=True)
class CostModel:
    """Link bandwidths (GB/s, GB = 1e9 B) per direction, a per-copy latency (µs), copy
    engines per direction (each a FIFO server), and the duration assumed for ops the
    trace gives none (µs). ``h2d_gbps``, ``d2h_gbps`` and ``latency_us`` are those of
    pinned host memory; the ``pageable_*`` fields those of pageable host memory
    (``None``: :data:`PAGEABLE_FRACTION` of the pinned bandwidth, and
    :data:`DEFAULT_PAGEABLE_LATENCY_US` or ``latency_us``, whichever is higher).

    ``host_us_per_op`` is what enqueuing one op costs the host (µs), and
    ``host_us_per_action`` what each action of the plan the host enqueues with it costs
    more (a swap-in triggered at the op or due there, a swap-out after the op before it, a
    recompute before it): the compute stream cannot run ahead of the host, so op ``i`` is
    dispatched no earlier than the host's enqueue of ops ``0..i`` (:meth:`host_ready`), and
    the swap-ins it triggers are handed over then too; with ``host_gated`` the device
    starts only once the host enqueued the whole iteration (the emulated device's gate).
    Both 0 (the default) leave the host out: a launch-bound program is then predicted as
    fast as its ops."""

    h2d_gbps: float
    d2h_gbps: float
    latency_us: float = DEFAULT_LATENCY_US
    copy_engines_per_direction: int = 1
    default_op_us: float = DEFAULT_OP_US
    pageable_h2d_gbps: float | None = None
    pageable_d2h_gbps: float | None = None
    pageable_latency_us: float | None = None
    host_us_per_op: float = 0.0
    host_us_per_action: float = 0.0
    host_gated: bool = False

    def __post_init__(self):
        for name in ("h2d_gbps", "d2h_gbps"):
            _positive(name, getattr(self, name))
        for name in ("pageable_h2d_gbps", "pageable_d2h_gbps"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        for name in ("latency_us", "default_op_us", "pageable_latency_us", "host_us_per_op",
                     "host_us_per_action"):
            value = getattr(self, name)
            if value is None and name == "pageable_latency_us":
                continue
            if not _number(value) or not math.isfinite(value) or value < 0:
                raise InputError(f"{name} (={value!r}) must be a finite number >= 0")
        engines = self.copy_engines_per_direction
        if not isinstance(engines, int) or isinstance(engines, bool) or engines < 1:
            raise InputError(f"copy_engines_per_direction (={engines!r}) must be an integer >= 1")

    def gbps(self, direction: str) -> float:
        """Bandwidth of ``"h2d"`` or ``"d2h"``."""
        if direction == H2D:
            return self.h2d_gbps
        if direction == D2H:
            return self.d2h_gbps
        raise InputError(f"direction (={direction!r}) must be 'h2d' or 'd2h'")

    def level_gbps(self, direction: str, level: str = PINNED) -> float:
        """Bandwidth of ``direction`` from or to host ``level`` (``"pinned"``, ``"pageable"``)."""
        pinned = self.gbps(direction)
        if level == PINNED:
            return pinned
        if level == PAGEABLE:
            stated = self.pageable_h2d_gbps if direction == H2D else self.pageable_d2h_gbps
            return pinned * PAGEABLE_FRACTION if stated is None else stated
        raise InputError(f"level (={level!r}) must be one of {', '.join(HOST_LEVELS)}")

    def level_latency_us(self, level: str = PINNED) -> float:
        """Fixed cost of one copy from or to host ``level`` (µs)."""
        if level == PAGEABLE:
            stated = self.pageable_latency_us
            if stated is None:  # never less than a pinned copy's fixed cost
                return max(DEFAULT_PAGEABLE_LATENCY_US, self.latency_us)
            return stated
        self.level_gbps(H2D, level)  # names a bad level
        return self.latency_us

    def copy_us(self, nbytes: int, direction: str, level: str = PINNED) -> float:
        """Time of one copy of ``nbytes`` in ``direction`` from or to host ``level``
        (pinned unless said) on a free engine (µs)."""
        if level == PINNED:
            return self.latency_us + nbytes / (self.gbps(direction) * 1e3)
        return self.level_latency_us(level) + nbytes / (self.level_gbps(direction, level) * 1e3)

    def fastest_copy_us(self, nbytes: int, direction: str) -> float:
        """The shortest a copy of ``nbytes`` in ``direction`` can take, to or from whichever
        host level (µs)."""
        return min(self.copy_us(nbytes, direction, level) for level in HOST_LEVELS)

    def op_us(self, trace: Trace, i: int) -> float:
        """Duration of op ``i`` of ``trace`` (µs): its ``duration_us``, else the default."""
        duration = trace.ops[i].duration_us
        return self.default_op_us if duration is None else float(duration)

    def host_ready(self, num_ops: int, actions) -> tuple[float, ...]:
        """When the host has enqueued each op of an iteration of ``num_ops`` ops whose
        plan has ``actions`` (µs from its start; see the class docstring); ``()`` when the
        host is left out."""
        per_op, per_action = self.host_us_per_op, self.host_us_per_action
        if not (per_op or per_action) or not num_ops:
            return ()
        work = [per_op] * (num_ops + 1)  # the last: swap-outs after the last op
        for action in actions:
            if isinstance(action, SwapIn):
                ops = (action.trigger_op, action.due_op)
            elif isinstance(action, SwapOut):
                ops = (action.after_op + 1,)
            else:
                ops = (action.before_op,)
            for op in ops:
                if 0 <= op <= num_ops:
                    work[op] += per_action
        ready, total = [], 0.0
        for k in range(num_ops):
            total += work[k]
            ready.append(total)
        if self.host_gated:
            return (total + work[num_ops] - per_op,) * num_ops
        return tuple(ready)

    def op_times(self, trace: Trace) -> list[float]:
        """``op_us`` of every op, in order."""
        return [self.op_us(trace, i) for i in range(trace.num_ops)]


def ops_without_duration(trace: Trace) -> int:
    """How many ops of ``trace`` have no ``duration_us`` (they take the default)."""
    return sum(op.duration_us is None for op in trace.ops)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(name, value) -> None:
    if not _number(value) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} (={value!r}) must be a finite number of GB/s > 0")


def link_gbps(link: str | float) -> float:
    """A link preset name (``"gen4"``, ``"gen5"``) or a number of GB/s (also as a string)."""
    if isinstance(link, str):
        key = link.strip().lower()
        if key in LINK_PRESETS:
            return LINK_PRESETS[key]
        try:
            value = float(key)
        except ValueError:
            raise InputError(f"link (={link!r}) must be one of {', '.join(LINK_PRESETS)} "
                             f"or a bandwidth in GB/s") from None
    else:
        value = link
    _positive("link", value)
    return float(value)


def cost_model(link: str | float = "gen5", h2d_gbps: float | None = None,
               d2h_gbps: float | None = None, latency_us: float | None = None,
               copy_engines_per_direction: int = 1,
               default_op_us: float | None = None, pageable_gbps: float | None = None,
               pageable_latency_us: float | None = None) -> CostModel:
    """A :class:`CostModel` for a link preset or bandwidth, each part overridable
    (``pageable_gbps`` sets the pageable bandwidth of both directions).

    Bad values raise :class:`~cupool.errors.InputError` quoting them.
    """
    both = link_gbps(link)
    return CostModel(
        h2d_gbps=both if h2d_gbps is None else h2d_gbps,
        d2h_gbps=both if d2h_gbps is None else d2h_gbps,
        latency_us=DEFAULT_LATENCY_US if latency_us is None else latency_us,
        copy_engines_per_direction=copy_engines_per_direction,
        default_op_us=DEFAULT_OP_US if default_op_us is None else default_op_us,
        pageable_h2d_gbps=pageable_gbps, pageable_d2h_gbps=pageable_gbps,
        pageable_latency_us=pageable_latency_us,
    )
