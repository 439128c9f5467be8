"""PNG plots of simulation results, drawn off-screen with matplotlib's Agg canvas.

Figures are built as `matplotlib.figure.Figure` objects on a `FigureCanvasAgg`, without pyplot,
so nothing needs a display and no global matplotlib state (backend, open figures) is touched.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from corral.sim.loop.results import SimResult


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (120 dpi, tight bounding box)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return buf.getvalue()


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig))
    return path


def plot_jct_cdf(results: Mapping[str, Sequence[SimResult]], path: str | Path) -> Path:
    """Write `jct_cdf_figure(results)` as a PNG to `path`."""
    return _save(jct_cdf_figure(results), path)


def jct_cdf_figure(results: Mapping[str, Sequence[SimResult]]) -> Figure:
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
    return fig


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
    """Write `gpu_usage_figure(...)` as a PNG to `path`."""
    return _save(gpu_usage_figure(results, cluster_gpus, each), path)


def _workload_names(results: Mapping[str, Sequence[SimResult]]) -> list[str]:
    names: list[str] = []
    for runs in results.values():
        for r in runs:
            if r.workload not in names:
                names.append(r.workload)
    return names


def gpu_usage_figure(results: Mapping[str, Sequence[SimResult]], cluster_gpus: int | None = None,
                     each: bool = False) -> Figure:
    """GPUs in use over time, one line per policy.

    Plots the first workload (that of the first policy, matched by name in the others) when
    `each=False`, or one panel per workload name when `each=True`. A dashed line marks the cluster
    size (`cluster_gpus`, or the largest `SimResult.cluster_gpus` when None).
    """
    workloads = _workload_names(results)
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
    return fig


def _cdf(ax: Axes, values: list[float], label: str) -> bool:
    values = sorted(values)
    if not values:
        return False
    n = len(values)
    ax.step(values, [(k + 1) / n for k in range(n)], where="post", label=f"{label} (n={n})")
    return True


def queue_fairness_figure(results: Mapping[str, Sequence[SimResult]]) -> Figure:
    """Two CDFs per policy over the finished jobs of all its workloads: the queueing delay
    (first start - submission; symlog axis, since many jobs wait 0 s) and the finish-time
    fairness rho (JCT over the JCT on a 1/N share; rho > 1 is worse than a fair share)."""
    fig = Figure(figsize=(11, 4))
    qax, fax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for policy, runs in results.items():
        jobs = [j for r in runs for j in r.jobs if j.finish_s is not None]
        _cdf(qax, [max(0.0, j.first_start_s - j.submit_s) for j in jobs
                   if j.first_start_s is not None], policy)
        _cdf(fax, [j.jct_s / j.fair_share_jct_s for j in jobs
                   if j.fair_share_jct_s and j.jct_s is not None], policy)
    qax.set_xscale("symlog", linthresh=60)
    qax.set_xlabel("queueing delay (s)")
    qax.set_title("queueing delay CDF")
    fax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    fax.set_xscale("log")
    fax.set_xlabel("finish-time fairness rho (1 = a fair 1/N share)")
    fax.set_title("finish-time fairness CDF")
    for ax in (qax, fax):
        ax.set_ylabel("fraction of jobs")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


#: At most this many jobs get a band of their own in the allocation timeline (the ones with
#: the most GPU time); more would be unreadable and slow to draw.
MAX_BANDS = 100


def allocation_steps(history: Sequence[tuple[float, int]], finish_s: float | None,
                     times: Sequence[float]) -> list[float]:
    """GPUs a job held at each of `times` (sorted): its allocation changes `history`, held
    until `finish_s` (0 before its first allocation and from its finish on)."""
    held, k, out = 0, 0, []
    for t in times:
        while k < len(history) and history[k][0] <= t:
            held = history[k][1]
            k += 1
        out.append(0.0 if finish_s is not None and t >= finish_s else float(held))
    return out


def allocation_figure(results: Mapping[str, Sequence[SimResult]],
                      workload: str | None = None) -> Figure:
    """Which job held how many GPUs when, on one workload (default: the first): one panel
    per policy, each job a band of its colour stacked over time (jobs in submission order)."""
    workload = workload if workload is not None else next(iter(_workload_names(results)), None)
    found = [(p, next((r for r in runs if r.workload == workload), None))
             for p, runs in results.items()]
    chosen = [(p, r) for p, r in found if r is not None]
    fig = Figure(figsize=(11, 2.3 * max(len(chosen), 1) + 0.6))
    if not chosen:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
        return fig
    end = max((j.finish_s or 0.0) for _, r in chosen for j in r.jobs) or 1.0
    cmap = colormaps["tab20"]
    first = None
    for k, (policy, r) in enumerate(chosen):
        ax = fig.add_subplot(len(chosen), 1, k + 1, sharex=first)
        first = first or ax
        times = sorted({0.0, end, *(t for h in r.allocations.values() for t, _ in h),
                        *(j.finish_s for j in r.jobs if j.finish_s is not None)})
        jobs = sorted(r.jobs, key=lambda j: -j.attained_gpu_s)[:MAX_BANDS]
        shown = f"{len(jobs)} jobs" if len(jobs) == len(r.jobs) else \
            f"the {len(jobs)} of {len(r.jobs)} jobs with the most GPU time"
        jobs.sort(key=lambda j: j.submit_s)
        if r.allocations:
            bands = [allocation_steps(r.allocations.get(j.name, []), j.finish_s, times)
                     for j in jobs]
            ax.stackplot([t / 3600.0 for t in times], bands, step="post", linewidth=0,
                         colors=[cmap(i % 20) for i in range(len(jobs))])
        else:
            ax.text(0.5, 0.5, "allocations not recorded", ha="center", va="center",
                    transform=ax.transAxes)
        if r.cluster_gpus:
            ax.axhline(r.cluster_gpus, color="gray", linestyle="--", linewidth=1)
            ax.set_ylim(0, r.cluster_gpus * 1.05)
        ax.set_ylabel("GPUs")
        ax.set_title(f"{policy}: GPUs per job on {workload} ({shown}, one colour each)",
                     fontsize="medium", loc="left")
        ax.grid(True, alpha=0.3)
    fig.axes[-1].set_xlabel("time (h)")
    fig.tight_layout()
    return fig
