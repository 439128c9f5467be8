"""The `corral` command: thin — parses arguments, calls the library, prints results."""

from __future__ import annotations

import os

# One BLAS thread: the small fits and searches here gain nothing from threads, and on a busy
# machine OpenBLAS threading slows scipy's L-BFGS-B fits many times over. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import dataclasses  # noqa: E402
import functools
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup

from corral.cli.progress import Counter
from corral.core.cluster import Cluster
from corral.core.errors import CorralError

if TYPE_CHECKING:  # loaded lazily where used: `corral --help` stays quick
    import click

    from corral.core.queues import QueueTree
    from corral.sim.analysis.metrics import Summary
    from corral.sim.analysis.queue_metrics import QueueSetup
    from corral.sim.loop.results import SimResult
    from corral.sim.truth.base import Truth
    from corral.sim.workloads import Workload

# What an option without its own metavar shows in --help, by the type typer would name.
_PLAIN_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "file": "FILE",
                   "directory": "DIR"}


def _plain_metavars(params: list, ctx: click.Context) -> list:
    """Help that says what to type: a flag shows no value (not `<bool>`), an option without a
    metavar shows N, NUMBER, TEXT or PATH (not `<int>`, `<list[str]>`), an argument its
    metavar (its name by default) without a Python type beside it."""
    for param in params:
        if isinstance(param, TyperArgument):
            # (per argument: its type is not shown beside its metavar)
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
            continue
        if param.metavar is not None:
            continue
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
            continue
        label = param.display_type(ctx).strip("<>")
        label = label[5:-1] if label.startswith("list[") else label
        param.metavar = _PLAIN_METAVARS.get(label.lower(), label.upper())
    return params


