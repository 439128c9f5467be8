"""The core's per-round shortcuts give what the plain computation gives: the ledger's view
(fields by position, its assignment kept while unchanged), the user's batch (remembered per
distinct input) and the decision check (one pass over the nodes)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from corral.core.cluster import Cluster, Placement
from corral.core.errors import DecisionError
from corral.core.jobs import (
    Assignment,
    BatchConfig,
    Decision,
    JobSpec,
    JobView,
    MetricHistory,
    check_decision,
)
from corral.core.ledger import VIEW_FIELDS, JobLedger


def _spec(**kw) -> JobSpec:
    base = dict(name="j", submit_time_s=0.0, app="a", gpus=2, batch_size=96, init_bsz=32,
                max_bsz=512, min_local_bsz=4, max_local_bsz=32)
    return JobSpec(**{**base, **kw})


def test_view_fields_by_position_land_on_their_names() -> None:
    assert tuple(f.name for f in dataclasses.fields(JobView)) == VIEW_FIELDS
    ledger = JobLedger(_spec())
    ledger.place(10.0, Placement.of([(3, 2)]), epoch=1)
    ledger.hold(5.0)
    ledger.wait(7.0)
    ledger.restarts, ledger.relaunches = 4, 3
    batch, fixed = BatchConfig(8, 1), BatchConfig(16, 0)
    metrics = ((1, 1, 0.5),)
    view = ledger.view(epoch=6, steps=11, progress=12.5, batch=batch, fixed_batch=fixed,
                       estimator=None, metrics=metrics)
    expected = dict(spec=ledger.spec, status=ledger.view_status,
                    assignment=Assignment(ledger.placement, fixed), attained_gpu_s=10.0,
                    run_time_s=5.0, queue_time_s=7.0, restarts=4, epoch=6, steps=11,
                    progress=12.5, max_gpus_held=2, first_start_s=10.0, last_change_s=10.0,
                    batch=batch, estimator=None, metrics=metrics, epochs_since_change=5,
                    oracle=None, last_start_s=10.0, relaunches=3)
    assert {name: getattr(view, name) for name in VIEW_FIELDS} == expected


def test_view_assignment_follows_placement_and_fixed_batch() -> None:
    ledger = JobLedger(_spec())
    shown = lambda fixed: ledger.view(0, 0, 0.0, None, fixed, None, ()).assignment  # noqa: E731
    assert shown(None) is None
    first = Placement.of([(0, 2)])
    ledger.place(1.0, first, epoch=0)
    a = shown(None)
    assert a == Assignment(first, None) and shown(None) is a  # unchanged: the same object
    b = BatchConfig(8, 0)
    assert shown(b) == Assignment(first, b)
    ledger.place(2.0, Placement.of([(1, 2)]), epoch=0)
    assert shown(b) == Assignment(Placement.of([(1, 2)]), b)
    ledger.release()
    assert shown(b) is None


def _user_batch_reference(spec: JobSpec, num_gpus: int) -> BatchConfig:
    """The user's batch computed as before it was remembered."""
    s = max(0, math.ceil(spec.batch_size / max(num_gpus, 1) / spec.max_local_bsz) - 1)
    if num_gpus == 1 and spec.one_gpu_split_bsz is not None \
            and spec.batch_size > spec.one_gpu_split_bsz:
        s = max(s, 1)
    micro = num_gpus * (s + 1)
    local = math.ceil(spec.batch_size / micro)
    if spec.batch_size <= spec.max_bsz:
        local = min(local, spec.max_bsz // micro)
    return BatchConfig(max(1, local), s)


def test_user_batch_is_remembered_per_every_input() -> None:
    for bsz, max_local, split, max_bsz, gpus in itertools.product(
            (1, 33, 96, 384, 1000), (4, 32, 100), (None, 32), (64, 350, 4096), (1, 2, 5, 16)):
        spec = _spec(batch_size=bsz, max_local_bsz=max_local, min_local_bsz=1,
                     one_gpu_split_bsz=split, max_bsz=max_bsz)
        assert spec.user_batch(gpus) == _user_batch_reference(spec, gpus), (bsz, max_local,
                                                                           split, max_bsz, gpus)


def test_over_allocation_reports_the_first_node_in_node_order() -> None:
    cluster = Cluster.parse("4x4")
    decision = Decision({"a": Assignment(Placement.of([(3, 4)])),
                         "b": Assignment(Placement.of([(3, 1), (1, 4)])),
                         "c": Assignment(Placement.of([(1, 2)]))})
    with pytest.raises(DecisionError, match="node node1: 6 GPUs assigned, 4 available"):
        check_decision(decision, {"a", "b", "c"}, cluster, "p")
    check_decision(Decision({"a": Assignment(Placement.of([(3, 4), (0, 4)]))}), {"a"}, cluster, "p")


def test_metric_history_reads_as_the_tuple_of_its_first_records() -> None:
    records = [(10, 1, 0.5), (20, 2, 0.25), (30, 3, 0.125)]
    shown = MetricHistory(records, 2)
    as_tuple = tuple(records[:2])
    records.append((40, 4, 0.0625))  # appended later: not in what was shown
    assert len(shown) == 2 and list(shown) == list(as_tuple) and shown == as_tuple
    assert shown[0] == as_tuple[0] and shown[-1] == as_tuple[-1] and shown[-2] == as_tuple[0]
    assert shown[1:] == as_tuple[1:] and shown[::-1] == as_tuple[::-1]
    for bad in (2, -3):
        with pytest.raises(IndexError):
            shown[bad]
    assert shown != tuple(records[:3]) and shown != records[:1] and shown != "ab"
    assert MetricHistory(records, 0) == () and not MetricHistory(records, 0)
    assert [m for _, _, m in shown] == [0.5, 0.25] and (20, 2, 0.25) in shown
    assert repr(shown) == f"MetricHistory({as_tuple!r})"
