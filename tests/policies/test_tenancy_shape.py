"""Issue 43's quota promise on a cluster of two GPU types with untyped quotas (`shape.py`,
`QueuedPolicy._lend`): two teams of quota 2 on `t4:2,a100:2`, vision borrowing everything when
nlp's 2-GPU job arrives. nlp's share is carved in one type, so its job runs whole; where the
carve cannot be made usable, what nlp cannot use is lent back for the round instead of sitting
idle; and a job running on fewer GPUs than it asked brings its queue's quota back."""

from __future__ import annotations

import dataclasses

from layer_rounds import AsAsked, KeepsWhereTheyRun, Mover, spec, view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Decision, JobSpec, JobView, Snapshot, check_decision
from corral.core.queues import parse_queues
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy, job_demand
from corral.policies.tenancy.shape import give_back_order, unusable

CLUSTER = Cluster.parse("t4:1x2,a100:1x2")  # node 0: 2 t4, node 1: 2 a100
TEAMS = "[queue.vision]\nquota = 2\n[queue.nlp]\nquota = 2\n"


def _elastic(job: JobSpec, least: int = 1) -> JobSpec:
    return dataclasses.replace(job, min_gpus=least)


def _decide(inner, jobs: list[tuple[JobSpec, Placement | None, float | None]],
            queues: str = TEAMS) -> tuple[Decision, QueuedPolicy]:
    layer = QueuedPolicy(inner, parse_queues(queues, total_gpus=CLUSTER.total_gpus))
    views = tuple(view(j, p, t) for j, p, t in jobs)
    decision = layer.decide(Snapshot(60.0, CLUSTER, views, Decision()))
    check_decision(decision, {j.name: j for j, _, _ in jobs}, CLUSTER, "layer")
    return decision, layer


def _same(job: JobSpec) -> JobSpec:
    return job


def _borrowed_everything(make=_same) -> list[tuple[JobSpec, Placement | None, float | None]]:
    """vision's four 1-GPU jobs on all four GPUs (v1, v2 the most recently started, one of
    each type), nlp's 2-GPU job just arrived."""
    on_t4, on_a100 = Placement.of({0: 1}), Placement.of({1: 1})
    return [(make(spec("v1", 1, "vision")), on_a100, 30.0),
            (make(spec("v2", 1, "vision")), on_t4, 30.0),
            (make(spec("v3", 1, "vision")), on_a100, 10.0),
            (make(spec("v4", 1, "vision")), on_t4, 10.0),
            (make(spec("n1", 2, "nlp", 50.0)), None, None)]


def _types(decision: Decision) -> dict[str, tuple[str | None, int]]:
    return {n: (CLUSTER.placement_type(a.placement), a.num_gpus)
            for n, a in decision.assignments.items()}


def test_a_gang_queue_is_given_back_gpus_of_one_type_so_its_job_starts_whole() -> None:
    # without the shape, vision gave back v1 (a100) and v2 (t4): nlp's gang of 2 fit nowhere,
    # two GPUs sat idle and two of vision's jobs waited
    decision, layer = _decide(lambda: create_policy("tiresias-las"), _borrowed_everything())
    assert _types(decision)["n1"] == ("a100", 2)
    assert sum(a.num_gpus for a in decision.assignments.values()) == 4
    assert sorted(t for n, t in _types(decision).items() if n != "n1") == [("t4", 1)] * 2


def test_an_elastic_queue_runs_its_job_on_its_whole_share_of_one_type() -> None:
    decision, _ = _decide(AsAsked, _borrowed_everything(_elastic))
    assert _types(decision)["n1"] == ("a100", 2)  # not 1 t4 + an idle a100
    assert sum(a.num_gpus for a in decision.assignments.values()) == 4


