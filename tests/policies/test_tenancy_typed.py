"""The tenancy layer with quotas per GPU type on clusters of several types: each type shared by
its own quotas, jobs pinned to a type counting only there, every job within one type; a
property test over random typed clusters, typed queue trees and arrivals (as
tests/policies/test_tenancy.py's, per type): no round gives a queue more of a type than its
limit, leaves a guaranteed GPU of a type idle while its queue waits with a job that fits on
that type, or splits a gang or spreads it over two types."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layer_rounds import drive_rounds, spec, view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import (
    Decision,
    JobSpec,
    Snapshot,
    check_decision,
)
from corral.core.queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueTree,
    any_type,
    parse_queues,
    type_capacity,
)
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy, type_demand

MIXED = Cluster.parse("k80:2x4,v100:1x4")  # nodes 0, 1: k80; node 2: v100
SPLIT = "[queue.a]\nquota = { v100 = 4 }\n[queue.b]\nquota = { k80 = 8 }\n"


_spec, _view = spec, view


def _layer(text: str = SPLIT, cluster: Cluster = MIXED, inner: str = "fifo") -> QueuedPolicy:
    tree = parse_queues(text, total_gpus=cluster.total_gpus, gpus_by_type=type_capacity(cluster))
    return QueuedPolicy(lambda: create_policy(inner), tree)


def _types(decision: Decision) -> dict[str, str | None]:
    return {n: MIXED.placement_type(a.placement) for n, a in decision.assignments.items()}


def test_a_pinned_job_is_demand_only_on_its_type_and_a_gang_only_where_it_fits():
    jobs = {"a": [_view(_spec("p", 2, "a", gpu_type="v100")), _view(_spec("free", 2, "a")),
                  _view(_spec("big", 8, "a"))],
            "b": [_view(_spec("r", 4, "b"), Placement.of({0: 4}), 0.0)]}
    on_v100 = {"a": jobs["a"], "b": []}  # b's job runs on a k80: not shown to the v100 pass
    demand, base, held = type_demand(on_v100, "v100", 4, elastic=False)
    assert demand == base == {"a": 4, "b": 0} and held == {"a": 0, "b": 0}  # big fits no v100 node
    demand, _, held = type_demand(jobs, "k80", 8, elastic=False)
    assert demand == {"a": 10, "b": 4} and held == {"a": 0, "b": 4}  # p is pinned to v100


def test_each_queue_gets_the_types_it_is_owed():
    layer = _layer()
    jobs = (_view(_spec("a1", 4, "a", gpu_type="v100")),
            *(_view(_spec(f"b{i}", 4, "b")) for i in range(3)))
    d = layer.decide(Snapshot(0.0, MIXED, jobs, Decision()))
    check_decision(d, {v.name: v.spec for v in jobs}, MIXED, "layer")
    assert _types(d) == {"a1": "v100", "b0": "k80", "b1": "k80"}  # b2 waits: a's v100s
    v100, k80 = layer.last_type_shares["v100"], layer.last_type_shares["k80"]
    assert (v100.share["a"], v100.share["b"], k80.share["a"], k80.share["b"]) == (4, 0, 0, 8)
    assert layer.last_shares.share["b"] == 8  # the sum over types


def test_idle_quota_of_a_type_is_lent_and_reclaimed_on_that_type():
    layer = _layer()
    b = [_view(_spec(f"b{i}", 4, "b")) for i in range(3)]
    d = layer.decide(Snapshot(0.0, MIXED, tuple(b), Decision()))
    assert sorted(_types(d).values()) == ["k80", "k80", "v100"]  # a's idle v100s are lent
    on_v100 = next(n for n, t in _types(d).items() if t == "v100")
    placed = {v.spec.name: d.get(v.spec.name).placement for v in b}
    # b's job on the v100s started first of all; a's v100 job arrives: that job gives way,
    # not b's newest (which runs on k80s, of which a is owed none)
    started = {n: (0.0 if n == on_v100 else 50.0) for n in placed}
    views = tuple(_view(v.spec, placed[v.spec.name], started[v.spec.name]) for v in b)
    d = layer.decide(Snapshot(100.0, MIXED, (*views, _view(_spec("a1", 4, "a", 90.0, "v100"))),
                              d))
    assert d.get(on_v100) is None and _types(d)["a1"] == "v100"
    assert all(d.get(n).placement == placed[n] for n in placed if n != on_v100)


def test_a_typed_limit_caps_that_type_alone():
    layer = _layer("[queue.a]\nquota = { k80 = 4 }\nlimit = { v100 = 0 }\n[queue.b]\n")
    jobs = tuple(_view(_spec(f"a{i}", 4, "a")) for i in range(3))
    d = layer.decide(Snapshot(0.0, MIXED, jobs, Decision()))
    assert sorted(_types(d).values()) == ["k80", "k80"]  # never a v100; idle k80s borrowed


def test_an_untyped_tree_on_a_mixed_cluster_keeps_each_job_within_one_type():
    layer = _layer("[queue.a]\nquota = 6\n[queue.b]\nquota = 6\n")
    jobs = (_view(_spec("a0", 4, "a")), _view(_spec("a1", 4, "a")), _view(_spec("b0", 2, "b")),
            _view(_spec("b1", 2, "b", gpu_type="v100")))
    d = layer.decide(Snapshot(0.0, MIXED, jobs, Decision()))
    check_decision(d, {v.name: v.spec for v in jobs}, MIXED, "layer")  # within one type
    assert _types(d)["b1"] == "v100" and len(d.assignments) == 4


# --- the property, per type ------------------------------------------------------------------

TYPES = ("k80", "p100", "v100")


@st.composite
def typed_scenarios(draw):
    n_types = draw(st.integers(1, 3))
    shape = {t: (draw(st.integers(1, 2)), draw(st.integers(1, 4))) for t in TYPES[:n_types]}
    cluster = Cluster.parse(",".join(f"{t}:{n}x{g}" for t, (n, g) in shape.items()))
    caps = type_capacity(cluster)
    n_leaves = draw(st.integers(1, 4))
    leaves = [f"q{i}" for i in range(n_leaves)]
    cohort = draw(st.integers(0, n_leaves))  # the first `cohort` leaves share a parent
    quotas: dict[str, dict[str, int]] = {q: {} for q in leaves}
    c_quota: dict[str, int] = {}
    for t, cap in caps.items():
        left = cap
        for q in leaves:
            if draw(st.booleans()):
                quotas[q][t] = draw(st.integers(0, left))
                left -= quotas[q][t]
        if cohort:
            c_quota[t] = sum(quotas[q].get(t, 0) for q in leaves[:cohort]) + draw(
                st.integers(0, left))

    def limits(quota: dict[str, int]) -> tuple[tuple[str, int], ...] | None:
        chosen = {t: draw(st.integers(quota.get(t, 0), cap)) for t, cap in caps.items()
                  if draw(st.booleans())}
        return tuple(chosen.items()) if chosen else None
    queues = []
    if cohort:
        queues.append(Queue("c", quota=tuple(c_quota.items()), limit=limits(c_quota),
                            weight=draw(st.sampled_from([1, 2])), priority=draw(st.integers(0, 1))))
    for i, q in enumerate(leaves):
        queues.append(Queue(q, quota=tuple(quotas[q].items()), limit=limits(quotas[q]),
                            weight=draw(st.sampled_from([0.5, 1, 3])),
                            parent="c" if i < cohort else None, priority=draw(st.integers(0, 2))))
    queues.append(Queue(DEFAULT_QUEUE, quota=any_type(0)))
    tree = QueueTree(tuple(queues), 0.0, None, "hypothesis")
    tree.validate(cluster.total_gpus, caps)
    biggest = max(g for _, g in shape.values()) * 2
    jobs = draw(st.lists(st.tuples(st.sampled_from(leaves + [None]), st.integers(0, 5),
                                   st.integers(1, biggest), st.integers(1, 4),
                                   st.sampled_from((None, None) + TYPES[:n_types])),
                         min_size=1, max_size=8))
    return cluster, tree, jobs


def _held(tree: QueueTree, cluster: Cluster, decision: Decision,
          specs: dict[str, JobSpec]) -> dict[str, dict[str, int]]:
    """GPUs held per queue (cohorts: their subtree's) per type."""
    held = {q.name: dict.fromkeys(cluster.gpu_types, 0) for q in tree.queues}
    for name, a in decision.assignments.items():
        t = cluster.placement_type(a.placement)
        leaf = tree.leaf_for(specs[name].queue)
        for q in (leaf, *tree.ancestors(leaf)):
            held[q][t] += a.num_gpus
    return held


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_scenarios())
def test_no_round_breaks_a_typed_limit_idles_a_typed_guarantee_or_splits_a_gang(case):
    cluster, tree, rows = case
    layer = QueuedPolicy(lambda: create_policy("fifo", {"backfill": "true"}), tree)
    specs = {f"j{i}": _spec(f"j{i}", g, q, float(t), pin)
             for i, (q, t, g, _, pin) in enumerate(rows)}
    rounds_left = {f"j{i}": d for i, (_, _, _, d, _) in enumerate(rows)}

    def check(r: int, active: list[str], decision: Decision) -> None:
        # within one type, and on a pinned job's type
        check_decision(decision, {n: specs[n] for n in active}, cluster, "layer")
        for name, a in decision.assignments.items():  # no gang split
            assert a.num_gpus == specs[name].gpus, (name, a)
        held = _held(tree, cluster, decision, specs)
        for t in cluster.gpu_types:
            per_type = tree.for_type(t)
            for q in per_type.queues:  # no limit of the type exceeded
                if q.any_limit is not None:
                    assert held[q.name][t] <= q.any_limit, (q.name, t, held, r)
            idle = cluster.gpus_of_type(t) - sum(held[q][t] for q in tree.children(None))
            for q in tree.leaves:  # no guaranteed GPU of t idle while a job that fits waits
                room = min(per_type.quota(q) - held[q][t], idle)
                waiting = [n for n in active if tree.leaf_for(specs[n].queue) == q
                           and decision.get(n) is None and specs[n].gpu_type in (None, t)]
                assert not [n for n in waiting if specs[n].gpus <= room], (q, t, held, idle, r)
    drive_rounds(layer, cluster, specs, rounds_left, check)


