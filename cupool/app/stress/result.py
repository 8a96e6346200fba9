"""What a scenario checked and what a whole run found: the ``--json`` object and the human
summary ``cupool stress`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from cupool.app.stress.config import SCENARIOS

JSON_KEYS = ("device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
             "leaked_blocks", "late_prefetches", "errors")
"""The keys of :meth:`StressResult.summary`, in order (the ``--json`` object)."""


@dataclass
class ScenarioResult:
    """What one scenario checked (see :mod:`cupool.app.stress` for each count)."""

    bytes_checked: int = 0
    corrupt_bytes: int = 0
    leaked_blocks: int = 0
    late_prefetches: int = 0
    notes: dict = field(default_factory=dict)

    def add(self, other: ScenarioResult) -> None:
        self.bytes_checked += other.bytes_checked
        self.corrupt_bytes += other.corrupt_bytes
        self.leaked_blocks += other.leaked_blocks
        self.late_prefetches += other.late_prefetches


@dataclass
class StressResult:
    """The totals of a stress run; :meth:`summary` is the ``--json`` object."""

    device: str
    seconds: float = 0.0
    scenarios: int = 0
    bytes_checked: int = 0
    corrupt_bytes: int = 0
    leaked_blocks: int = 0
    late_prefetches: int = 0
    errors: int = 0
    rounds: int = 0
    by_scenario: dict = field(default_factory=lambda: {name: 0 for name in SCENARIOS})
    messages: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No corrupt byte, no leaked block, no error."""
        return self.corrupt_bytes == 0 and self.leaked_blocks == 0 and self.errors == 0

    def summary(self) -> dict:
        """``{"device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
        "leaked_blocks", "late_prefetches", "errors"}`` (:data:`JSON_KEYS`)."""
        return {"device": self.device, "seconds": round(self.seconds, 3),
                "scenarios": self.scenarios, "bytes_checked": self.bytes_checked,
                "corrupt_bytes": self.corrupt_bytes, "leaked_blocks": self.leaked_blocks,
                "late_prefetches": self.late_prefetches, "errors": self.errors}


def summary_lines(result: StressResult) -> list[str]:
    """The human summary ``cupool stress`` prints."""
    verdict = "PASS" if result.passed else "FAIL"
    counts = ", ".join(f"{name} {count}" for name, count in result.by_scenario.items())
    lines = [f"cupool stress on {result.device}: {verdict} after {result.seconds:.1f} s, "
             f"{result.scenarios} scenarios in {result.rounds} rounds ({counts})",
             f"  bytes checked    {result.bytes_checked}",
             f"  corrupt bytes    {result.corrupt_bytes}",
             f"  leaked blocks    {result.leaked_blocks}",
             f"  late prefetches  {result.late_prefetches}",
             f"  errors           {result.errors}"]
    lines += [f"  error: {message}" for message in result.messages]
    return lines
