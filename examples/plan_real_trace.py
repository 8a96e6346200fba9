"""Plan a real training step (ResNet-50, bf16) with every greedy solver and with ``auto``.

Run: ``python examples/plan_real_trace.py``. Prints one line per solver: arena bytes and the
ratio to the lower bound (1.0000 = no byte wasted). Checked by tests/test_examples.py.
"""

from cupool.data import DATA_DIR
from cupool.io import load_trace
from cupool.planning import plan, validate_plan

trace = load_trace(DATA_DIR / "traces" / "resnet50_train_b32_bf16.trace.json.gz")
print(f"{trace.name}: {len(trace.buffers)} buffers over {trace.num_ops} ops, "
      f"lower bound {trace.lower_bound_bytes()} B")
for solver in ("greedy-size", "greedy-breadth", "best-fit", "auto"):
    result = plan(trace, solver)
    assert validate_plan(trace, result).valid
    print(f"{solver:<15} arena {result.arena_bytes:>11} B  ratio {result.ratio:.4f}")
