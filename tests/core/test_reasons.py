"""`corral.core.reasons`: the kinds a waiting job's reason takes from the GPUs left free, the
round loop's own reason where it re-places a decision onto one GPU type, and a reason's trip
through a store."""

from __future__ import annotations

from job_views import view

from corral.core.cluster import Cluster, Placement
from corral.core.gpu_types import within_one_type
from corral.core.jobs import Assignment, Decision, JobSpec
from corral.core.ledger import JobLedger
from corral.core.reasons import ARRIVING, WaitKind, WaitReason, no_type_room, waiting_reasons

TYPED = Cluster.parse("a100:1x4,v100:1x4")


def _spec(name: str, gpus: int, gpu_type: str | None = None, min_gpus: int = 1) -> JobSpec:
    return JobSpec(name, 0.0, "cifar10", gpus=gpus, batch_size=64 * gpus, init_bsz=64,
                   max_bsz=64 * gpus, min_local_bsz=8, max_local_bsz=64, gpu_type=gpu_type,
                   min_gpus=min_gpus)


def test_free_gpus_decide_between_ranked_lower_no_fit_and_type_unavailable() -> None:
    running = {"r": Assignment(Placement.of({0: 2}))}  # 2 a100 and 4 v100 free
    jobs = [view(_spec("r", 2)), view(_spec("big", 8)), view(_spec("six", 6)),
            view(_spec("pinned", 4, "a100")), view(_spec("small", 2))]
    got = waiting_reasons(jobs, running, TYPED, "mine", lambda v, above: f"behind {above}")
    assert set(got) == {"big", "six", "pinned", "small"}
    assert got["big"].kind is WaitKind.RANKED_LOWER  # 6 free in all: others hold the rest
    assert got["big"].text == "mine: behind r; needs 8 GPUs, 6 free"
    assert got["six"] == WaitReason(WaitKind.NO_FIT, "mine: needs 6 GPUs of one type; the "
                                    "largest free block is 4 (v100)")
    assert got["pinned"] == WaitReason(WaitKind.TYPE_UNAVAILABLE,
                                       "mine: gpu_type a100 named; needs 4, 2 free")
    assert got["small"].text == "mine: behind pinned; needs 2 GPUs, 6 free"
    assert no_type_room("x", 1, "k80", {"a100": 4}).text == "x: gpu_type k80 named; the " \
        "cluster has none"


def test_a_job_no_one_type_has_room_for_gets_the_round_loops_reason() -> None:
    # a type-unaware policy put 6 GPUs over both types for a job that needs at least 6: no
    # type holds it; the a100-only job it put on v100s moves to a100
    decision = Decision({"wide": Assignment(Placement.of({0: 3, 1: 3})),
                         "fits": Assignment(Placement.of({0: 1})),
                         "pinned": Assignment(Placement.of({1: 2}))})
    specs = {"wide": _spec("wide", 6, min_gpus=6), "fits": _spec("fits", 1),
             "pinned": _spec("pinned", 2, "a100")}
    placed = within_one_type(decision, TYPED, specs)
    assert placed.get("fits") is not None
    assert placed.get("wide") is None and placed.get("pinned") is not None
    assert placed.reasons["wide"] == WaitReason(
        WaitKind.NO_FIT, "one GPU type per job: needs 6 GPU(s) of one type; the largest free "
        "block is 4 (v100)")


def test_a_ledger_sums_its_wait_by_reason_and_keeps_the_reason_through_a_store() -> None:
    books = JobLedger(_spec("j", 1))
    assert books.reason is ARRIVING
    books.wait(5.0)
    quota = WaitReason(WaitKind.QUOTA, "queue a holds its quota 2/2 and nothing is idle to "
                       "borrow", "a")
    books.told(quota)
    books.wait(7.0)
    books.told(None)  # a decision that says nothing
    books.wait(1.0)
    assert books.waited_by_reason == {"arriving": 5.0, "quota": 7.0, "unexplained": 1.0}
    books.told(quota)
    again = JobLedger(_spec("j", 1))
    again.restore(books.books())
    assert again.reason == quota and again.waited_by_reason == books.waited_by_reason
    assert WaitReason.from_doc({"kind": "no-such-kind", "text": "t"}).kind is WaitKind.UNEXPLAINED
