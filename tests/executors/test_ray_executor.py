"""The Ray executor: the shared executor contract, plus what only a multi-node cluster shows.

One local Ray cluster per module, on 127.0.0.1 without the dashboard: a head node and a second
node started with ray.cluster_utils.Cluster (two raylets on this machine). Slots are custom
resources standing in for GPUs: `contract_slot` (4, on the head only: the contract places every
job on node 0) and `corral_slot` (2 on each node: the multi-node tests). The cluster is shut
down at the end of the module, whatever happened. Skipped when ray is not installed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'corral[ray]')")

import ray  # noqa: E402
from local_ray import FAST_NODE_DEATH, local_cluster  # noqa: E402 (tests/ is on sys.path)

from corral.core.cluster import Placement  # noqa: E402
from corral.core.errors import CorralError  # noqa: E402
from corral.executors import create_executor  # noqa: E402
from corral.executors.base import ExecState, WorkerPlan  # noqa: E402
from corral.executors.ray import inplace as ray_inplace  # noqa: E402
from corral.executors.ray.executor import RayExecutor, connect  # noqa: E402
from corral.executors.ray.launch import check_address  # noqa: E402
from corral.executors.ray.nodes import NodeTable, bundles_for, ranks_by_node  # noqa: E402
from corral.executors.ray.resize import PidLookup, plan_in_place  # noqa: E402

# a hang guard: the first test also starts the module's cluster, which took 2.5 minutes at a
# load average of 20 (seconds when quiet)
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.xdist_group("serial")]



import contract  # noqa: E402  (this folder is on sys.path: conftest.py)
from trainjobs import PATIENT, own_hold_file, tiny, trains_on  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    """Head (contract_slot 4, corral_slot 2) + one more node (corral_slot 2), torn down after."""
    with local_cluster(dict(num_cpus=1, resources={"contract_slot": 4, "corral_slot": 2}),
                       [dict(num_cpus=0, resources={"corral_slot": 2})], FAST_NODE_DEATH) as cluster:
        try:
            connect(cluster.address)
            yield cluster
        finally:
            ray.shutdown()


def _executor(data_dir: Path, resource: str, max_retries: int = 2) -> RayExecutor:
    return RayExecutor(data_dir, resource=resource, max_retries=max_retries, stop_timeout_s=10,
                       crash_grace_s=1, poll_s=0.02, nodes_poll_s=0.2)


class TestRayExecutorContract(contract.ExecutorContract):
    @pytest.fixture
    def make_executor(self, ray_cluster):
        def make(data_dir: Path, slots: int, max_retries: int) -> RayExecutor:
            ex = _executor(data_dir, "contract_slot", max_retries)
            assert ex.cluster().total_gpus >= slots
            return ex
        return make


def test_node_table_keeps_node_indices_stable() -> None:
    table = NodeTable("GPU")

    def raw(node_id: str, alive: bool = True, head: bool = False, gpus: int = 2) -> dict:
        res = {"GPU": gpus, **({"node:__internal_head__": 1} if head else {})}
        return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.1", "Resources": res}

    table.update([raw("bb"), raw("aa", head=True), raw("cc", gpus=0)])
    assert [n.node_id for n in table.nodes] == ["aa", "bb"]  # head first; no GPUs: not a node
    table.update([raw("00"), raw("bb"), raw("aa", head=True)])  # a node joins: appended
    assert [n.node_id for n in table.nodes] == ["aa", "bb", "00"]
    table.update([raw("00"), raw("bb", alive=False), raw("aa", head=True)])  # one leaves
    assert [n.node_id for n in table.nodes] == ["aa", "00"]
    assert table.cluster().gpus_per_node == (2, 2)
    assert table.resolve(Placement(((0, 1), (1, 2)))) == (("aa", 1), ("00", 2))
    assert table.resolve(Placement(((2, 1),))) is None and table.resolve(Placement(((0, 3),))) is None
    assert bundles_for((("aa", 2),), "GPU").strategy == "STRICT_PACK"
    spread = bundles_for((("aa", 1), ("00", 2)), "GPU")
    assert spread.strategy == "STRICT_SPREAD" and spread.bundles == ({"GPU": 1.0}, {"GPU": 2.0})
    assert spread.selectors == ({"ray.io/node-id": "aa"}, {"ray.io/node-id": "00"})
    # ranks go node by node in table order; local ranks count within a node
    assert ranks_by_node([1, 2], ["00", "aa"], ["aa", "00"]) == [
        (1, "aa", 0, 2), (1, "aa", 1, 2), (0, "00", 0, 1)]


def test_a_bad_ray_address_is_a_one_line_error() -> None:
    for address, text in (("nohost", "expected HOST:PORT"), ("127.0.0.1:x", "expected HOST:PORT"),
                          ("127.0.0.1:1", "cannot reach the Ray cluster at 127.0.0.1:1")):
        with pytest.raises(CorralError, match=text) as err:
            check_address(address)
        assert "\n" not in str(err.value)
    assert check_address("auto") is None and check_address("ray://head:10001") is None


def test_registered_by_name(ray_cluster, tmp_path: Path) -> None:
    ex = create_executor("ray", tmp_path, resource="corral_slot")
    try:
        assert isinstance(ex, RayExecutor) and ex.cluster().gpus_per_node == (2, 2)
    finally:
        ex.shutdown(5)


def test_spanning_job_resizes_and_recovers_from_a_lost_node(ray_cluster, tmp_path: Path) -> None:
    """Workers on both nodes; a resize onto the second node; that node removed: the job restarts
    from its checkpoint on the node that remains and finishes. The job counts on until the test
    lets it finish (a plain 3-second count ended before the resize on a loaded machine)."""
    ex = _executor(tmp_path / "data", "corral_slot")
    try:
        cluster = ex.cluster()
        assert cluster.gpus_per_node == (2, 2)
        job, hold = contract.held(ex, "span", 150)
        ex.place(job, WorkerPlan(Placement(((0, 1), (1, 1)))))
        ex.wait_for("span", ExecState.RUNNING, contract.TIMEOUT_S)
        contract.wait_until(lambda: "starts at" in ex.files.read_log("span")
                            and len(contract.env_lines(ex, "span")) == 2, what="first launch")
        assert ex.status("span").plan.placement == Placement(((0, 1), (1, 1)))
        first = contract.env_lines(ex, "span")
        assert sorted((l["RANK"], l["LOCAL_RANK"], l["LOCAL_WORLD_SIZE"]) for l in first) == [
            ("0", "0", "1"), ("1", "0", "1")]  # one worker on each node

        time.sleep(0.5)
        ex.place(job, WorkerPlan(Placement(((1, 2),))))  # resize: both workers on node 1
        # the old rank 0's last line may land after the new launch's first on a loaded machine
        contract.wait_until(lambda: "rank 0 launch 1 starts" in ex.files.read_log("span")
                            and "rank 0 stopped at " in ex.files.read_log("span"), what="resize")
        assert ex.status("span").plan.placement == Placement(((1, 2),))
        log = ex.files.read_log("span")
        stopped_at = int(log.split("rank 0 stopped at ")[1].split()[0])
        assert f"rank 0 launch 1 starts at {stopped_at}" in log

        node1 = ex.node_ids()[1]  # the node the job now runs on
        removed = [n for n in ray_cluster.worker_nodes if n.node_id == node1]
        assert removed, "the job's node is not the removable worker node"
        lost_pids = [l["pid"] for l in contract.env_lines(ex, "span") if l["config"]["launch"] == 1]
        ray_cluster.remove_node(removed[0], allow_graceful=False)  # as if the machine died
        contract.wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in lost_pids), 10,
                            "the lost node's worker processes to die with their actors")
        contract.wait_until(lambda: "rank 0 launch 2 starts" in ex.files.read_log("span"),
                            what="the restart on the node that remains")
        hold.unlink()
        st = ex.wait_for("span", contract.END, contract.TIMEOUT_S)
        assert st.state is ExecState.DONE, ex.files.read_log("span")
        assert st.crashes == 1 and st.launches == 3
        assert ex.cluster().gpus_per_node == (2,)  # the node table followed the removal
        assert f"rank 0 launch 2 starts at {stopped_at}" in ex.files.read_log("span")
        third = [l for l in contract.env_lines(ex, "span") if l["config"]["launch"] == 2]
        assert sorted(l["RANK"] for l in third) == ["0", "1"]  # same size, on what remains
        counted = json.loads((ex.files.checkpoint_dir("span") / "count.json").read_text())
        assert counted["count"] >= stopped_at
    finally:
        ex.shutdown(10)


def test_an_in_place_plan_keeps_rank_0_and_never_moves_workers() -> None:
    grow = plan_in_place(["a", "a"], (("a", 2), ("b", 2)))
    assert grow.ranks == {0: 0, 1: 1} and grow.joiners == (("b", 2),) and grow.new_world == 4
    shrink = plan_in_place(["a", "a", "b", "b"], (("a", 1), ("b", 1)))
    assert shrink.ranks == {0: 0, 1: None, 2: 1, 3: None}  # each node's highest ranks leave
    assert shrink.staying == [0, 2] and shrink.leaving == [1, 3] and not shrink.joiners
    assert plan_in_place(["a", "b"], (("b", 1),)) is None  # rank 0's node would lose it
    assert plan_in_place(["a", "b"], (("a", 2),)) is None  # one node gains, another loses
    assert plan_in_place(["a"], (("a", 1),)) is None  # nothing to do


def _two_nodes(ray_cluster, ex: RayExecutor) -> None:
    """The module's second node again if an earlier test removed it, seen by `ex`."""
    if len(ex.cluster().gpus_per_node) < 2:
        ray_cluster.add_node(num_cpus=0, resources={"corral_slot": 2}, node_ip_address="127.0.0.1")
    contract.wait_until(lambda: ex.cluster().gpus_per_node == (2, 2), 60, "two nodes")


