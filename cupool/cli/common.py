"""What every command module of the CLI shares: exit codes, printing a result, the small
argument helpers that raise bad input."""

from __future__ import annotations

import json

from cupool.core.vocabulary import SolveStatus
from cupool.errors import InputError
from cupool.planning.planned import PlannedTrace

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT = 0, 1, 2

BLOCKS_SOLVER = "blocks"
"""``cupool plan T1 [T2 ...] --solver blocks``: several models in one pool of blocks
(:mod:`cupool.planning.blocks`); ``--budget`` (bytes, or % of the sum of the models' lower
bounds) caps the shared arena; ``--out DIR`` writes one plan per model into a directory."""


def emit(stdout, args, document: dict, lines: list[str]) -> None:
    """Print ``document`` as one JSON object with ``--json``, else the human ``lines``."""
    if args.json:
        print(json.dumps(document), file=stdout)
    else:
        print("\n".join(lines), file=stdout)


def cost_from(args):
    """The cost model the command's ``--link`` (and, where it has them, ``--h2d-gbps``,
    ``--d2h-gbps``, ``--latency-us``) name."""
    from cupool.sim import cost_model

    return cost_model(getattr(args, "link", "gen5"), h2d_gbps=getattr(args, "h2d_gbps", None),
                      d2h_gbps=getattr(args, "d2h_gbps", None),
                      latency_us=getattr(args, "latency_us", None))


def require_possible(planned: PlannedTrace) -> PlannedTrace:
    """``planned``, unless the budget planner found that no plan can exist (an op whose own
    working set exceeds the budget): that is bad input (exit 2) with its one-line reason."""
    if planned.plan.status == SolveStatus.INFEASIBLE and planned.budget is not None:
        raise InputError(planned.reason or f"no plan fits the budget "
                                           f"(={planned.plan.capacity_bytes} bytes)")
    return planned


def names(text: str | None, what: str) -> tuple[str, ...] | None:
    """The comma-separated names of option ``what`` (``None`` when not given); bad input
    when the text names nothing."""
    if text is None:
        return None
    parsed = tuple(name.strip() for name in text.split(",") if name.strip())
    if not parsed:
        raise InputError(f"{what} (={text!r}) names nothing")
    return parsed


def gap_bytes(text: str) -> int:
    """``--gap``: bytes between persistent slots (``"0"``, or a size such as ``"2MiB"``)."""
    from cupool.core.units import parse_bytes

    return 0 if text.strip() == "0" else parse_bytes(text, "--gap")

