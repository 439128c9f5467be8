"""Pieces of the simulator's speed work that must not change a figure: the catalog's epoch gains
in one pass, cluster totals as attributes; and trace windows (`--window`)."""

from __future__ import annotations

import pickle

import datafiles
import numpy as np
import pytest

from corral.core import Cluster
from corral.core.cluster import Node
from corral.core.errors import InputError
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Window, apply_window, load_workload, synthetic


def test_catalog_epoch_gains_equal_the_per_epoch_gain_bit_for_bit():
    rng = np.random.default_rng(0)
    for app in CatalogTruth().apps().values():
        lim = app.limits
        totals = np.concatenate([np.geomspace(lim.init_bsz / 2, lim.max_bsz * 2, 40).round(),
                                 rng.uniform(1, 4 * lim.max_bsz, 20)])
        for total in totals.tolist():
            fast = app.epoch_gains(total, lim.epochs)
            assert fast == tuple(app.gain(total, e) for e in range(lim.epochs)), (app.name, total)
            assert all(type(g) is float for g in fast)


def test_cluster_totals_are_attributes_that_survive_pickling():
    c = Cluster((Node("a", 4), Node("b", 8), Node("c", 2)))
    assert (c.total_gpus, c.max_node_gpus, c.gpus_per_node) == (14, 8, (4, 8, 2))
    copy = pickle.loads(pickle.dumps(c))
    assert copy == c and copy.total_gpus == 14 and copy.max_node_gpus == 8
    assert Cluster.parse("3x4") == Cluster.uniform(3, 4) and Cluster.parse("3x4").total_gpus == 12
    assert Cluster(()).max_node_gpus == 0


@pytest.mark.parametrize("text,start,hours", [("all", None, None), ("3600:2", "3600", 2.0),
                                              ("2017-10-09 07:00:00:24", "2017-10-09 07:00:00", 24.0)])
def test_window_parses(text, start, hours):
    w = Window.parse(text)
    assert (w.start, w.hours) == (start, hours)


@pytest.mark.parametrize("text", ["", "soon", "10", "10:0", "10:-1", ":5", "10:x"])
def test_bad_window_is_a_one_line_input_error(text):
    with pytest.raises(InputError, match="--window"):
        Window.parse(text)


def test_window_of_a_trace_without_timestamps(apps):
    w = synthetic(apps, num_jobs=50, rate_per_hour=10, seed=2)
    assert apply_window(w, Window.parse("all")) is w
    part = apply_window(w, Window.parse("3600:2"))
    first = w.jobs[0].submit_time_s
    inside = [j for j in w.jobs if 3600 <= j.submit_time_s - first < 3600 + 7200]
    assert [j.name for j in part.jobs] == [j.name for j in inside]
    assert part.jobs[0].submit_time_s == pytest.approx(inside[0].submit_time_s - first - 3600)
    with pytest.raises(InputError, match="no jobs in the window"):
        apply_window(w, Window.parse("1e9:1"))
    with pytest.raises(InputError, match="no timestamps"):
        apply_window(w, Window.parse("2017-10-09 07:00:00:1"))


@datafiles.needs("philly")
def test_philly_windows(apps):
    path = datafiles.need("philly")
    busiest = load_workload(path, apps)
    assert busiest.name.endswith("-8h")
    whole = load_workload(path, apps, window=Window.parse("all"))
    assert len(whole.jobs) == 74428 and whole.name.endswith("-end")
    day = load_workload(path, apps, window=Window.parse("2017-10-09 07:00:00:24"))
    assert 0 < len(day.jobs) < len(whole.jobs)
    assert max(j.submit_time_s for j in day.jobs) < 24 * 3600