def test_a_trainer_grows_onto_another_node_and_shrinks_back_in_place(ray_cluster, tmp_path):
    """1 worker on node 0, grown in place to one more on node 1 (its actor and process stay,
    training goes on from its step), then shrunk in place back to node 0: the leaver's slot is
    given back to Ray."""
    pytest.importorskip("torch")
    ex = _ray_trainer_executor(tmp_path / "data")
    try:
        _two_nodes(ray_cluster, ex)
        ex.place(tiny("ip"), WorkerPlan(Placement(((0, 1),))))
        first = trains_on(ex, "ip", 0, 1, after_steps=5)
        (rank0,) = ex.status("ip").workers

        ex.place(tiny("ip"), WorkerPlan(Placement(((0, 1), (1, 1)))))
        grown = trains_on(ex, "ip", 1, 2, after_steps=first.steps)
        st = ex.status("ip")
        assert st.workers[0] == rank0 and len(st.workers) == 2  # rank 0's actor stayed
        assert st.plan.placement == Placement(((0, 1), (1, 1)))
        assert grown.resumed["in_place"] == 1 and grown.resumed["checkpoint"] is None
        assert grown.resumed["steps"] >= first.steps  # continues, not from a checkpoint

        ex.place(tiny("ip"), WorkerPlan(Placement(((0, 1),))))
        shrunk = trains_on(ex, "ip", 2, 1, after_steps=grown.steps)
        assert ex.status("ip").workers == (rank0,) and shrunk.resumed["in_place"] == 2
        events = list(ex.status("ip").events)
        assert [d for k, d in events if k == "resized" and "in place from 1 to 2" in d]
        assert not [k for k, _ in events if k == "resize-fallback"], events
        # the leaver's slot is Ray's again: 4 slots, the job holds 1
        contract.wait_until(lambda: ray.available_resources().get("corral_slot", 0) == 3, 120,
                            "the leaver's placement group to be removed")
    finally:
        ex.stop("ip", cancel=True)
        ex.wait_for("ip", ExecState.CANCELLED, 60)
        ex.shutdown(10)


