"""Where a ground truth comes from, as a small value a worker process or Ray task can rebuild.

A loaded truth holds per-instance caches that do not pickle; a sweep sends its workers this
description instead, and each worker loads the truth once (`load`, memoised per process) and
keeps its caches warm across the cells it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from corral.core.gpu_speeds import GpuSpeed
from corral.sim.truth.base import Truth


@dataclass(frozen=True, slots=True)
class TruthSource:
    """Measured profiles (`profiles`), a catalog file (`catalog`), Gavel's throughput table
    (`gavel`: a `.trace` workload brings it), or the built-in catalog; and GPU types described
    by their speed relative to a known one (`speeds`: `--gpu-speed`, a cluster file's column;
    they replace the built-in catalog's own, `corral.sim.truth.speeds.builtin_speeds`)."""

    profiles: str | None = None
    catalog: str | None = None
    gavel: str | None = None
    speeds: tuple[GpuSpeed, ...] = ()

    @classmethod
    def of(cls, profiles: Path | str | None = None, catalog: Path | str | None = None,
           speeds: Iterable[GpuSpeed] = ()) -> TruthSource:
        return cls(str(profiles) if profiles is not None else None,
                   str(catalog) if catalog is not None else None, speeds=tuple(speeds))

    def load(self) -> Truth:
        """The truth, loaded once per process for each distinct source."""
        return _load(self)


@lru_cache(maxsize=8)
def _load(source: TruthSource) -> Truth:
    from corral.sim.truth.speeds import with_speeds

    truth = _read(source)
    return with_speeds(truth, source.speeds) if source.speeds else truth


def _read(source: TruthSource) -> Truth:
    if source.gavel is not None:
        from corral.sim.truth.gavel import GavelTruth

        return GavelTruth(Path(source.gavel))
    if source.profiles is not None:
        from corral.sim.truth.profiles import ProfileTruth

        return ProfileTruth(Path(source.profiles))
    from corral.sim.truth.catalog import CatalogTruth

    return CatalogTruth(source.catalog)
