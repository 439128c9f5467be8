"""The scheduling round, written once for the simulator's engine and the live control loop.

`Rounds` owns the round schedule (rounds at multiples of the interval), the `changed` flag, the
rule for when the policy is asked (`should_decide`) and the round count. `step(now_s, world)`
is one moment, always in this order: take the jobs that left, take the arrivals, ask the rule,
then decide and apply, or keep the last decision. A `World` is the side's jobs: the engine's
simulated ones, advanced analytically to `now_s`, or the live loop's, on an executor. Like
SimPy's one `Environment.step()`, the time itself (simulated or a clock) is the caller's.
"""

from __future__ import annotations

import enum
import math
from typing import Protocol

from corral.core.policy import Changes, Policy, Promises

__all__ = ["Ask", "Rounds", "World", "should_decide"]


class Ask(enum.Enum):
    """What a moment does with the policy (`Rounds.should_decide`)."""

    DECIDE = "decide"  # call `decide` and apply what it returns
    KEEP = "keep"  # a round in which the last decision stays in force without asking
    NOTHING = "nothing"  # not a round for this policy


class World(Protocol):
    """The jobs a `Rounds` schedules: what the engine and the live loop each implement."""

    def take_finished(self, now_s: float) -> Changes:
        """Bring the jobs to `now_s` and take out those that left: COMPLETION if any did (and
        NODES if nodes joined or left), else Changes.NONE."""

    def take_arrivals(self, now_s: float) -> bool:
        """Take in the jobs submitted by `now_s`; True when any arrived."""

    def none_waits(self) -> bool:
        """Every active job holds GPUs (on the nodes the policy last saw)."""

    def decide(self, now_s: float) -> bool:
        """Ask the policy and apply its decision; True when that was a round (jobs active)."""

    def keep(self, now_s: float, changed: bool) -> bool:
        """Keep the last decision (`changed`: jobs came or went since the policy was asked);
        True when that was a round (jobs active)."""


def should_decide(policy: Policy, promises: Promises, at_round: bool, changed: bool,
                  event: bool, now_s: float, none_waits: bool, trust: bool = True) -> Ask:
    """What `policy` (taking `promises`) does at `now_s`. It is asked (DECIDE) at a round
    unless nothing changed since it was last asked and its last decision still stands: it keeps
    its decision until a change, or it said the same decision holds until later
    (`Policy.stands_until`, taken where `trust`); and at once after a change it reacts to
    (`event`). Where it would be asked while every active job holds GPUs (`none_waits`) and it
    keeps running jobs then, its answer is known (KEEP). A round it is not asked at is still a
    round (KEEP) unless it decides only on change. `Rounds.should_decide` is this rule with its
    promises read once; the tenancy layer asks it for each queue's inner policy."""
    on_change_only = promises.on_change_only
    if event or (at_round and (changed or not (
            on_change_only or (trust and now_s < policy.stands_until())))):
        return Ask.KEEP if none_waits and promises.keeps_running else Ask.DECIDE
    return Ask.KEEP if at_round and not on_change_only else Ask.NOTHING


class Rounds:
    """One policy's rounds: when they are, whether the policy is asked, how many were held.

    With `trust=False` none of the policy's speed promises is used: it is asked at every
    round (`EngineConfig(trust_promises=False)`); what it reads and reacts to stays."""

    __slots__ = ("policy", "promises", "interval_s", "next_round_s", "changed", "count",
                 "trust", "_index", "_reacts", "_keeps_running")

    def __init__(self, policy: Policy, interval_s: float, first_s: float = 0.0,
                 trust: bool = True) -> None:
        self.policy = policy
        #: the promises taken: the policy's, or none of its shortcuts
        self.promises = policy.promises if trust else policy.promises.without_shortcuts()
        self.interval_s = interval_s
        self.trust = trust
        self._index = math.ceil(first_s / interval_s)  # the next round is the index-th
        self.next_round_s = self._index * interval_s
        self.changed = True  # jobs came or went since the policy was last asked
        #: rounds held: the policy asked, or its last decision kept (the live loop adds its
        #: fill-in rounds)
        self.count = 0
        self._reacts = self.promises.reacts_to
        self._keeps_running = self.promises.keeps_running

    def step(self, now_s: float, world: World) -> bool:
        """One moment at `now_s` (see the module docstring); True when it was a round."""
        changes = world.take_finished(now_s)
        if world.take_arrivals(now_s):
            changes = changes | Changes.ARRIVAL
        event = False
        if changes:
            self.changed = True
            event = bool(changes & self._reacts)
        at_round = now_s >= self.next_round_s
        ask = self.should_decide(at_round, self.changed, event, now_s,
                                 self._keeps_running and world.none_waits())
        if ask is Ask.DECIDE:
            held = world.decide(now_s)
        elif ask is Ask.KEEP:
            held = world.keep(now_s, self.changed)
        else:
            held = False
        if held:
            self.count += 1
        if ask is not Ask.NOTHING:
            self.changed = False
        if at_round:
            self._index = max(self._index + 1, int(now_s // self.interval_s) + 1)
            self.next_round_s = self._index * self.interval_s
        return at_round

    def should_decide(self, at_round: bool, changed: bool, event: bool, now_s: float,
                      none_waits: bool) -> Ask:
        """What the policy does at `now_s` (the module's `should_decide`, with the promises
        this round loop takes)."""
        return should_decide(self.policy, self.promises, at_round, changed, event, now_s,
                             none_waits, self.trust)

    def skip_to(self, t_s: float) -> None:
        """No round before the first multiple of the interval at or after `t_s`, when that
        is later than the next round (nothing can arrive or finish before `t_s`)."""
        if math.isfinite(t_s) and t_s > self.next_round_s:
            self._index = math.ceil(t_s / self.interval_s)
            self.next_round_s = self._index * self.interval_s
