"""The tenancy layer (`corral.policies.tenancy.QueuedPolicy`): one inner policy per queue on its
share of the cluster. In the simulator with fifo and pollux inside, and a property test over
random queue trees, quotas and arrivals: no round gives a queue more than its limit, leaves a
guaranteed GPU idle while its queue waits with a job that fits, or splits a gang."""

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
from corral.core.queues import Queue, QueueTree, any_type, parse_queues
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy, is_elastic
from corral.sim.analysis.allocations import record_allocations
from corral.sim.loop.engine import Simulator
from corral.sim.truth.source import TruthSource
from corral.sim.workloads.common import Workload, make_job

HALVES = "[queue.a]\nquota = 4\n[queue.b]\nquota = 4\n"
#: imagenet's run alone (a duration-based job): long enough that its gangs queue behind each
#: other for hours, without the days its full epochs take (those rounds were most of this
#: file's time, the plain run asking the inner policies at every one of 17,000 rounds).
LONG_RUN_S = 6 * 3600.0


@pytest.fixture(scope="module")
def truth():
    return TruthSource.of(None, None).load()


def _job(truth, name: str, t: float, queue: str, gpus: int, app: str = "cifar10") -> JobSpec:
    limits = truth.limits()[app]
    return dataclasses.replace(make_job(name, t, app, limits, gpus, limits.init_bsz), queue=queue)


def _run(truth, inner: str, jobs: list[JobSpec], queues: str = HALVES, cluster: str = "2x4"):
    shape = Cluster.parse(cluster)
    policy = QueuedPolicy(lambda: create_policy(inner), parse_queues(queues, total_gpus=shape.total_gpus))
    book = record_allocations(policy)
    result = Simulator(truth, policy, shape).run(Workload("w", jobs, "test"))
    return policy, result, book


def test_the_layer_is_asked_every_round_with_full_views():
    layer = QueuedPolicy(lambda: create_policy("fifo"), parse_queues(HALVES))
    assert layer.name == "fifo" and not is_elastic(layer.inner("a"))
    from corral.core.policy import Keeps, Reads

    # the most conservative promises: fresh full views, asked every round, nothing kept
    assert layer.promises.reads == Reads.VIEWS and layer.promises.keeps == Keeps.NOTHING
    oracle = QueuedPolicy(lambda: create_policy("srtf"), parse_queues(HALVES))
    assert oracle.promises.oracle and oracle.promises.keeps == Keeps.NOTHING
    assert type(layer).stands_until(layer) == float("-inf")
    assert is_elastic(create_policy("pollux"))
    assert layer.inner("a") is not layer.inner("b")  # per-job state stays per queue


def test_fifo_a_queue_gets_its_quota_back_within_one_round(truth):
    # a borrows b's idle quota; b's job arrives: the next round a's newest job gives way
    jobs = [_job(truth, "a1", 0, "a", 4), _job(truth, "a2", 10, "a", 4),
            _job(truth, "b1", 1000, "b", 4)]
    _, result, book = _run(truth, "fifo", jobs)
    assert book["a2"][0] == (60.0, 4)  # borrowed b's quota
    assert book["b1"][0] == (1020.0, 4)  # the first round after its arrival (1000 s)
    assert (1020.0, 0) in book["a2"]  # the most recently started job of a gave it back
    assert book["a1"] == [(0.0, 4)]  # the other is left alone
    assert all(j.finish_s is not None for j in result.jobs)


def test_min_runtime_delays_the_reclaim(truth):
    jobs = [_job(truth, "a1", 0, "a", 4), _job(truth, "a2", 10, "a", 4),
            _job(truth, "b1", 1000, "b", 4)]
    _, _, book = _run(truth, "fifo", jobs, "min_runtime_s = 1500\n" + HALVES)
    # a1 started at 0, a2 at 60: at 1500 a1 is the first that may be preempted, so it goes
    assert book["b1"][0] == (1500.0, 4)
    assert (1500.0, 0) in book["a1"] and book["a2"][:2] == [(60.0, 4), (1500.0, 0)] or \
        book["a2"] == [(60.0, 4)]


def test_pollux_shrinks_the_borrower_in_place_rather_than_preempting_it(truth):
    # a1 runs 2 h alone on its 4 GPUs, not imagenet's full day: the same first hour, b1 at 3000 s
    a1 = dataclasses.replace(_job(truth, "a1", 0, "a", 4, "imagenet"), trace_duration_s=7200.0)
    policy, result, book = _run(truth, "pollux", [a1, _job(truth, "b1", 3000, "b", 4)])
    grown = [g for t, g in book["a1"] if t < 3000]
    assert max(grown) == 8  # a1 borrowed all of b's quota
    at = dict(book["a1"])
    assert at[3000.0] == 4  # the round b1 arrived: a1 shrank to a's quota ...
    assert all(g > 0 for _, g in book["a1"])  # ... in place: never preempted
    assert [j.finish_s > 3600.0 for j in result.jobs if j.name == "a1"] == [True]  # ran beside b1
    assert book["b1"][0][0] <= 3060.0  # pollux starts a new job on its second round
    assert all(j.finish_s is not None for j in result.jobs)