def _paragraphs(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line, so that help wraps them at the terminal's
    width rather than where the source broke them."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class _Command(TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = _paragraphs(self.help)

    def get_params(self, ctx):
        return _plain_metavars(super().get_params(ctx), ctx)


class _Group(TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = _paragraphs(self.help)
        _adopt(self)

    def get_params(self, ctx):
        return _plain_metavars(super().get_params(ctx), ctx)


def _adopt(group: TyperGroup) -> None:
    """A sub-app added with add_typer (`corral data`) is built with typer's own classes: its
    commands get the same help as the others (the classes add behaviour only, no state)."""
    for command in (group.commands or {}).values():
        if type(command) is TyperCommand:
            command.__class__ = _Command
            command.help = _paragraphs(command.help)
        elif type(command) is TyperGroup:
            command.__class__ = _Group
            command.help = _paragraphs(command.help)
            _adopt(command)


class _App(typer.Typer):
    """Every command's help with plain metavars (`_plain_metavars`)."""

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)


app = _App(cls=_Group, add_completion=False, no_args_is_help=True,
           help="corral: schedule deep-learning training jobs on shared GPU clusters.")
# Tables fit the terminal (the columns that matter first, the rest with --wide). Output that
# is not a terminal gets 200 columns, unless $COLUMNS says otherwise.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
console = Console(width=_WIDTH)
err_console = Console(stderr=True)


def print_table(table: Table, wide: bool = False) -> None:
    """Print a table on stdout; `wide`: at the width its columns need, past the terminal's."""
    if not wide:
        console.print(table)
        return
    width = console.width
    try:  # rich prints no wider than its console: widen it for this table
        console.width = max(width, console.measure(table, options=console.options.update_width(
            10_000)).maximum)
        console.print(table, crop=False)
    finally:
        console.width = width

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


def _truth(profiles: Path | None, catalog: Path | None) -> Truth:
    from corral.sim.truth.source import TruthSource

    return TruthSource.of(profiles, catalog).load()


def _check_fits(workloads: list, shape: Cluster, truth: Truth, policies: list[str]) -> None:
    """Every job of `workloads` fits `shape` under every policy of the run (`check_feasible`):
    a policy that runs a job on the GPUs it asked for is refused a job no GPU type holds, naming
    it; one that chooses the count starts such a job from the largest type's GPUs, said in one
    warning line per workload (`corral.sim.loop.capping`)."""
    from corral.policies import policy_class
    from corral.sim.loop.capping import capped_note, capped_to_types, chooses_counts
    from corral.sim.loop.engine import check_feasible

    resizing = [p for p in policies if chooses_counts(policy_class(p))]
    fixed = [p for p in policies if p not in resizing]
    for w in workloads:
        if fixed:
            try:
                check_feasible(w, shape, truth)
            except CorralError as exc:
                raise CorralError(f"{exc} ({', '.join(fixed)}: a job runs on the GPUs it asks "
                                  "for)") from None
        if resizing:
            capped, which = capped_to_types(w, shape)
            check_feasible(capped, shape, truth)
            if which:
                err_console.print(f"[yellow]warning:[/] {capped_note(w, which, resizing)}",
                                  highlight=False, soft_wrap=True)


def _policy_list(text: str | None) -> list[str]:
    from corral.policies import policy_names

    if text:
        return [p.strip() for p in text.split(",") if p.strip()]
    known = set(policy_names())
    return [p for p in DEFAULT_POLICIES if p in known]


def _column_options(columns: str | None, model_map: str | None) -> dict:
    from corral.sim.workloads import parse_columns, parse_model_map

    return {"columns": parse_columns(columns) if columns else None,
            "model_map": parse_model_map(model_map) if model_map else None}


# `corral simulate --help`: what a first run sets, then these panels.
_INPUTS = "Workloads and profiles"
_ENGINE = "Policies and the simulator"
_RUNS = "Running the simulations"


@app.command()
@user_errors
def simulate(
    workload: list[Path] | None = typer.Option(None, "--workload", "-w", metavar="FILE|DIR", help="Workload CSV file or directory of them (repeatable). Default: the built-in workload."),
    profiles: Path | None = typer.Option(None, metavar="DIR", help="Directory of measured profiles (Pollux format). Default: the built-in catalog.", rich_help_panel=_INPUTS),
    catalog: Path | None = typer.Option(None, metavar="FILE", help="A catalog file made by `corral calibrate` instead of the built-in one.", rich_help_panel=_INPUTS),
    policy: str | None = typer.Option(None, "--policy", "-p", metavar="POLICY[,POLICY]", help="Comma-separated policies. Default: every built-in comparison policy."),
    set_: list[str] | None = typer.Option(None, "--set", metavar="[P.]KEY=VALUE", help="policy.key=value (or key=value for every policy that has it; repeatable).", rich_help_panel=_ENGINE),
    cluster: str = typer.Option("16x4", metavar="NxG|TYPE:NxG,...|FILE", help="N nodes of G GPUs; several GPU types as TYPE:NODESxGPUS,... (e.g. k80:6x4,p100:3x8,v100:2x8); or a file with one 'name gpus [type [speed]]' line per node."),
    gpu_speed: str | None = typer.Option(None, "--gpu-speed", metavar="TYPE=BASE*FACTOR,...", help="GPU types the truth lacks, described by their speed relative to one it knows: a100=v100*2.2 (compute 2.2x as fast, synchronisation as the v100's). Replaces the built-in catalog's a100, h100, l4.", rich_help_panel=_INPUTS),
    interval: float = typer.Option(60.0, metavar="SECONDS", help="Scheduling interval, seconds.", rich_help_panel=_ENGINE),
    restart_delay: float | None = typer.Option(None, metavar="SECONDS", show_default="each model's own in profiles of Sia's layout, else 30", help="Pause of a job whose placement changes (checkpoint and restart), seconds, the same for every model.", rich_help_panel=_ENGINE),
    mechanism: str = typer.Option("checkpoint-restart", metavar="MECHANISM", help="How jobs are resized and what it costs: checkpoint-restart, sidecar, termination, termination-epoch, in-place.", rich_help_panel=_ENGINE),
    interference: float = typer.Option(0.0, metavar="FRACTION", help="Slowdown of distributed jobs sharing a node (0 = off).", rich_help_panel=_ENGINE),
    seed: int = typer.Option(0, metavar="N", help="Seed of every random draw: the built-in workload, the models of trace rows by size class (Tiresias, Philly), and randomized policies (their `seed` parameter; --set P.seed=N wins). The engine draws nothing.", rich_help_panel=_INPUTS),
    window: str | None = typer.Option(None, metavar="all|START:HOURS", help="Stretch of a trace: 'all', or START:HOURS (START: seconds from the first submission, or a Philly timestamp). Default: a Philly trace's busiest 8 hours, other files whole.", rich_help_panel=_INPUTS),
    jobs: int | None = typer.Option(None, "--jobs", "-j", metavar="N", show_default="the CPU count", help="Simulations run at once in worker processes (1: one after another here)."),
    ray_address: str | None = typer.Option(None, metavar="ADDRESS|auto", help="Run the simulations as Ray tasks on this Ray cluster ('auto': the one this machine is in).", rich_help_panel=_RUNS),
    out: Path | None = typer.Option(None, metavar="DIR", help="Write summary.json, jobs.csv, timelines, plots and report.html here; each simulation's result is kept in OUT/cells as it finishes (a run that completes keeps only its own)."),
    resume: bool = typer.Option(False, "--resume", help="Take the simulations an earlier run with the same inputs and code kept in OUT/cells (a sweep that stopped part-way) and run only the others.", rich_help_panel=_RUNS),
    columns: str | None = typer.Option(None, metavar="FIELD=COL,...", help="Read the workload CSVs as duration-based traces: which column holds each of submit, gpus, duration (needed), name, model, batch, queue (the job's team), e.g. submit=ts,gpus=n,duration=d (the --format columns of other tools).", rich_help_panel=_INPUTS),
    model_map: str | None = typer.Option(None, metavar="MODEL=MODEL,...", help="Trace model -> catalog model for ITP and duration-based traces: gpt2=bert,vgg16=imagenet (unmapped models unknown to the catalog go by GPU-time class).", rich_help_panel=_INPUTS),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="With --out, also draw jct_cdf.png, gpu_usage.png and report.html (--no-plots: the CSV and JSON files only, seconds sooner; `corral report OUT` builds report.html from them later).", rich_help_panel=_RUNS),
    lp_bound: bool = typer.Option(True, "--lp-bound/--no-lp-bound", help="Compute each workload's LP lower bound on the average JCT and every policy's gap to it (seconds per 160-job workload, minutes for a day of a production trace; above 600 jobs a windowed relaxation of it).", rich_help_panel=_RUNS),
    wide: bool = typer.Option(False, "--wide", help="Every metric column, however wide the table (default: the ones that fit the terminal; --out writes them all to summary.json)."),
    queues: Path | None = typer.Option(None, "--queues", metavar="FILE", help="Teams share the cluster: a TOML file of queues ([queue.NAME] quota, limit (GPUs, or per GPU type: { v100 = 8 }), weight, parent, priority; min_runtime_s, usage_half_life_s). Each policy runs once per queue on the queue's share; jobs take their queue from the trace's tenant column (Philly's virtual cluster, or --columns queue=COL).", rich_help_panel=_INPUTS),
    quotas: str | None = typer.Option(None, "--quotas", metavar="proportional", help="'proportional': one queue per tenant of the trace, its quota its share of the trace's GPU-time (instead of --queues).", rich_help_panel=_INPUTS),
) -> None:
    """Replay workloads under policies and print one comparison table."""
    from corral.core.gpu_speeds import parse_gpu_speeds
    from corral.policies import POLICIES
    from corral.report import comparison_table, summary_document, write_outputs
    from corral.report.findings import findings
    from corral.report.tables import per_workload_tables
    from corral.sim.analysis.metrics import mean_summary, summarize
    from corral.sim.batch.cellstore import CellStore
    from corral.sim.batch.sweep import parse_settings, run_matrix, runner_for
    from corral.sim.loop.config import EngineConfig
    from corral.sim.loop.mechanism import mechanism_named
    from corral.sim.loop.memory import peak_rss_mib
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads import Window, builtin_default, load_workloads

    if resume and out is None:
        raise CorralError("--resume needs --out: the folder whose cells an earlier run kept")
    shape = Cluster.parse(cluster)
    speeds = (*shape.speeds, *(parse_gpu_speeds(gpu_speed) if gpu_speed else ()))
    source = TruthSource.of(profiles, catalog, speeds)
    truth = source.load()
    if interval <= 0 or (restart_delay is not None and restart_delay < 0) or not 0 <= interference < 1:
        raise CorralError("--interval must be > 0, --restart-delay >= 0 and --interference in [0, 1)")
    choices = parse_settings(_policy_list(policy), set_ or [], seed=seed)
    tenancy = _queue_setup(queues, quotas, shape)
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
        source = dataclasses.replace(own.pop(), speeds=source.speeds)
        truth = source.load()
    _check_fits(workloads, shape, truth, [c.name for c in choices])
    config = EngineConfig(interval_s=interval, mechanism=mechanism_named(mechanism, restart_delay),
                          interference_slowdown=interference)
    console.print(f"[dim]truth: {truth.source}; cluster {shape.describe()} ({shape.total_gpus} GPUs); "
                  f"{len(workloads)} workload(s); policies: {', '.join(c.name for c in choices)}; "
                  f"mechanism: {config.mechanism.for_models(truth.restart_times()).describe()}[/]")
    runs = len(choices) * len(workloads)
    runner = runner_for(jobs or os.cpu_count() or 1, ray_address)
    with Counter(err_console, "simulations", runs) as bar:
        finished = [0]

        def done(n: int, total: int, p: str, w: str, ok: bool) -> None:
            finished[0] = n
            bar.update(n, f"{p} on {w}{' done' if ok else ' FAILED'}")

        def jobs_done(p: str, w: str, fraction: float) -> None:  # cells run here: jobs finished
            bar.update(finished[0], f"{p} on {w}: {fraction:.0%} of jobs finished", fraction)
        matrix = run_matrix(source, choices, workloads, shape, config, runner, on_cell_done=done,
                            on_job_progress=jobs_done, bound=lp_bound,
                            store=CellStore(out / "cells") if out is not None else None,
                            reuse=resume, queues=tenancy)
    if matrix.reused and out is not None:  # (only a run with --out reuses cells)
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
    rows: list[tuple[str, str, Summary | Mapping[str, Any]]] = []
    for p, sums in summaries.items():
        if len(sums) > 1:
            rows += [(p, r.workload, s) for r, s in zip(results[p], sums)]
        rows.append((p, "mean" if len(sums) > 1 else results[p][0].workload, mean_summary(sums)))
    width = None if wide else console.width
    print_table(comparison_table(rows, width=width, more="--wide"), wide)
    if len(workloads) > 1 and len(choices) > 1:
        for table in per_workload_tables({p: {r.workload: s for r, s in zip(results[p], summaries[p])}
                                          for p in summaries}, width, title="avg JCT per workload"):
            print_table(table, wide)
    per_queue = None
    if tenancy is not None:
        per_queue = _per_queue(results, workloads, tenancy, shape)
        print_table(_queue_table(results, per_queue, width), wide)
    oracles = POLICIES.oracles()
    for line in findings(summary_document(results, summaries), oracles):
        console.print(line, highlight=False)  # wrapped between words at the terminal's width
    if out is not None:
        paths = write_outputs(out, results, summaries, plots=plots, queues=per_queue,
                              oracles=oracles)
        console.print(f"[dim]wrote {', '.join(str(p) for p in paths.values())}[/]")
    rss, child = peak_rss_mib()
    console.print(f"[dim]peak memory (RSS): {rss:,.0f} MiB here"
                  + (f", {child:,.0f} MiB in the largest worker process" if child else "") + "[/]")
    if matrix.failures:
        raise typer.Exit(1)


