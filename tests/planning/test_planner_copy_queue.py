"""The copy engine's cached finish times and tolerances, kept up to date copy by copy, equal
those computed afresh, bit for bit, through any mix of adds and removes: in the Python
queue and, when it is built, the compiled one."""

from __future__ import annotations

import random

import pytest

from cupool.planning.budget.engine.copies import (
    COMPILED_AVAILABLE,
    CompiledCopyEngine,
    CopyEngine,
    PythonCopyEngine,
    QueuedCopy,
)

ENGINES = [PythonCopyEngine] + ([CompiledCopyEngine] if COMPILED_AVAILABLE else [])


def fresh(engine: CopyEngine) -> CopyEngine:
    return type(engine).from_queue(engine.issues, engine.lengths, engine.dues)


@pytest.mark.parametrize("engine_class", ENGINES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", range(6))
def test_incremental_caches_equal_fresh_ones(seed, engine_class):
    rng = random.Random(seed)
    engine, queued = engine_class(), []
    busy = seed % 2 == 0              # a saturated link (few idle gaps) or a sparse one
    for step in range(400):
        if queued and rng.random() < 0.35:
            engine.remove(queued.pop(rng.randrange(len(queued))))
        else:
            issue = float(rng.randrange(0, 200 if busy else 5000))
            length = rng.choice([0.5, 1.25, 3.0, 7.75, 20.0])
            due = issue + length + rng.choice([0.0, 2.0, 15.0, 80.0, float("inf")])
            engine.add(issue, length, due)
            queued.append(QueuedCopy(issue, length, due))
        if step % 3:                  # query sometimes, so caches are both kept and rebuilt
            other = fresh(engine)
            assert engine.finishes() == other.finishes()
            assert engine.tolerances() == other.tolerances()
            probe = (float(rng.randrange(0, 300)), 2.5, float(rng.randrange(0, 400)))
            assert engine.fits(*probe) == other.fits(*probe)
            assert engine.lateness(*probe) == other.lateness(*probe)
