"""Recompute recipes: how a dropped buffer can be produced again.

A trace may say so itself (``buffer.recompute = {"op": k, "inputs": [...]}``). The shared
real traces do not, so the budget planners *derive* recipes from the data flow, with one
documented rule (recorded in every plan's ``stats["recompute_recipes"]``):

    a temporary buffer ``b`` whose first use is its start op ``k`` (it is *produced* by op
    ``k``) can be recomputed by re-running op ``k``; the recipe's inputs are the other
    buffers op ``k`` uses that already existed before op ``k`` (``start < k``), persistent
    or temporary. Buffers born at op ``k`` too (sibling outputs, workspaces) are not inputs.
    Ops of the optimizer phase (``phase == "opt"``) are never re-run.

::

    op:        3 (conv)      4 (relu)         ...   40 (relu bw)
    x (act)    [====)                                 (x used at 3 only... )
    w (param)  ====================================================
    y = conv   [==============)                       y.recompute = op 3, inputs (x, w)

Memory-planning only: the trace does not say which uses write, so a recipe is exact for
memory and time, not a claim about values when an input is modified in place later.
"""

from __future__ import annotations

from dataclasses import replace

from cupool.core.vocabulary import PERSISTENT, Recompute, Trace

DERIVED_RULE = ("derived: producer = the buffer's start op (its first use); inputs = the other "
                "buffers that op uses and that exist before it; optimizer ops excluded")


def has_recipes(trace: Trace) -> bool:
    """True when at least one buffer of ``trace`` carries a recompute recipe."""
    return any(b.recompute is not None for b in trace.buffers)


def with_recompute_recipes(trace: Trace) -> Trace:
    """``trace`` itself when it carries recipes; else a copy with derived recipes (see module).

    Deterministic: the same trace gives the same recipes, so a plan made on the derived
    trace validates against ``with_recompute_recipes(trace)`` computed anywhere.
    """
    if has_recipes(trace):
        return trace
    used_at: list[list[int]] = [[] for _ in range(trace.num_ops)]
    for b in trace.buffers:
        for u in dict.fromkeys(b.uses):
            used_at[u].append(b.id)
    by_id = {b.id: b for b in trace.buffers}
    buffers = []
    for b in trace.buffers:
        k = b.start
        recipe = None
        if (b.kind != PERSISTENT and b.uses and b.uses[0] == k
                and trace.ops[k].phase != "opt"):
            inputs = tuple(sorted(x for x in used_at[k] if x != b.id and by_id[x].start < k))
            recipe = Recompute(k, inputs)
        buffers.append(b if recipe is None else replace(b, recompute=recipe))
    return replace(trace, buffers=tuple(buffers))
