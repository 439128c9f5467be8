"""`corral autoscale`: one job on rented cloud nodes under Pollux's goodput-based autoscaler and
Or et al.'s throughput-based one (Pollux §5.4.1); prints cost (node-hours) and JCT of each.

Registered on the main `corral` app when this module is imported. Thin: parses arguments and
calls `corral.sim.analysis.autoscale`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from corral.cli.main import _truth, app, console, user_errors
from corral.core.errors import InputError
from corral.report.tables import Col, fitted_table

if TYPE_CHECKING:  # the simulator is imported when the command runs
    from corral.sim.analysis.autoscale import AutoscaleResult


def autoscale_table(results: Sequence[AutoscaleResult], title: str) -> Table:
    """One row per autoscaler: every column always (six narrow ones), none cut."""
    cols = [Col("autoscaler", style="bold")] + [
        Col(h, justify="right") for h in ("JCT", "node\nhours", "GPU\nhours", "resizes", "most\nnodes")]
    cells = [[r.autoscaler, f"{r.jct_s / 3600:.2f} h" if r.jct_s is not None else "unfinished",
              f"{r.node_hours:.1f}", f"{r.gpu_hours:.1f}", str(r.resizes), str(r.max_nodes_used)]
             for r in results]
    return fitted_table(cols, cells, None, title=title)[0]


@app.command()
@user_errors
def autoscale(
    app_name: str = typer.Option("imagenet", "--app", metavar="MODEL", help="Application (model) to train."),
    profiles: Path | None = typer.Option(None, metavar="DIR", help="Directory of measured profiles (Pollux format). Default: the built-in catalog."),
    gpus_per_node: int = typer.Option(4, metavar="N", help="GPUs per rented node."),
    max_nodes: int = typer.Option(16, metavar="N", help="Most nodes the job may rent."),
    interval: float = typer.Option(60.0, metavar="SECONDS", help="Seconds between autoscaling decisions."),
    restart_delay: float = typer.Option(30.0, metavar="SECONDS", help="Pause of every resize (checkpoint and restart), seconds."),
    up: float = typer.Option(2 / 3, metavar="FRACTION", show_default="2/3", help="Goodput autoscaler: scale up above this fraction of ideal goodput (U)."),
    target: float = typer.Option(0.5, metavar="FRACTION", help="Target fraction of ideal goodput / throughput when resizing (L)."),
) -> None:
    """Auto-scale one job on cloud nodes: goodput vs throughput.

    Cloud auto-scaling of one job: goodput-based (Pollux) vs throughput-based (Or et al.)."""
    from corral.sim.analysis.autoscale import (
        GoodputAutoscaler,
        ThroughputAutoscaler,
        simulate_autoscaling,
    )
    from corral.sim.workloads.common import make_job

    if not 0 < target <= up <= 1:
        raise InputError("need 0 < --target <= --up <= 1")
    truth = _truth(profiles, None)
    limits = truth.app(app_name).limits
    spec = make_job(f"{app_name}-0", 0.0, app_name, limits, 1, limits.init_bsz)
    results = [simulate_autoscaling(truth, spec, scaler, gpus_per_node=gpus_per_node,
                                    max_nodes=max_nodes, interval_s=interval,
                                    restart_s=restart_delay)
               for scaler in (GoodputAutoscaler(up=up, target=target),
                              ThroughputAutoscaler(threshold=target))]
    console.print(autoscale_table(results, f"auto-scaling {app_name} on {gpus_per_node}-GPU "
                                           f"nodes (at most {max_nodes})"))
    ours, theirs = results
    if ours.jct_s and theirs.jct_s:
        console.print(f"goodput vs throughput autoscaler: cost {ours.node_hours / theirs.node_hours - 1:+.0%}, "
                      f"JCT {ours.jct_s / theirs.jct_s - 1:+.0%} (paper: -25% cost, +6% JCT)")
    for r in results:
        steps = ", ".join(f"{t / 3600:.2f}h:{n}n/M={m}" for t, n, m in r.timeline)
        console.print(f"[dim]{r.autoscaler}: {steps}[/]")


if __name__ == "__main__":  # pragma: no cover - usable before the main app imports it
    app()