@pytest.mark.parametrize("inner", ["fifo", "tiresias-las", "pollux"])
def test_the_typed_layer_runs_in_the_simulator_and_its_fast_path_decides_as_the_plain_one(inner):
    import random

    from corral.sim.analysis.allocations import record_allocations
    from corral.sim.loop.engine import Simulator
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads.common import Workload, make_job

    truth = TruthSource.of(None, None).load()
    rng = random.Random(7)
    jobs = []
    for i in range(6 if inner == "pollux" else 24):
        app = rng.choice(("cifar10", "ncf"))
        limits = truth.limits()[app]
        gpus = rng.choice((1, 2, 4))  # gangs above a quota may starve each other, typed or not
        spec = make_job(f"j{i}", rng.uniform(0, 3600), app, limits, gpus, limits.init_bsz)
        pinned = "v100" if gpus <= 2 and rng.random() < 0.3 else None  # b may hold 2 v100s
        jobs.append(dataclasses.replace(spec, queue=rng.choice("ab"), gpu_type=pinned))
    cluster = Cluster.parse("k80:2x4,v100:1x4")
    text = SPLIT.replace("quota = { k80 = 8 }", "quota = { k80 = 6 }\nlimit = { v100 = 2 }")
    runs = []
    for fast in (True, False):
        tree = parse_queues(text, gpus_by_type=type_capacity(cluster))
        layer = QueuedPolicy(lambda: create_policy(inner), tree, fast=fast)
        book = record_allocations(layer)
        result = Simulator(truth, layer, cluster).run(Workload("w", jobs, "test"))
        runs.append((result, book))
    (fast_run, fast_book), (plain, plain_book) = runs
    assert all(j.finish_s is not None for j in fast_run.jobs)
    # the same decisions, to the second (the fast path is a speed promise on decisions; the
    # reasons a queue known without asking gives are those of its last ask, which may file a
    # wait under another kind than a fresh ask would: `waited_by_reason` is not compared)
    def record(r) -> dict:
        return {k: v for k, v in dataclasses.asdict(r).items() if k != "waited_by_reason"}

    assert [record(r) for r in fast_run.jobs] == [record(r) for r in plain.jobs]
    assert fast_book == plain_book
