"""Typed, picklable errors of a program run under a budget, each naming the op and the tensor.

    CupoolError
      ProgramError                 misuse of the session API (the message says which)
        SessionClosedError         the session was closed; ``operation`` names the call
        TensorReleasedError        a persistent tensor used after ``release``
        TensorScopeError           a tensor of another session or of an iteration that ended
        SpecError                  a bad output shape or dtype, or a bad op declaration
        BudgetTooSmallError        one op's own working set does not fit the budget
        PlanningFailedError        the recorded program got no plan though every op's
                                   working set fits the budget (a bug in cupool)
        ProgramChangedError        the op sequence or a shape differs from the recorded one
                                   (raised when the session was opened with
                                   ``on_change="raise"``; by default it re-records)
        OpFailedError              an op's callable raised; the iteration was aborted
        UndeclaredWriteError       an op wrote into a tensor it did not declare as an
                                   output or an update
        OpResultError              an op returned an array instead of writing its outputs
        NotReadyError              a fetched value read before its iteration finished

Every error keeps its fields and pickles with them (as the call that constructed it,
:class:`~cupool.errors.CupoolError`), so it survives worker processes. ``op`` is the op's
name as the program declared it (``None`` where the error is not about one op) and
``op_index`` its position in the iteration.
"""

from __future__ import annotations

from cupool.errors import CupoolError


class ProgramError(CupoolError):
    """Base class of the program session's errors; also raised as is for misuse of the API
    (an op declared outside an iteration, an iteration inside another...)."""