def test_job_left_reaches_the_inner_instance_of_the_jobs_queue():
    layer = QueuedPolicy(lambda: create_policy("fifo"), parse_queues(HALVES))
    seen: dict[str, list[str]] = {}
    for q in ("a", "b"):
        inner = layer.inner(q)
        inner.job_left = lambda name, q=q: seen.setdefault(q, []).append(name)  # type: ignore
    spec_a = _spec("x", 1, "a")
    spec_b = _spec("y", 1, "b")
    layer.decide(Snapshot(0.0, Cluster.parse("2x4"), (_view(spec_a), _view(spec_b)), Decision()))
    layer.job_left("x")
    layer.job_left("y")
    layer.job_left("never-seen")
    assert seen == {"a": ["x"], "b": ["y"]}


# --- hand-made rounds ---------------------------------------------------------------------------


_spec, _view = spec, view


def test_unnamed_jobs_run_in_the_default_queue_on_what_nobody_uses():
    layer = QueuedPolicy(lambda: create_policy("fifo"), parse_queues(HALVES))
    d = layer.decide(Snapshot(0.0, Cluster.parse("2x4"), (_view(_spec("x", 8, None)),), Decision()))
    assert d.get("x").num_gpus == 8
    assert layer.last_shares.share["default"] == 8


def test_the_newest_gang_of_a_queue_over_its_share_gives_back_whole():
    cluster = Cluster.parse("2x4")
    jobs = (_view(_spec("old", 2, "a"), Placement.of({0: 2}), 0.0),
            _view(_spec("new", 2, "a"), Placement.of({0: 2}), 50.0),
            _view(_spec("big", 4, "a"), Placement.of({1: 4}), 10.0),
            _view(_spec("b", 3, "b", 90.0)))
    layer = QueuedPolicy(lambda: create_policy("fifo"), parse_queues(HALVES))
    d = layer.decide(Snapshot(100.0, cluster, jobs, Decision()))
    # newest first until within the share (5 of 8), then the older that still fit come back
    assert d.get("big") is None
    assert d.get("old").placement == d.get("new").placement == Placement.of({0: 2})  # unmoved
    assert d.get("b").num_gpus == 3


# --- the property -----------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    nodes, per_node = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    total = nodes * per_node
    n_leaves = draw(st.integers(1, 4))
    leaves = [f"q{i}" for i in range(n_leaves)]
    cohort = draw(st.integers(0, n_leaves))  # the first `cohort` leaves share a parent
    left = total
    queues = []
    quotas = {}
    for name in leaves:
        quotas[name] = draw(st.integers(0, left))
        left -= quotas[name]
    inner_sum = sum(quotas[q] for q in leaves[:cohort])
    if cohort:
        extra = draw(st.integers(0, left))
        left -= extra
        c_quota = inner_sum + extra
        c_limit = draw(st.one_of(st.none(), st.integers(c_quota, total)))
        queues.append(Queue("c", quota=any_type(c_quota), limit=any_type(c_limit), weight=draw(st.sampled_from([1, 2])),
                            priority=draw(st.integers(0, 1))))
    for i, name in enumerate(leaves):
        queues.append(Queue(name, quota=any_type(quotas[name]),
                            limit=any_type(draw(st.one_of(st.none(),
                                                          st.integers(quotas[name], total)))),
                            weight=draw(st.sampled_from([0.5, 1, 3])),
                            parent="c" if i < cohort else None, priority=draw(st.integers(0, 2))))
    queues.append(Queue("default", quota=any_type(0)))
    tree = QueueTree(tuple(queues), 0.0, None, "hypothesis")
    tree.validate(total)
    jobs = draw(st.lists(st.tuples(st.sampled_from(leaves + [None]), st.integers(0, 5),
                                   st.integers(1, total), st.integers(1, 4)),
                         min_size=1, max_size=8))
    return Cluster.uniform(nodes, per_node), tree, jobs


def _holding(tree: QueueTree, decision: Decision, specs: dict[str, JobSpec]) -> dict[str, int]:
    held = {q.name: 0 for q in tree.queues}
    for name, a in decision.assignments.items():
        leaf = tree.leaf_for(specs[name].queue)
        for q in (leaf, *tree.ancestors(leaf)):
            held[q] += a.num_gpus
    return held


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_round_breaks_a_limit_idles_a_guarantee_or_splits_a_gang(case):
    cluster, tree, rows = case
    layer = QueuedPolicy(lambda: create_policy("fifo", {"backfill": "true"}), tree)
    specs = {f"j{i}": _spec(f"j{i}", g, q, float(t)) for i, (q, t, g, _) in enumerate(rows)}
    rounds_left = {f"j{i}": d for i, (_, _, _, d) in enumerate(rows)}

    def check(r: int, active: list[str], decision: Decision) -> None:
        check_decision(decision, set(active), cluster, "layer")
        for name, a in decision.assignments.items():  # no gang split
            assert a.num_gpus == specs[name].gpus, (name, a)
        held = _holding(tree, decision, specs)
        for q in tree.queues:  # no limit exceeded
            if q.any_limit is not None:
                assert held[q.name] <= q.any_limit, (q.name, held, r)
        idle = cluster.total_gpus - sum(held[q] for q in tree.children(None))
        for q in tree.leaves:  # no guaranteed GPU idle while a job of its queue that fits waits
            room = min(tree.quota(q) - held[q], idle)
            waiting = [n for n in active if tree.leaf_for(specs[n].queue) == q
                       and decision.get(n) is None]
            assert not [n for n in waiting if specs[n].gpus <= room], (q, held, idle, r)
    drive_rounds(layer, cluster, specs, rounds_left, check)


