"""The `corral` command: thin — parses arguments, calls the library, prints results."""

from __future__ import annotations

import os

# One BLAS thread: the small fits and searches here gain nothing from threads, and on a busy
# machine OpenBLAS threading slows scipy's L-BFGS-B fits many times over. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import functools  # noqa: E402
import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from corral.core.cluster import Cluster
from corral.core.errors import CorralError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="corral: schedule deep-learning training jobs on shared GPU clusters.")
# Tables are wide: when output is not a terminal, do not squeeze them into 80 columns.
_WIDTH = None if sys.stdout.isatty() else 200
console = Console(width=_WIDTH)
err_console = Console(stderr=True)

DEFAULT_POLICIES = ["fifo", "tiresias-las", "optimus-oracle", "pollux", "srtf"]


def user_errors(fn: Callable) -> Callable:
    """Print a CorralError as one line on stderr and exit 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CorralError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    return wrapper


def _truth(profiles: Path | None, catalog: Path | None):
    from corral.sim.truth.source import TruthSource

    return TruthSource.of(profiles, catalog).load()


def _policy_list(text: str | None) -> list[str]:
    from corral.core.policy import policy_names

    if text:
        return [p.strip() for p in text.split(",") if p.strip()]
    known = set(policy_names())
    return [p for p in DEFAULT_POLICIES if p in known]


def _column_options(columns: str | None, model_map: str | None) -> dict:
    from corral.sim.workloads import parse_columns, parse_model_map

    return {"columns": parse_columns(columns) if columns else None,
            "model_map": parse_model_map(model_map) if model_map else None}


@app.command()
@user_errors
def simulate(
    workload: list[Path] | None = typer.Option(None, "--workload", "-w", help="Workload CSV file or directory of them (repeatable). Default: the built-in workload."),
    profiles: Path | None = typer.Option(None, help="Directory of measured profiles (Pollux format). Default: the built-in catalog."),
    catalog: Path | None = typer.Option(None, help="A catalog file made by `corral calibrate` instead of the built-in one."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Comma-separated policies. Default: every built-in comparison policy."),
    set_: list[str] | None = typer.Option(None, "--set", help="policy.key=value (or key=value for every policy that has it)."),
    cluster: str = typer.Option("16x4", help="NODESxGPUS, or a file with one 'name gpus' line per node."),
    interval: float = typer.Option(60.0, help="Scheduling interval, seconds."),
    restart_delay: float = typer.Option(30.0, help="Pause of a job whose placement changes (checkpoint-restart), seconds."),
    mechanism: str = typer.Option("checkpoint-restart", help="How jobs are resized and what it costs: checkpoint-restart, sidecar, termination, termination-epoch, in-place."),
    interference: float = typer.Option(0.0, help="Slowdown of distributed jobs sharing a node (0 = off)."),
    seed: int = typer.Option(0, help="Seed of every random draw: the built-in workload, the models of trace rows by size class (Tiresias, Philly), and randomized policies (their `seed` parameter; --set P.seed=N wins). The engine draws nothing."),
    window: str | None = typer.Option(None, help="Stretch of a trace: 'all', or START:HOURS (START: seconds from the first submission, or a Philly timestamp). Default: a Philly trace's busiest 8 hours, other files whole."),
    jobs: int = typer.Option(0, "--jobs", "-j", help="Simulations run at once in worker processes (default: the CPU count; 1: one after another here)."),
    ray_address: str | None = typer.Option(None, help="Run the simulations as Ray tasks on this Ray cluster ('auto': the one this machine is in)."),
    out: Path | None = typer.Option(None, help="Write summary.json, jobs.csv, timelines, plots and report.html here; each simulation's result is kept in OUT/cells as it finishes (a run that completes keeps only its own)."),
    resume: bool = typer.Option(False, "--resume", help="Take the simulations an earlier run with the same inputs and code kept in OUT/cells (a sweep that stopped part-way) and run only the others."),
    columns: str | None = typer.Option(None, help="Read the workload CSVs as duration-based traces with these columns: submit=COL,gpus=COL,duration=COL[,name=COL,model=COL,batch=COL] (the --format columns of other tools)."),
    model_map: str | None = typer.Option(None, help="Trace model -> catalog model for ITP and duration-based traces: gpt2=bert,vgg16=imagenet (unmapped models unknown to the catalog go by GPU-time class)."),
    lp_bound: bool = typer.Option(True, "--lp-bound/--no-lp-bound", help="Compute each workload's LP lower bound on the average JCT and every policy's gap to it (seconds per 160-job workload)."),
) -> None:
    """Replay workloads under policies and print one comparison table."""
    from corral.report import comparison_table, per_workload_table, summary_document, write_outputs
    from corral.report.findings import findings
    from corral.sim.analysis.metrics import mean_summary, summarize
    from corral.sim.batch.cellstore import CellStore
    from corral.sim.batch.sweep import parse_settings, run_matrix, runner_for
    from corral.sim.loop.config import EngineConfig
    from corral.sim.loop.engine import check_feasible
    from corral.sim.loop.mechanism import mechanism_named
    from corral.sim.loop.memory import peak_rss_mib
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads import Window, builtin_default, load_workloads

    if resume and out is None:
        raise CorralError("--resume needs --out: the folder whose cells an earlier run kept")
    source = TruthSource.of(profiles, catalog)
    truth = source.load()
    shape = Cluster.parse(cluster)
    if interval <= 0 or restart_delay < 0 or not 0 <= interference < 1:
        raise CorralError("--interval must be > 0, --restart-delay >= 0 and --interference in [0, 1)")
    choices = parse_settings(_policy_list(policy), set_ or [], seed=seed)
    apps = truth.limits()
    span = Window.parse(window) if window is not None else None
    if span is not None and not workload:
        raise CorralError("--window needs a trace (--workload)")
    mapping = _column_options(columns, model_map)
    workloads = (load_workloads(workload, apps, seed=seed, window=span, **mapping) if workload
                 else [builtin_default(apps, seed=seed)])
    own = {w.truth for w in workloads if w.truth is not None}
    if own:  # a Gavel trace brings its truth (its throughput table)
        if len(own) > 1 or any(w.truth is None for w in workloads) or profiles or catalog:
            raise CorralError("a Gavel .trace runs on its own throughput table: give no --profiles or "
                              "--catalog, and no workloads of other formats (or tables) beside it")
        source = own.pop()
        truth = source.load()
    for w in workloads:
        check_feasible(w, shape, truth)
    config = EngineConfig(interval_s=interval, mechanism=mechanism_named(mechanism, restart_delay),
                          interference_slowdown=interference)
    console.print(f"[dim]truth: {truth.source}; cluster {shape.describe()} ({shape.total_gpus} GPUs); "
                  f"{len(workloads)} workload(s); policies: {', '.join(c.name for c in choices)}; "
                  f"mechanism: {config.mechanism.name}[/]")
    runs = len(choices) * len(workloads)
    runner = runner_for(jobs or os.cpu_count() or 1, ray_address)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.2f}/{task.total}"),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task(f"simulating ({type(runner).__name__})", total=runs)
        finished = [0]

        def done(n: int, total: int, p: str, w: str, ok: bool) -> None:
            finished[0] = n
            bar.update(task, completed=n, description=f"{p} on {w}{'' if ok else ' FAILED'}")

        def jobs_done(p: str, w: str, fraction: float) -> None:  # cells run here: jobs finished
            bar.update(task, completed=finished[0] + fraction,
                       description=f"{p} on {w}: {fraction:.0%} of jobs finished")
        matrix = run_matrix(source, choices, workloads, shape, config, runner, on_cell_done=done,
                            on_job_progress=jobs_done, bound=lp_bound,
                            store=CellStore(out / "cells") if out is not None else None,
                            reuse=resume)
    if matrix.reused:
        err_console.print(f"[dim]{matrix.reused} of {runs} simulation(s) taken from "
                          f"{out / 'cells'} (kept by an earlier run of the same inputs)[/]")
    for note in matrix.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    for failure in matrix.failures:
        err_console.print(f"[bold red]failed:[/] {failure.describe()}", highlight=False, soft_wrap=True)
    results = matrix.results
    if not results:
        raise typer.Exit(1)
    summaries = {p: [summarize(r) for r in rs] for p, rs in results.items()}
    rows = []
    for p, sums in summaries.items():
        if len(sums) > 1:
            rows += [(p, r.workload, s) for r, s in zip(results[p], sums)]
        rows.append((p, "mean" if len(sums) > 1 else results[p][0].workload, mean_summary(sums)))
    console.print(comparison_table(rows))
    if len(workloads) > 1 and len(choices) > 1:
        console.print(per_workload_table({p: {r.workload: s for r, s in zip(results[p], summaries[p])}
                                          for p in summaries}))
    for line in findings(summary_document(results, summaries)):
        console.print(line, highlight=False, soft_wrap=True)
    if out is not None:
        paths = write_outputs(out, results, summaries)
        console.print(f"[dim]wrote {', '.join(str(p) for p in paths.values())}[/]")
    own, child = peak_rss_mib()
    console.print(f"[dim]peak memory (RSS): {own:,.0f} MiB here"
                  + (f", {child:,.0f} MiB in the largest worker process" if child else "") + "[/]")
    if matrix.failures:
        raise typer.Exit(1)


@app.command()
@user_errors
def report(
    out_dir: Path = typer.Argument(..., help="A folder written by `corral simulate --out`."),
) -> None:
    """Rebuild report.html in a results folder from its summary.json and jobs.csv."""
    from corral.report.html import write_html_report

    console.print(f"wrote {write_html_report(out_dir)}", highlight=False, soft_wrap=True)


@app.command()
@user_errors
def policies() -> None:
    """List the policies with their parameters and defaults."""
    from corral.core.policy import param_fields, policy_class, policy_names

    table = Table(title="policies")
    for col in ("policy", "what it does", "parameters (default)"):
        table.add_column(col)
    for name in policy_names():
        cls = policy_class(name)
        params = ", ".join(f"{n}={d!r}" for n, _, d in param_fields(cls)) or "-"
        kind = " [oracle]" if cls.oracle else ""
        table.add_row(name, (cls.summary or (cls.__doc__ or "").strip().splitlines()[0]) + kind, params)
    console.print(table)


@app.command()
@user_errors
def workloads(
    path: Path = typer.Argument(..., help="A workload CSV file."),
    profiles: Path | None = typer.Option(None, help="Profiles directory (default: built-in catalog)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    columns: str | None = typer.Option(None, help="As for simulate: submit=COL,gpus=COL,duration=COL[,...]."),
    model_map: str | None = typer.Option(None, help="As for simulate: trace model -> catalog model."),
) -> None:
    """Describe a workload: jobs per model, GPU requests, time span, arrival rate, and how
    each column of a duration-based trace was read."""
    from corral.sim.workloads import describe_workload, load_workload

    truth = _truth(profiles, None)
    info = describe_workload(load_workload(path, truth.limits(),
                                           **_column_options(columns, model_map)))
    if as_json:
        console.print_json(json.dumps(info, default=str))
        return
    table = Table(title=str(path), show_header=False)
    for key, value in info.items():
        table.add_row(str(key), json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value))
    console.print(table)


@app.command()
@user_errors
def calibrate(
    profiles_dir: Path = typer.Argument(..., help="Directory of measured profiles (Pollux format)."),
    output: Path = typer.Option(..., "-o", "--output", help="Catalog file to write (JSON)."),
) -> None:
    """Fit the compact catalog figures from measured profiles and report their error."""
    from corral.sim.truth.calibrate import calibrate as fit_catalog
    from corral.sim.truth.calibrate import fidelity

    doc = fit_catalog(profiles_dir)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(doc, indent=1) + "\n")
    table = Table(title=f"catalog vs {profiles_dir}")
    for col in ("model", "step time err (mean)", "step time err (max)", "efficiency err (mean)",
                "efficiency err (max)"):
        table.add_column(col)
    for model, err in fidelity(doc, profiles_dir).items():
        table.add_row(model, f"{err['step_time_mre']:.1%}", f"{err['step_time_max_re']:.1%}",
                      f"{err['efficiency_mre']:.1%}", f"{err['efficiency_max_re']:.1%}")
    console.print(table)
    console.print(f"wrote {output}")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
from corral.cli import autoscale_cmd as _autoscale  # noqa: E402,F401
from corral.cli import data_cmd as _data  # noqa: E402,F401
from corral.cli import emulate_cmd as _emulate  # noqa: E402,F401
from corral.cli import live as _live  # noqa: E402,F401
from corral.cli import replay_cmd as _replay  # noqa: E402,F401
