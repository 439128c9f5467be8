"""`Rounds`: the one round of the engine and the live loop. Its order (finished, arrivals, the
rule, decide or keep), its rule for asking the policy, its schedule and its count, on a world
that records what it was asked to do."""

from __future__ import annotations

import itertools

import pytest

from corral.core.policy import Changes, Keeps, Promises, Reads
from corral.core.rounds import Ask, Rounds
from corral.policies import policy_class, policy_names
from corral.policies.fifo import Fifo


class _World:
    """A world whose jobs leave and arrive when the test says; it records every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.leaving = Changes.NONE
        self.arriving = False
        self.waiting = True
        self.jobs = True

    def take_finished(self, now_s: float) -> Changes:
        self.calls.append("finished")
        return self.leaving

    def take_arrivals(self, now_s: float) -> bool:
        self.calls.append("arrivals")
        return self.arriving

    def none_waits(self) -> bool:
        self.calls.append("none_waits")
        return not self.waiting

    def decide(self, now_s: float) -> bool:
        self.calls.append(f"decide@{now_s:g}")
        return self.jobs

    def keep(self, now_s: float, changed: bool) -> bool:
        self.calls.append(f"keep@{now_s:g}{'*' if changed else ''}")
        return self.jobs


@pytest.mark.parametrize("name", ["fifo", "tiresias-las", "pollux", "optimus", "ones"])
def test_should_decide_follows_the_policy_promises(name: str) -> None:
    policy = policy_class(name)()
    promises = policy.promises
    for trust in (False, True):
        rounds = Rounds(policy, 60.0, trust=trust)
        on_change_only = trust and promises.on_change_only
        for at_round, changed, event, none_waits in itertools.product((False, True), repeat=4):
            asked = (at_round and (changed or not on_change_only)) or event
            if asked:
                keeps = trust and none_waits and promises.keeps_running
                want = Ask.KEEP if keeps else Ask.DECIDE
            else:
                want = Ask.KEEP if at_round and not on_change_only else Ask.NOTHING
            got = rounds.should_decide(at_round, changed, event, 0.0, none_waits)
            assert got is want, (at_round, changed, event, none_waits, trust)


def test_only_gang_schedulers_that_keep_running_jobs_promise_to_keep_them() -> None:
    keepers = {n for n in policy_names() if policy_class(n).promises.keeps_running}
    assert keepers == {"fifo", "srtf", "tiresias-las", "tiresias-gittins"}


def test_a_standing_decision_skips_rounds_until_its_time_unless_something_changed() -> None:
    class Standing(Fifo):
        promises = Promises(reads=Reads.PLACEMENTS)

        def stands_until(self) -> float:
            return 100.0

    rounds = Rounds(Standing(), 60.0)
    assert rounds.should_decide(True, False, False, 99.0, False) is Ask.KEEP
    assert rounds.should_decide(True, False, False, 100.0, False) is Ask.DECIDE
    assert rounds.should_decide(True, True, False, 50.0, False) is Ask.DECIDE  # a change
    assert rounds.should_decide(False, False, False, 150.0, False) is Ask.NOTHING  # no round
    untrusting = Rounds(Standing(), 60.0, trust=False)
    assert untrusting.should_decide(True, False, False, 99.0, False) is Ask.DECIDE


def test_a_step_takes_finished_then_arrivals_then_asks_then_decides_or_keeps() -> None:
    class Keeping(Fifo):
        promises = Promises(reads=Reads.PLACEMENTS, keeps=Keeps.RUNNING_WHEN_NONE_WAITS)

    world = _World()
    rounds = Rounds(Keeping(), 60.0, first_s=107.0)
    assert rounds.next_round_s == 120.0  # rounds at multiples of the interval
    assert rounds.step(110.0, world) is False and world.calls == [
        "finished", "arrivals", "none_waits"]  # no round: nothing asked
    world.calls.clear()
    assert rounds.step(120.0, world) is True and rounds.next_round_s == 180.0
    assert world.calls == ["finished", "arrivals", "none_waits", "decide@120"]
    world.calls.clear()
    world.waiting, world.leaving = False, Changes.COMPLETION  # a job left; none waits
    rounds.step(180.0, world)
    assert world.calls == ["finished", "arrivals", "none_waits", "keep@180*"]
    assert rounds.count == 2 and rounds.changed is False
    world.jobs = False  # no job active: a moment, not a round
    rounds.step(240.0, world)
    assert rounds.count == 2


def test_a_policy_is_asked_at_once_only_after_the_changes_it_reacts_to() -> None:
    class OnArrival(Fifo):
        promises = Promises(reads=Reads.PLACEMENTS, reacts_to=Changes.ARRIVAL,
                            keeps=Keeps.DECISION_UNTIL_CHANGE)

    world = _World()
    rounds = Rounds(OnArrival(), 60.0)
    rounds.step(0.0, world)  # the first round
    world.calls.clear()
    world.leaving = Changes.COMPLETION
    rounds.step(30.0, world)
    assert world.calls == ["finished", "arrivals"] and rounds.changed  # decided at the round
    world.leaving, world.arriving = Changes.NONE, True
    rounds.step(40.0, world)
    assert world.calls[-1] == "decide@40" and not rounds.changed


def test_skipping_lands_on_a_multiple_of_the_interval_and_never_goes_back() -> None:
    rounds = Rounds(Fifo(), 60.0)
    rounds.skip_to(601.0)
    assert rounds.next_round_s == 660.0
    rounds.skip_to(100.0)  # earlier: nothing changes
    rounds.skip_to(float("inf"))
    assert rounds.next_round_s == 660.0
    world = _World()
    world.jobs = False
    assert rounds.step(700.0, world)  # a late tick (live): the next round is the next multiple
    assert rounds.next_round_s == 720.0
