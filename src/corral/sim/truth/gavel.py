"""Ground truth from Gavel's throughput table, for the jobs of Gavel's `.trace` files.

Gavel (OSDI'20; stanford-futuredata/gavel, MIT) measured each job type's throughput, in
iterations/s at the type's per-GPU batch `b`, alone on 1, 2, 4 and 8 GPUs of `k80`, `p100` and
`v100`, on one server (`<type>`) and spread over servers (`<type>_unconsolidated`). Its
`simulation_throughputs.json` is read in place (the shared data's `gavel/`), never copied. One
application per Gavel job type, M0 = `b`; progress counts Gavel's iterations (one GPU's step at
batch `b`): a step on `g` GPUs at per-GPU batch `m` makes `g m / b` of them (gain = total batch
/ b). How other GPU counts and batches are read: `_per_gpu` and `GavelApp._step_fn`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

from corral.core.errors import InputError
from corral.core.jobs import LrRule
from corral.sim.truth.base import AppLimits, AppTruth, Truth, TypeView

_BSZ = re.compile(r"\(batch size (\d+)\)")

#: {g: iterations/s of all g GPUs}
Table = dict[int, float]


def _per_gpu(table: Table, gpus: int) -> float:
    """p(g) = tput(g) / g, per-GPU throughput on `gpus` GPUs (Gavel's scale factors are linear in
    g): linear over log2(g) between measured counts, held at the nearest measured one past 8 GPUs
    (or below the smallest). A zero entry (Gavel's k80 ResNet-50 at batch 128 on 2+ GPUs) counts
    as not measured."""
    keys = sorted(table)
    if gpus <= keys[0]:
        return table[keys[0]] / keys[0]
    if gpus >= keys[-1]:
        return table[keys[-1]] / keys[-1]
    x = math.log2(gpus)
    for g0, g1 in zip(keys, keys[1:]):
        if gpus <= g1:
            p0, p1 = table[g0] / g0, table[g1] / g1
            w = (x - math.log2(g0)) / (math.log2(g1) - math.log2(g0))
            return p0 + (p1 - p0) * w
    return table[keys[-1]] / keys[-1]  # not reached


def batch_of(job_type: str) -> int:
    """The per-GPU batch in a Gavel job type's name ("ResNet-50 (batch size 64)" -> 64; 1 without)."""
    m = _BSZ.search(job_type)
    return int(m.group(1)) if m else 1


def family_of(job_type: str) -> str:
    """The model of a Gavel job type ("ResNet-50 (batch size 64)" -> "ResNet-50")."""
    return _BSZ.sub("", job_type).strip()


class GavelApp(AppTruth):
    """One Gavel job type's measured throughputs on every GPU type. Its own type (what `step_time`
    answers, and "" of an unnamed cluster) is the first of its types by name (`k80`); `for_type`
    gives the others. A type is known when its single-GPU throughput was measured there."""

    def __init__(self, name: str, tables: Mapping[str, tuple[Table, Table]],
                 family: Mapping[int, Mapping[str, tuple[Table, Table]]] | None = None) -> None:
        self.name = name
        self.bsz = batch_of(name)
        #: {type: (consolidated, unconsolidated)}
        self._tables = dict(sorted(tables.items()))
        #: {batch: {type: tables}} of the same model's job types (this one included)
        self._family = dict(sorted((family or {self.bsz: tables}).items()))
        self.gpu_type = next(iter(self._tables))
        self.limits = AppLimits(app=name, init_bsz=self.bsz, max_bsz=8 * self.bsz, min_local_bsz=1,
                                max_local_bsz=self.bsz, epochs=1, lr_rule=LrRule.LINEAR, adaptive=False)
        self.step_time = lru_cache(maxsize=65536)(self._step_fn(self.gpu_type))  # type: ignore[method-assign]

    def _step_fn(self, gpu_type: str) -> Callable[[tuple[int, ...], float], tuple[float, float]]:
        # (batch, consolidated, unconsolidated) of the model's job types measured on this type
        """The step time on `gpu_type`: 1 / p(g) at the type's batch `b`, from the consolidated
        table on one node, else the unconsolidated one (the consolidated one where that has no
        entry). Another per-GPU batch `m` is interpolated over log2(m) between the job types of
        the same model at other batches, each at its 1 / p(g); below the smallest held at its
        time, above the largest proportional to `m` (as a model measured at one batch only: A3C,
        CycleGAN). Sync time is the part above the one-GPU step at the same per-GPU batch, so an
        accumulation micro-step costs the one-GPU step."""
        sizes = [(b, *t[gpu_type]) for b, t in self._family.items() if gpu_type in t]
        logs = [math.log2(b) for b, _, _ in sizes]

        def at(i: int, gpus: int, spread: bool) -> float:
            b, consolidated, unconsolidated = sizes[i]
            return 1.0 / _per_gpu(unconsolidated if spread and unconsolidated else consolidated, gpus)

        def raw(g: int, spread: bool, m: float) -> float:
            if m <= sizes[0][0]:
                return at(0, g, spread)
            if m >= sizes[-1][0]:
                return at(len(sizes) - 1, g, spread) * m / sizes[-1][0]
            hi = next(i for i, (b, _, _) in enumerate(sizes) if b >= m)
            w = (math.log2(m) - logs[hi - 1]) / (logs[hi] - logs[hi - 1])
            return at(hi - 1, g, spread) * (1 - w) + at(hi, g, spread) * w

        def step_s(counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
            m = float(local_bsz)
            step = raw(sum(counts), len(counts) > 1, m)
            return step, max(0.0, step - raw(1, False, m))

        return step_s

    def step_time(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:  # replaced per instance
        raise NotImplementedError

    def throughput(self, gpus: int, gpu_type: str | None = None, spread: bool = False) -> float:
        """Iterations per second of `gpus` GPUs of `gpu_type` (default: the app's own) at batch `b`."""
        consolidated, unconsolidated = self._tables[gpu_type or self.gpu_type]
        return _per_gpu(unconsolidated if spread and unconsolidated else consolidated, gpus) * gpus

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self._tables)

    def _type_view(self, gpu_type: str) -> AppTruth:
        return TypeView(self, gpu_type, self._step_fn(gpu_type))

    def grad_stats(self, total_bsz: float, epoch: int) -> tuple[float, float]:
        return 0.0, 1.0  # gain = total_bsz / b

    def epoch_progress(self) -> tuple[float, ...]:
        return (1.0,)

    def duration_counts(self, gpus: int, gpus_per_node: int) -> tuple[int, ...]:
        return (gpus,)  # a trace job's duration is on one server, as Gavel's trace states it


def read_throughputs(path: Path) -> dict[str, dict[str, tuple[Table, Table]]]:
    """{job type: {gpu type: (consolidated, unconsolidated)}} of the solo measurements."""
    if not path.is_file():
        raise InputError(f"{path}: Gavel throughput file not found")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, Mapping) or not data:
        raise InputError(f"{path}: not Gavel's throughput table ({{worker type: {{(job type, scale): ...}}}})")
    raw: dict[str, dict[str, tuple[Table, Table]]] = {}
    for worker, entries in data.items():
        gpu_type, _, spread = worker.partition("_")
        if spread not in ("", "unconsolidated") or not isinstance(entries, Mapping):
            raise InputError(f"{path}: unexpected worker type {worker!r}")
        for key, entry in entries.items():
            try:
                job_type, scale = ast.literal_eval(key)
                tput = float(entry["null"]) if entry.get("null") is not None else 0.0
            except (ValueError, SyntaxError, TypeError, KeyError, AttributeError):
                raise InputError(f"{path}: {worker}: entry {key!r} is not "
                                 "'(job type, scale factor)': {'null': throughput, ...}") from None
            if tput > 0 and math.isfinite(tput):
                pair = raw.setdefault(str(job_type), {}).setdefault(gpu_type, ({}, {}))
                pair[1 if spread else 0][int(scale)] = tput
    out: dict[str, dict[str, tuple[Table, Table]]] = {}
    for job_type, types in sorted(raw.items()):
        known = {t: pair for t, pair in sorted(types.items()) if 1 in pair[0]}
        if known:
            out[job_type] = known
    return out


class GavelTruth(Truth):
    """Every job type of Gavel's `simulation_throughputs.json`."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.source = f"Gavel throughputs {self.path}"
        table = read_throughputs(self.path)
        families: dict[str, dict[int, Mapping[str, tuple[Table, Table]]]] = {}
        for name, tables in table.items():
            families.setdefault(family_of(name), {})[batch_of(name)] = tables
        self._apps = {name: GavelApp(name, tables, families[family_of(name)])
                      for name, tables in table.items()}
        if not self._apps:
            raise InputError(f"{self.path}: no job type with a single-GPU throughput")

    def apps(self) -> Mapping[str, GavelApp]:
        return self._apps
