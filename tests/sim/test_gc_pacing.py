"""The engine paces Python's cyclic collector during a run, and gives the pacing back."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.engine import Simulator
from corral.sim.loop.gc_pacing import YOUNG_THRESHOLD, fewer_collections
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic


def test_the_pacing_comes_back_after_the_block_even_on_error():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == (max(before[0], YOUNG_THRESHOLD), *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a failed run")
    assert gc.get_threshold() == before


def test_a_slower_pacing_already_set_is_kept():
    before = gc.get_threshold()
    gc.set_threshold(10 * YOUNG_THRESHOLD, *before[1:])
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 10 * YOUNG_THRESHOLD
    finally:
        gc.set_threshold(*before)


def test_overlapping_blocks_in_two_threads_give_back_the_first_pacing():
    """A and B overlap (A enters, B enters, A leaves, B leaves): the pacing stays paced until
    B leaves, then it is the one from before A."""
    before = gc.get_threshold()
    a_in, a_out, b_in = threading.Event(), threading.Event(), threading.Event()
    seen: list[int] = []

    def run_a() -> None:
        with fewer_collections():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def run_b() -> None:
        a_in.wait(5)
        with fewer_collections():
            b_in.set()
            a_out.wait(5)
            seen.append(gc.get_threshold()[0])  # A has left: B's run is still paced

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [max(before[0], YOUNG_THRESHOLD)]
    assert gc.get_threshold() == before
    with fewer_collections(), fewer_collections():  # nested in one thread
        pass
    assert gc.get_threshold() == before


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_cyclic_garbage_is_still_freed_within_the_block():
    if not gc.isenabled():
        pytest.skip("the collector is switched off in this process")
    with fewer_collections(young=1000):
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        del cycle
        for _ in range(20):  # allocations enough for several young passes
            junk = [[i] for i in range(1000)]
            del junk
            if gone() is None:
                break
        assert gone() is None


def test_the_engine_runs_under_the_pacing():
    truth = CatalogTruth()
    policy = create_policy("fifo")
    seen: list[int] = []
    decide = policy.decide

    def spying(snapshot):
        seen.append(gc.get_threshold()[0])
        return decide(snapshot)

    policy.decide = spying  # type: ignore[method-assign]
    before = gc.get_threshold()
    Simulator(truth, policy, Cluster.parse("16x4")).run(
        synthetic(truth.limits(), num_jobs=4, rate_per_hour=20, seed=0))
    assert seen and min(seen) >= YOUNG_THRESHOLD
    assert gc.get_threshold() == before