def _queue_setup(queues: Path | None, quotas: str | None, shape: Cluster) -> QueueTree | str | None:
    """The queue tree of `--queues`, "proportional" for `--quotas proportional`, or None."""
    from corral.core.queues import load_queues, type_capacity

    if queues is not None and quotas is not None:
        raise CorralError("--queues and --quotas: give one (a queues file, or quotas from the trace)")
    if quotas is not None:
        if quotas.strip().lower() != "proportional":
            raise CorralError(f"--quotas {quotas!r}: the one choice is 'proportional'")
        return "proportional"
    return None if queues is None else load_queues(queues, shape.total_gpus, type_capacity(shape))


def _per_queue(results: Mapping[str, Sequence[SimResult]], workloads: Sequence[Workload],
               tenancy: QueueSetup, shape: Cluster) -> dict:
    """{policy: [per-queue figures per run]} (`corral.sim.analysis.queue_metrics`)."""
    from corral.sim.analysis.queue_metrics import queue_summary, resolve_queues

    by_name: dict[str, Workload] = {}
    for w in workloads:
        by_name.setdefault(w.name, w)
    return {p: [queue_summary(r, resolve_queues(tenancy, by_name[r.workload], shape.total_gpus))
                for r in rs] for p, rs in results.items()}


def _queue_table(results: Mapping[str, Sequence[SimResult]], per_queue: dict,
                 width: int | None) -> Table:
    from corral.report.queues import queue_table

    return queue_table(((p, r.workload, q) for p, rs in results.items()
                        for r, q in zip(rs, per_queue[p])), width)


