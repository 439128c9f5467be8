"""Any trace with submit time, GPUs and duration: duration-based jobs from named CSV columns.

Each row becomes a duration-based job (`JobSpec.trace_duration_s`, `corral.sim.truth.scaled`).
Columns by role (`COLUMN_ROLES`): `submit` (s, shifted to start at 0), `gpus`, `duration`
required; `name`, `model`, `batch`, `queue` (the job's team) optional. The header `job_id,submit_time,num_gpus,duration
[,model,batch_size]` needs no mapping; others use `--columns submit=COL,...`. The model: a
`model_map` entry, the trace's name if in the catalog, else a seeded pick of its GPU-time class
(`map_size_classes`). GPUs are kept (capped), the batch is `tuned_config`'s (a trace's batch
belongs to its own model). `load_itp` reads ElasticFlow's ITP traces with `ITP_MODEL_MAP`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from corral.core.errors import InputError
from corral.core.jobs import JobSpec
from corral.sim.truth.base import AppLimits
from corral.sim.workloads.common import (
    Workload,
    check_unique,
    make_job,
    map_size_classes,
    parse_number,
    read_table,
    tuned_config,
)

#: Roles a column can play, and whether a file must have it.
COLUMN_ROLES: dict[str, bool] = {"submit": True, "gpus": True, "duration": True,
                                 "name": False, "model": False, "batch": False, "queue": False}
#: The documented header: a file with these column names needs no mapping.
DEFAULT_COLUMNS: dict[str, str] = {"name": "job_id", "submit": "submit_time", "gpus": "num_gpus",
                                   "duration": "duration", "model": "model",
                                   "batch": "batch_size", "queue": "queue"}
ITP_COLUMNS: dict[str, str] = {"name": "job_id", "submit": "submission_time", "gpus": "num_gpu",
                               "duration": "duration", "model": "model_name",
                               "batch": "batch_size"}
#: ITP/ElasticFlow model names -> catalog models (see the module docstring for why).
ITP_MODEL_MAP: dict[str, str] = {"resnet50": "imagenet", "inception3": "imagenet",
                                 "vgg16": "imagenet", "bert": "bert",
                                 "deepspeech2": "deepspeech2", "gpt2": "bert"}
#: The header columns that identify an ITP trace (the raw form has only these).
ITP_HEADER: tuple[str, ...] = ("job_id", "submission_time", "duration", "num_gpu")


def parse_columns(text: str) -> dict[str, str]:
    """`submit=COL,gpus=COL,...` as {role: column}; InputError for an unknown role."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        role, sep, col = item.partition("=")
        role = role.strip()
        if not sep or role not in COLUMN_ROLES or not col.strip():
            raise InputError(f"--columns {item!r}: expected ROLE=COLUMN with ROLE one of "
                             f"{', '.join(COLUMN_ROLES)}")
        out[role] = col.strip()
    return out


