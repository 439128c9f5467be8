"""Which nodes a pollux round searches on a large cluster, and the warm start's columns moved."""

from __future__ import annotations

import numpy as np

from corral.core import Cluster, JobSpec
from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, JobStatus, JobView, Snapshot
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.pollux.nodes import SEARCH_ALL_NODES_UP_TO, move_columns, search_nodes


def test_a_small_cluster_is_searched_whole():
    n = SEARCH_ALL_NODES_UP_TO
    assert search_nodes(np.full(n, 4), np.zeros((1, n), int), np.array([1])).tolist() == \
        list(range(n))


def test_a_large_cluster_spans_held_and_seeded_nodes_and_room_for_every_cap():
    nodes = np.full(200, 4)
    base = np.zeros((2, 200), int)
    base[0, 150] = 2  # held high up
    base[1, 7] = 1
    got = search_nodes(nodes, base, np.array([8, 16]), seeded=np.array([199]))
    assert {7, 150, 199} <= set(got.tolist())
    assert np.all(np.diff(got) > 0)
    # 24 GPUs of caps + one spare node: 28 GPUs = 7 nodes; 3 spanned, 4 empty ones added
    assert nodes[got].sum() >= 8 + 16 + 4 and len(got) == 7
    assert got.tolist() == [0, 1, 2, 3, 7, 150, 199]
    # when the caps need the whole cluster, it is all of it
    assert len(search_nodes(nodes, base, np.array([800]))) == 200


def test_every_node_size_gets_room_for_every_cap():
    nodes = np.array([8, 2] * 40)
    got = search_nodes(nodes, np.zeros((1, 80), int), np.array([9]))
    # 9 + 8 GPUs of each size: three 8-GPU nodes (0, 2, 4), nine 2-GPU ones (1, 3, ..., 17)
    assert got.tolist() == [0, 1, 2, 3, 4] + list(range(5, 18, 2))


def test_moving_columns_keeps_shared_nodes_and_empties_new_ones():
    free, block = 2, 3  # two jobs
    pop = np.array([[[0, 1], [free, free]], [[1, free], [0, 0]]], dtype=np.int16)  # (2, 2, 2)
    old, new = np.array([5, 9]), np.array([1, 9, 12])
    sizes = np.zeros(13, int)
    sizes[[1, 5, 9, 12]] = [2, 2, 2, 1]
    moved = move_columns(pop, old, new, sizes, num_jobs=2)
    assert moved.dtype == pop.dtype and moved.shape == (2, 3, 2)
    assert moved[:, 0].tolist() == [[free, free]] * 2  # node 1: new, empty
    assert moved[:, 1].tolist() == pop[:, 1].tolist()  # node 9 kept its slots
    assert moved[:, 2].tolist() == [[free, block]] * 2  # node 12 has one GPU
    assert move_columns(pop, old, old.copy(), sizes, 2) is pop


def _view(name: str, placement: Placement | None) -> JobView:
    spec = JobSpec(name=name, submit_time_s=0.0, app="cifar10", gpus=1, batch_size=128,
                   init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)
    est = JobEstimator(128, 4096, 32, 1024)
    for n, k in ((1, 1), (1, 2)):
        est.observe_step(n, k, 128, 0.1, 0.002 * (k - 1))
    est.observe_grad(1.0, 50.0)
    running = placement is not None
    return JobView(spec=spec, status=JobStatus.RUNNING if running else JobStatus.PENDING,
                   assignment=Assignment(placement) if running else None,
                   attained_gpu_s=0.0, run_time_s=600.0, queue_time_s=0.0, restarts=0,
                   epoch=0, steps=0, progress=0.0, max_gpus_held=placement.num_gpus if running
                   else 0, first_start_s=None, last_change_s=None, batch=None, estimator=est)


def test_pollux_on_a_large_cluster_places_on_real_nodes_and_keeps_far_away_jobs():
    cluster = Cluster.parse("128x4")
    # the search's own answer (no growth after it): the current allocation wins
    pol = create_policy("pollux", {"generations": "0", "grow_idle_gpus": "false"})
    far = Placement(((120, 2),))
    views = (_view("far", far), _view("new", None))
    decision = pol.decide(Snapshot(time_s=600.0, cluster=cluster, jobs=views,
                                   previous=Decision({})))
    assert decision.get("far").placement == far
    # searching warm-started, over several rounds: every placement on the cluster, in capacity
    pol = create_policy("pollux", {"generations": "20", "patience": "0"})
    used = np.zeros(128, int)
    for t in (600.0, 660.0, 720.0):
        decision = pol.decide(Snapshot(time_s=t, cluster=cluster, jobs=views,
                                       previous=Decision({})))
        used[:] = 0
        for name in ("far", "new"):
            for node, gpus in decision.get(name).placement.slots:
                assert 0 <= node < 128
                used[node] += gpus
        assert used.max() <= 4
        assert len(pol._searched) < 128  # a few nodes searched, not all
        views = tuple(_view(v.name, decision.get(v.name).placement) for v in views)
