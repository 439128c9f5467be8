"""`QueuedPolicy`: teams share the cluster through queues, each scheduled by its own inner policy.

Every round the layer computes each leaf queue's GPU share (`corral.core.queues.shares`),
carves the cluster into one sub-cluster per queue (`_carve`) and asks one inner policy
instance per queue (`inner_factory()`, so per-job state stays per queue) to decide for that
queue's jobs alone on its sub-cluster; node indices are mapped back and the decisions merged.
A gang is never split. Where quotas are per GPU type (a typed tree) the shares and the carve
are made once per type (`_typed_carve`), and on a cluster of several types each queue's jobs
are kept within one type of its sub-cluster (`_ask`, `gpu_types.py`), and every inner decision
goes through the one step the engine and the live loop use (`core/deciding.checked_decision`).
Where the inner policies' promises give a queue's decision without asking (`_known`, by the
round's own rule, `core/rounds.should_decide`), it is not asked; `fast=False` asks every
round, as a reference (tests/policies/test_tenancy.py compares the two).
docs/queues.md, "The layer" and "Quotas per GPU type", has the rules.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

from corral.core.cluster import Cluster, Placement
from corral.core.completed import NewlyCompleted
from corral.core.deciding import checked_decision
from corral.core.jobs import (
    STATUS_PENDING,
    STATUS_RUNNING,
    Assignment,
    Decision,
    JobView,
    Snapshot,
)
from corral.core.policy import Policy
from corral.core.queues import QueueTree, Shares, shares
from corral.core.reasons import WaitReason
from corral.core.rounds import Ask, should_decide
from corral.policies.tenancy.demand import is_elastic, job_demand, type_demand
from corral.policies.tenancy.gpu_types import (
    fits,
    leaf_limits,
    one_type_each,
    runs_on,
    summed,
    waiting,
)
from corral.policies.tenancy.reasons import queue_reasons
from corral.policies.tenancy.shape import give_back_order, give_back_type, movable, unusable

__all__ = ["QueuedPolicy", "is_elastic", "job_demand", "type_demand"]


class QueuedPolicy(Policy):
    """One inner policy per queue, each on its share of the cluster (module docstring)."""

    def __init__(self, inner_factory: Callable[[], Policy], queues: QueueTree,
                 fast: bool = True) -> None:
        probe = inner_factory()
        super().__init__(probe.params)
        self.name = probe.name  # type: ignore[misc]  # results keep the inner policy's name
        self.summary = f"{probe.name} per queue"  # type: ignore[misc]
        self._queues = queues
        self._factory = inner_factory
        self._spare: Policy | None = probe
        self._inner: dict[str, Policy] = {}
        self._queue_of: dict[str, str] = {}
        self.elastic = is_elastic(probe)
        self._usage_gpu_s: dict[str, float] = {}
        self._usage_at: float | None = None
        self._usage_then: dict[str, int] = {}  # GPUs each queue held at `_usage_at`
        #: The last round's shares and each queue's sub-cluster size (for tests and reports).
        self.last_shares: Shares | None = None
        #: A typed tree's last shares per GPU type (`_typed_carve`).
        self.last_type_shares: dict[str, Shares] = {}
        self.last_carve: dict[str, int] = {}
        # The most conservative promises: fresh full views, asked at every round, nothing kept
        # between rounds; it reads oracle information or finished jobs, and reacts to
        # arrivals and completions, only where the inner policy does.
        self.promises = probe.promises.without_shortcuts()
        #: Take the inner policies' promises and reuse sub-clusters and shares between rounds
        #: (same decisions; False: ask every inner policy every round, as a reference).
        self.fast = fast
        self._asked: dict[str, _Asked] = {}  # per queue: what its inner policy last decided
        self._parts: dict[str, tuple] = {}  # per queue: its last sub-cluster
        self._last_split: tuple | None = None
        self._done = NewlyCompleted()
        self._done_grouped: dict[str, list[JobView]] = {}
        self._leaf_of: dict[str | None, str] = {}  # a job's queue -> the leaf it runs in
        self._stands = -math.inf
        #: Each waiting job's reason from its inner policy when that was last asked: a queue
        #: whose decision is known without asking (`_known`) keeps its jobs' reasons.
        self._said: dict[str, WaitReason] = {}
        self._lending: _Lending | None = None  # this round's offers (`_lend`), until lent

    @property
    def queues(self) -> QueueTree:
        """The queue tree the next round shares the cluster by."""
        return self._queues

    @queues.setter
    def queues(self, tree: QueueTree) -> None:
        """A new tree (`PUT /queues`): nothing decided or kept under the old one stands, so the
        next round shares the cluster by it even when no job came or went."""
        self._queues = tree
        self._stands = -math.inf
        self._leaf_of.clear()
        self._asked.clear()
        self._parts.clear()
        self._last_split = None

    # -- the inner instances -----------------------------------------------------------------
    def inner(self, queue: str) -> Policy:
        """The inner policy instance of leaf `queue` (made on first use)."""
        policy = self._inner.get(queue)
        if policy is None:
            policy, self._spare = (self._spare or self._factory()), None
            self._inner[queue] = policy
        return policy

    def job_left(self, name: str) -> None:
        self._said.pop(name, None)
        queue = self._queue_of.pop(name, None)
        if queue is not None and queue in self._inner:
            self._inner[queue].job_left(name)

    # -- a round -----------------------------------------------------------------------------
    def _weights(self, now: float, usage: Mapping[str, int]) -> dict[str, float] | None:
        """The weights that share idle GPUs, with `usage_half_life_s`: each queue's weight falls
        with its decayed past usage (Slurm's fair-share factor 2^(-usage/shares), usage and
        shares normalised over queues). None without it."""
        half = self.queues.usage_half_life_s
        if half is None:
            return None
        if self._usage_at is not None and now > self._usage_at:  # what was held since then
            dt = now - self._usage_at
            decay = 0.5 ** (dt / half)
            held = self._usage_then
            for q in set(self._usage_gpu_s) | set(held):
                self._usage_gpu_s[q] = self._usage_gpu_s.get(q, 0.0) * decay + held.get(q, 0) * dt
        self._usage_at = now
        self._usage_then = dict(usage)
        leaves = self.queues.leaves
        total_u = sum(self._usage_gpu_s.get(q, 0.0) for q in leaves)
        total_w = sum(self.queues[q].weight for q in leaves)
        if total_u <= 0:
            return None
        return {q: self.queues[q].weight * 2.0 ** (
            -(self._usage_gpu_s.get(q, 0.0) / total_u) / (self.queues[q].weight / total_w))
            for q in leaves}

    def decide(self, snapshot: Snapshot) -> Decision:
        tree, cluster, now = self.queues, snapshot.cluster, snapshot.time_s
        total = cluster.total_gpus
        self._stands = -math.inf  # until this round's decision is made
        self._lending = None
        by_queue: dict[str, list[JobView]] = {}
        queue_of, leaf_of = self._queue_of, self._leaf_of
        for view in snapshot.jobs:
            spec = view.spec
            q = leaf_of.get(spec.queue)
            if q is None:
                q = leaf_of[spec.queue] = tree.leaf_for(spec.queue)
            queue_of[spec.name] = q
            views = by_queue.get(q)
            if views is None:
                by_queue[q] = [view]
            else:
                views.append(view)
        usage, base, demand = {}, {}, {}
        elastic = self.elastic
        for q, views in by_queue.items():
            held = b = d = 0
            for v in views:
                if v.status is STATUS_RUNNING and v.assignment is not None:
                    g = v.assignment.placement.num_gpus
                    held += g
                    if not elastic:  # a gang: what it holds (job_demand, inlined)
                        b += g
                        d += g
                        continue
                vb, vd = job_demand(v, total, elastic)
                b += vb
                d += vd
            usage[q], base[q], demand[q] = held, b, d
        if tree.typed:
            split, kept, sub, over = self._typed_carve(now, cluster, by_queue, usage)
        else:
            split = self._shares(now, demand, usage, total, base)
            kept, sub = self._carve(now, cluster, by_queue, split, tree,
                                    list(cluster.gpus_per_node), cluster.is_mixed)
            over = any(usage[q] > split.share.get(q, 0) for q in usage)
        self.last_shares = split
        merged: dict[str, Assignment] = {}
        shrinks = self._shrinks(by_queue, kept, usage, split)  # the layer's own, then the inner's
        held_now = {v.name: v.placement.num_gpus for v in snapshot.jobs if v.is_running}
        completed = self._completed_by_queue(snapshot.completed) if snapshot.completed else {}
        fast = self.fast
        stands = math.inf if fast and self.queues.usage_half_life_s is None else -math.inf
        offered: Mapping[str, Mapping[int, int]] = (
            self._lending.offers if self._lending is not None else {})
        for q in sorted(by_queue, key=lambda q: q not in offered):  # offered queues first
            if q not in offered:
                self._lend_unused(merged)  # what the offered left unused, to the others
            views = by_queue[q]
            key = tuple(sorted((n, g) for n, g in sub.get(q, {}).items() if g > 0))
            if not key:
                self._asked.pop(q, None)
                continue
            inner = self.inner(q)
            if fast:
                known = self._known(q, inner, key, views, kept, now)
                if known is not None:
                    merged.update(known[0])
                    stands = min(stands, known[1])
                    continue
            stands = -math.inf  # asked: its decision may change what runs
            nodes, local, part = self._part(q, key, cluster)
            done = tuple(completed.get(q, ()))
            decision = self._ask(q, inner, Snapshot(time_s=now, cluster=part, jobs=(),
                                                    previous=snapshot.previous, completed=done),
                                 views, kept, local, cluster.is_mixed)
            self._said.update(decision.reasons)
            for name, words in decision.shrinks.items():
                shrinks[name] = f"{shrinks[name]}; {words}" if name in shrinks else words
            decided: dict[str, Assignment] = {}
            for name, a in decision.assignments.items():
                if a.placement.slots:
                    decided[name] = dataclasses.replace(
                        a, placement=Placement(tuple((nodes[n], g) for n, g in a.placement.slots)))
            merged.update(decided)
            if fast:
                self._asked[q] = _Asked(key, tuple(v.name for v in views), decided)
        self._lend_unused(merged)
        self.last_carve = {q: sum(per.values()) for q, per in sub.items()}
        if (elastic and tree.start_waiting
                and self._start_waiting(merged, by_queue, sub, split, cluster.node_types)):
            stands = -math.inf  # the layer placed jobs its inner policies did not
        if stands > now and not over:
            # Every queue's decision is what runs, known from its inner policy's promises,
            # and no queue holds more than its share: until a job comes or goes (or an inner
            # policy's decision may change), the next round has the same shares, the same
            # sub-clusters and the same answers.
            self._stands = stands
        return Decision(merged, queue_reasons(now, cluster, tree, by_queue, merged, split.share,
                                              self._said, elastic),
                        {n: w for n, w in shrinks.items()
                         if n in merged and merged[n].num_gpus < held_now.get(n, 0)})

    @staticmethod
    def _shrinks(by_queue: Mapping[str, list[JobView]], kept: Mapping[str, Placement],
                 usage: Mapping[str, int], split: Shares) -> dict[str, str]:
        """`Decision.shrinks` of the jobs the carve shrank in place: their queue held more
        than its share, and gives back what it borrowed."""
        out = {}
        for q, views in by_queue.items():
            for v in views:
                p = kept.get(v.name)
                if (p is not None and v.is_running and v.placement.slots
                        and 0 < p.num_gpus < v.placement.num_gpus):
                    out[v.name] = (f"queues: queue {q} holds {usage.get(q, 0)} GPU(s), more than "
                                   f"its share {split.share.get(q, 0)}; it gives back what it "
                                   "borrowed")
        return out

    def _start_waiting(self, merged: dict[str, Assignment],
                       by_queue: Mapping[str, list[JobView]],
                       sub: Mapping[str, Mapping[int, int]], split: Shares,
                       node_types: tuple[str, ...]) -> bool:
        """With `start_waiting`: where an elastic inner policy left GPUs of its queue's share
        idle while its jobs wait (Pollux's search does, in a burst) and the queue holds less
        than its guarantee (min(quota, demand)), start waiting jobs there, oldest first, each
        on one node of the share with its requested GPUs (at least its `min_gpus`; at most
        what the guarantee lacks, on the node with the fewest idle GPUs that holds it), until
        the queue holds its guarantee; a job that names a GPU type only on a node of it. Then,
        while the queue still holds less, its jobs running on fewer GPUs than they asked grow
        in place on their node's idle GPUs of the share, oldest first, up to what they asked
        (issue 43's benchmark: nlp's job started on 1 of its 2 a100s; pollux, whose restart
        penalty holds a young job where it is, grew it into the other 33 s later). The inner
        policy resizes them from the next round. True when it started or grew any."""
        started = False
        for q, views in by_queue.items():
            want = min(self.queues.quota(q), split.demand.get(q, 0))
            held = sum(merged[v.name].num_gpus for v in views if v.name in merged)
            waiting = [v for v in views if v.name not in merged]
            short = [v for v in views if v.name in merged and len(merged[v.name].placement.slots)
                     == 1 and merged[v.name].num_gpus < min(v.spec.gpus, v.spec.max_gpus)]
            if held >= want or not (waiting or short):
                continue
            idle = dict(sub.get(q, {}))
            for v in views:
                a = merged.get(v.name)
                if a is not None:
                    for node, gpus in a.placement.slots:
                        if node in idle:
                            idle[node] -= gpus
            for v in sorted(waiting, key=lambda v: (v.spec.submit_time_s, v.name)):
                pin = v.spec.gpu_type
                usable = {n: g for n, g in idle.items() if pin is None or node_types[n] == pin}
                most = max(usable.values(), default=0)
                least = max(1, v.spec.min_gpus)
                if held >= want or most < least:
                    continue
                gpus = max(least, min(v.spec.gpus, most, want - held))
                node = min((n for n, g in usable.items() if g >= gpus), key=lambda n: (idle[n], n))
                merged[v.name] = Assignment(Placement(((node, gpus),)))
                idle[node] -= gpus
                held += gpus
                started = True
            for v in sorted(short, key=lambda v: (v.spec.submit_time_s, v.name)):
                a = merged[v.name]
                [(node, gpus)] = a.placement.slots
                more = min(idle.get(node, 0), min(v.spec.gpus, v.spec.max_gpus) - gpus,
                           want - held)
                if more <= 0:
                    continue
                merged[v.name] = Assignment(Placement(((node, gpus + more),)))
                idle[node] -= more
                held += more
                started = True
        return started

    def _ask(self, q: str, inner: Policy, frame: Snapshot, views: list[JobView],
             kept: Mapping[str, Placement], local: Mapping[int, int], mixed: bool) -> Decision:
        """Queue `q`'s inner policy's decision on its sub-cluster (`frame`: the time, the
        sub-cluster, the global previous decision and the finished jobs), checked. On a mixed
        cluster each job is kept within one type and on its `gpu_type`: jobs no one type of the
        sub-cluster can hold are not shown (`fits`), a type-unaware policy's decision is placed
        within one type per job (`one_type_each`), and where a gang then fits on no type whole,
        the policy is asked again without it, so the GPUs it would have held go to jobs that fit."""
        part = frame.cluster
        if mixed:
            views = [v for v in views if v.name in kept or fits(v.spec, part, self.elastic)]
        shown = tuple(self._local_view(v, kept.get(v.name), local) for v in views)
        previous = {}
        for v in views:
            a = frame.previous.assignments.get(v.name)
            if a is not None and all(n in local for n, _ in a.placement.slots):
                previous[v.name] = dataclasses.replace(a, placement=_mapped(a.placement, local))
        specs = {v.name: v.spec for v in views}
        held = {v.name: v.assignment.placement for v in shown
                if v.assignment is not None} if mixed else {}
        hidden: set[str] = set()
        while True:
            decision = inner.decide(dataclasses.replace(
                frame, jobs=tuple(v for v in shown if v.name not in hidden),
                previous=Decision({n: a for n, a in previous.items() if n not in hidden})))
            type_aware = inner.promises.type_aware
            placed = decision
            if mixed and not type_aware and not self.elastic:  # gangs packed type-aware
                placed = one_type_each(decision, part, specs, held, elastic=False)
            # the one step every decision goes through (within one type, then checked)
            placed = checked_decision(placed, part, specs, f"{inner.name} (queue {q})",
                                      type_aware, restricted=mixed)
            if not mixed:
                return placed
            dropped = {n for n, a in decision.assignments.items()
                       if a.placement.slots and n not in placed.assignments}
            if not dropped:
                return placed
            hidden |= dropped

    def stands_until(self) -> float:
        """After `decide`: until when the same decision would come again while no job comes
        or goes (`Policy.stands_until`): where every queue's decision was known without asking
        (`_known`), the earliest of their inner policies' promises; else -inf."""
        return self._stands

    # -- the fast path: what is known without asking, and what is kept between rounds ---------
    def _known(self, q: str, inner: Policy, key: tuple, views: list[JobView],
               kept: Mapping[str, Placement], now: float,
               ) -> tuple[dict[str, Assignment], float] | None:
        """Queue `q`'s decision when its inner policy's own promises give it without asking
        (None: ask). Every job of the queue must be shown exactly as it runs (the carve took
        nothing from it). Then, either every job runs and the inner policy keeps running jobs
        when none waits (`Keeps.RUNNING_WHEN_NONE_WAITS`): each keeps its assignment; or the
        queue's sub-cluster and jobs are those it last decided for, its decision is what runs,
        and the inner policy promised that decision stands (`Keeps.DECISION_UNTIL_CHANGE`, or
        `stands_until` later than now): that decision again. With it: until when it
        stands while no job comes or goes."""
        promises = inner.promises
        none_waits = True
        for v in views:
            p = kept.get(v.name)
            if p is None:
                if v.assignment is not None and v.is_running:
                    return None  # taken out by the carve: shown as waiting
                none_waits = False
            elif v.assignment is None or p != v.assignment.placement:
                return None  # shrunk by the carve
        last = self._asked.get(q)
        changed = last is None or last.sub != key or not _runs_as_decided(last, views)
        # the round's own rule (`core/rounds.py`): every layer decision is a round, and a
        # change of the queue's jobs or sub-cluster is a change for its inner policy
        if should_decide(inner, promises, True, changed, False, now, none_waits) is Ask.DECIDE:
            return None
        if none_waits and promises.keeps_running:
            self._asked.pop(q, None)  # not asked: its stands_until is not renewed
            return {v.name: v.assignment for v in views if v.assignment is not None}, math.inf
        assert last is not None  # unchanged: it was asked before
        return last.decided, (math.inf if promises.on_change_only else inner.stands_until())

    def _part(self, q: str, key: tuple, cluster: Cluster) -> tuple[list[int], dict[int, int],
                                                                   Cluster]:
        """Queue `q`'s sub-cluster for `key` ((node, GPUs) pairs): its nodes (global indices),
        the global-to-local index map and the Cluster, reused while the key stays the same."""
        cached = self._parts.get(q)
        if cached is not None and cached[0] == key and cached[1] is cluster:
            return cached[2], cached[3], cached[4]
        nodes = [n for n, _ in key]
        local = {n: i for i, n in enumerate(nodes)}
        part = Cluster(tuple(dataclasses.replace(cluster.nodes[n], gpus=g)
                             for n, g in key))  # names and GPU types kept
        if self.fast:
            self._parts[q] = (key, cluster, nodes, local, part)
        return nodes, local, part

    def _shares(self, now: float, demand: dict[str, int], usage: dict[str, int], total: int,
                base: dict[str, int]) -> Shares:
        """`shares` of this round; without decayed usage, the last round's when the inputs are
        the same (a pure function of them)."""
        weights = self._weights(now, usage)
        if weights is not None or not self.fast:
            return shares(self.queues, demand, usage, total, weights, base)
        key = (total, tuple(sorted(demand.items())), tuple(sorted(usage.items())),
               tuple(sorted(base.items())))
        if self._last_split is not None and self._last_split[0] == key:
            return self._last_split[1]
        split = shares(self.queues, demand, usage, total, None, base)
        self._last_split = (key, split)
        return split

    def _completed_by_queue(self, completed: tuple[JobView, ...]) -> dict[str, list[JobView]]:
        """The finished jobs per leaf queue, grown from the last round's where `completed`
        extends it (the engine's list only grows)."""
        new, again = self._done.read(completed)
        if again:
            self._done_grouped = {}
        leaf_for = self.queues.leaf_for
        for v in new:
            self._done_grouped.setdefault(leaf_for(v.spec.queue), []).append(v)
        return self._done_grouped

    @staticmethod
    def _local_view(view: JobView, placement: Placement | None, local: Mapping[int, int]) -> JobView:
        if placement is None:
            if view.assignment is None and view.status is STATUS_PENDING:
                return view
            return dataclasses.replace(view, status=STATUS_PENDING, assignment=None)
        batch = view.assignment.batch if (view.assignment is not None
                                          and placement == view.placement) else None
        return dataclasses.replace(view, assignment=Assignment(_mapped(placement, local), batch))

    def _typed_carve(self, now: float, cluster: Cluster, by_queue: Mapping[str, list[JobView]],
                     usage: Mapping[str, int],
                     ) -> tuple[Shares, dict[str, Placement], dict[str, dict[int, int]], bool]:
        """A typed tree's round: `shares` and `_carve` once per GPU type of the cluster, on that
        type's GPUs, with each queue's quota and limit for that type (`QueueTree.for_type`) and
        the demand of its jobs that may run there (`type_demand`). A job the carve takes out of
        one type may start on another at once: the types are shared again with it waiting
        (until no more jobs are taken out). Returns the shares summed over types, which running
        jobs keep which GPUs, each queue's GPUs per node, and whether any queue held more of a
        type than its share of it."""
        weights = self._weights(now, usage)
        views = by_queue
        out: set[str] = set()
        over = False
        while True:
            kept, sub, over_now = self._type_passes(now, cluster, views, weights)
            over = over or over_now
            taken = {v.name for vs in views.values() for v in vs
                     if v.is_running and v.assignment is not None and v.name not in kept}
            if not taken:
                break
            out |= taken
            views = {q: [waiting(v) if v.name in out else v for v in vs]
                     for q, vs in by_queue.items()}
        return summed(tuple(self.last_type_shares.values()), self.queues.leaves), kept, sub, over

    def _type_passes(self, now: float, cluster: Cluster, by_queue: Mapping[str, list[JobView]],
                     weights: Mapping[str, float] | None,
                     ) -> tuple[dict[str, Placement], dict[str, dict[int, int]], bool]:
        """One `shares` and `_carve` per GPU type (`_typed_carve`)."""
        kept: dict[str, Placement] = {}
        sub: dict[str, dict[int, int]] = {q: {} for q in by_queue}
        self.last_type_shares = {}
        over = False
        for t in cluster.gpu_types:
            tree_t = self.queues.for_type(t)
            capacity = cluster.gpus_of_type(t)
            on_t = {q: [v for v in views if runs_on(v, cluster) in (None, t)]
                    for q, views in by_queue.items()}
            demand, base, held = type_demand(on_t, t, capacity, self.elastic,
                                             leaf_limits(tree_t))
            split = shares(tree_t, demand, held, capacity, weights, base)
            self.last_type_shares[t] = split
            over = over or any(held[q] > split.share.get(q, 0) for q in held)
            free = [g if cluster.node_types[n] == t else 0
                    for n, g in enumerate(cluster.gpus_per_node)]
            kept_t, sub_t = self._carve(now, cluster, on_t, split, tree_t, free)
            kept.update(kept_t)
            for q, per in sub_t.items():
                sub[q].update(per)  # the types' nodes are disjoint
        return kept, sub, over

    def _carve(self, now: float, cluster: Cluster, by_queue: Mapping[str, list[JobView]],
               split: Shares, tree: QueueTree, free: list[int], shaped: bool = False,
               ) -> tuple[dict[str, Placement], dict[str, dict[int, int]]]:
        """Which running jobs keep which GPUs, and each queue's GPUs per node (global). A queue
        within its share keeps its running jobs' GPUs, the rest from free GPUs (its own nodes
        first, then the emptiest). A queue above its share gives GPUs back, most recently
        (re)started jobs first: under an elastic inner policy (`is_elastic`) each is first shrunk
        in place down to its `min_gpus`, then whole jobs are taken out (shown as waiting); never
        one that (re)started less than `min_runtime_s` ago. GPUs left over go to queues with
        demand left, within their limits. Under an elastic inner policy the GPUs of a queue
        with jobs waiting to start are spread over more nodes (`_grant`), and GPUs idle after
        every demand go to the queues, up to once more their demand. `tree`: the queues (one type's,
        `for_type`, where GPUs are shared per type); `free`: the GPUs per node to share (taken
        from). `shaped` (an untyped tree on a mixed cluster): GPUs are given back of one type
        first and what a queue could not use is lent (`_lend`, `shape.py`)."""
        kept: dict[str, Placement] = {}
        sub: dict[str, dict[int, int]] = {}
        spread: dict[str, int] = {}  # per elastic queue with jobs waiting: its jobs
        given: dict[str, tuple[str, Placement, float]] = {}  # shrunk or taken out: was
        types = cluster.node_types
        growing: set[str] = set()  # shaped: types where a queue below its share could grow
        if shaped:
            for q, views in by_queue.items():
                on = [v for v in views if v.is_running and v.placement.slots]
                if sum(v.placement.num_gpus for v in on) < split.share.get(q, 0):
                    growing |= {types[v.placement.slots[0][0]] for v in on
                                if v.placement.num_gpus < v.spec.max_gpus}
        for q, views in by_queue.items():
            running = [v for v in views if v.is_running and v.placement.slots]
            hold = {v.name: v.placement for v in running}
            over = sum(p.num_gpus for p in hold.values()) - split.share.get(q, 0)
            # most recently (re)started first: they give back first
            order = sorted(running, key=lambda v: (-_started(v), v.name))
            lead = None
            if shaped and over > 0:  # of one type first: what is freed forms one block
                lead = give_back_type(order, types, over, growing)
                order = give_back_order(order, types, over, growing)
            if over > 0 and self.elastic and lead is not None:
                # shrink that type's jobs, then take whole ones of it out; only if that type
                # cannot give it all (jobs under min_runtime_s) are other types' jobs shrunk:
                # a shrink on each type frees GPUs no one job of the queue taking them back
                # can use together (issue 43's benchmark: nlp held 1 of its 2 for minutes)
                first = [v for v in order if types[v.placement.slots[0][0]] == lead]
                tried = dict(hold)
                left = self._give_back(now, tree, first, tried, over, shrink=True)
                if left > 0:
                    left = self._give_back(now, tree, first, tried, left, shrink=False)
                if left <= 0:
                    hold, over = tried, left
            if over > 0 and self.elastic:
                over = self._give_back(now, tree, order, hold, over, shrink=True)
            if over > 0:
                over = self._give_back(now, tree, order, hold, over, shrink=False)
            for v in running:
                if hold.get(v.name) != v.placement:
                    given[v.name] = (q, v.placement, _started(v))
            per: dict[int, int] = {}
            for name, p in hold.items():
                kept[name] = p
                for n, g in p.slots:
                    per[n] = per.get(n, 0) + g
                    free[n] -= g
            sub[q] = per
            spread[q] = len(views) if self.elastic and len(hold) < len(views) else 0
        ranked = sorted(by_queue, key=lambda q: (-tree[q].priority, q))
        for q in ranked:  # the rest of each queue's share, from free GPUs
            self._grant(sub[q], free, split.share.get(q, 0) - sum(sub[q].values()), spread[q])
        if sum(free) > 0:  # left over: to queues with demand left, within their limits
            for q in sorted(ranked, key=lambda q: (-tree[q].priority,
                                                  sum(sub[q].values()) - split.fair[q], q)):
                self._grant(sub[q], free, self._room(tree, q, split, sub), spread[q])
        if self.elastic and sum(free) > 0:  # idle still: room to grow past the demand
            for q in sorted(ranked, key=lambda q: (-tree[q].priority, split.demand[q], q)):
                self._grant(sub[q], free, self._room(tree, q, split, sub, split.demand[q]),
                            spread[q])
        if shaped:
            self._lend(by_queue, split, tree, kept, sub, free, given, cluster)
        return kept, sub

    @staticmethod
    def _give_back(now: float, tree: QueueTree, order: Sequence[JobView],
                   hold: dict[str, Placement], over: int, shrink: bool) -> int:
        """Give back `over` GPUs from the jobs of `order` (first first) in `hold` (changed):
        by shrinking each in place down to its `min_gpus` (`shrink`), else by taking whole
        jobs out, never one that (re)started less than `min_runtime_s` ago (a whole gang can
        free more than needed: the older ones that still fit are kept). What is left to give
        back (negative: given back beyond `over`)."""
        if shrink:
            for v in order:
                if over <= 0:
                    break
                if v.name not in hold:
                    continue
                floor = max(1, v.spec.min_gpus)
                cut = min(over, hold[v.name].num_gpus - floor)
                if cut > 0:
                    hold[v.name] = _shrunk(hold[v.name], cut)
                    over -= cut
            return over
        out = []
        for v in order:
            if over <= 0:
                break
            if v.name not in hold or now - _started(v) < tree.min_runtime_s:
                continue  # not preempted before min_runtime_s
            out.append((v.name, hold.pop(v.name)))
            over -= out[-1][1].num_gpus
        for name, p in reversed(out):  # a whole gang can free more than needed:
            if p.num_gpus <= -over:  # keep the older ones that still fit
                hold[name] = p
                over += p.num_gpus
        return over

    def _lend(self, by_queue: Mapping[str, list[JobView]], split: Shares, tree: QueueTree,
              kept: dict[str, Placement], sub: dict[str, dict[int, int]], free: list[int],
              given: Mapping[str, tuple[str, Placement, float]], cluster: Cluster) -> None:
        """An untyped tree on a mixed cluster: what of a queue's carve none of its jobs could
        use this round (`shape.unusable`: GPUs of a type no job of it goes to) is lent for the
        round (`_lend_out`). A queue below its guarantee under an elastic policy is first
        offered those of a type one of its running jobs could move to (`shape.movable`): they
        stay in its sub-cluster, its inner policy weighs the move, and what it leaves unused is
        lent after it decides (`_lend_unused`; `decide` asks the offered queues first). Issue
        43's benchmark: after a quota raise nlp's two jobs ran on the t4s, the GPU vision freed
        was an a100, lent back, and nlp never held its 3."""
        node_types = cluster.node_types
        lent: dict[str, dict[int, int]] = {}
        offers: dict[str, dict[int, int]] = {}
        for q, views in by_queue.items():
            idle = unusable(views, sub[q], kept, node_types, self.elastic)
            held = sum(kept[v.name].num_gpus for v in views if v.name in kept)
            if self.elastic and idle and held < split.guaranteed.get(q, 0):
                offers[q] = movable(views, idle, kept, cluster)
                idle = {n: g for n, g in idle.items() if n not in offers[q]}
            for n, g in idle.items():
                sub[q][n] -= g
                if not sub[q][n]:
                    del sub[q][n]
                free[n] += g
                lent.setdefault(q, {})[n] = g
        offers = {q: per for q, per in offers.items() if per}
        if offers:
            self._lending = _Lending(offers, by_queue, split, tree, kept, sub, free, given)
        self._lend_out(lent, set(lent), by_queue, split, tree, kept, sub, free, given)

    def _lend_unused(self, merged: Mapping[str, Assignment]) -> None:
        """After the offered queues' inner policies decided (`_lend`): what of their offer
        they left unused is lent for the round, as `_lend` lends (`_lend_out`), to the queues
        not asked yet; what none takes stays with the queue offered it."""
        lending, self._lending = self._lending, None
        if lending is None:
            return
        lent: dict[str, dict[int, int]] = {}
        for q, offer in lending.offers.items():
            used: dict[int, int] = {}
            for v in lending.by_queue[q]:
                a = merged.get(v.name)
                if a is not None:
                    for n, g in a.placement.slots:
                        used[n] = used.get(n, 0) + g
            per = lending.sub[q]
            for n in offer:
                left = min(offer[n], per.get(n, 0) - used.get(n, 0))
                if left > 0:
                    per[n] -= left
                    if not per[n]:
                        del per[n]
                    lending.free[n] += left
                    lent.setdefault(q, {})[n] = left
        if lent:
            self._lend_out(lent, set(lending.offers), lending.by_queue, lending.split,
                           lending.tree, lending.kept, lending.sub, lending.free, lending.given)

    def _lend_out(self, lent: Mapping[str, Mapping[int, int]], lenders: set[str],
                  by_queue: Mapping[str, list[JobView]], split: Shares, tree: QueueTree,
                  kept: dict[str, Placement], sub: dict[str, dict[int, int]], free: list[int],
                  given: Mapping[str, tuple[str, Placement, float]]) -> None:
        """Lend `lent` (per lending queue, GPUs per node, already in `free`) for the round:
        first back to the jobs that gave those GPUs up (oldest first; they keep their
        placement, no restart), then to the other queues (not `lenders`) with demand left.
        What no other queue takes stays with the queue that lent it: an elastic policy may yet
        move a job there (issue 43's benchmark: pollux's two 1-GPU jobs on the t4s left the
        a100s idle for minutes, lent to a queue without jobs, where shown them it moves one at
        2 GPUs)."""
        if not lent:
            return
        for name, (q, was, _) in sorted(given.items(), key=lambda kv: (kv[1][2], kv[0])):
            now = dict(kept[name].slots) if name in kept else {}
            extra = {n: g - now.get(n, 0) for n, g in was.slots if g > now.get(n, 0)}
            if (q not in lenders and all(free[n] >= g for n, g in extra.items())
                    and sum(extra.values()) <= self._room(tree, q, split, sub)):
                kept[name] = was
                for n, g in extra.items():
                    free[n] -= g
                    sub[q][n] = sub[q].get(n, 0) + g
        for q in sorted(by_queue, key=lambda q: (-tree[q].priority, q)):
            if q not in lenders:
                self._grant(sub[q], free, self._room(tree, q, split, sub))
        for q in sorted(lent, key=lambda q: (-tree[q].priority, q)):  # what none took
            for n, g in lent[q].items():
                back = min(g, free[n])
                if back > 0:
                    sub[q][n] = sub[q].get(n, 0) + back
                    free[n] -= back

    @staticmethod
    def _room(tree: QueueTree, q: str, split: Shares, sub: Mapping[str, Mapping[int, int]],
              beyond: int = 0) -> int:
        """GPUs leaf `q` could still take: its demand left (plus `beyond`), within its and its
        cohorts' limits."""
        room = split.demand[q] + beyond - sum(sub[q].values())
        for a in ((q,) if beyond else ()) + tree.ancestors(q):
            limit = tree[a].any_limit
            if limit is not None:
                under = sum(sum(per.values()) for x, per in sub.items()
                            if x == a or a in tree.ancestors(x))
                room = min(room, limit - under)
        return max(0, room)

    @staticmethod
    def _grant(per: dict[int, int], free: list[int], want: int, spread: int = 0) -> None:
        """Give `want` free GPUs: nodes the queue is on first, then those with most free.

        With `spread` (the jobs of an elastic queue, some waiting to start), a node gives at
        most `want / spread` GPUs (rounded up) while other nodes have free GPUs: the GPUs go
        to about as many nodes as the queue has jobs where the cluster allows. Why: pollux
        starts or grows about two jobs per node with free GPUs per round (its search's growth
        requests, drawn in its priority order), so a share packed into a few whole nodes left
        a queue's jobs waiting for rounds beside idle GPUs of its share (issue 36)."""
        if want <= 0:
            return
        order = sorted(range(len(free)), key=lambda n: (n not in per, -free[n], n))
        cap = -(-want // spread) if spread > 0 else None
        for limit in ((cap, None) if cap is not None else (None,)):
            for n in order:
                if want <= 0:
                    return
                take = min(free[n], want)
                if limit is not None:
                    take = min(take, limit)
                if take > 0:
                    per[n] = per.get(n, 0) + take
                    free[n] -= take
                    want -= take


@dataclasses.dataclass(frozen=True, slots=True)
class _Lending:
    """A round's carve kept for `_lend_unused` (the same objects `_carve` changes): the GPUs
    offered to queues below their guarantee, and what lending needs."""

    offers: dict[str, dict[int, int]]  # per offered queue: GPUs per node (global)
    by_queue: Mapping[str, list[JobView]]
    split: Shares
    tree: QueueTree
    kept: dict[str, Placement]
    sub: dict[str, dict[int, int]]
    free: list[int]
    given: Mapping[str, tuple[str, Placement, float]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Asked:
    """What a queue's inner policy was last asked about and answered (global node indices)."""

    sub: tuple[tuple[int, int], ...]  # its sub-cluster: (node, GPUs) pairs
    names: tuple[str, ...]  # its jobs, in the snapshot's order
    decided: dict[str, Assignment]  # what it placed


def _runs_as_decided(last: _Asked, views: list[JobView]) -> bool:
    """Are `views` the jobs the queue's inner policy was last asked about, in the same order,
    each running exactly as it decided (or waiting, where it placed nothing)?"""
    if len(last.names) != len(views):
        return False
    decided = last.decided
    for v, name in zip(views, last.names):
        if v.name != name:
            return False
        a = decided.get(name)
        if a is None:
            if v.assignment is not None and v.is_running:
                return False
        elif v.assignment is None or not v.is_running or v.assignment.placement != a.placement:
            return False
    return True


def _started(view: JobView) -> float:
    """When a running job was last (re)started (`JobView.started_s`: an in-place resize is
    no restart)."""
    t = view.started_s
    return -math.inf if t is None else t


def _shrunk(placement: Placement, cut: int) -> Placement:
    """`placement` less `cut` GPUs, taken from the nodes it has fewest GPUs on first."""
    per = dict(placement.slots)
    for n in sorted(per, key=lambda n: (per[n], -n)):
        if cut <= 0:
            break
        take = min(per[n], cut)
        per[n] -= take
        cut -= take
    return Placement.of(per)


def _mapped(placement: Placement, local: Mapping[int, int]) -> Placement:
    return Placement(tuple((local[n], g) for n, g in placement.slots))
