"""Every error of the swap engine pickles with its fields and keeps its message."""

from __future__ import annotations

import pickle

import pytest

from cupool.errors import CupoolError
from cupool.swap.errors import (
    ConflictingUseError,
    CopyFailedError,
    EngineError,
    EngineStateError,
    HandleError,
    HandleLifetimeError,
    HandleStateError,
    StagingError,
    StreamWorkError,
)

ERRORS = [
    (HandleError("buffer 3: bad intent"), "buffer 3: bad intent"),
    (HandleLifetimeError(7, 2, 5), "buffer 7: used after its lifetime [2, 5) ended"),
    (HandleStateError(4, "host", "the bytes are not on the device"),
     "buffer 4: state is 'host', the bytes are not on the device"),
    (ConflictingUseError(2, "write", 1, 0),
     "buffer 2: use(intent='write') conflicts with 1 read(s) and 0 write(s) in progress"),
    (StreamWorkError(3, "stream 'compute': launch op failed: OSError()"),
     "iteration 3: work on a stream failed: stream 'compute': launch op failed"),
    (CopyFailedError(9, "h2d", 1024, "DMA fault"),
     "buffer 9: h2d copy of 1024 bytes failed: DMA fault"),
    (StagingError("released twice"), "released twice"),
    (EngineError("the executor needs a swapping plan"), "the executor needs a swapping plan"),
    (EngineStateError("before_op(3): no iteration is running"),
     "before_op(3): no iteration is running"),
]


@pytest.mark.parametrize("error, message", ERRORS, ids=[type(e).__name__ for e, _m in ERRORS])
def test_errors_pickle_with_their_fields_and_message(error, message):
    assert isinstance(error, CupoolError) and str(error).startswith(message)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)
