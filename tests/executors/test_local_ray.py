"""The tests' local Ray cluster (tests/local_ray.py) starts again once when Ray's own start-up
wait runs out, ending what the failed start left; any other failure is raised as it is."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'corral[ray]')")
psutil = pytest.importorskip("psutil")

import local_ray  # noqa: E402 (tests/ is on sys.path)


class FakeCluster:
    def __init__(self):
        self.shut = False

    def shutdown(self):
        self.shut = True


def _failing_starts(failures: list[Exception], leftovers: list[subprocess.Popen]):
    def start(head, others, system_config):
        if failures:
            leftovers.append(subprocess.Popen(["sleep", "60"]))  # what a failed start leaves
            raise failures.pop(0)
        return FakeCluster()
    return start


def test_a_start_that_timed_out_is_tried_again_and_its_leftovers_are_ended(monkeypatch):
    left: list[subprocess.Popen] = []
    timeout = Exception("The current node timed out during startup. This could happen ...")
    monkeypatch.setattr(local_ray, "_start", _failing_starts([timeout], left))
    with local_ray.local_cluster({}) as cluster:
        assert isinstance(cluster, FakeCluster) and len(left) == 1
        assert not psutil.pid_exists(left[0].pid)  # ended (and reaped) before the second start
    assert cluster.shut


def test_other_failures_and_a_second_timeout_are_raised(monkeypatch):
    left: list[subprocess.Popen] = []
    monkeypatch.setattr(local_ray, "_start", _failing_starts([ValueError("bad resources")], left))
    with pytest.raises(ValueError, match="bad resources"), local_ray.local_cluster({}):
        pass
    twice = [Exception("node timed out during startup")] * local_ray.STARTS
    monkeypatch.setattr(local_ray, "_start", _failing_starts(list(twice), left))
    with pytest.raises(Exception, match="timed out during startup"), local_ray.local_cluster({}):
        pass
    for proc in left:
        proc.kill()
        proc.wait(timeout=10)