def test_decayed_usage_lowers_the_borrowing_weight_of_the_queue_that_used_most():
    tree = parse_queues("usage_half_life_s = 3600\n[queue.a]\n[queue.b]\n")
    layer = QueuedPolicy(lambda: create_policy("fifo"), tree)
    assert layer._weights(0.0, {"a": 8}) is None  # no usage yet: the declared weights
    weights = layer._weights(3600.0, {"b": 8})  # a held 8 GPUs for an hour
    assert weights["a"] < weights["b"] == 1.0
    # an hour later a's usage has halved and b has used twice that since: b now weighs less
    later = layer._weights(7200.0, {})
    assert weights["a"] < later["a"] < 1.0 and later["b"] < later["a"]
    # idle GPUs are lent by those weights: b, which used less, gets more of them
    cluster = Cluster.parse("2x4")
    jobs = tuple(_view(_spec(f"{q}{i}", 1, q, 7200.0)) for q in "ab" for i in range(8))
    layer = QueuedPolicy(lambda: create_policy("fifo"), tree)
    layer._weights(0.0, {"a": 8})
    layer.decide(Snapshot(3600.0, cluster, jobs, Decision()))
    assert layer.last_shares.share["b"] > layer.last_shares.share["a"]


# --- the fast path decides as the plain one ------------------------------------------------------

THREE = "[queue.a]\nquota = 8\n[queue.b]\nquota = 4\n[queue.c]\nquota = 4\n"
COHORT = ("min_runtime_s = 900\n[queue.r]\nquota = 8\nlimit = 12\n[queue.a]\nparent = \"r\"\n"
          "quota = 4\n[queue.b]\nparent = \"r\"\nquota = 4\n[queue.c]\nquota = 4\n")


def _mixed_jobs(truth, n: int, seed: int, apps: tuple[str, ...]) -> list[JobSpec]:
    import random

    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        queue = rng.choice(["a", "a", "b", "c", None])
        job = _job(truth, f"j{i}", rng.uniform(0, 7200), queue or "nowhere",
                   rng.choice([1, 1, 2, 4, 8]), rng.choice(apps))
        if job.app == "imagenet":
            job = dataclasses.replace(job, trace_duration_s=LONG_RUN_S)
        jobs.append(job)
    return jobs


GANG_APPS = ("cifar10", "ncf", "imagenet")


@pytest.mark.parametrize("inner,queues,n,apps", [
    ("fifo", THREE, 20, GANG_APPS), ("tiresias-las", THREE, 20, GANG_APPS),
    ("fifo", COHORT, 24, GANG_APPS), ("tiresias-las", COHORT, 24, GANG_APPS),
    ("pollux", THREE, 6, ("cifar10", "ncf"))], ids=["fifo", "las", "fifo-cohort", "las-cohort",
                                                   "pollux"])
def test_the_fast_path_decides_exactly_as_the_plain_one(truth, inner, queues, n, apps):
    jobs = _mixed_jobs(truth, n, seed=len(queues) + n, apps=apps)
    runs = []
    for fast in (True, False):
        shape = Cluster.parse("4x4")
        policy = QueuedPolicy(lambda: create_policy(inner),
                              parse_queues(queues, total_gpus=shape.total_gpus), fast=fast)
        asked = [0]
        for q in policy.queues.leaves:  # count the inner policies' rounds
            instance = policy.inner(q)
            decide = instance.decide

            def counted(snapshot, decide=decide):
                asked[0] += 1
                return decide(snapshot)
            instance.decide = counted  # type: ignore[method-assign]
        book = record_allocations(policy)
        result = Simulator(truth, policy, shape).run(Workload("w", jobs, "test"))
        runs.append((result, book, asked[0]))
    (fast, fast_book, fast_asked), (plain, plain_book, plain_asked) = runs
    assert [dataclasses.asdict(r) for r in fast.jobs] == [dataclasses.asdict(r) for r in plain.jobs]
    assert fast_book == plain_book and fast.gpu_timeline == plain.gpu_timeline
    assert sum(r.finish_s is not None for r in fast.jobs) >= n // 2
    if inner != "pollux":  # the gang schedulers' promises let rounds through unasked
        assert fast_asked < plain_asked and fast.rounds == plain.rounds
        assert any(r.first_start_s is not None and r.first_start_s > r.submit_s + 300
                   for r in fast.jobs)  # the gangs queue
