"""What ``auto`` (:mod:`.auto`) keeps of its members' outcomes: :class:`Selection`.

Members' plans are simulated as they come (:func:`~.parallel.judge`) and ranked by their
simulations; the independent validator checks a plan only when ``auto`` is about to rely
on it (:meth:`Selection.confirm`: the best plan, before it ends the search at the ideal or
counts as found, and each plan before it is refined). A plan that fails is excluded as if
it had failed when it came (its ``candidates`` entry says why) and the selection is made
again without it, so the plan ``auto`` returns is the one that validating every member's
plan would give, and it is always validated. The members whose simulated overhead
``candidates`` reports from a plan the validator did not check are listed
(:attr:`Selection.unvalidated`).
"""

from __future__ import annotations

from dataclasses import replace

from cupool.check import validate_plan
from cupool.planning.budget.parallel import MemberOutcome, judged_key
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.working_sets import KEPT_MEMBER, MEMBER

LAST_RESORT_MEMBERS = frozenset({MEMBER, KEPT_MEMBER})
"""The names of ``auto``'s last resort (:func:`~.auto.working_set_members`, those of
:mod:`.working_sets`)."""

SEARCHED_MEMBER = "stream(searched keep set)"
"""The member whose plan ``auto`` refines side by side with the best of the others (its
kept set is searched: the local search may take either plan further)."""


class Selection:
    """What ``auto`` keeps of its members' outcomes, given in rank order (:meth:`add`): the
    ``candidates`` report, why members found nothing, the best plan (least simulated
    iteration time; ties: fewer swapped bytes, then rank) and the best but the searched
    member's; a greedy plan that waits for copies by design loses ties to one that does
    not. The last resort's plans (:func:`~.auto.working_set_members`) are kept aside
    (``last_resort``): ``auto`` refines the best of them too when it beats the others'
    best before refining, and keeps it only when it is faster refined.

    ``judged``: :func:`~.parallel.judge`'s plans already judged, where :meth:`confirm` keeps
    the validator's reports too."""

    def __init__(self, trace, judged: dict | None = None) -> None:
        self.trace = trace
        self.judged = {} if judged is None else judged
        self._outcomes: list[tuple[int, MemberOutcome]] = []  # as added, checks since
        self._skipped: list[str] = []
        self._clear()

    def _clear(self) -> None:
        self.report: dict[str, float | str] = {}
        self.reasons: list[str] = []
        self.best: BudgetResult | None = None
        self.others: BudgetResult | None = None  # the best member but the searched one
        self.last_resort: BudgetResult | None = None
        self._last_resort_key = None
        self._families: dict[str, tuple] = {}  # the best (key, entry) of each family
        self._best_key = self._others_key = None
        self.unrepaired: BudgetResult | None = None  # the best placed without a repair
        self._unrepaired_key = None
        self.last_plan = None

    def at_ideal(self) -> bool:
        """Whether the best plan so far runs the ideal iteration (overhead 0): no member
        can be faster."""
        return self.best is not None and self.best.simulation.overhead <= 0.0

    def skip(self, names: list[str]) -> None:
        """Report ``names`` (members after a plan at the ideal) as not planned."""
        self._skipped = list(names)
        for name in names:
            self.report[name] = (f"not planned: {self.best.member} already runs the ideal "
                                 f"iteration (overhead 0)")

    def add(self, rank: int, outcome: MemberOutcome) -> None:
        self._outcomes.append((rank, outcome))
        self._take(rank, outcome)

    def _take(self, rank: int, outcome: MemberOutcome) -> None:
        self.last_plan = outcome.plan
        name = outcome.name
        if not outcome.feasible:
            self.report[name] = outcome.reason
            self.reasons.append(f"{name}: {outcome.reason}")
            return
        check, sim = outcome.check, outcome.simulation
        if check is not None and not check.valid:
            self.report[name] = f"invalid ({check.rule}): {check.message}"
            return
        self.report[name] = sim.overhead
        # a plan that waits for copies by design (:mod:`.engine.waits`) ranks after the
        # plans that do not: it wins only where it is faster
        waits = outcome.plan.stats.get("planned_wait_us", 0.0) > 0
        key = (sim.iteration_us, sim.swapped_bytes, waits, rank)
        entry = BudgetResult(outcome.plan, self.trace, outcome.policy, outcome.reason,
                             simulation=sim, member=name)
        if name in LAST_RESORT_MEMBERS:
            if self._last_resort_key is None or key < self._last_resort_key:
                self.last_resort, self._last_resort_key = entry, key
            return
        if "placement_repair" not in outcome.plan.stats and (
                self._unrepaired_key is None or key < self._unrepaired_key):
            self.unrepaired, self._unrepaired_key = entry, key
        if self._best_key is None or key < self._best_key:
            self.best, self._best_key = entry, key
        if name == SEARCHED_MEMBER:
            return
        if self._others_key is None or key < self._others_key:
            self.others, self._others_key = entry, key
        family = _family(name)
        if family not in self._families or key < self._families[family][0]:
            self._families[family] = (key, entry)

    def confirm(self, entry: BudgetResult) -> bool:
        """Check ``entry`` (one of this selection's plans) with the validator, once per
        plan. True when it is valid; else its member is excluded, the selection is made
        again without it (every entry may change) and the answer is False."""
        key = judged_key(entry.plan)
        check, sim = self.judged.get(key, (None, entry.simulation))
        if check is None:
            check = validate_plan(self.trace, entry.plan)
            self.judged[key] = (check, sim)
        if check.valid:
            return True
        self._outcomes = [(rank, replace(outcome, check=check, simulation=None)
                           if outcome.feasible and judged_key(outcome.plan) == key else outcome)
                          for rank, outcome in self._outcomes]
        self._clear()
        for rank, outcome in self._outcomes:
            self._take(rank, outcome)
        if self._skipped:
            self.skip(self._skipped)
        return False

    def confirmed_best(self) -> BudgetResult | None:
        """The best plan, validated (:meth:`confirm`), or ``None`` when no valid one is
        left."""
        while self.best is not None and not self.confirm(self.best):
            pass
        return self.best

    @property
    def unvalidated(self) -> list[str]:
        """The members whose overhead in ``report`` comes from a plan the validator has
        not checked, in rank order."""
        return [outcome.name for _rank, outcome in self._outcomes
                if outcome.feasible and isinstance(self.report.get(outcome.name), float)
                and self.judged.get(judged_key(outcome.plan), (None,))[0] is None]

    @property
    def runner_up(self) -> BudgetResult | None:
        """The best plan of another family of members than the best of the others' (the
        searched member aside; not the same plan), or ``None``."""
        if self.others is None:
            return None
        family = _family(self.others.member)
        rivals = sorted((key, entry) for name, (key, entry) in self._families.items()
                        if name != family and not _same_plan(entry.plan, self.others.plan))
        return rivals[0][1] if rivals else None


def _family(member: str) -> str:
    """A member's family: its name up to its options (``greedy``, ``stream``, ...)."""
    return member.split("(", 1)[0]


def _same_plan(a, b) -> bool:
    """Whether two members made the same plan (variants often do): refining it twice
    finds nothing new."""
    return a.residencies == b.residencies and a.actions == b.actions
