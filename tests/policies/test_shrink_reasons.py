"""Issue 43: a policy that shrinks a running job says why in its own words
(`Decision.shrinks`), as it does for a job it leaves waiting (`Decision.reasons`); the team
layer says so where it shrinks a queue's job back to its share, beside the inner policy's
words; the live service's `resized` event carries them (tests/service/test_api.py)."""

from __future__ import annotations

import dataclasses

import pytest
from job_views import typed_estimator, view
from layer_rounds import spec as queued_spec

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Assignment, Decision, JobSpec, Snapshot
from corral.core.policy import Policy
from corral.core.queues import parse_queues
from corral.core.reasons import shrink_reasons
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy


def _elastic(name: str, submitted: float) -> JobSpec:
    return JobSpec(name, submitted, "cifar10", gpus=4, min_gpus=1, max_gpus=4, batch_size=128,
                   init_bsz=128, max_bsz=4096, min_local_bsz=16, max_local_bsz=1024,
                   adaptive=True)


@pytest.mark.parametrize(("policy", "cluster", "words"), [
    ("pollux", "1x4", "pollux: more goodput over all jobs with its GPUs given to others "
                      "(its speedup "),
    ("sia", "t4:1x4", "sia: its program chose 2 GPU(s) for it, more goodput for the others "
                      "(goodput "),
])
def test_an_elastic_policy_says_why_it_shrinks_a_running_job(policy: str, cluster: str,
                                                             words: str) -> None:
    # a holds all four GPUs; b arrives: both policies give b two of a's
    shape = Cluster.parse(cluster)
    t = shape.gpu_types[0]
    a = view(_elastic("a", 0.0), Placement.of({0: 4}), 0.0, typed_estimator({t: 0.1}, t, 4))
    b = view(_elastic("b", 100.0), None, None, typed_estimator({t: 0.1}, t, 1))
    decision = create_policy(policy).decide(Snapshot(1000.0, shape, (a, b), Decision()))
    assert decision.assignments["a"].num_gpus == 2
    assert list(decision.shrinks) == ["a"] and decision.shrinks["a"].startswith(words)


def test_shrink_reasons_name_only_running_jobs_given_fewer_gpus_but_some() -> None:
    jobs = [view(_elastic(n, 0.0), Placement.of({0: 2}), 0.0) for n in ("kept", "shrunk", "out")]
    jobs.append(view(_elastic("new", 1.0)))
    decided = {"kept": Assignment(Placement.of({0: 2})), "shrunk": Assignment(Placement.of({0: 1})),
               "new": Assignment(Placement.of({0: 1}))}
    said = shrink_reasons(jobs, decided, "p", lambda v, a: f"to {a.num_gpus}")
    assert said == {"shrunk": "p: to 1"}


class Quarter(Policy):
    """Every job on one GPU: what it is shown running on more, it shrinks, saying so."""

    name = "quarter"

    def decide(self, snapshot: Snapshot) -> Decision:
        out, node = {}, 0
        for v in snapshot.jobs:
            out[v.name] = Assignment(Placement.of({node: 1}))
            node += 1
        return Decision(out, {}, shrink_reasons(snapshot.jobs, out, self.name,
                                                lambda v, a: "one each"))


def test_the_layer_says_why_it_shrinks_a_queue_back_to_its_share_beside_the_policy() -> None:
    # vision's job holds all 4 GPUs of a 1x4 cluster, nlp's arrives: the carve shrinks vision's
    # job to its share of 1 (the layer's words); alone, it borrows all 4 and its inner policy
    # shrinks it (its own words)
    queues = parse_queues("[queue.vision]\nquota = 1\n[queue.nlp]\nquota = 3\n", total_gpus=4)
    v = dataclasses.replace(queued_spec("v", 4, "vision"), min_gpus=1)
    n = dataclasses.replace(queued_spec("n", 3, "nlp", 50.0), min_gpus=1)
    layer = QueuedPolicy(Quarter, queues)
    views = (view(v, Placement.of({0: 4}), 0.0), view(n))
    decision = layer.decide(Snapshot(100.0, Cluster.parse("1x4"), views, Decision()))
    assert decision.assignments["v"].num_gpus == 1
    assert decision.shrinks == {
        "v": "queues: queue vision holds 4 GPU(s), more than its share 1; it gives back what "
             "it borrowed"}
    regrown = layer.decide(Snapshot(100.0, Cluster.parse("1x4"), (view(v, Placement.of({0: 4}),
                                                                        0.0),), Decision()))
    assert regrown.assignments["v"].num_gpus == 1 and regrown.shrinks == {
        "v": "quarter: one each"}
