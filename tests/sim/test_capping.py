"""An elastic job's request above the largest GPU type it may use (issue 44 item 4): a policy
that chooses the count starts it from that type's GPUs; a fixed-size policy refuses it."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core import Cluster, create_policy
from corral.core.errors import InfeasibleJobError
from corral.core.policy import policy_class
from corral.sim.loop.capping import capped_note, capped_to_types, chooses_counts, most_gpus
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload
from corral.sim.workloads.synthetic import synthetic

CLUSTER = "k80:1x4,v100:1x8"  # the largest type holds 8


@pytest.fixture(scope="module")
def truth() -> CatalogTruth:
    return CatalogTruth()


def _workload(truth: CatalogTruth, **changes) -> Workload:
    base = synthetic(truth.limits(), num_jobs=2, rate_per_hour=40.0, mix={"cifar10": 1.0},
                     seed=1, name="big").jobs
    jobs = [dataclasses.replace(base[0], submit_time_s=0.0, **changes),
            dataclasses.replace(base[1], submit_time_s=5.0, gpus=2, min_gpus=1)]
    return Workload(name="big", jobs=jobs, source="test")


def test_which_policies_choose_the_count() -> None:
    assert all(chooses_counts(policy_class(p)) for p in ("pollux", "sia", "optimus", "gavel"))
    assert not any(chooses_counts(policy_class(p)) for p in ("fifo", "srtf", "tiresias-las"))


def test_a_request_above_the_largest_type_is_capped_to_it(truth) -> None:
    cluster = Cluster.parse(CLUSTER)
    w = _workload(truth, gpus=12, min_gpus=1)
    capped, which = capped_to_types(w, cluster)
    assert which == ((w.jobs[0].name, 12, 8),)
    assert [j.gpus for j in capped.jobs] == [8, 2] and capped.jobs[1] is w.jobs[1]
    note = capped_note(w, which, ["pollux"])
    assert "\n" not in note and f"{w.jobs[0].name} 12 -> 8" in note and "pollux" in note
    pinned = dataclasses.replace(w.jobs[0], gpu_type="k80")
    assert most_gpus(pinned, cluster) == 4  # its own type's GPUs
    fits = _workload(truth, gpus=8, min_gpus=1)
    assert capped_to_types(fits, cluster) == (fits, ())
    # a job whose least count no type holds is left as it is, for check_feasible to refuse
    never = _workload(truth, gpus=12, min_gpus=10)
    assert capped_to_types(never, cluster)[1] == ()


def test_a_resizing_policy_runs_it_and_a_fixed_size_one_refuses_naming_it(truth) -> None:
    cluster = Cluster.parse(CLUSTER)
    w = _workload(truth, gpus=12, min_gpus=1)
    result = Simulator(truth, create_policy("pollux"), cluster).run(w)
    assert all(j.finish_s is not None for j in result.jobs)
    with pytest.raises(InfeasibleJobError, match=f"job {w.jobs[0].name} in big asks for 12 GPUs"):
        Simulator(truth, create_policy("fifo"), cluster).run(w)
    with pytest.raises(InfeasibleJobError, match="asks for 12 GPUs"):
        Simulator(truth, create_policy("pollux"), cluster).run(_workload(truth, gpus=12, min_gpus=10))
