"""Progress bars for the long loops (GA generations, exact search, replay iterations).

Off unless a caller turns it on, so library calls and tests stay silent; the CLI wraps a
command in :func:`enabled`::

    from cupool import progress

    with progress.enabled(quiet=args.quiet):     # the CLI, around one command
        plan(trace, "genetic")                   # the GA's generation loop shows a bar

    with progress.bar(total=300, desc="genetic", unit="gen") as bar:   # a long loop
        for generation in ...:
            bar.update(postfix="best 2.78 GiB")

A bar is drawn with tqdm (the optional extra ``pip install 'cupool[progress]'``) on the
stream given to :func:`enabled` (default ``sys.stderr``), and only when all hold: progress
is enabled, ``quiet`` is False, the stream is a terminal, and tqdm is importable. Otherwise
:func:`bar` returns a no-op. A bar appears only after :data:`DELAY_S` seconds, so short
loops never flash one.

``enabled(callback=f)`` also reports every update as ``f(desc, done, total)`` (``total``
is ``None`` when unknown), terminal or not: for tests and for embedding applications.

Progress is output only: a loop must not read anything back from its bar, so results are
identical with and without it (the solvers' tests check this). The state is a
:class:`contextvars.ContextVar`, so threads and asyncio tasks each see their own.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from cupool.errors import CupoolError

DELAY_S = 1.0
"""Seconds a loop must run before its bar is drawn (tqdm's ``delay``)."""

Callback = Callable[[str, int, "int | None"], None]
"""``callback(desc, done, total)``: called after every update of every bar."""


class ProgressError(CupoolError):
    """:func:`enabled` was misused (the same context entered twice, or exited twice)."""


@dataclass(frozen=True)
class _Settings:
    quiet: bool
    stream: IO[str] | None
    callback: Callback | None


_current: contextvars.ContextVar[_Settings | None] = contextvars.ContextVar(
    "cupool_progress", default=None)


class ProgressContext:
    """What :func:`enabled` returns: sets the progress settings on ``__enter__`` and restores
    the previous ones on ``__exit__`` (even on error). One object is entered once."""

    def __init__(self, settings: _Settings) -> None:
        self._settings = settings
        self._token: contextvars.Token | None = None
        self._used = False

    def __enter__(self) -> ProgressContext:
        if self._used:
            raise ProgressError("progress.enabled(...) was entered twice; make a new one")
        self._used = True
        self._token = _current.set(self._settings)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._token is None:
            raise ProgressError("progress.enabled(...) was exited without being entered, "
                                "or exited twice")
        token, self._token = self._token, None
        _current.reset(token)


def enabled(quiet: bool = False, stream: IO[str] | None = None,
            callback: Callback | None = None) -> ProgressContext:
    """Turn progress on for a ``with`` block: ``with progress.enabled(quiet=args.quiet):``.

    ``quiet=True`` keeps bars off but still calls ``callback``; ``stream`` is where bars
    go (default: ``sys.stderr`` at the time of each bar). Blocks nest: the inner one
    wins until it exits. Entering one context twice, or exiting it twice, raises
    :class:`ProgressError`.
    """
    return ProgressContext(_Settings(bool(quiet), stream, callback))


def is_enabled() -> bool:
    """True inside an :func:`enabled` block (bars may still be hidden: see the module)."""
    return _current.get() is not None


class Bar:
    """One progress bar; the no-op when nothing is to be drawn or called back.

    ``update(n=1, postfix=None)`` advances it (``postfix``: a short status string such as
    ``"best 2.78 GiB"``); ``close()`` ends it; it is its own context manager.
    """

    def __init__(self, desc: str, total: int | None, bar=None,
                 callback: Callback | None = None) -> None:
        self.desc, self.total, self.done = desc, total, 0
        self._bar, self._callback = bar, callback

    def update(self, n: int = 1, postfix: str | None = None) -> None:
        """Count ``n`` more steps done."""
        self.done += n
        if self._bar is not None:
            if postfix is not None:
                self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.update(n)
        if self._callback is not None:
            self._callback(self.desc, self.done, self.total)

    def close(self) -> None:
        """Remove the bar from the terminal (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def bar(total: int | None = None, desc: str = "", unit: str = "it") -> Bar:
    """A bar of ``total`` steps (``None``: unknown) labelled ``desc``, counting ``unit``s;
    a no-op outside :func:`enabled`, when quiet, off a terminal, or without tqdm."""
    settings = _current.get()
    if settings is None:
        return Bar(desc, total)
    drawn = None
    stream = settings.stream if settings.stream is not None else sys.stderr
    if not settings.quiet and _is_terminal(stream):
        tqdm = _tqdm()
        if tqdm is not None:
            drawn = tqdm(total=total, desc=desc, unit=unit, file=stream, leave=False,
                         delay=DELAY_S, dynamic_ncols=True)
    return Bar(desc, total, drawn, settings.callback)


def iterate(items: Iterable, desc: str = "", unit: str = "it",
            total: int | None = None) -> Iterator:
    """Yield ``items`` unchanged, advancing a :func:`bar` after each one (``total``
    defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    with bar(total, desc, unit) as progress_bar:
        for item in items:
            yield item
            progress_bar.update()


__all__ = ["DELAY_S", "Bar", "ProgressContext", "ProgressError", "bar", "enabled", "is_enabled",
           "iterate"]
