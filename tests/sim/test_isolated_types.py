"""A job's isolated and fair-share JCTs on a cluster of several GPU types (issue 35): the best
type it may run on, with that type's node size and speed, as on that type's nodes alone."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core import Cluster
from corral.sim.loop.engine import isolated_jcts
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads.synthetic import synthetic

#: eight v100s on nodes of two, eight k80s on one node: a cluster-wide node size of 8 would
#: pack the v100s on one node, as no node of theirs holds them
MIXED = "k80:1x8,v100:4x2"


@pytest.fixture(scope="module")
def truth() -> CatalogTruth:
    return CatalogTruth()


def _spec(truth: CatalogTruth, **changes):
    spec = synthetic(truth.limits(), num_jobs=1, rate_per_hour=40.0, mix={"bert": 1.0},
                     seed=1, name="one").jobs[0]
    return dataclasses.replace(spec, **changes)


@pytest.mark.parametrize("gpu_type", [None, "k80", "v100"])
@pytest.mark.parametrize("active", [1, 3])
def test_mixed_figures_are_the_best_of_each_types_own_nodes(truth, gpu_type, active):
    spec = _spec(truth, gpu_type=gpu_type)
    app, epochs = truth.app(spec.app), 2
    mixed = isolated_jcts(spec, app, Cluster.parse(MIXED), epochs, active)
    types = ("k80", "v100") if gpu_type is None else (gpu_type,)
    alone = [isolated_jcts(spec, app, Cluster.parse(part), epochs, active)
             for part in MIXED.split(",") if part.split(":")[0] in types]
    assert mixed == (min(a[0] for a in alone), min(a[1] for a in alone))


def test_a_types_small_nodes_cost_it(truth):
    """The v100 figure is the v100 nodes' (two GPUs each), not eight v100s on one node."""
    spec = _spec(truth, gpu_type="v100")
    app = truth.app(spec.app)
    on_small = isolated_jcts(spec, app, Cluster.parse("v100:4x2"), 2, 1)[0]
    on_one = isolated_jcts(spec, app, Cluster.parse("v100:1x8"), 2, 1)[0]
    assert on_small > on_one
    assert isolated_jcts(spec, app, Cluster.parse(MIXED), 2, 1)[0] == on_small