@app.command()
@user_errors
def report(
    out_dir: Path = typer.Argument(..., metavar="DIR", help="A folder written by `corral simulate --out`."),
) -> None:
    """Rebuild report.html from a results folder.

    The folder is one written by `corral simulate --out`: report.html is made again from its
    summary.json and jobs.csv."""
    from corral.policies import POLICIES
    from corral.report.html import write_html_report

    console.print(f"wrote {write_html_report(out_dir, POLICIES.oracles())}", highlight=False,
                  soft_wrap=True)


@app.command()
@user_errors
def policies() -> None:
    """List the policies with their parameters and defaults."""
    from corral.core.policy import param_fields
    from corral.policies import policy_class, policy_names
    from corral.report.tables import Col, fitted_table

    rows = []
    for name in policy_names():
        cls = policy_class(name)
        params = ", ".join(f"{n}={d!r}" for n, _, d in param_fields(cls)) or "-"
        kind = " [oracle]" if cls.promises.oracle else ""
        rows.append([name, (cls.summary or (cls.__doc__ or "").strip().splitlines()[0]) + kind, params])
    cols = [Col("policy", style="bold"), Col("what it does", wrap=True),
            Col("parameters (default)", wrap=True)]
    console.print(fitted_table(cols, rows, console.width, title="policies")[0])


