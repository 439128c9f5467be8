"""One walk over the nested containers a training state is made of (dicts, lists and tuples
holding tensors and plain values), shared by the checkpoint copy to the CPU
(corral.train.host_copy) and the packed state broadcast of an in-place regroup
(corral.train.distributed.Group.broadcast_state)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["map_leaves"]


def map_leaves(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """`obj` rebuilt with every leaf (anything not a dict, list or tuple) replaced by
    `fn(leaf)`, leaves visited in order (dict insertion order, then sequence order)."""
    if isinstance(obj, dict):
        return {k: map_leaves(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_leaves(v, fn) for v in obj)
    return fn(obj)