def parse_model_map(text: str) -> dict[str, str]:
    """`trace_model=catalog_model,...` as a dict."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, app = item.partition("=")
        if not sep or not name.strip() or not app.strip():
            raise InputError(f"--model-map {item!r}: expected TRACE_MODEL=CATALOG_MODEL")
        out[name.strip()] = app.strip()
    return out


def load_columns(path: str | Path, apps: Mapping[str, AppLimits], *,
                 columns: Mapping[str, str] | None = None,
                 model_map: Mapping[str, str] | None = None, seed: int = 0,
                 kind: str = "columns") -> Workload:
    """Duration-based jobs from a CSV with submit time, GPUs and duration (module docstring).

    `columns` maps roles to column names over `DEFAULT_COLUMNS` (optional roles whose column
    is absent are left out). The workload's `columns` says how each column was read.
    """
    mapping = dict(DEFAULT_COLUMNS)
    mapping.update(columns or {})
    model_map = dict(model_map or {})
    for name, app in model_map.items():
        if app not in apps:
            raise InputError(f"--model-map {name}={app}: unknown model {app!r}; known: "
                             f"{', '.join(sorted(apps))}")
    required = [mapping[r] for r, needed in COLUMN_ROLES.items() if needed]
    table = read_table(path, required, kind)
    present = {r: c for r, c in mapping.items() if c in table.col}
    submit, gpus, duration, names, models, queues = [], [], [], [], [], []
    seen: dict[str, int] = {}
    for i, row in enumerate(table.rows):
        name = row[table.col[present["name"]]].strip() if "name" in present else str(i + 1)
        check_unique(table, i, name, seen, present.get("name", "job name"))
        names.append(name)
        submit.append(parse_number(table, i, present["submit"]))
        gpus.append(int(parse_number(table, i, present["gpus"], integer=True, minimum=1)))
        d = parse_number(table, i, present["duration"])
        if d <= 0:
            raise table.error(i, f"{present['duration']} must be > 0, got {d:g}")
        duration.append(d)
        models.append(row[table.col[present["model"]]].strip() if "model" in present else "")
        queues.append(row[table.col[present["queue"]]].strip() or None
                      if "queue" in present else None)
    gpu_s = np.array(duration) * np.array(gpus, dtype=float)
    by_class = map_size_classes(gpu_s, apps, seed, str(table.path))
    chosen, how = [], {"map": 0, "same": 0, "class": 0}
    for model, fallback in zip(models, by_class):
        if model in model_map:
            chosen.append(model_map[model])
            how["map"] += 1
        elif model and model in apps:
            chosen.append(model)
            how["same"] += 1
        else:
            chosen.append(fallback)
            how["class"] += 1
    t0 = min(submit)
    jobs, trace = [], {}
    for i, (name, t, g, d, app, queue) in enumerate(zip(names, submit, gpus, duration, chosen,
                                                         queues)):
        limits = apps[app]
        g2, batch = tuned_config(limits, g)
        spec = make_job(f"{app}-{name}", t - t0, app, limits, g2, batch,
                        where=f"{table.path}: row {table.lines[i]}")
        # on fewer GPUs than the trace's (capped), the same work takes longer: GPU-time kept
        jobs.append(_with_duration(spec, d * g / g2, queue))
        trace[spec.name] = float(d * g)
    read = _how_read(present, table.header, how, model_map, t0)
    return Workload(table.path.stem, jobs, source=f"{kind}:{table.path} (seed {seed})",
                    trace_gpu_s=trace, columns=read)


def _with_duration(spec: JobSpec, duration_s: float, queue: str | None = None) -> JobSpec:
    from dataclasses import replace

    return replace(spec, trace_duration_s=float(duration_s), queue=queue)


def _how_read(present: Mapping[str, str], header: list[str], how: Mapping[str, int],
              model_map: Mapping[str, str], t0: float) -> dict[str, str]:
    """{column: how it was read}, for `corral workloads`."""
    out = {present["submit"]: f"submit time, seconds (shifted by -{t0:.0f} so the first is 0)",
           present["gpus"]: "GPUs the job asks for (capped at what its model can use)",
           present["duration"]: "run time in seconds on those GPUs: the model's epochs are "
                                "scaled so the job takes that long"}
    if "name" in present:
        out[present["name"]] = "job name (after the model: MODEL-NAME)"
    parts = []
    if how["map"]:
        parts.append(f"{how['map']} by the model map ("
                     + ", ".join(f"{k}->{v}" for k, v in sorted(model_map.items())) + ")")
    if how["same"]:
        parts.append(f"{how['same']} by the same name in the catalog")
    if how["class"]:
        parts.append(f"{how['class']} by GPU-time class (duration x GPUs)")
    if "model" in present:
        out[present["model"]] = "model: " + "; ".join(parts)
    else:
        out["(no model column)"] = "model: " + "; ".join(parts)
    if "batch" in present:
        out[present["batch"]] = "not used: the catalog model's tuned batch for the GPUs is"
    if "queue" in present:
        out[present["queue"]] = "the job's queue (team; `corral simulate --queues`)"
    for col in header:
        out.setdefault(col, "not used")
    return out


def load_itp(path: str | Path, apps: Mapping[str, AppLimits], *, seed: int = 0,
             model_map: Mapping[str, str] | None = None) -> Workload:
    """An ITP/ElasticFlow trace (module docstring); `model_map` entries override `ITP_MODEL_MAP`."""
    mapping = {k: v for k, v in ITP_MODEL_MAP.items() if v in apps}
    mapping.update(model_map or {})
    return load_columns(path, apps, columns=ITP_COLUMNS, model_map=mapping, seed=seed,
                        kind="itp")
