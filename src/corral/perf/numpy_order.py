"""Sums of Python floats in the order numpy adds them, so scalar code can reproduce a numpy
computation to the last bit.

`np.add.reduce` (what `np.sum` and `np.mean` call) of a 1-d float64 array adds pairwise: runs
shorter than 8 left to right, up to 128 values in 8 interleaved partial sums, longer ones
split in halves (numpy's `pairwise_sum`), the whole added to the identity 0.0. Floating-point
addition is not associative, so a loop over the same values can differ in the last bits; a
fit that is iterated hundreds of times then ends elsewhere. `numpy_sum` follows numpy's order
(checked against `np.add.reduce` in tests/perf/test_numpy_order.py).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["numpy_sum"]

_UNROLL = 8  # numpy's partial sums
_BLOCK = 128  # numpy's PW_BLOCKSIZE: longer runs are split in halves


def numpy_sum(values: Sequence[float]) -> float:
    """`float(np.add.reduce(np.array(values, dtype=float)))`, bit for bit, without numpy."""
    if len(values) < _UNROLL:  # the common case, inline
        res = -0.0
        for v in values:
            res += v
        return 0.0 + res
    return 0.0 + _pairwise(values, 0, len(values))


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    if n < _UNROLL:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        end = lo + n - n % _UNROLL
        for i in range(lo + 8, end, 8):
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(end, lo + n):
            res += a[i]
        return res
    half = n // 2
    half -= half % _UNROLL
    return _pairwise(a, lo, half) + _pairwise(a, lo + half, n - half)