def test_a_new_worker_that_dies_on_ray_falls_back_to_checkpoint_restart(ray_cluster, tmp_path):
    pytest.importorskip("torch")
    ex = _ray_trainer_executor(tmp_path / "data")
    try:
        ex.place(tiny("fb"), WorkerPlan(Placement(((0, 1),))))
        first = trains_on(ex, "fb", 0, 1, after_steps=5)
        ex.place(tiny("fb"), WorkerPlan(Placement(((0, 2),))))
        job = ex._jobs["fb"]  # white-box: the resize under way and its new worker's actor
        joiner = contract.wait_until(
            lambda: job.resize is not None and job.resize.joiners is not None
            and job.resize.joiners.started and job.resize.joiners.actors[0], 60,
            "the new worker to start")
        ray.kill(joiner, no_restart=True)
        after = trains_on(ex, "fb", 1, 2, after_steps=first.steps)
        assert after.resumed["checkpoint"] is not None  # restarted from a checkpoint
        assert after.resumed["steps"] >= first.steps  # nothing before the resize is lost
        events = list(ex.status("fb").events)
        assert any(k == "resize-fallback" and "checkpoint-restart instead" in d for k, d in events)
        assert ex.status("fb").crashes == 0  # a fallback is no crash
    finally:
        ex.stop("fb", cancel=True)
        ex.wait_for("fb", ExecState.CANCELLED, 60)
        ex.shutdown(10)


