"""Sweeps: the matrix run in worker processes or as Ray tasks gives exactly the serial results;
a failing cell is reported with its cell and the others are kept."""

from __future__ import annotations

import pytest
from sweepkit import SOURCE, figures, small_workloads  # noqa: E402 (tests/sim is on sys.path)

from corral.core import Cluster
from corral.sim.batch.runners import ProcessRunner, RayRunner, SerialRunner
from corral.sim.batch.sweep import PolicyChoice, run_matrix, runner_for
from corral.sim.loop.config import EngineConfig

CLUSTER = Cluster.parse("8x4")
CONFIG = EngineConfig()


def _workloads():
    return small_workloads((20, 20, 1), (12, 30, 3))


def _matrix_workloads():
    """The serial and worker-process matrices' workloads: half _workloads' jobs (their pollux
    cells were most of those tests' time; the cells' order and results are what they check)."""
    return small_workloads((10, 20, 1), (6, 30, 3))


def _choices():
    return [PolicyChoice("fifo", {}), PolicyChoice("tiresias-las", {}),
            PolicyChoice("pollux", {"generations": "3", "population": "10"})]


@pytest.fixture(scope="module")
def serial():
    progress, jobs = [], []
    matrix = run_matrix(SOURCE, _choices(), _matrix_workloads(), CLUSTER, CONFIG, SerialRunner(),
                        on_cell_done=lambda *a: progress.append(a),
                        on_job_progress=lambda *a: jobs.append(a))
    return matrix, progress, jobs


def test_serial_matrix_reports_every_cell_in_order(serial):
    matrix, progress, jobs = serial
    assert not matrix.failures
    # in this process, each cell also reports the fraction of its jobs finished, up to all
    assert [f for p, w, f in jobs if (p, w) == ("fifo", "w6")][-1] == 1.0
    assert all(0 < f <= 1 for _, _, f in jobs)
    assert list(matrix.results) == ["fifo", "tiresias-las", "pollux"]
    for runs in matrix.results.values():
        assert [r.workload for r in runs] == [w.name for w in _matrix_workloads()]
        assert all(j.finish_s is not None for r in runs for j in r.jobs)
    assert [p[0] for p in progress] == list(range(1, 7)) and all(p[1] == 6 for p in progress)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_worker_processes_match_serial_exactly(serial):
    matrix = run_matrix(SOURCE, _choices(), _matrix_workloads(), CLUSTER, CONFIG,
                        ProcessRunner(2))
    assert not matrix.failures
    assert figures(matrix) == figures(serial[0])


@pytest.mark.slow
@pytest.mark.xdist_group("serial")  # a Ray of its own: not beside the other Ray tests
@pytest.mark.timeout(300)
def test_ray_tasks_match_serial_exactly():
    """Against a serial run of the same cells, made here: the module's `serial` fixture would
    also run pollux's cells on the serial group's worker, which this test does not compare."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")  # its own Ray, not one another process started here
    try:
        progress = []
        choices = _choices()[:2]  # the cheap policies: Ray's start-up is the cost here
        matrix = run_matrix(SOURCE, choices, _workloads(), CLUSTER, CONFIG, RayRunner(None),
                            on_cell_done=lambda *a: progress.append(a))
        assert ray.is_initialized()  # a connection it did not open is left open
    finally:
        ray.shutdown()
    assert not matrix.failures
    expected = run_matrix(SOURCE, choices, _workloads(), CLUSTER, CONFIG, SerialRunner())
    assert not expected.failures and list(expected.results) == [c.name for c in choices]
    assert figures(matrix) == figures(expected)
    assert sorted(p[0] for p in progress) == list(range(1, 5))


@pytest.mark.timeout(60)
def test_ray_tasks_at_an_address_where_nothing_answers_fail_at_once_in_one_line():
    pytest.importorskip("ray")
    import socket
    import time

    from corral.core.errors import CorralError
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(CorralError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        list(RayRunner(f"127.0.0.1:{port}").run([(len, ("ab",))]))
    assert time.monotonic() - started < 30  # Ray's own connect retries for minutes (the bound:
    # a hang guard, far above the quiet run's fraction of a second, far below those minutes)


@pytest.mark.parametrize("runner", [SerialRunner(), ProcessRunner(2)], ids=["serial", "processes"])
@pytest.mark.timeout(300)
def test_a_failing_cell_is_named_and_the_others_kept(runner):
    bad = PolicyChoice("fifo", {"no_such_parameter": "1"})
    seen = []
    matrix = run_matrix(SOURCE, [PolicyChoice("srtf", {}), bad], _workloads()[:1], CLUSTER,
                        CONFIG, runner, on_cell_done=lambda *a: seen.append(a))
    assert [r.workload for r in matrix.results["srtf"]] == [_workloads()[0].name]
    assert "fifo" not in matrix.results
    (failure,) = matrix.failures
    assert (failure.policy, failure.workload) == ("fifo", _workloads()[0].name)
    assert "no_such_parameter" in failure.error and "Traceback" in failure.detail
    assert failure.describe().startswith(f"fifo on {_workloads()[0].name}: ")
    assert sorted((p, ok) for _, _, p, _, ok in seen) == [("fifo", False), ("srtf", True)]


def test_runner_for_picks_by_options():
    assert isinstance(runner_for(1), SerialRunner)
    assert isinstance(runner_for(3), ProcessRunner) and runner_for(3).workers == 3
    assert isinstance(runner_for(3, "auto"), RayRunner)
    with pytest.raises(Exception, match="--jobs"):
        runner_for(0)
