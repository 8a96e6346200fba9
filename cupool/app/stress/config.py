"""What a stress run does, in names and numbers (the package docstring says how each is
used)."""

from __future__ import annotations

DEVICES = ("emulated", "cuda")
SCENARIOS = ("pool", "swap", "streams")
FAULTS = ("pool-corrupt", "pool-leak", "swap-corrupt", "streams-corrupt")

POOL_ITERATIONS = 4
"""Iterations per pool scenario: one recorded, the rest served from the plan."""
SWAP_BUDGET = 0.5
"""The swap scenario's budget, as a fraction of the trace's lower bound."""
SWAP_POLICIES = ("capuchin", "greedy", "auto")
"""Budget policies tried in order until one gives a plan the walker can run."""
SWAP_ITERATIONS = 2
BUNDLED_TRACE = "resnet50_train_b32_fp32"
BUNDLED_SIZE_SCALE = 4096
THREADS = 4
STREAM_ROUNDS = 8
EMULATED_CAPACITY = 512 << 20
"""Bytes of the emulated device :func:`~cupool.app.stress.device.open_stress_device` opens
(a ceiling, not a reservation)."""
CORRUPT_BYTES = 4
"""Bytes a corrupting fault changes."""
MAX_MESSAGES = 20
"""Error messages a run keeps (the count in ``errors`` goes on)."""
