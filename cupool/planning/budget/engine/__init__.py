"""The budget planners' engine: what every policy shares, lowest module first.

==================  ======================================================================
module              what it holds
==================  ======================================================================
:mod:`.schedule`    the decision's vocabulary: idle gaps, :class:`~.schedule.Gap` (a gap
                    taken off the device by swap or recompute), :class:`~.schedule.Schedule`;
                    what every run reads of a trace, made once (:class:`~.schedule.TraceIndex`)
:mod:`.copies`      :class:`~.copies.CopyEngine`: one FIFO copy queue per direction, with
                    due times, as the planners model the link (compiled in ``_copyq.c``
                    when built, with an identical pure-Python fallback)
:mod:`.records`     the plain records of the state: holes, swap windows, recompute chains
:mod:`.state`       :class:`~.state.PlanState`: estimated op times, both copy queues, bytes
                    resident per op, and what taking one gap off the device would cost
:mod:`.checkpoint`  segment checkpointing: re-run each segment of the forward once, at the
                    start of its backward
:mod:`.relief`      what on-time swaps of persistent state can free at each op: a floor
                    under what such plans keep resident
:mod:`.greedy`      the greedy that takes gaps off the device until every op fits
:mod:`.residency`   schedule → residencies and actions; each op's working set
:mod:`.placement`   residencies → offsets within the budget → plan; the loop every
                    policy's ``decide(internal_budget)`` runs in
:mod:`.firstfit`    the last-resort placement: first fit, a persistent buffer's stay across
                    the iteration boundary as one item (compiled in ``_firstfit.c`` when
                    built, with an identical NumPy fallback)
``_stream.c``       the searched weight-streaming member's estimate of one kept set
                    (:func:`cupool.planning.budget.stream.estimate_kept`, compiled: equal
                    estimates; the member uses it when built)
==================  ======================================================================

Policies (:mod:`cupool.planning.budget.auto`, ``capuchin``, ``classic``,
``segments_ga``) are clients: they build a :class:`~.state.PlanState` or a
:class:`~.schedule.Schedule` their own way and hand it to :func:`~.placement.place_schedule`.
"""
