"""Micro-batches from the shared sample stream, on the training device, fetched ahead of use.

The trainer names the indices of the micro-batch it needs now and the next (corral.train.
stream). On a GPU a background thread gathers, pins and copies the next one on a side stream
while the current step computes; a prefetch whose indices turn out wrong (batch changed) is
dropped. On the CPU the gather is in place. `TensorDataset`s are indexed in one operation;
others go through `collate_fn` (default: default_collate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

__all__ = ["BatchFetcher", "to_device"]


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """`batch` (tensors in tuples, lists and dicts) with every tensor on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        # the batch's own sequence type (a list, a tuple) from an iterable: typeshed's abstract
        # Sequence takes no arguments
        items = (to_device(b, device, non_blocking) for b in batch)
        return type(batch)(items)  # type: ignore[call-arg]
    return batch


def _pin(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory() if batch.device.type == "cpu" else batch
    if isinstance(batch, dict):
        return {k: _pin(v) for k, v in batch.items()}
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return type(batch)(_pin(b) for b in batch)  # type: ignore[call-arg]  # (as in to_device)
    return batch


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return [t for b in batch for t in _tensors(b)]
    return []


class BatchFetcher:
    """Gathers micro-batches by dataset index; prefetches the next one on a GPU."""

    def __init__(self, dataset: Any, device: torch.device,
                 collate_fn: Callable[[list], Any] | None = None) -> None:
        self.dataset = dataset
        self.device = device
        self._collate = collate_fn or torch.utils.data.default_collate
        self._cuda = device.type == "cuda"
        self._pool: ThreadPoolExecutor | None = None  # the prefetch thread, started on demand
        self._copy_stream = torch.cuda.Stream(device) if self._cuda else None
        self._ahead: tuple[np.ndarray, Future] | None = None
        self.prefetch_hits = 0

    def gather(self, indices: np.ndarray) -> Any:
        """The micro-batch at `indices`, in host memory."""
        ds = self.dataset
        if isinstance(ds, torch.utils.data.TensorDataset):
            index = torch.from_numpy(np.ascontiguousarray(indices))
            on = {t.device for t in ds.tensors}
            if len(on) == 1:  # a dataset on a GPU: the index goes there once, not per tensor
                index = index.to(next(iter(on)))
            return tuple(t[index] for t in ds.tensors)
        return self._collate([ds[int(i)] for i in indices])

    def fetch(self, indices: np.ndarray, upcoming: np.ndarray | None = None) -> Any:
        """The micro-batch at `indices` on the device; starts fetching `upcoming`."""
        if not self._cuda:
            return to_device(self.gather(indices), self.device)
        batch, event = None, None
        if self._ahead is not None and np.array_equal(self._ahead[0], indices):
            batch, event = self._ahead[1].result()
            self.prefetch_hits += 1
        self._ahead = None
        if batch is None:
            batch, event = self._load(indices)
        stream = torch.cuda.current_stream(self.device)
        assert event is not None  # (every fetched batch comes with its copy's event)
        stream.wait_event(event)
        for t in _tensors(batch):
            t.record_stream(stream)  # the caching allocator must not reuse it under the step
        if upcoming is not None:
            if self._pool is None:  # first use, or in use again after close()
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="corral-prefetch")
            self._ahead = (upcoming, self._pool.submit(self._load, upcoming))
        return batch

    def _load(self, indices: np.ndarray) -> tuple[Any, torch.cuda.Event]:
        host = _pin(self.gather(indices))
        with torch.cuda.device(self.device), torch.cuda.stream(self._copy_stream):
            batch = to_device(host, self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._copy_stream)
        return batch, event

    def close(self) -> None:
        """Drops the prefetched batch and stops the prefetch thread; a later fetch (training
        on after `finish()`) starts another, as fetching on the CPU goes on working."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
