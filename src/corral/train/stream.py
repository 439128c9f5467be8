"""Where a job is in its data, independent of how many workers read it and how big their
batches are: one endless stream of shuffled passes, and a position in it.

Pass p is a permutation of the dataset seeded by (seed, p). A step of total batch M at `pos`
consumes `[pos, pos + M)`; worker r's micro-batch j (K workers, per-worker batch m) is
`[pos + (j*K + r)*m, ... + m)`. So a restart at `pos` with any K, m or accumulation continues
with exactly the next samples, also mid-pass (AdaptDL's epoch-local index cannot). A step may
span two passes. Torch-free.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SampleStream"]


class SampleStream:
    """Maps stream positions to dataset indices."""

    def __init__(self, num_samples: int, seed: int = 0, shuffle: bool = True) -> None:
        if num_samples < 1:
            raise ValueError("a dataset needs at least one sample")
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self.shuffle = shuffle
        self._cache: dict[int, np.ndarray] = {}

    def permutation(self, pass_index: int) -> np.ndarray:
        perm = self._cache.get(pass_index)
        if perm is None:
            if self.shuffle:
                rng = np.random.default_rng([self.seed, pass_index])
                perm = rng.permutation(self.num_samples)
            else:
                perm = np.arange(self.num_samples)
            if len(self._cache) > 2:
                self._cache.pop(min(self._cache))
            self._cache[pass_index] = perm
        return perm

    def indices(self, start: int, count: int) -> np.ndarray:
        """Dataset indices at stream positions [start, start + count)."""
        out = np.empty(count, dtype=np.int64)
        done = 0
        while done < count:
            pos = start + done
            p, offset = divmod(pos, self.num_samples)
            take = min(count - done, self.num_samples - offset)
            out[done:done + take] = self.permutation(p)[offset:offset + take]
            done += take
        return out

    def micro_batch(self, position: int, rank: int, world_size: int, local_bsz: int,
                    micro_step: int) -> np.ndarray:
        """Indices of worker `rank`'s micro-batch `micro_step` of the step starting at `position`."""
        start = position + (micro_step * world_size + rank) * local_bsz
        return self.indices(start, local_bsz)

    def passes(self, position: int) -> float:
        """Passes over the data completed at `position`."""
        return position / self.num_samples
