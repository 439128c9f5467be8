"""Tiny scheduling instances and their optimum by brute force, for the bounds' tests
(tests/sim/test_lp_bound.py, tests/sim/test_window_bound.py)."""

from __future__ import annotations

import functools
import itertools
import math
import random


def brute_force_avg_jct(releases, works, speedups, gpus):
    """Least average JCT over schedules that change allocations at whole times and completions."""
    n = len(works)

    def allocations(active):
        caps = [min(gpus, len(speedups[j])) for j in active]
        want = min(gpus, sum(caps))
        for combo in itertools.product(*[range(c + 1) for c in caps]):
            if sum(combo) == want:
                yield combo

    @functools.cache
    def best(t, remaining):
        """Least sum of completion times of the unfinished jobs from state (t, remaining)."""
        if all(r <= 1e-12 for r in remaining):
            return 0.0
        active = [j for j in range(n) if remaining[j] > 1e-12 and releases[j] <= t + 1e-12]
        if not active:
            nxt = min(releases[j] for j in range(n) if remaining[j] > 1e-12)
            return best(float(nxt), remaining)
        result = math.inf
        for combo in allocations(active):
            rates = {j: speedups[j][k - 1] if k else 0.0 for j, k in zip(active, combo)}
            step = math.floor(t + 1e-9) + 1 - t
            for j, r in rates.items():
                if r > 0:
                    step = min(step, remaining[j] / r)
            rem = list(remaining)
            done = 0.0
            for j, r in rates.items():
                rem[j] = remaining[j] - r * step
                if rem[j] <= 1e-9:
                    rem[j] = 0.0
                    done += t + step
            result = min(result, done + best(round(t + step, 9),
                                             tuple(round(x, 9) for x in rem)))
        return result

    total = best(0.0, tuple(float(w) for w in works))
    return (total - sum(releases)) / n


def random_instance(rng: random.Random):
    n = rng.choice([2, 3])
    gpus = rng.choice([2, 3])
    releases = sorted(rng.choice([0, 0, 1, 2]) for _ in range(n))
    works = [rng.choice([1, 2, 3, 4]) for _ in range(n)]
    speedups = []
    for _ in range(n):
        cap = rng.randint(1, gpus)
        s, step = [1.0], 1.0
        for _ in range(cap - 1):  # concave, non-decreasing increments
            step = rng.choice([0.0, 0.25, 0.5, step])
            s.append(s[-1] + min(step, 1.0))
        speedups.append(s)
    return releases, works, speedups, gpus
