"""A buffer's size is a positive number of bytes, however the trace was built."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace
from cupool.errors import TraceFormatError


@pytest.mark.parametrize("size", [0, -4, True, 2.0, "8", None])
def test_a_size_that_is_not_a_positive_integer_is_refused(size):
    with pytest.raises(TraceFormatError,
                       match=rf"^buffer 7: size \(={size!r}\) must be an integer > 0 \(bytes\)$"):
        Buffer(7, size, 0, 2, (0, 1))


def test_positive_sizes_of_any_integer_type_are_kept():
    assert Buffer(1, 4096, 0, 1, (0,)).size == 4096
    assert Buffer(2, np.int64(512), 0, 1, (0,), kind=PERSISTENT).size == 512


def test_a_trace_built_in_python_with_an_empty_buffer_never_reaches_a_planner():
    with pytest.raises(TraceFormatError, match="buffer 1: size"):
        Trace("t", [Op(0, "a", 1.0), Op(1, "b", 1.0)],
              [Buffer(0, 64, 0, 2, (0, 1)), Buffer(1, 0, 1, 2, (1,))])