def test_a_late_pid_answer_does_not_hold_up_the_executor(ray_cluster, tmp_path, monkeypatch):
    """Rank 0's actor names its command's pid 6 s late (a slow node): meanwhile the executor's
    thread goes on looking at its jobs (a call that needs its lock answers well before the
    answer: held, it would wait about 6 s; the bound, 3 s, leaves room for a loaded machine),
    then the job grows in place; shrinking back asks no more (the same rank 0 keeps its
    pid)."""
    pytest.importorskip("torch")

    @ray.remote(num_cpus=0)
    def late(pid: int | None) -> int | None:
        time.sleep(LATE_S)
        return pid

    asked: list[float] = []

    def slow_lookup(actor: str, ref, deadline: float) -> PidLookup:
        asked.append(time.monotonic())
        return PidLookup(actor, late.remote(ref), deadline)

    monkeypatch.setattr(ray_inplace, "PidLookup", slow_lookup)  # where resizes ask it
    ex = _ray_trainer_executor(tmp_path / "data")
    try:
        ex.place(tiny("late"), WorkerPlan(Placement(((0, 1),))))
        first = trains_on(ex, "late", 0, 1, after_steps=5)
        ex.place(tiny("late"), WorkerPlan(Placement(((0, 2),))))
        contract.wait_until(lambda: asked, 30, "the executor to ask rank 0's pid")
        slowest = 0.0
        while time.monotonic() < asked[0] + LATE_S - 1.0:  # the answer is not in yet
            t0 = time.monotonic()
            ex.status("late")
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.1)
        assert slowest < LATE_S / 2, f"the executor's lock was held {slowest:.1f} s"
        grown = trains_on(ex, "late", 1, 2, after_steps=first.steps)
        assert grown.resumed["in_place"] == 1 and grown.resumed["checkpoint"] is None
        ex.place(tiny("late"), WorkerPlan(Placement(((0, 1),))))
        shrunk = trains_on(ex, "late", 2, 1, after_steps=grown.steps)
        assert shrunk.resumed["in_place"] == 2 and len(asked) == 1
        assert not _events(ex, "late", "resize-fallback")
    finally:
        ex.stop("late", cancel=True)
        ex.wait_for("late", ExecState.CANCELLED, 60)
        ex.shutdown(10)


#: A bound on the early-start tests' waits for workers to start (a hang guard: at load 25-29,
#: three CI runs at once, 60 s ran out while Ray started the actors and torch imported).
EARLY_WAIT_S = 240.0

#: How late rank 0's actor names its pid in test_a_late_pid_answer_does_not_hold_up_the_executor.
LATE_S = 6.0


def _ray_trainer_executor(data_dir: Path) -> RayExecutor:
    """An executor for the tiny trainer, whose in-place resizes never fall back for time
    within a test's waits (`PATIENT`), however loaded the machine."""
    return RayExecutor(data_dir, resource="corral_slot", max_retries=1, stop_timeout_s=20,
                       crash_grace_s=1, poll_s=0.02, nodes_poll_s=0.2, report_interval_s=0.2,
                       checkpoint_interval_s=1.0, resize_deadlines=PATIENT)


def _events(ex: RayExecutor, job_id: str, kind: str) -> list[str]:
    return [d for k, d in ex.status(job_id).events if k == kind]


def _steps(ex: RayExecutor, job_id: str) -> int:
    report = ex.files.report(job_id)
    return (report.steps or 0) if report is not None else 0


def _free_slots() -> float:
    return ray.available_resources().get("corral_slot", 0)


@dataclass
class EarlyRound:
    """An early-start round under way (`early_round`): its executor, the file whose creation
    ends the incoming workers' initialisation, and the donor's report before the round."""

    ex: RayExecutor
    hold: Path
    first: dict


def _cancel_both(ex: RayExecutor) -> None:
    for job_id in ("incoming", "donor"):
        ex.stop(job_id, cancel=True)
    for job_id in ("incoming", "donor"):
        ex.wait_for(job_id, (ExecState.CANCELLED, ExecState.STOPPED, ExecState.UNKNOWN), 60)
    ex.shutdown(10)


