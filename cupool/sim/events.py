"""A small discrete-event core in the style of SimPy.

The environment keeps a heap of ``(time, priority, seq, event)``: :meth:`Environment.step`
pops the earliest, advances ``now`` and runs the event's callbacks; :meth:`run` steps
until the heap is empty (or a time). ``seq`` makes the order of simultaneous events
deterministic (first scheduled, first processed); ``URGENT`` events (a process waking up)
go before ``NORMAL`` ones (timeouts) at the same time.

Processes are generators that ``yield`` events and resume with the event's value once
it has been processed::

    def worker(env, log):
        yield env.timeout(2.0)
        log.append((env.now, "done"))

    env = Environment()
    env.process(worker(env, log))
    env.run()            # log == [(2.0, "done")]

:class:`Store` is a FIFO queue (``put`` is immediate, ``get`` is an event), which is all
a copy engine needs. Nothing here knows about GPUs; :mod:`cupool.sim.simulator` builds
the streams on top.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

URGENT = 0
NORMAL = 1

_PENDING = object()


class SimulationError(RuntimeError):
    """Misuse of the event core (an event triggered twice, yielding a non-event)."""


class Event:
    """Something that happens at one instant; callbacks run when it is processed."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.callbacks: list | None = []
        self.value = _PENDING

    @property
    def triggered(self) -> bool:
        """True once the event has a value (it is scheduled or processed)."""
        return self.value is not _PENDING

    @property
    def processed(self) -> bool:
        """True once its callbacks ran."""
        return self.callbacks is None

    def succeed(self, value=None, priority: int = NORMAL) -> Event:
        """Trigger the event now; its callbacks run when the environment reaches it."""
        if self.triggered:
            raise SimulationError(f"{self!r} has already been triggered")
        self.value = value
        self.env.schedule(self, priority)
        return self


class Timeout(Event):
    """An event that triggers ``delay`` time units after its creation."""

    def __init__(self, env: Environment, delay: float, value=None) -> None:
        if delay < 0:
            raise SimulationError(f"delay (={delay}) must be >= 0")
        super().__init__(env)
        self.value = value
        env.schedule(self, NORMAL, delay)


class AllOf(Event):
    """Triggers once every event of ``events`` has been processed (value: their values)."""

    def __init__(self, env: Environment, events) -> None:
        super().__init__(env)
        self._events = list(events)
        self._left = 0
        for event in self._events:
            if not event.processed:
                self._left += 1
                event.callbacks.append(self._check)
        if self._left == 0:
            self.succeed([e.value for e in self._events], URGENT)

    def _check(self, _event) -> None:
        self._left -= 1
        if self._left == 0:
            self.succeed([e.value for e in self._events], URGENT)


class Process(Event):
    """Runs a generator; the process is itself an event triggered when it returns."""

    def __init__(self, env: Environment, generator) -> None:
        super().__init__(env)
        self._generator = generator
        start = Event(env)
        start.callbacks.append(self._resume)
        start.succeed(None, URGENT)

    def _resume(self, event) -> None:
        value = event.value
        while True:
            try:
                target = self._generator.send(value)
            except StopIteration as stop:
                self.succeed(stop.value, URGENT)
                return
            if not isinstance(target, Event):
                raise SimulationError(f"a process yielded {target!r}, which is not an event")
            if not target.processed:
                target.callbacks.append(self._resume)
                return
            value = target.value


class Store:
    """A FIFO queue of items: ``put`` is immediate; ``get()`` is an event whose value is the
    next item, served to getters in the order they asked."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.items: deque = deque()
        self._getters: deque = deque()

    def put(self, item) -> None:
        self.items.append(item)
        self._serve()

    def get(self) -> Event:
        event = Event(self.env)
        self._getters.append(event)
        self._serve()
        return event

    def _serve(self) -> None:
        while self.items and self._getters:
            self._getters.popleft().succeed(self.items.popleft(), URGENT)


class Environment:
    """The clock and the event heap."""

    def __init__(self, initial_time: float = 0.0) -> None:
        self.now = initial_time
        self._queue: list = []
        self._seq = itertools.count()

    def schedule(self, event: Event, priority: int = NORMAL, delay: float = 0.0) -> None:
        heapq.heappush(self._queue, (self.now + delay, priority, next(self._seq), event))

    def peek(self) -> float:
        """Time of the next event (``inf`` when none is left)."""
        return self._queue[0][0] if self._queue else float("inf")

    def step(self) -> None:
        """Process the next event."""
        self.now, _priority, _seq, event = heapq.heappop(self._queue)
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)

    def run(self, until: float | None = None) -> None:
        """Step until no event is left, or until the next event is later than ``until``."""
        while self._queue and (until is None or self._queue[0][0] <= until):
            self.step()
        if until is not None and until > self.now:
            self.now = until

    def event(self) -> Event:
        return Event(self)

    def timeout(self, delay: float, value=None) -> Timeout:
        return Timeout(self, delay, value)

    def process(self, generator) -> Process:
        return Process(self, generator)

    def all_of(self, events) -> AllOf:
        return AllOf(self, events)
