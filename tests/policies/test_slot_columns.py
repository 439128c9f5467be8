"""Column-wise small lists (`slot_columns`): the sorting networks sort every input (0-1
principle), merges keep the smallest entries, lengthened runs are merged copies, runs and counts by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from corral.policies.slot_columns import (
    count_true,
    extend_runs,
    merge_smallest,
    pick,
    position_in_run,
    run_starts,
    sort_columns,
    sort_network,
)


@pytest.mark.parametrize("width", range(1, 11))
def test_network_sorts_every_zero_one_input(width):
    # a comparator network that sorts all 2^width 0/1 inputs sorts every input
    inputs = np.array(list(itertools.product([0, 1], repeat=width)), dtype=np.int16).T
    assert np.array_equal(sort_columns(inputs.copy()), np.sort(inputs, axis=0))
    assert all(i < k < width for i, k in sort_network(width))
    assert sort_network(0) == () and sort_network(1) == ()


def test_network_sorts_random_integer_columns():
    x = np.random.default_rng(0).integers(0, 9, size=(7, 50, 30)).astype(np.int16)
    assert np.array_equal(sort_columns(x.copy()), np.sort(x, axis=0))


@pytest.mark.parametrize("width", [1, 3, 4, 8])
def test_merge_keeps_the_smallest_entries_sorted(width):
    rng = np.random.default_rng(width)
    a = np.sort(rng.integers(0, 20, size=(width, 500)), axis=0)
    b = np.sort(rng.integers(0, 20, size=(width, 500)), axis=0)
    expected = np.sort(np.concatenate([a, b]), axis=0)[:width]
    assert np.array_equal(merge_smallest(a, b), expected)


def test_runs_positions_counts_and_pick():
    x = np.array([[3, 1], [3, 2], [5, 2], [5, 2]])  # two lists, one per column
    assert run_starts(x).T.tolist() == [[True, False, True, False], [True, True, False, False]]
    assert position_in_run(run_starts(x)).T.tolist() == [[0, 1, 0, 1], [0, 0, 1, 2]]
    assert count_true(x == 2).tolist() == [0, 3]
    assert pick(x > 2, x, -1).T.tolist() == [[3, 3, 5, 5], [-1, -1, -1, -1]]


def test_extend_runs_is_merging_the_added_copies():
    rng = np.random.default_rng(3)
    for width in (1, 2, 4, 8):
        x = np.sort(rng.integers(0, 6, size=(width, 400)), axis=0)
        starts = run_starts(x)
        add = np.where(starts, rng.integers(0, width + 1, size=x.shape), 0)
        copies = [np.concatenate([x[:, i], np.repeat(x[:, i], add[:, i])]) for i in range(400)]
        expected = np.stack([np.sort(c)[:width] for c in copies], axis=1)
        assert np.array_equal(extend_runs(x, add), expected)


def test_geometric_draws_are_numpys_from_the_same_state():
    """The growth requests' geometric gaps: numpy's numbers, numpy's generator state after,
    for p below 1/3 (inversion, computed here) and above (numpy's own search)."""
    from corral.policies.pollux.search import geometric_draws

    for low in (4, 1):  # p up to 1/4: inverted here; p up to 1: some by numpy's search
        ours, theirs = np.random.default_rng(3), np.random.default_rng(3)
        p = 1.0 / np.arange(low, low + 300, dtype=float)[:, None]
        for shape in ((300, 50), (300, 1)):
            got = geometric_draws(ours, p, shape)
            assert got.dtype == np.int64
            assert np.array_equal(got, theirs.geometric(np.broadcast_to(p, shape)))
        assert ours.random() == theirs.random()
