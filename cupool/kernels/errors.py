"""Typed, picklable errors of the kernels package, each quoting the numbers.

    CupoolError
      KernelError                  anything the kernels package refuses or cannot do
        KernelArgumentError        a seed, id, size or offset outside its documented range
        SegmentRangeError          a gather segment that runs outside the arena
        SegmentOverlapError        two gather segments whose ranges break the overlap rule
        KernelToolchainError       no CUDA compiler (NVRTC) to build the kernels with
        KernelArchitectureError    a GPU whose architecture the kernels do not support

Every class takes its fields as constructor arguments and pickles with them.
"""

from __future__ import annotations

from cupool.errors import ArgumentError, CupoolError


class KernelError(CupoolError):
    """Base class of every error the kernels package raises on purpose."""


class KernelArgumentError(ArgumentError, KernelError):
    """``"fill_pattern(seed=-1): seed must be in [0, 2**64)"``: ``operation`` names the
    call, ``field`` the argument, ``value`` the bad value and ``rule`` what it must obey."""


class SegmentRangeError(KernelError):
    """Gather segment ``index`` = ``(src_offset, dst_offset, nbytes)`` reaches past the
    end of an arena of ``arena_bytes`` bytes (or has a negative field)."""

    def __init__(self, index: int, segment: tuple[int, int, int], arena_bytes: int) -> None:
        self.index = index
        self.segment = tuple(segment)
        self.arena_bytes = arena_bytes
        src, dst, nbytes = self.segment
        super().__init__(f"gather segment {index} (src_offset={src}, dst_offset={dst}, "
                         f"nbytes={nbytes}): must lie inside the arena [0, {arena_bytes}) "
                         f"with every field >= 0")


class SegmentOverlapError(KernelError):
    """The destination of gather segment ``index`` overlaps ``other_role`` (``"source"``
    or ``"destination"``) of segment ``other_index``; the byte ranges are half-open
    ``(start, end)`` arena offsets."""

    def __init__(self, index: int, destination: tuple[int, int], other_index: int,
                 other_role: str, other_range: tuple[int, int]) -> None:
        self.index = index
        self.destination = tuple(destination)
        self.other_index = other_index
        self.other_role = other_role
        self.other_range = tuple(other_range)
        (start, end), (other_start, other_end) = self.destination, self.other_range
        super().__init__(f"gather segment {index}: destination [{start}, {end}) overlaps the "
                         f"{other_role} [{other_start}, {other_end}) of segment {other_index}; "
                         f"a destination may overlap no source and no other destination")


class KernelToolchainError(KernelError):
    """The kernels cannot be compiled here: ``missing`` names what is absent (NVRTC),
    ``install`` says what to install, ``detail`` is the underlying message."""

    def __init__(self, missing: str, install: str, detail: str) -> None:
        self.missing = missing
        self.install = install
        self.detail = detail
        super().__init__(f"cannot compile cupool's CUDA kernels: {missing} is not available "
                         f"({detail}); install {install}")


class KernelArchitectureError(KernelError):
    """GPU ``device`` has compute capability ``compute_capability`` (e.g. ``"61"``), which the
    kernels do not support; ``detail`` says why (below the minimum, or the compiler's word)."""

    def __init__(self, device: str, compute_capability: str, detail: str) -> None:
        self.device = device
        self.compute_capability = compute_capability
        self.detail = detail
        super().__init__(f"device {device!r} (compute capability {compute_capability}) is not "
                         f"supported by cupool's kernels: {detail}")
