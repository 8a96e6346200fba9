"""Faults a time-shared device's jobs meet (the fault matrix's broker cells): a job that does
not fit refused when it joins, and a job's own device failing a launch in the middle of its
slice. After each: a typed error naming it, the slice released with its temporary bytes
zeroed, every job's persistent bytes as written, both jobs served again, and nothing left
in the arena once they leave."""

from __future__ import annotations

import pytest

from tests.bench_modules import load_bench

clients = load_bench("fault_clients")


@pytest.mark.parametrize("label", clients.BROKER_POINTS)
def test_every_broker_cell_meets_the_targets(label):
    cell = clients.broker_cell(label)
    assert clients.good(cell) and cell.outcome == "continued", cell
    expected = ("AdmissionError: job 'c' refused" if "joining" in label
                else "DeviceError: launch() on 'faulty': injected fault (launch call 1")
    assert cell.error.startswith(expected), cell
