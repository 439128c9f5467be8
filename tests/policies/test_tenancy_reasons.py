"""Why a job waits under queues (`corral.policies.tenancy.reasons`): its queue's quota,
another queue's job protected by `min_runtime_s`, or its inner policy's own reason; and a
reason names nothing of another team."""

from __future__ import annotations

from layer_rounds import spec, view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Decision, Snapshot
from corral.core.queues import parse_queues
from corral.core.reasons import WaitKind
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy

TWO_TEAMS = "[queue.nlp]\nquota = 2\n[queue.vision]\nquota = 2\n"


def _layer(queues: str, inner: str = "fifo") -> QueuedPolicy:
    return QueuedPolicy(lambda: create_policy(inner), parse_queues(queues, total_gpus=4))


def test_a_queue_at_its_quota_with_nothing_idle_waits_for_quota() -> None:
    jobs = (view(spec("nlp-1", 2, "nlp"), Placement.of({0: 2}), 0.0),
            view(spec("vision-1", 2, "vision"), Placement.of({0: 2}), 0.0),
            view(spec("nlp-2", 2, "nlp", 10.0)))
    d = _layer(TWO_TEAMS).decide(Snapshot(60.0, Cluster.parse("1x4"), jobs, Decision()))
    assert d.get("nlp-2") is None
    reason = d.reasons["nlp-2"]
    assert reason.kind is WaitKind.QUOTA and reason.queue == "nlp"
    assert reason.text == "queue nlp holds its quota 2/2 and nothing is idle to borrow"


def test_a_queue_below_its_quota_waits_for_a_protected_job_of_another_queue() -> None:
    # vision borrowed all 4 GPUs 100 s ago; nlp's job arrives; min_runtime_s keeps them
    jobs = (view(spec("vision-big", 4, "vision"), Placement.of({0: 4}), 100.0),
            view(spec("nlp-1", 2, "nlp", 150.0)))
    layer = _layer("min_runtime_s = 600\n" + TWO_TEAMS)
    d = layer.decide(Snapshot(200.0, Cluster.parse("1x4"), jobs, Decision()))
    assert d.get("vision-big") is not None and d.get("nlp-1") is None
    reason = d.reasons["nlp-1"]
    assert reason.kind is WaitKind.PROTECTED and reason.queue == "nlp"
    assert "until 00:11:40" in reason.text  # 100 s + 600 s
    # what nlp's team is told names neither vision's job nor vision's queue
    assert "vision" not in reason.text
    # once min_runtime_s has passed, nlp gets its quota back (no reason: it runs)
    d = layer.decide(Snapshot(700.0, Cluster.parse("1x4"), jobs, Decision()))
    assert d.get("nlp-1") is not None and "nlp-1" not in d.reasons


def test_inside_its_share_a_job_gets_its_inner_policys_reason_naming_its_own_queue_only() -> None:
    # nlp holds 1 of its 2, vision 2; nlp's second job needs 2: fifo's reason, of nlp's jobs
    jobs = (view(spec("nlp-1", 1, "nlp"), Placement.of({0: 1}), 0.0),
            view(spec("vision-1", 2, "vision"), Placement.of({0: 2}), 0.0),
            view(spec("vision-2", 1, "vision", 5.0)),
            view(spec("nlp-2", 2, "nlp", 10.0)))
    d = _layer(TWO_TEAMS).decide(Snapshot(60.0, Cluster.parse("1x4"), jobs, Decision()))
    waiting = {n: r for n, r in d.reasons.items() if d.get(n) is None}
    assert set(waiting) >= {"nlp-2"}
    reason = waiting["nlp-2"]
    assert reason.queue == "nlp" and reason.text.startswith("fifo: ")
    assert "behind nlp-1" in reason.text
    for name, r in waiting.items():
        other = "vision" if name.startswith("nlp") else "nlp"
        assert other not in r.text, (name, r.text)
