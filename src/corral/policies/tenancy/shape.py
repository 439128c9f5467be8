"""An untyped quota on a cluster of several GPU types, carved in a shape the queue can use.

A job runs within one GPU type, so a share of "2 GPUs" carved as 1 t4 + 1 a100 runs a 2-GPU
job on 1 GPU and leaves the other idle (issue 43: nlp's a100 sat idle while vision's jobs
waited). Two steps keep that from happening, each used by the layer's `_carve` where an
untyped tree shares a mixed cluster:

* `give_back_order`: a queue above its share gives back GPUs of one type first (a type it can
  free all it must give back from, where a queue taking GPUs back runs a job if there is one,
  so what it frees forms one block the queue taking them back can use; under an elastic
  policy by shrinking that type's jobs, then taking whole jobs of it out, before any other);
* `unusable`: what of a queue's carved GPUs none of its jobs could use this round (no waiting
  job fits on that type's idle GPUs and no running job there could grow into them). The layer
  lends those for the round: back to the jobs that gave them up, else to other queues;
* `movable`: of those, the GPUs of a type one of the queue's running elastic jobs could move
  to. A queue below its guarantee is offered them for the round (the inner policy weighs the
  move's restart); only what its inner policy leaves unused is lent (issue 43's benchmark:
  under pollux nlp's two jobs ran on the t4s, the GPU vision freed was an a100, and nlp held 2
  of its raised quota of 3 until the run ended).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import JobView

__all__ = ["give_back_order", "give_back_type", "movable", "unusable"]


def give_back_type(order: Sequence[JobView], node_types: tuple[str, ...], over: int,
                   prefer: Collection[str] = ()) -> str | None:
    """The GPU type a queue gives back `over` GPUs from first: of the types whose jobs in
    `order` (first first) hold `over` GPUs or more, one of `prefer` (types where a queue
    taking GPUs back runs a job that could grow into them) if any, else the type of the
    earliest such job in `order`; None when no one type holds that many."""
    freeable: dict[str, int] = {}
    rank: dict[str, int] = {}
    for i, v in enumerate(order):
        t = node_types[v.placement.slots[0][0]]
        freeable[t] = freeable.get(t, 0) + v.placement.num_gpus
        rank.setdefault(t, i)
    return min((t for t, g in freeable.items() if g >= over),
               key=lambda t: (t not in prefer, rank[t]), default=None)


def give_back_order(order: Sequence[JobView], node_types: tuple[str, ...],
                    over: int, prefer: Collection[str] = ()) -> list[JobView]:
    """`order` (the jobs a queue gives back from, first first) regrouped by GPU type: the jobs
    of `give_back_type`'s type first, then the others as they were. Within a type the order is
    kept."""
    first = give_back_type(order, node_types, over, prefer)
    return sorted(order, key=lambda v: node_types[v.placement.slots[0][0]] != first)


def unusable(views: Sequence[JobView], per_node: Mapping[int, int],
             kept: Mapping[str, Placement], node_types: tuple[str, ...],
             elastic: bool) -> dict[int, int]:
    """Of a queue's carved GPUs (`per_node`, global node indices), those none of its jobs
    could use this round, per node: the idle ones (not held by a job it keeps, `kept`) of a
    type where no job goes. Jobs claim idle GPUs oldest first, each on one type it may run on:
    a running job under an elastic policy grows on its own type, up to its `max_gpus`; a
    waiting one needs its whole request there (under an elastic policy, its `min_gpus`, at
    least 1, and takes up to its request), going to the type with the fewest idle GPUs that
    holds it."""
    idle: dict[int, int] = dict(per_node)
    for v in views:
        p = kept.get(v.name)
        if p is not None:
            for n, g in p.slots:
                if n in idle:
                    idle[n] -= g
    left: dict[str, int] = {}
    for n, g in idle.items():
        if g > 0:
            left[node_types[n]] = left.get(node_types[n], 0) + g
    for v in sorted(views, key=lambda v: (v.spec.submit_time_s, v.name)):
        if not any(left.values()):
            break
        spec = v.spec
        p = kept.get(v.name)
        if p is not None:
            if elastic and p.slots:
                t = node_types[p.slots[0][0]]
                left[t] = left.get(t, 0) - min(left.get(t, 0),
                                               max(0, spec.max_gpus - p.num_gpus))
            continue
        least = max(1, spec.min_gpus) if elastic else max(spec.gpus, spec.min_gpus, 1)
        fit = [t for t, g in left.items() if g >= least and spec.gpu_type in (None, t)]
        if not fit:
            continue
        t = min(fit, key=lambda t: (left[t], t))
        left[t] -= min(left[t], max(least, spec.gpus)) if elastic else least
    out: dict[int, int] = {}
    for n in sorted(idle, key=lambda n: (idle[n], -n)):  # the fewest idle first: whole nodes kept
        t = node_types[n]
        take = min(idle[n], left.get(t, 0))
        if take > 0:
            out[n] = take
            left[t] -= take
    return out


def movable(views: Sequence[JobView], lent: Mapping[int, int], kept: Mapping[str, Placement],
            cluster: Cluster) -> dict[int, int]:
    """Of the GPUs a queue would lend (`lent`, per node: `unusable`'s), those of a type where
    one of its running jobs (`kept`) could move: a type other than the one it runs on, that
    it may use (`Cluster.types_for`), with at least its `min_gpus` (1 at least) of them lent.
    An elastic policy may move the job there and grow another into the GPUs it leaves; the
    move is a restart, which the policy weighs."""
    node_types = cluster.node_types
    per_type: dict[str, int] = {}
    for n, g in lent.items():
        per_type[node_types[n]] = per_type.get(node_types[n], 0) + g
    types: set[str] = set()
    for v in views:
        p = kept.get(v.name)
        if not (p is not None and p.slots):
            continue
        here = node_types[p.slots[0][0]]
        types |= {t for t in cluster.types_for(v.spec)
                  if t != here and per_type.get(t, 0) >= max(1, v.spec.min_gpus)}
    return {n: g for n, g in lent.items() if node_types[n] in types}