def test_what_a_queue_cannot_use_is_lent_back_to_the_job_that_gave_it() -> None:
    # vision's two 2-GPU jobs can only shrink to 1 each, and v1 (re)started under
    # min_runtime_s ago cannot be taken out: nlp's share is 1 t4 + 1 a100, and its one job
    # runs within one type; the other GPU goes back to the vision job that gave it up, which
    # keeps its placement (no resize), instead of sitting idle
    jobs = [(_elastic(spec("v1", 2, "vision")), Placement.of({1: 2}), 45.0),
            (_elastic(spec("v2", 2, "vision")), Placement.of({0: 2}), 10.0),
            (_elastic(spec("n1", 2, "nlp", 50.0)), None, None)]
    decision, layer = _decide(AsAsked, jobs)
    assert sum(a.num_gpus for a in decision.assignments.values()) == 4  # nothing idle
    n1_type, n1_gpus = _types(decision)["n1"]
    assert n1_gpus == 1
    kept = {"t4": "v2", "a100": "v1"}[{"t4": "a100", "a100": "t4"}[n1_type]]
    assert decision.assignments[kept].placement == dict((j.name, p) for j, p, _ in jobs)[kept]
    assert layer.last_carve == {"vision": 3, "nlp": 1}


def test_a_job_running_short_of_its_request_brings_its_quota_back() -> None:
    # issue 43: nlp's job asked 2 GPUs, ran on 1, and stayed there after nlp's quota was
    # raised to 3 while vision borrowed the rest
    one = Cluster.parse("1x4")
    jobs = [(_elastic(spec("n1", 2, "nlp")), Placement.of({0: 1}), 10.0),
            *((_elastic(spec(f"v{i}", 1, "vision")), Placement.of({0: 1}), 20.0)
              for i in (1, 2, 3))]
    layer = QueuedPolicy(AsAsked, parse_queues("[queue.vision]\nquota = 1\n[queue.nlp]\n"
                                               "quota = 3\n", total_gpus=4))
    decision = layer.decide(Snapshot(60.0, one, tuple(view(j, p, t) for j, p, t in jobs),
                                     Decision()))
    assert decision.assignments["n1"].num_gpus == 2
    assert layer.last_shares is not None and layer.last_shares.guaranteed["nlp"] == 2
    running_short = view(jobs[0][0], Placement.of({0: 1}), 10.0)
    assert job_demand(running_short, 4, elastic=True) == (2, 2)
    assert job_demand(running_short, 4, elastic=False) == (1, 1)  # a gang holds what it runs


def test_give_back_order_frees_one_type_first_and_unusable_finds_the_idle_type() -> None:
    views = [view(j, p, t) for j, p, t in _borrowed_everything()[:4]]
    types = CLUSTER.node_types
    order = [v.name for v in give_back_order(views, types, 2)]
    assert order == ["v1", "v3", "v2", "v4"]  # both a100 jobs first: v1's type frees 2
    assert [v.name for v in give_back_order(views, types, 3)] == ["v1", "v2", "v3", "v4"]
    waiting: list[JobView] = [view(spec("n1", 2, "nlp"))]
    # a gang of 2 on 1 t4 + 1 a100: neither type holds it, both are lent
    assert unusable(waiting, {0: 1, 1: 1}, {}, types, elastic=False) == {0: 1, 1: 1}
    assert unusable(waiting, {1: 2}, {}, types, elastic=False) == {}
    # elastic: it starts on one GPU of one type; the other type's GPU is unusable
    assert unusable([view(_elastic(spec("n1", 2, "nlp")))], {0: 1, 1: 1}, {}, types,
                    elastic=True) == {0: 1}  # a tie: the first type by name
    pinned = [view(dataclasses.replace(spec("p", 1, "nlp"), gpu_type="t4"))]
    assert unusable(pinned, {1: 2}, {}, types, elastic=True) == {1: 2}


def test_what_no_other_queue_takes_stays_with_the_queue_that_could_not_use_it() -> None:
    # issue 43's benchmark (bench_tenants.py): vision's two elastic jobs, each asking 2 GPUs,
    # started on 1 t4 each; the a100s were `unusable` to vision (no job of it runs there to
    # grow), lent, taken by no one (nlp has no jobs) and sat idle for minutes while pollux,
    # shown them, would have moved a job there at 2 GPUs (as it does without queues)
    on_t4 = Placement.of({0: 1})
    jobs = [(_elastic(spec("v1", 2, "vision")), on_t4, 10.0),
            (_elastic(spec("v2", 2, "vision")), on_t4, 10.0)]
    decision, layer = _decide(AsAsked, jobs)
    assert layer.last_carve == {"vision": 4}  # the inner policy is shown the a100s
    # lent first all the same: nlp's job, arriving, is given the a100s whole
    decision, layer = _decide(AsAsked, [*jobs, (_elastic(spec("n1", 2, "nlp", 50.0)), None,
                                                None)])
    assert _types(decision)["n1"] == ("a100", 2)


