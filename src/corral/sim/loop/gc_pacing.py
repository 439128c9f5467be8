"""Fewer passes of Python's cyclic garbage collector while a simulation runs.

A simulation allocates millions of short- or whole-run-lived containers and next to no cycles,
so the default pacing walks the growing heap of jobs again and again. Pacing the young
generation at `YOUNG_THRESHOLD` allocations keeps the collector on (cycles are freed, at most
that many objects late) at about the cost of switching it off; results cannot change.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Net container allocations between young-generation passes during a run (Python's default:
#: 700). 100,000 small objects waiting for a pass are a few MiB.
YOUNG_THRESHOLD = 100_000

_lock = threading.Lock()
_open = 0  # blocks open now, in any thread
_saved: tuple[int, ...] = ()  # the pacing before the first of them


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Pace the young generation at `young` allocations (or the current pace, if slower) for
    the duration of the block; the previous pacing comes back when the last open block ends,
    whatever happens in it. The pacing is the process's: blocks that overlap (nested, or runs
    in several threads) keep the one the first of them set."""
    global _open, _saved
    with _lock:
        if _open == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(_saved[0], young), *_saved[1:])
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                gc.set_threshold(*_saved)
