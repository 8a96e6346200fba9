"""cupool: planned GPU memory for repeating CuPy workloads."""

__version__ = "0.1.0"