def test_a_queue_below_its_share_is_given_a_block_of_the_type_its_job_runs_on() -> None:
    # issue 43's benchmark, the rounds after nlp's arrival: nlp's job ran on 1 a100 of its 2,
    # vision held 3 (v1: 1 a100 at its min_gpus, v2: 2 t4). vision shrank v2 to 1 t4, which
    # nlp's job cannot use; lent back, nlp held 1 GPU of its quota 2 for minutes. The layer
    # now gives back from the type nlp's job runs on: v1 (past min_runtime_s) is taken out
    jobs = [(_elastic(spec("v1", 2, "vision")), Placement.of({1: 1}), 20.0),
            (_elastic(spec("v2", 2, "vision")), Placement.of({0: 2}), 20.0),
            (_elastic(spec("n1", 2, "nlp", 15.0)), Placement.of({1: 1}), 20.0)]
    decision, layer = _decide(AsAsked, jobs)
    assert _types(decision)["n1"] == ("a100", 2)
    assert _types(decision)["v2"] == ("t4", 2) and "v1" not in decision.assignments
    assert layer.last_carve == {"vision": 2, "nlp": 2}
    # v1 under min_runtime_s (restarted 10 s ago): not taken out; as before, v2 is shrunk and
    # the t4 nlp cannot use is lent back to it (no resize)
    jobs[0] = (jobs[0][0], jobs[0][1], 50.0)
    decision, layer = _decide(AsAsked, jobs)
    assert _types(decision)["n1"] == ("a100", 1) and _types(decision)["v2"] == ("t4", 2)


RAISED = "[queue.vision]\nquota = 1\n[queue.nlp]\nquota = 3\n"


def _after_the_raise() -> list[tuple[JobSpec, Placement | None, float | None]]:
    """issue 43's benchmark after the raise (nlp 2 -> 3, vision 2 -> 1): nlp's two elastic
    jobs, each asking 2, run on 1 t4 each; vision's job holds both a100s."""
    on_t4 = Placement.of({0: 1})
    return [(_elastic(spec("v1", 2, "vision")), Placement.of({1: 2}), 10.0),
            (_elastic(spec("n1", 2, "nlp")), on_t4, 10.0),
            (_elastic(spec("n2", 2, "nlp")), on_t4, 10.0)]


def test_a_queue_below_its_guarantee_is_offered_a_type_its_job_could_move_to() -> None:
    # the GPU vision gives back is an a100, where no nlp job runs or waits: it used to be lent
    # back to v1 and nlp held 2 of its 3 for good. Now it is offered to nlp (a job of it could
    # move there) and an inner policy that moves a job uses it
    decision, layer = _decide(Mover, _after_the_raise(), RAISED)
    types = _types(decision)
    assert layer.last_carve == {"vision": 1, "nlp": 3}
    assert sorted(types[n] for n in ("n1", "n2")) == [("a100", 1), ("t4", 2)]
    assert types["v1"] == ("a100", 1)


def test_an_offer_the_inner_policy_leaves_unused_is_lent_for_the_round() -> None:
    # an inner policy that keeps its jobs where they are leaves the a100 unused: it is lent
    # back to the job that gave it up, which keeps its placement (no resize, nothing idle)
    decision, layer = _decide(KeepsWhereTheyRun, _after_the_raise(), RAISED)
    types = _types(decision)
    assert types["n1"] == types["n2"] == ("t4", 1)
    assert decision.assignments["v1"].placement == Placement.of({1: 2})
    assert not decision.shrinks
    assert layer.last_carve == {"vision": 2, "nlp": 2}
