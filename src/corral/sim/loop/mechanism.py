"""How a running job is resized, and what that costs: a property of the execution mechanism.

The engine asks how long a job pauses (no progress, GPUs held) when its placement changes.
By name (`mechanism_named`, `--mechanism`): `checkpoint-restart` (Pollux's testbed, 30 s per
change, first start included), `sidecar` (SideCar (SC'20)), `termination` (Kubernetes, the
SideCar paper's baseline), `termination-epoch` (resuming from the last epoch), `in-place`
(ONES (SC'21) §3.3.1). Numbers: `corral.perf.overheads`; GPUs being released: `GpuHandover`.
Checkpoint-restart charges each model the pause its data's publishers charged it
(`Truth.restart_times`, via `for_models`) unless the user set one pause for all (`pinned`).
Decided here: a job waits for the last of its releasing GPUs (release + start, or their max
with early initialisation); a donor shrinks at the decision, not when the incoming job is ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from corral.core.cluster import NO_PLACEMENT, Placement
from corral.core.errors import InputError
from corral.perf.overheads import OVERHEADS, ReshapeOverheads, resize_kind

CHECKPOINT_RESTART = "checkpoint-restart"


@dataclass(frozen=True, slots=True)
class Mechanism:
    """An execution mechanism: its overhead profile and the pause each placement change costs.

    `pinned`: checkpoint-restart's pause was set for every model (`--restart-delay`), so
    `for_models` leaves it; `per_model`: (app, overheads) pairs that replace the profile for
    those models (each model's own restart pause, or what a live run measured of it).
    """

    overheads: ReshapeOverheads
    pinned: bool = False
    per_model: tuple[tuple[str, ReshapeOverheads], ...] = ()

    @property
    def name(self) -> str:
        return self.overheads.name

    def for_models(self, restarts: Mapping[str, float]) -> Mechanism:
        """This mechanism charging each model in `restarts` its own checkpoint-restart pause;
        itself when it is another mechanism or its pause is pinned."""
        if self.pinned or self.name != CHECKPOINT_RESTART or not restarts:
            return self
        return replace(self, per_model=tuple((app, restart_overheads(pause))
                                             for app, pause in sorted(restarts.items())))

    def overheads_of(self, app: str) -> ReshapeOverheads:
        """The overheads `app` pays: its own where set (`per_model`), else the profile's."""
        for name, own in self.per_model:
            if name == app:
                return own
        return self.overheads

    def describe(self) -> str:
        """The name, and the models whose start pause differs from the profile's."""
        own = [(app, o.start_s) for app, o in self.per_model if o.start_s != self.overheads.start_s]
        if not own:
            return self.name
        each = ", ".join(f"{app} {pause:g} s" for app, pause in own)
        return f"{self.name} (restart pause per model: {each}; others {self.overheads.start_s:g} s)"

    def start_s(self) -> float:
        """The longest first-start pause any model pays (the horizon's allowance)."""
        return max([self.overheads.start_s, *(o.start_s for _, o in self.per_model)])

    def pause_s(self, app: str, old: Placement, new: Placement, wait_s: float = 0.0) -> float:
        """Pause of a job moving from `old` to `new`; `wait_s`: until its new GPUs are free."""
        o = self.overheads_of(app)
        if not new:
            return 0.0
        if not old:
            return max(o.start_s, wait_s) if o.early_init else o.start_s + wait_s
        return max(o.resize_s(old.num_gpus, new.num_gpus, _new_host(old, new)), wait_s)

    def relaunches(self, app: str, old: Placement, new: Placement) -> bool:
        """Does a running job moving from `old` to `new` start a new worker set (a
        checkpoint-restart), rather than keep its workers (a resize in place, which
        `min_runtime_s` does not count as a restart)? A start always does."""
        if not old or not new:
            return True
        kind = resize_kind(old.num_gpus, new.num_gpus, _new_host(old, new))
        return kind not in self.overheads_of(app).in_place


def _new_host(old: Placement, new: Placement) -> bool:
    """Does `new` use a node `old` does not?"""
    old_nodes = {n for n, _ in old.slots}
    return any(n not in old_nodes for n, _ in new.slots)


DEFAULT_RESTART_S = 30.0  # Pollux (OSDI'21) §5.3: the simulator's delay per re-allocation


def restart_overheads(delay_s: float) -> ReshapeOverheads:
    """Checkpoint-restart's profile: `delay_s` for every placement change, first start included."""
    return ReshapeOverheads(CHECKPOINT_RESTART, delay_s, delay_s, delay_s, delay_s)


def CheckpointRestart(delay_s: float = DEFAULT_RESTART_S, pinned: bool = False) -> Mechanism:  # noqa: N802 - reads as a type
    """Stop, checkpoint, restart on the new GPUs: a fixed pause for every placement change.

    A job's first start costs the same pause (its workers start and load), as in the reference
    simulator, where every allocation change, the first included, started the same countdown.
    `pinned`: `delay_s` holds for every model, whatever pause its data sets (`for_models`).
    """
    return Mechanism(restart_overheads(delay_s), pinned=pinned)


def mechanism_named(name: str, restart_delay_s: float | None = None) -> Mechanism:
    """The mechanism called `name`. `restart_delay_s` sets checkpoint-restart's pause for every
    model; None: each model's own where its data sets one (`for_models`), else 30 s."""
    if name == CHECKPOINT_RESTART:
        if restart_delay_s is None:
            return CheckpointRestart()
        return CheckpointRestart(restart_delay_s, pinned=True)
    if name in OVERHEADS:
        return Mechanism(OVERHEADS[name])
    raise InputError(f"unknown mechanism {name!r}; known: {', '.join(mechanism_names())}")


def mechanism_names() -> list[str]:
    return [CHECKPOINT_RESTART, *OVERHEADS]


class GpuHandover:
    """Per-node ledger of GPUs that no job holds but that are still being released.

    One per simulation run. `released` records GPUs a finished job frees; `pauses` applies one
    decision: GPUs given up by shrunk or preempted jobs join the ledger, and each job that gains
    GPUs on a node takes idle ones first, then the earliest-released ones, and waits for the
    latest it took.
    """

    def __init__(self, gpus_per_node: Sequence[int]) -> None:
        self._pending: list[list[float]] = [[] for _ in gpus_per_node]  # free-at times, sorted
        self._caps = list(gpus_per_node)

    def released(self, placement: Placement, at_s: float) -> None:
        for node, gpus in placement.slots:
            self._pending[node].extend([at_s] * gpus)
            self._pending[node].sort()

    def unreleased(self, node: int, at_s: float, count: int) -> None:
        """Take back up to `count` GPUs recorded as released on `node` at `at_s` (the emulated
        executor: another job already took them in the same decision)."""
        pending = self._pending[node]
        for _ in range(count):
            if at_s in pending:
                pending.remove(at_s)

    def pauses(self, now_s: float, mech: Mechanism,
               changes: Sequence[tuple[str, Placement, Placement]],
               held: Sequence[int] | None = None) -> list[float]:
        """Pause of each `(app, old, new)`; unchanged placements get 0.

        `held`: GPUs per node that running jobs hold before this decision. Given, `changes` need
        list only the jobs whose placement changes, and only the nodes they touch are visited;
        without it, `changes` must list every running job (their old placements are the holdings).
        """
        if held is None:
            counted = [0] * len(self._caps)
            for _, old, _ in changes:
                for node, gpus in old.slots:
                    counted[node] += gpus
            held = counted
        idle: dict[int, int] = {}

        def idle_before(node: int) -> int:
            """Idle GPUs on `node` before this decision (its expired releases dropped first)."""
            if node not in idle:
                pending = self._pending[node]
                if pending and pending[0] <= now_s:
                    pending[:] = [t for t in pending if t > now_s]
                idle[node] = self._caps[node] - held[node] - len(pending)
            return idle[node]

        release_at = now_s + mech.overheads.resize_release_s
        for _, old, new in changes:
            if old != new:
                lost = _lost(old, new)
                for node, _ in lost.slots:
                    idle_before(node)
                self.released(lost, release_at)
        out = []
        for app, old, new in changes:
            if old == new:
                out.append(0.0)
                continue
            wait = 0.0
            for node, gpus in _lost(new, old).slots:
                take_idle = min(idle_before(node), gpus)
                idle[node] -= take_idle
                rest = gpus - take_idle
                if rest > 0:
                    pending = self._pending[node]
                    wait = max(wait, pending[rest - 1] - now_s)
                    del pending[:rest]
            out.append(mech.pause_s(app, old, new, max(wait, 0.0)))
        return out


def _lost(old: Placement, new: Placement) -> Placement:
    """GPUs per node that `old` has and `new` does not (all of `old` when `new` is empty, as
    at every finish and preemption; none when `old` is, as at every first start)."""
    if not new.slots:
        return old
    if not old.slots:
        return NO_PLACEMENT
    after = dict(new.slots)
    return Placement.of({n: g - after.get(n, 0) for n, g in old.slots if g > after.get(n, 0)})
