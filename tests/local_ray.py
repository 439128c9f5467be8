"""A local Ray cluster for tests: raylets on 127.0.0.1 with explicit resources, torn down after.

Ray waits a fixed 30 s for a new raylet to register with its GCS (`ray._private.node`, not
configurable), and on a loaded machine that wait runs out ("The current node timed out during
startup"; seen at load 21+). The cluster is then started once more, after ending the processes
the failed start left (this process's new children, by pid), rather than failing the tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psutil
from ray.cluster_utils import Cluster

#: A killed node is declared dead after about 1.5 s instead of Ray's default (about 15 s).
FAST_NODE_DEATH = {"health_check_period_ms": 500, "health_check_timeout_ms": 500,
                   "health_check_failure_threshold": 3}
#: Starts tried before a start-up timeout fails the test.
STARTS = 2
STARTUP_TIMEOUT = "timed out during startup"


@contextmanager
def local_cluster(head: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = (),
                  system_config: Mapping[str, Any] | None = None) -> Iterator[Cluster]:
    """A head node with `head`'s arguments and one more node per entry of `others` (each
    `add_node`'s keyword arguments), all on 127.0.0.1 without a dashboard."""
    for attempt in range(1, STARTS + 1):
        before = _children()
        try:
            cluster = _start(head, others, system_config)
            break
        except Exception as error:
            if STARTUP_TIMEOUT not in str(error) or attempt == STARTS:
                raise
            _end(_children() - before)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _start(head: Mapping[str, Any], others: Sequence[Mapping[str, Any]],
           system_config: Mapping[str, Any] | None) -> Cluster:
    head_args = dict(head, include_dashboard=False, node_ip_address="127.0.0.1")
    if system_config:
        head_args["_system_config"] = dict(system_config)
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        for node in others:
            cluster.add_node(**node, node_ip_address="127.0.0.1")
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _end(pids: set[int]) -> None:
    """Kill the processes a failed start left behind: this process's own children only."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.kill()
            procs.append(proc)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)