@pytest.fixture
def early_round(ray_cluster, tmp_path):
    """On two nodes with every slot free: a donor trained a few steps on both slots of node 0,
    shrunk to one in the round that places a 2-worker incoming job (early initialisation on,
    initialisation held until `hold` exists) on the slot it gives up and a free one of node 1.
    Both jobs are cancelled and the executor shut down after the test."""
    pytest.importorskip("torch")
    ex = _ray_trainer_executor(tmp_path / "data")
    hold = own_hold_file(tmp_path / "data")
    try:
        _two_nodes(ray_cluster, ex)
        contract.wait_until(lambda: _free_slots() == 4, 30, "earlier tests' slots to be free")
        ex.place(tiny("donor"), WorkerPlan(Placement(((0, 2),))))
        first = trains_on(ex, "donor", 0, 2, after_steps=3)
        with ex.applying():
            ex.place(tiny("donor"), WorkerPlan(Placement(((0, 1),))))
            ex.place(tiny("incoming", "--init-hold-file", str(hold), early_init=True),
                     WorkerPlan(Placement(((0, 1), (1, 1)))))
        yield EarlyRound(ex, hold, first)
    finally:
        _cancel_both(ex)


def test_early_start_on_ray_donor_trains_until_the_incoming_job_is_ready(
        early_round: EarlyRound) -> None:
    """A donor on both slots of node 0 shrinks to one in the round that places a 2-worker job
    on node 0's slot it gives up plus a free slot of node 1: the incoming workers start and
    initialise at once (the one on node 0 in the donor's own placement group) while the donor
    trains on with both; it shrinks in place only once they are ready, and the incoming job's
    first step comes after its worker on that slot has left."""
    ex, hold = early_round.ex, early_round.hold
    # the incoming job's workers have started and are initialising ...
    contract.wait_until(lambda: all(Path(f"{hold}.waiting-r{r}").exists() for r in (0, 1)),
                        EARLY_WAIT_S, "the early workers")
    (started,) = _events(ex, "incoming", "early-init")
    assert "n0:donor/rank 1" in started and "n1:free" in started
    at = _steps(ex, "donor")
    # ... while the donor keeps stepping on both its slots (the incoming job cannot be ready)
    contract.wait_until(lambda: _steps(ex, "donor") > at + 5, EARLY_WAIT_S, "the donor to keep training")
    donor, queued = ex.status("donor"), ex.status("incoming")
    assert donor.state is ExecState.RUNNING and len(donor.workers) == 2 and donor.launches == 1
    assert queued.state is ExecState.QUEUED and not queued.workers
    assert not _events(ex, "donor", "donated")
    assert ex.files.report("donor").world_size == 2
    # Ray's books: the donor's two slots and the free one the incoming job reserved; its
    # worker in the donor's placement group reserves nothing there
    assert _free_slots() == 1

    hold.touch()  # initialisation ends: the workers report ready; the donor gives up its slot
    trained = trains_on(ex, "incoming", 0, 2, after_steps=3)
    assert trained.resumed is None  # its first launch, from scratch
    shrunk = trains_on(ex, "donor", 1, 1, after_steps=early_round.first.steps)
    assert shrunk.resumed["in_place"] == 1  # it shrank by its own mechanism (in place)
    left = max(e["time"] for e in shrunk.events if e["kind"] == "resized-in-place")
    assert trained.first_step_time > left  # the incoming job stepped once the donor let go
    (donated,) = _events(ex, "donor", "donated")
    assert "initialised early" in donated
    (summary,) = _events(ex, "incoming", "early-started")
    assert "started early" in summary and "overlap" in summary
    assert ex.status("incoming").plan.placement == Placement(((0, 1), (1, 1)))
    assert ex.status("incoming").crashes == 0 == ex.status("donor").crashes
    assert not _events(ex, "incoming", "early-init-fallback")
    contract.wait_until(lambda: _free_slots() == 1, 30, "the books: 3 of 4 slots held")