class SessionClosedError(ProgramError):
    """``operation`` (``"op 'fc1'"``, ``"read('W1')"``...) was called on a closed session."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        super().__init__(f"{operation}: the session is closed")


class TensorReleasedError(ProgramError):
    """Persistent tensor ``tensor`` was used by ``operation`` after ``release``."""

    def __init__(self, tensor: str, operation: str) -> None:
        self.tensor, self.operation = tensor, operation
        super().__init__(f"{operation}: tensor {tensor!r} was released")


class TensorScopeError(ProgramError):
    """Tensor ``tensor`` was used by ``operation`` outside the scope it lives in (``why``:
    another session, or an iteration that already ended)."""

    def __init__(self, tensor: str, operation: str, why: str) -> None:
        self.tensor, self.operation, self.why = tensor, operation, why
        super().__init__(f"{operation}: tensor {tensor!r} {why}")


class SpecError(ProgramError):
    """A bad declaration: ``what`` (a shape, a dtype, an argument) of op ``op``."""

    def __init__(self, op: str, what: str) -> None:
        self.op, self.what = op, what
        super().__init__(f"op {op!r}: {what}")


class BudgetTooSmallError(ProgramError):
    """Op ``op`` (index ``op_index``) needs ``needed_bytes`` resident at once (its inputs,
    updates and outputs, each rounded up to the pool's unit); the budget is
    ``budget_bytes``. No plan and no eviction can run it."""

    def __init__(self, op: str, op_index: int, needed_bytes: int, budget_bytes: int) -> None:
        self.op, self.op_index = op, op_index
        self.needed_bytes, self.budget_bytes = needed_bytes, budget_bytes
        super().__init__(f"op {op_index} {op!r} needs {needed_bytes} bytes resident (its "
                         f"inputs, updates and outputs), the budget is {budget_bytes} bytes")


class PlanningFailedError(ProgramError):
    """The program recorded by iteration ``iteration`` got no plan within ``budget_bytes``
    though every op's working set fits it: ``reason`` says why (the planner's own error,
    the plan's status, or the swap engine refusing the plan). Where every working set fits
    a plan exists (at worst each op's working set brought in and put back, the budget
    planner's last resort), so this is a bug in cupool; the session says so rather than
    run every later iteration passively. The recording iteration itself ran: its updates
    stand and its fetched values are delivered; the next iteration records and plans
    again."""

    def __init__(self, iteration: int, budget_bytes: int, reason: str) -> None:
        self.iteration, self.budget_bytes, self.reason = iteration, budget_bytes, reason
        super().__init__(f"iteration {iteration}: the recorded program got no plan within "
                         f"{budget_bytes} bytes, though every op's working set fits: "
                         f"{reason}")


class ProgramChangedError(ProgramError):
    """Iteration ``iteration`` differs from the recorded program at op ``op_index``
    (``op``): ``detail`` says how, naming ``tensor`` where one differs."""

    def __init__(self, iteration: int, op_index: int, op: str, tensor: str | None,
                 detail: str) -> None:
        self.iteration, self.op_index, self.op = iteration, op_index, op
        self.tensor, self.detail = tensor, detail
        about = f", tensor {tensor!r}" if tensor is not None else ""
        super().__init__(f"iteration {iteration}: op {op_index} {op!r}{about}: {detail} "
                         f"(the plan was made for the recorded program)")


class OpFailedError(ProgramError):
    """Op ``op`` (index ``op_index``) of iteration ``iteration`` raised ``cause`` (its
    ``repr``); the ops after it were skipped and the iteration was closed cleanly."""

    def __init__(self, op: str, op_index: int, iteration: int, cause: str) -> None:
        self.op, self.op_index, self.iteration, self.cause = op, op_index, iteration, cause
        super().__init__(f"iteration {iteration}: op {op_index} {op!r} raised {cause}; the "
                         f"ops after it were skipped")


class EngineFailedError(ProgramError):
    """Iteration ``iteration`` failed in the swap engine or the device (a copy, a launch,
    a stream), not in an op: ``cause`` says what failed. Persistent state the plan was
    moving may be partly updated or lost, so the session refuses later iterations and
    reads with this error; closing it returns every device resource."""

    def __init__(self, iteration: int, cause: str) -> None:
        self.iteration, self.cause = iteration, cause
        super().__init__(f"iteration {iteration} failed in the swap engine: {cause}; the "
                         f"persistent state may be partly updated, so the session refuses "
                         f"later iterations and reads")


class ReplayError(ProgramError):
    """A recorded trace cannot be replayed as a program: no valid swapping plan within the
    budget, recompute callables for buffers the trace does not have, or the swap engine
    cannot run the plan on the device (reason in the message)."""


class UndeclaredWriteError(ProgramError):
    """Op ``op`` (index ``op_index``) wrote into ``tensor``, which it declared as an input
    only (declare it in ``updates`` to modify it in place)."""

    def __init__(self, op: str, op_index: int, tensor: str) -> None:
        self.op, self.op_index, self.tensor = op, op_index, tensor
        super().__init__(f"op {op_index} {op!r} wrote into tensor {tensor!r}, which it "
                         f"declared as an input only (declare it in updates= to modify it "
                         f"in place)")


class OpResultError(ProgramError):
    """Op ``op`` (index ``op_index``) returned ``returned`` (a type name) instead of writing
    into its declared outputs (whose contents would otherwise be lost)."""

    def __init__(self, op: str, op_index: int, returned: str) -> None:
        self.op, self.op_index, self.returned = op, op_index, returned
        super().__init__(f"op {op_index} {op!r} returned a {returned} that is not one of its "
                         f"outputs: write results into the output arrays it is given")


class NotReadyError(ProgramError):
    """The value of fetched tensor ``tensor`` was read before its iteration finished."""

    def __init__(self, tensor: str) -> None:
        self.tensor = tensor
        super().__init__(f"tensor {tensor!r}: its value is ready once the iteration's "
                         f"'with' block has ended")


__all__ = ["BudgetTooSmallError", "EngineFailedError", "NotReadyError", "OpFailedError",
           "OpResultError", "ProgramChangedError", "ProgramError", "ReplayError",
           "SessionClosedError",
           "SpecError", "TensorReleasedError", "TensorScopeError", "UndeclaredWriteError"]
