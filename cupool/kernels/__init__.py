"""CUDA C kernels the CUDA backend compiles at run time, each with a NumPy reference twin.

Planned here (DESIGN.md, "Kernels"): pattern fill and checksum for integrity checks, a
timed spin for replaying op durations, gather/compaction. None is shipped yet: the
static planner needs no kernel. Only this package and ``cupool.devices.cuda`` may import
CuPy's CUDA parts, and only lazily.
"""