def test_early_start_on_ray_takes_over_a_preempted_donors_placement_groups(ray_cluster, tmp_path):
    """The donor is preempted in the round that places a 2-worker job on its slots: the
    incoming workers initialise in the donor's placement groups while it trains on; once they
    are ready the donor checkpoints and stops, its placement groups pass to the incoming job
    (not removed: its actors there live on), which steps only after the donor stopped."""
    pytest.importorskip("torch")
    ex = _ray_trainer_executor(tmp_path / "data")
    hold = own_hold_file(tmp_path / "data")
    incoming = tiny("incoming", "--init-hold-file", str(hold), early_init=True)
    try:
        contract.wait_until(lambda: _free_slots() == ex.cluster().total_gpus, 30,
                            "earlier tests' slots to be free")
        free_before = _free_slots()
        ex.place(tiny("donor"), WorkerPlan(Placement(((0, 2),))))
        trains_on(ex, "donor", 0, 2, after_steps=3)
        with ex.applying():
            ex.stop("donor")
            ex.place(incoming, WorkerPlan(Placement(((0, 2),))))
        contract.wait_until(lambda: all(Path(f"{hold}.waiting-r{r}").exists() for r in (0, 1)),
                            EARLY_WAIT_S, "the early workers")
        at = _steps(ex, "donor")
        contract.wait_until(lambda: _steps(ex, "donor") > at + 5, EARLY_WAIT_S, "the donor to keep training")
        assert ex.status("donor").state is ExecState.RUNNING
        assert ex.status("incoming").state is ExecState.QUEUED
        assert _free_slots() == free_before - 2  # only the donor's two slots are reserved

        hold.touch()
        trained = trains_on(ex, "incoming", 0, 2, after_steps=3)
        ex.wait_for("donor", ExecState.STOPPED, 60)
        stopped = ex.files.report("donor")
        assert stopped.state == "stopped"
        assert trained.first_step_time > stopped.time  # it stepped once the donor stopped
        (summary,) = _events(ex, "incoming", "early-started")
        assert "n0:donor/rank 0" in summary and "n0:donor/rank 1" in summary
        assert not _events(ex, "incoming", "early-init-fallback")
        assert _free_slots() == free_before - 2  # the donor's groups are the incoming job's now
        assert ex.status("incoming").crashes == 0 == ex.status("donor").crashes
    finally:
        _cancel_both(ex)


def test_an_early_worker_that_dies_on_ray_leaves_the_donor_alone(early_round: EarlyRound) -> None:
    """One of two incoming workers - the one pre-started in the donor's placement group - dies
    while it initialises: the early start is called off with an event and its other worker
    ends (no process is left at the gate), the donor shrinks as decided (no crash, no
    restart), and the job starts normally once the slot is free."""
    ex, hold = early_round.ex, early_round.hold
    waiting = [Path(f"{hold}.waiting-r{r}") for r in (0, 1)]
    contract.wait_until(lambda: all(w.exists() and w.read_text() for w in waiting), EARLY_WAIT_S,
                        "the early workers")
    pids = [int(w.read_text()) for w in waiting]
    os.kill(pids[0], signal.SIGKILL)  # rank 0, in the donor's group, dies as it initialises

    fallback = contract.wait_until(lambda: _events(ex, "incoming", "early-init-fallback"),
                                   60, "the fallback")
    assert "before it was ready" in fallback[0] and "starts normally" in fallback[0]
    contract.wait_until(lambda: not Path(f"/proc/{pids[1]}").exists()
                        or "zombie" in Path(f"/proc/{pids[1]}/status").read_text(), 10,
                        "the other early worker to end with the early start")
    # the donor was not harmed: it shrinks in place as decided, no restart, no crash
    shrunk = trains_on(ex, "donor", 1, 1, after_steps=early_round.first.steps)
    assert shrunk.resumed["in_place"] == 1 and ex.status("donor").crashes == 0
    hold.touch()
    trains_on(ex, "incoming", 0, 2)  # started normally once the slot was free
    assert ex.status("incoming").crashes == 0
    assert len(_events(ex, "incoming", "early-init")) == 1  # not tried early again
    assert not _events(ex, "incoming", "early-started")
    assert ex.status("incoming").plan.placement == Placement(((0, 1), (1, 1)))


def test_kuberay_manifest_is_a_raycluster_with_shared_storage() -> None:
    """docs/kuberay-raycluster.yaml parses, and every pod mounts the shared volume."""
    yaml = pytest.importorskip("yaml")
    path = Path(__file__).resolve().parents[2] / "docs" / "kuberay-raycluster.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    ray_cluster = next(d for d in docs if d["kind"] == "RayCluster")
    assert ray_cluster["apiVersion"] == "ray.io/v1"
    pods = [ray_cluster["spec"]["headGroupSpec"]["template"]["spec"],
            *(g["template"]["spec"] for g in ray_cluster["spec"]["workerGroupSpecs"])]
    for pod in pods:
        mounts = {m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
        assert "/shared" in mounts
    head_env = {e["name"]: e["value"] for e in pods[0]["containers"][0]["env"]}
    assert head_env["CORRAL_RAY_STORAGE"].startswith("/shared/")
    claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert claims["corral-shared"]["spec"]["accessModes"] == ["ReadWriteMany"]
