"""Plan MiniMalloc's five-buffer example into its 12-byte lower bound and draw the layout.

Run: ``python examples/plan_example.py``. The output is checked by tests/test_examples.py.
"""

from cupool.data import DATA_DIR
from cupool.io import load_trace
from cupool.planning import plan, validate_plan

trace = load_trace(DATA_DIR / "dsa" / "example.12.csv")
result = plan(trace, solver="exact")
assert validate_plan(trace, result).valid
print(f"{trace.name}: {len(trace.buffers)} buffers, lower bound {result.lower_bound_bytes} B, "
      f"arena {result.arena_bytes} B ({result.status.value})")

# One text row per byte row of the arena, top row first; one column per op.
offsets = result.offsets()
grid = [["." for _ in range(trace.num_ops)] for _ in range(result.arena_bytes)]
for buffer in trace.buffers:
    for byte in range(offsets[buffer.id], offsets[buffer.id] + buffer.size):
        for op in range(buffer.start, buffer.end):
            grid[byte][op] = buffer.name[-1]
for byte in reversed(range(result.arena_bytes)):
    print(f"{byte:>3} {''.join(grid[byte])}")
print("    " + "".join(str(op % 10) for op in range(trace.num_ops)) + "  <- op")
