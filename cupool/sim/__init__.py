"""Simulation: the cost model, a small discrete-event core, plan replay and overhead bounds.

::

    trace + plan + CostModel ──► simulate() ──► SimReport (iteration, ideal, overhead, stalls)
    trace + budget + CostModel ──► overhead_lower_bound() ──► Bound (what no plan can beat)

Reads plain traces and plans, never a live pool.
"""

from __future__ import annotations

from cupool.sim.bounds import Bound, overhead_lower_bound
from cupool.sim.cost import LINK_PRESETS, CostModel, cost_model, link_gbps
from cupool.sim.simulator import SimReport, ideal_us, simulate

__all__ = ["LINK_PRESETS", "Bound", "CostModel", "SimReport", "cost_model", "ideal_us",
           "link_gbps", "overhead_lower_bound", "simulate"]
