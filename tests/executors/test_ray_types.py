"""GPU types on the Ray executor: a node's type from Ray's accelerator-type resource or label,
in corral's short names, and every worker told its node's type (CORRAL_GPU_TYPE).

A local Ray cluster of two nodes on 127.0.0.1 (ray.cluster_utils.Cluster) whose slots are a
custom resource standing in for GPUs, with fake `accelerator_type:T4` and `accelerator_type:A100`
resources (what Ray sets on GPU nodes); shut down at the end of the module. Skipped without ray.
"""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'corral[ray]')")

import contract  # noqa: E402  (this folder is on sys.path: conftest.py)
import ray  # noqa: E402
from local_ray import local_cluster  # noqa: E402 (tests/ is on sys.path)

from corral.core.cluster import Placement  # noqa: E402
from corral.executors.base import WorkerPlan  # noqa: E402
from corral.executors.ray.executor import RayExecutor, connect  # noqa: E402
from corral.executors.ray.nodes import NodeTable, node_gpu_type  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def test_a_nodes_type_from_its_label_or_accelerator_resource() -> None:
    assert node_gpu_type({"Resources": {"GPU": 8, "accelerator_type:A100": 1}}) == "a100"
    assert node_gpu_type({"Resources": {"accelerator_type:A100-80G": 1}}) == "a100"
    assert node_gpu_type({"Resources": {"GPU": 1}, "Labels": {
        "ray.io/accelerator-type": "T4"}}) == "t4"
    assert node_gpu_type({"Resources": {"CPU": 4}}) == ""
    table = NodeTable("GPU")
    table.update([
        {"NodeID": "aa", "Alive": True, "NodeManagerAddress": "10.0.0.1",
         "Resources": {"GPU": 2, "accelerator_type:V100": 1, "node:__internal_head__": 1}},
        {"NodeID": "bb", "Alive": True, "NodeManagerAddress": "10.0.0.2",
         "Resources": {"GPU": 4, "accelerator_type:K80": 1}}])
    c = table.cluster()
    assert c.node_types == ("v100", "k80") and c.gpus_of_type("k80") == 4
    assert table.type_of("bb") == "k80" and table.type_of("gone") == ""


@pytest.fixture(scope="module")
def typed_ray():
    """Head (1 slot, a T4) + one more node (1 slot, an A100), torn down after."""
    with local_cluster(dict(num_cpus=1, resources={"typed_slot": 1, "accelerator_type:T4": 1}),
                       [dict(num_cpus=0, resources={"typed_slot": 1, "accelerator_type:A100": 1})]
                       ) as cluster:
        try:
            connect(cluster.address)
            yield cluster
        finally:
            ray.shutdown()


def test_workers_are_told_their_nodes_type_and_a_moved_job_the_new_one(typed_ray, tmp_path):
    ex = RayExecutor(tmp_path, resource="typed_slot", max_retries=0, stop_timeout_s=10,
                     crash_grace_s=1, poll_s=0.02, nodes_poll_s=0.2)
    try:
        contract.wait_until(lambda: ex.cluster().num_nodes == 2, what="both nodes")
        assert ex.cluster().node_types == ("t4", "a100")
        job = contract.launch("r", "sleep")
        ex.place(job, WorkerPlan(Placement(((1, 1),))))
        try:
            contract.wait_until(lambda: contract.env_lines(ex, "r"), what="the launch on the A100")
        except TimeoutError:
            raise AssertionError(f"{ex.status('r')}\n{ex.files.read_log('r')}") from None
        ex.place(job, WorkerPlan(Placement(((0, 1),))))
        contract.wait_until(lambda: len(contract.env_lines(ex, "r")) == 2,
                            what="the launch on the T4")
        assert [line["CORRAL_GPU_TYPE"] for line in contract.env_lines(ex, "r")] == ["a100", "t4"]
        ex.stop("r", cancel=True)
        ex.wait_for("r", contract.END, contract.TIMEOUT_S)
    finally:
        ex.shutdown(10)
