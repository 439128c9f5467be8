"""PNG plots of simulation results, drawn off-screen with matplotlib's Agg canvas.

Figures are built as `matplotlib.figure.Figure` objects on a `FigureCanvasAgg`, without pyplot,
so nothing needs a display and no global matplotlib state (backend, open figures) is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from corral.sim.results import SimResult


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
    return path


def plot_jct_cdf(results: Mapping[str, Sequence[SimResult]], path: str | Path) -> Path:
    """Empirical CDF of JCT, one line per policy, over all finished jobs of all its workloads.

    The x axis (JCT, seconds) is logarithmic; JCTs <= 0 cannot be shown on it and are left out.
    """
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    drawn = False
    for policy, runs in results.items():
        jcts = sorted(j.jct_s for r in runs for j in r.jobs
                      if j.jct_s is not None and j.jct_s > 0)
        if not jcts:
            continue
        n = len(jcts)
        ax.step(jcts, [(k + 1) / n for k in range(n)], where="post", label=f"{policy} (n={n})")
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.legend(loc="lower right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no finished jobs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("JCT CDF")
    return _save(fig, path)


def _step_points(result: SimResult) -> tuple[list[float], list[float]]:
    points = sorted(result.gpu_timeline, key=lambda p: p[0])
    if not points:
        return [], []
    times = [float(t) for t, _ in points]
    gpus = [float(g) for _, g in points]
    end = max([times[-1]] + [j.finish_s for j in result.jobs if j.finish_s is not None])
    if end > times[-1]:  # hold the last value until the last finish
        times.append(end)
        gpus.append(gpus[-1])
    return times, gpus


def plot_gpu_usage(results: Mapping[str, Sequence[SimResult]], path: str | Path,
                   cluster_gpus: int | None = None, each: bool = False) -> Path:
    """GPUs in use over time, one line per policy.

    Plots the first workload (that of the first policy, matched by name in the others) when
    `each=False`, or one panel per workload name when `each=True`. A dashed line marks the cluster
    size (`cluster_gpus`, or the largest `SimResult.cluster_gpus` when None).
    """
    workloads: list[str] = []
    for runs in results.values():
        for r in runs:
            if r.workload not in workloads:
                workloads.append(r.workload)
    if not each:
        workloads = workloads[:1]
    if cluster_gpus is None:
        cluster_gpus = max((r.cluster_gpus for runs in results.values() for r in runs), default=0)

    panels = max(len(workloads), 1)
    fig = Figure(figsize=(8, 3.2 * panels))
    axes = [fig.add_subplot(panels, 1, k + 1) for k in range(panels)]
    for k, ax in enumerate(axes):
        workload = workloads[k] if workloads else None
        for policy, runs in results.items():
            chosen = [r for r in runs if r.workload == workload]
            if not chosen:
                continue
            times, gpus = _step_points(chosen[0])
            if times:
                ax.step([t / 3600.0 for t in times], gpus, where="post", label=policy)
        if cluster_gpus:
            ax.axhline(cluster_gpus, color="gray", linestyle="--", linewidth=1,
                       label=f"cluster ({cluster_gpus} GPUs)")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("time (h)")
        ax.set_ylabel("GPUs in use")
        ax.set_title(f"GPU usage: {workload}" if workload is not None else "GPU usage")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    return _save(fig, path)
