"""`numpy_sum` adds Python floats in np.add.reduce's order, to the last bit."""

import numpy as np
import pytest

from corral.perf.numpy_order import numpy_sum


@pytest.mark.parametrize("seed", range(3))
def test_sums_match_numpy_bit_for_bit_at_every_length(seed):
    rng = np.random.default_rng(seed)
    for n in list(range(0, 40)) + [127, 128, 129, 255, 256, 300, 1000]:
        # mixed signs and magnitudes, so the order of additions shows in the last bits
        a = rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))
        assert numpy_sum(a.tolist()).hex() == float(np.add.reduce(a)).hex(), n


def test_a_plain_left_to_right_loop_would_differ():
    """The test above can fail: summing left to right gives other bits at some length."""
    rng = np.random.default_rng(0)
    differs = 0
    for n in range(8, 64):
        a = rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))
        total = 0.0
        for v in a.tolist():
            total += v
        differs += total != float(np.add.reduce(a))
    assert differs > 0


def test_signed_zeros_sum_as_numpy_does():
    for values in ([], [-0.0], [-0.0] * 3, [-0.0] * 9, [0.0, -0.0], [-0.0] * 200):
        assert numpy_sum(values).hex() == float(np.add.reduce(np.array(values))).hex()
