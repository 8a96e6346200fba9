"""Typed, picklable errors that carry the numbers.

Every error names what was wrong, which item (buffer id, line, field) and the
bad value, so that the CLI can print it as one line and exit with code 2.
Errors pickle with their fields so they survive worker processes, like CuPy's
``OutOfMemoryError``, by one mechanism: :class:`CupoolError` records the arguments each
error was constructed with and pickles as that same call, so a subclass takes its fields
as constructor arguments and needs no ``__reduce__`` of its own.
"""

from __future__ import annotations


def _construct(cls, args: tuple, kwargs: dict):
    """``cls(*args, **kwargs)``: how an error constructed with keyword arguments unpickles."""
    return cls(*args, **kwargs)


class CupoolError(Exception):
    """Base class of every error cupool raises on purpose.

    It pickles as the call that constructed it (module docstring): ``__new__`` records the
    arguments before any ``__init__`` runs, and unpickling calls the class with them again,
    which sets every field and the message as before. A subclass must therefore keep its
    constructor arguments as they were given (derive other fields from them)."""

    def __new__(cls, *args, **kwargs):
        error = super().__new__(cls, *args, **kwargs)
        error._constructed_with = (args, kwargs)
        return error

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self):
        args, kwargs = self._constructed_with
        if kwargs:
            return (_construct, (self.__class__, args, kwargs))
        return (self.__class__, args)

    def __str__(self) -> str:
        return self.message


class InputError(CupoolError):
    """Bad input: a file, a field or an argument that breaks a documented rule.

    ``where`` says which item (``"buffer 17"``, ``"line 4"``, ``"field 'version'"``);
    ``path`` is the file, when there is one.
    """

    def __init__(self, message: str, where: str | None = None, path: str | None = None) -> None:
        self.where = where
        self.path = path
        text = message if where is None else f"{where}: {message}"
        if path is not None:
            text = f"{path}: {text}"
        super().__init__(text)
        self.detail = message


class ArgumentError(CupoolError):
    """A call got a bad argument: ``"reserve(size=-3): size must be > 0"``. ``operation``
    names the call, ``field`` the argument, ``value`` the bad value and ``rule`` what it
    must satisfy. Layers mix it into their own base (``DeviceError``, ``KernelError``)."""

    def __init__(self, operation: str, field: str, value: object, rule: str) -> None:
        self.operation = operation
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{operation}({field}={value!r}): {field} {rule}")


class TraceFormatError(InputError):
    """A trace (trace v1 JSON or MiniMalloc CSV) breaks a rule of its format."""


class PlanFormatError(InputError):
    """A plan file breaks a rule of the plan format, or belongs to another trace."""


class UnitError(InputError):
    """A size or budget string could not be parsed (``"4GiB"``, ``"70%"``, ``"123"``)."""


class SolverError(CupoolError):
    """A solver was asked for something it cannot do (unknown name, bad parameter)."""


class OutputError(InputError):
    """A file could not be written: ``path`` (the path as given), ``errno`` (the OS error
    number, ``None`` for a short write that reported none) and ``reason`` (what failed:
    ``"No space left on device"``, ``"wrote 100 of 4096 bytes"``). An :class:`InputError`,
    so the CLI prints it as one line and exits 2: the output path is an argument."""

    def __init__(self, path: str, errno: int | None, reason: str) -> None:
        self.errno = errno
        self.reason = reason
        code = "" if errno is None else f", {_errno_name(errno)}"
        super().__init__(f"cannot write here ({reason}{code})", path=str(path))


def _errno_name(number: int) -> str:
    import errno

    return errno.errorcode.get(number, f"errno {number}")