@app.command()
@user_errors
def workloads(
    path: Path = typer.Argument(..., metavar="FILE", help="A workload CSV file."),
    profiles: Path | None = typer.Option(None, metavar="DIR", help="Profiles directory (default: built-in catalog)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    columns: str | None = typer.Option(None, metavar="FIELD=COL,...", help="As for simulate: e.g. submit=ts,gpus=n,duration=d."),
    model_map: str | None = typer.Option(None, metavar="MODEL=MODEL,...", help="As for simulate: trace model -> catalog model."),
) -> None:
    """Describe a workload: jobs per model, GPUs, arrivals.

    Jobs per model, GPU requests, time span, arrival rate, and how each column of a
    duration-based trace was read."""
    from corral.sim.workloads import describe_workload, load_workload

    truth = _truth(profiles, None)
    info = describe_workload(load_workload(path, truth.limits(),
                                           **_column_options(columns, model_map)))
    if as_json:
        console.print_json(json.dumps(info, default=str))
        return
    table = Table(title=str(path), show_header=False)
    table.add_column(no_wrap=True, overflow="fold")
    table.add_column(overflow="fold")
    for key, value in info.items():
        text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
        table.add_row(escape(str(key)), escape(text))
    console.print(table)


@app.command()
@user_errors
def calibrate(
    profiles_dir: Path = typer.Argument(..., metavar="DIR", help="Directory of measured profiles (Pollux format)."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="Catalog file to write (JSON)."),
) -> None:
    """Fit a catalog from measured profiles and report its error.

    The compact catalog figures (step time, scaling efficiency) are fitted to the profiles and
    their error against them printed."""
    from corral.sim.truth.calibrate import calibrate as fit_catalog
    from corral.sim.truth.calibrate import fidelity

    doc = fit_catalog(profiles_dir)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(calibration_table(fidelity(doc, profiles_dir), str(profiles_dir)))
    console.print(f"wrote {output}")


def calibration_table(errors: dict, profiles: str) -> Table:
    """`corral calibrate`'s table: each model's relative error of the fitted catalog."""
    from corral.report.tables import Col, fitted_table

    cols = [Col("model", style="bold")] + [
        Col(h, justify="right") for h in ("step time\nerr (mean)", "step time\nerr (max)",
                                         "efficiency\nerr (mean)", "efficiency\nerr (max)")]
    rows = [[model, f"{err['step_time_mre']:.1%}", f"{err['step_time_max_re']:.1%}",
             f"{err['efficiency_mre']:.1%}", f"{err['efficiency_max_re']:.1%}"]
            for model, err in errors.items()]
    return fitted_table(cols, rows, console.width, title=f"catalog vs {profiles}")[0]


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
from corral.cli import autoscale_cmd as _autoscale  # noqa: E402,F401
from corral.cli import data_cmd as _data  # noqa: E402,F401
from corral.cli import emulate_cmd as _emulate  # noqa: E402,F401
from corral.cli import live as _live  # noqa: E402,F401
from corral.cli import replay_cmd as _replay  # noqa: E402,F401
