"""`corral emulate`: a workload through the real service, on simulated jobs.

For each policy, `run_emulation` starts `corral serve --executor emulated --lockstep-jobs N`
(127.0.0.1, a free port, a fresh data directory), submits every job through the REST API naming
its arrival, waits for all to end, reads back the record and stops the service. In lock step
the service's clock stands still until every job is stored, then moves an emulated second at a
time, the control loop looking at each second at which a job reported or ended or a round or an
arrival falls (`LockstepClock`), so a run is the same however loaded the machine is, and as fast
as it allows up to `--time-scale`. Workload time 0 is the first
interval multiple of the service's clock, so rounds fall as the simulator's; finishes are seen
at the next whole second. The run becomes a `SimResult` in `corral simulate`'s schema;
`--compare` also simulates and prints `agreement`, against the unshifted simulation and
against the band of simulations whose arrivals are shifted by up to 4 s (`reference_runs`): on
a cluster of several GPU types a type-unaware policy's average JCT moves by up to 16 % when
arrivals move a second or two, so one simulation is no sharper a reference than that.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.core.cluster import Cluster
from corral.core.errors import CorralError

if TYPE_CHECKING:  # the simulator is imported when a command runs, not when the CLI starts
    from corral.service.client import Client
    from corral.sim.loop.results import SimResult
    from corral.sim.truth.base import Truth
    from corral.sim.workloads import Workload

__all__ = ["EmulationOptions", "EmulatedService", "run_emulation", "simulate_same", "agreement",
           "reference_runs", "submission_body", "REFERENCE_SHIFTS_S", "AGREEMENT_TOLERANCE"]

#: Arrival shifts (emulated seconds) of the reference simulations besides the unshifted one
#: (`reference_runs`): the simulator's own sensitivity to moments as small as the service
#: resolves (it sees a finish at the next whole second), where a type-unaware policy sends a
#: job to a 7x slower GPU or not.
REFERENCE_SHIFTS_S = (0.25, 0.5, 1.0, 2.0, 4.0)
#: How far (relative) the emulated average JCT may be from the reference band.
AGREEMENT_TOLERANCE = 0.05


@dataclass
class EmulationOptions:
    cluster: str = "16x4"
    profiles: Path | None = None
    catalog: Path | None = None
    time_scale: float = 100.0
    interval_s: float = 60.0
    restart_delay_s: float | None = None  # None: each model's own (`Mechanism.for_models`)
    mechanism: str = "checkpoint-restart"
    checkpoint_interval_s: float = 600.0  # emulated seconds between a job's checkpoints
    report_interval_s: float = 30.0  # emulated seconds between a job's reports
    fill_in: bool = False  # as the simulator: arrivals wait for the policy's next call
    tick_s: float | None = None  # the service's default for the time scale
    timeout_s: float = 3600.0  # real seconds one policy's run may take
    data_dir: Path | None = None  # default: a fresh temporary directory per run
    keep: bool = False  # keep the temporary data directory (its service.log, state.db)


def submission_body(spec: Any, cluster_gpus: int) -> dict[str, Any]:
    """The POST /jobs body of a workload's JobSpec: the same spec on the service's side
    (every field that changes how the job trains or where it may run: epochs, the one-GPU
    split, a trace's duration, its GPU type, so that the emulated job is the simulated one)."""
    return {"command": ["emulated", spec.app], "name": spec.name, "app": spec.app,
            "gpus": spec.gpus, "min_gpus": spec.min_gpus,
            # a trace row may ask for more GPUs than its model's cap (the simulator runs it so
            # under non-adaptive policies); the service requires gpus <= max_gpus
            "max_gpus": max(spec.gpus, min(spec.max_gpus, cluster_gpus)),
            "batch_size": spec.batch_size,
            "init_batch_size": spec.init_bsz, "max_batch_size": spec.max_bsz,
            "min_local_bsz": spec.min_local_bsz, "max_local_bsz": spec.max_local_bsz,
            "adaptive": spec.adaptive, "lr_rule": spec.lr_rule.value, "epochs": spec.epochs,
            "one_gpu_split_bsz": spec.one_gpu_split_bsz,
            "trace_duration_s": spec.trace_duration_s, "gpu_type": spec.gpu_type}


class EmulatedService:
    """One `corral serve --executor emulated` process on `data_dir`; every wait bounded. A
    second one on the same directory after this one ended resumes its jobs and clock."""

    def __init__(self, data_dir: Path, policy: str, sets: Sequence[str], opts: EmulationOptions,
                 lockstep_jobs: int = 0) -> None:
        self.data_dir = data_dir
        args = [sys.executable, "-m", "corral", "serve", "--executor", "emulated",
                "--policy", policy, "--cluster", opts.cluster, "--time-scale", str(opts.time_scale),
                "--interval", str(opts.interval_s),
                *(("--restart-delay", str(opts.restart_delay_s))
                  if opts.restart_delay_s is not None else ()),
                "--mechanism", opts.mechanism,
                "--checkpoint-interval", str(opts.checkpoint_interval_s),
                "--report-interval", str(opts.report_interval_s), "--port", "0", "--host", "127.0.0.1",
                "--data-dir", str(data_dir), "--fill-in" if opts.fill_in else "--no-fill-in"]
        if lockstep_jobs:  # a scripted run: time moves once every job is stored
            args += ["--lockstep-jobs", str(lockstep_jobs)]
        if opts.profiles is not None:
            args += ["--profiles", str(opts.profiles)]
        if opts.catalog is not None:
            args += ["--catalog", str(opts.catalog)]
        if opts.tick_s is not None:
            args += ["--tick", str(opts.tick_s)]
        for item in sets:
            args += ["--set", item]
        env = {k: v for k, v in os.environ.items()
               if k not in ("CORRAL_TOKEN", "CORRAL_URL", "CORRAL_HOME")}
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        data_dir.mkdir(parents=True, exist_ok=True)
        with open(data_dir / "service.log", "ab") as log:
            # a process group of its own: `close` ends it and whatever it started (a wrapper
            # such as a profiler can put the service one process further down)
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.client: Client | None = None

    def log_tail(self) -> str:
        try:
            return (self.data_dir / "service.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def connect(self, timeout_s: float = 120.0) -> Any:
        from corral.service.client import Client

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise CorralError(f"corral serve exited with status {self.proc.returncode}: "
                                  + " | ".join(self.log_tail().strip().splitlines()[-5:]))
            try:
                doc = json.loads((self.data_dir / "service.json").read_text())
                if doc.get("pid") == self.proc.pid:
                    token = (self.data_dir / "token").read_text().strip()
                    self.client = Client(doc["url"], token, timeout_s=30)
                    self.client.cluster()
                    return self.client
            except (OSError, ValueError, KeyError):
                pass
            except Exception:  # noqa: BLE001 - listening, not answering yet
                pass
            if time.monotonic() > deadline:
                raise CorralError(f"corral serve did not answer within {timeout_s:.0f} s")
            time.sleep(0.05)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self._signal_group(signal.SIGTERM)  # also what it left, should it have ended
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)

    def _signal_group(self, sig: signal.Signals) -> None:
        """Signal the service's process group (its own session, started by us)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


def run_emulation(workload: Workload, policy: str, truth: Truth, opts: EmulationOptions,
                  sets: Sequence[str] = (),
                  on_progress: Callable[[int, int, int], None] | None = None) -> SimResult:
    """Run `workload` through a real service with the emulated executor under `policy`;
    `on_progress(submitted, ended, total)` is called as it goes."""
    cluster = Cluster.parse(opts.cluster)
    started = time.perf_counter()
    temp = None
    data_dir = opts.data_dir
    if data_dir is None:
        temp = tempfile.mkdtemp(prefix=f"corral-emulate-{policy}-")
        data_dir = Path(temp)
    service = EmulatedService(data_dir, policy, sets, opts, len(workload.jobs))
    try:
        client = service.connect()
        jobs = _drive(client, workload, cluster, opts, on_progress, service)
        rounds = int(client.cluster().get("rounds", 0))
    finally:
        service.close()
    result = _result(workload, policy, truth, cluster, jobs)
    result.rounds = rounds
    result.wall_s = time.perf_counter() - started
    if temp is not None and not opts.keep:
        import shutil

        shutil.rmtree(temp, ignore_errors=True)
    return result


def _drive(client: Any, workload: Workload, cluster: Cluster, opts: EmulationOptions,
           on_progress: Callable[[int, int, int], None] | None, service: EmulatedService
           ) -> list[dict[str, Any]]:
    """Submit every job, each naming its arrival (the service's clock stands still until all
    are stored: `--lockstep-jobs`), wait for all to end; each job's summary and assignments,
    with its times shifted to the workload's time base (`offset` = workload time 0, the first
    multiple of the interval from the service's start, so rounds fall as the simulator's)."""
    offset = math.ceil(float(client.cluster()["time_s"]) / opts.interval_s) * opts.interval_s
    specs = sorted(workload.jobs, key=lambda s: s.submit_time_s)
    ids: dict[str, str] = {}
    deadline = time.monotonic() + opts.timeout_s
    total = len(specs)
    for spec in specs:
        body = {**submission_body(spec, cluster.total_gpus),
                "arrive_at_s": offset + spec.submit_time_s}
        ids[spec.name] = client.submit(body)["id"]
    while True:
        ended = _count_ended(client)
        if on_progress is not None:
            on_progress(total, ended, total)
        if ended >= total:
            break
        if service.proc.poll() is not None:
            raise CorralError(f"corral serve exited with status {service.proc.returncode}")
        if time.monotonic() > deadline:
            raise CorralError(f"the emulation took longer than {opts.timeout_s:.0f} s (real): "
                              f"{total - ended} of {total} jobs had not ended")
        time.sleep(0.25)
    by_id = {r["id"]: r for r in client.jobs()}  # every job, page after page
    out = []
    for spec in specs:
        row = dict(by_id[ids[spec.name]])
        row["assignments"] = client.job(row["id"])["assignments"]
        row["offset"] = offset
        row["spec"] = spec
        out.append(row)
    return out


def _count_ended(client: Client) -> int:
    """Jobs that have ended, counted by the service (no job is sent)."""
    return client.count(status=("done", "failed", "cancelled"))


def _result(workload: Workload, policy: str, truth: Truth, cluster: Cluster,
            jobs: list[dict[str, Any]]) -> SimResult:
    """The service's records as a SimResult in the workload's time base."""
    from corral.sim.loop.engine import isolated_jcts
    from corral.sim.loop.results import JobRecord, SimResult
    from corral.sim.truth.scaled import job_app

    def shift(value: float | None, offset: float) -> float | None:
        return None if value is None else float(value) - offset

    records = []
    spans = []
    for row in jobs:
        spec, offset = row["spec"], row["offset"]
        submit = float(row["submit_time_s"]) - offset  # the arrival it named
        finish = shift(row["finish_s"], offset) if row["status"] == "done" else None
        records.append(JobRecord(
            name=spec.name, app=spec.app, submit_s=submit, requested_gpus=spec.gpus,
            first_start_s=shift(row["first_start_s"], offset), finish_s=finish,
            restarts=int(row["restarts"]), attained_gpu_s=float(row["attained_gpu_s"]),
            run_time_s=float(row["run_time_s"]), queue_time_s=float(row["queue_time_s"]),
            waited_by_reason={str(kind): float(s) for kind, s in
                              (row.get("waited_by_reason") or {}).items()}))
        end = shift(row["finish_s"], offset)
        spans.append((submit, end if end is not None else math.inf))
    epochs = {app: len(a.epoch_progress()) for app, a in truth.apps().items()}
    for rec, row, (submit, _) in zip(records, jobs, spans):
        rec.active_at_arrival = sum(1 for s, e in spans if s <= submit < e)
        spec = row["spec"]
        total_epochs = max(1, min(spec.epochs or truth.app(spec.app).limits.epochs,
                                  epochs[spec.app]))
        rec.isolated_jct_s, rec.fair_share_jct_s = isolated_jcts(  # the engine's truth
            spec, job_app(truth, spec, cluster.max_node_gpus), cluster, total_epochs,
            rec.active_at_arrival)
    allocations, changes = {}, []
    for rec, row in zip(records, jobs):
        history = [(float(a["time_s"]) - row["offset"], int(a["num_gpus"]))
                   for a in row["assignments"]]
        if rec.finish_s is not None and (not history or history[-1][1]):
            history.append((rec.finish_s, 0))
        allocations[rec.name] = history
        before = 0
        for t, gpus in history:
            changes.append((t, gpus - before))
            before = gpus
    timeline = [(0.0, 0)]
    used = 0
    for t, delta in sorted(changes):
        used += delta
        if timeline[-1][0] == t:
            timeline[-1] = (t, used)
        elif used != timeline[-1][1]:
            timeline.append((t, used))
    unfinished = sum(r.finish_s is None for r in records)
    result = SimResult(policy=policy, workload=workload.name, cluster_gpus=cluster.total_gpus,
                       jobs=records, gpu_timeline=timeline, allocations=allocations)
    if unfinished:
        why = sorted({str(r.get("message") or r["status"]) for r in jobs if r["status"] != "done"})
        result.stopped = (f"{unfinished} of {len(records)} job(s) did not finish: "
                          + "; ".join(why)[:300])
    return result


def simulate_same(workload: Workload, policy: str, truth: Truth, opts: EmulationOptions,
                  sets: Sequence[str] = ()) -> SimResult:
    """`corral simulate` of the same workload, policy, cluster and mechanism."""
    from corral.policies import create_policy
    from corral.sim.batch.sweep import parse_settings
    from corral.sim.loop.config import EngineConfig
    from corral.sim.loop.engine import Simulator
    from corral.sim.loop.mechanism import mechanism_named

    choice = parse_settings([policy], [s if "." in s.split("=", 1)[0] else f"{policy}.{s}"
                                       for s in sets])[0]
    config = EngineConfig(interval_s=opts.interval_s,
                          mechanism=mechanism_named(opts.mechanism, opts.restart_delay_s))
    sim = Simulator(truth, create_policy(policy, choice.overrides), Cluster.parse(opts.cluster),
                    config)
    return sim.run(workload)


def reference_runs(workload: Workload, policy: str, truth: Truth, opts: EmulationOptions,
                   sets: Sequence[str] = ()) -> list[SimResult]:
    """The simulations `--compare` judges an emulated run against besides the unshifted one:
    every arrival shifted by each of `REFERENCE_SHIFTS_S`. JCTs count from each run's own
    arrivals, as the service's do."""
    from corral.sim.workloads import Workload as _Workload

    out = []
    for shift in REFERENCE_SHIFTS_S:
        jobs = [replace(s, submit_time_s=s.submit_time_s + shift) for s in workload.jobs]
        out.append(simulate_same(_Workload(workload.name, jobs, source=workload.source), policy,
                                 truth, opts, sets))
    return out


def _avg_jct(result: SimResult) -> float | None:
    jcts = [j.jct_s for j in result.jobs if j.jct_s is not None]
    return statistics.fmean(jcts) if jcts else None


def agreement(emulated: SimResult, simulated: SimResult,
              references: Sequence[SimResult] = ()) -> dict[str, Any]:
    """How far the emulated run is from the simulated one: average JCTs, their relative
    difference, and the median over jobs of |JCT difference| / simulated JCT. With
    `references` (`reference_runs`): the band of average JCTs they and `simulated` span
    (`band_s`) and the emulated run's relative distance outside it (`band_rel_diff`, 0
    inside); `agrees` is that distance within `AGREEMENT_TOLERANCE`."""
    emu = {j.name: j.jct_s for j in emulated.jobs if j.jct_s is not None}
    sim = {j.name: j.jct_s for j in simulated.jobs if j.jct_s is not None}
    both = [n for n in sim if n in emu]
    avg_e, avg_s = _avg_jct(emulated), _avg_jct(simulated)
    per_job = [abs(emu[n] - sim[n]) / sim[n] for n in both if sim[n] > 0]
    rel = (avg_e - avg_s) / avg_s if avg_e and avg_s else None
    out = {"policy": emulated.policy, "workload": emulated.workload, "jobs": len(both),
           "avg_jct_emulated_s": avg_e, "avg_jct_simulated_s": avg_s,
           "avg_jct_rel_diff": rel,
           "median_job_abs_rel_diff": statistics.median(per_job) if per_job else None,
           "p90_job_abs_rel_diff": (statistics.quantiles(per_job, n=10)[-1]
                                    if len(per_job) > 1 else None)}
    band = [a for a in (avg_s, *(_avg_jct(r) for r in references)) if a]
    if references and band and avg_e:
        lo, hi = min(band), max(band)
        outside = (avg_e - hi) / hi if avg_e > hi else (avg_e - lo) / lo if avg_e < lo else 0.0
        out.update(band_s=[lo, hi], band_runs=len(band), band_rel_diff=outside,
                   agrees=abs(outside) <= AGREEMENT_TOLERANCE)
    elif rel is not None:
        out["agrees"] = abs(rel) <= AGREEMENT_TOLERANCE
    return out


def agreement_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for a in rows:
        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:+.2f} %"
        out.append(f"{a['policy']} on {a['workload']} ({a['jobs']} jobs): avg JCT emulated "
                   f"{a['avg_jct_emulated_s']:.0f} s, simulated {a['avg_jct_simulated_s']:.0f} s "
                   f"({pct(a['avg_jct_rel_diff'])}); per-job median |difference| "
                   f"{pct(a['median_job_abs_rel_diff']).lstrip('+')}, p90 "
                   f"{pct(a['p90_job_abs_rel_diff']).lstrip('+')}")
        if "band_s" in a:
            lo, hi = a["band_s"]
            where = ("inside it" if a["band_rel_diff"] == 0 else
                     f"{pct(a['band_rel_diff'])} outside it")
            out[-1] += (f"; {a['band_runs']} simulations with arrivals shifted by up to "
                        f"{max(REFERENCE_SHIFTS_S):g} s give {lo:.0f}-{hi:.0f} s: emulated is "
                        f"{where} ({'within' if a['agrees'] else 'NOT within'} "
                        f"{100 * AGREEMENT_TOLERANCE:g} %)")
    return out


# -- the command ----------------------------------------------------------------------------------
import typer  # noqa: E402

from corral.cli.main import app, console, err_console, print_table, user_errors  # noqa: E402
from corral.cli.progress import Counter  # noqa: E402


@app.command()
@user_errors
def emulate(
    workload: Path | None = typer.Option(None, "--workload", "-w", metavar="FILE", help="Workload CSV file (default: the built-in workload)."),
    profiles: Path | None = typer.Option(None, metavar="DIR", help="Directory of measured profiles (Pollux format). Default: the built-in catalog."),
    catalog: Path | None = typer.Option(None, metavar="FILE", help="A catalog file made by `corral calibrate` instead of the built-in one."),
    policy: str = typer.Option("fifo", "--policy", "-p", metavar="POLICY[,POLICY]", help="Policy, or comma-separated policies (one service run each)."),
    set_: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help="Policy parameter (repeatable)."),
    cluster: str = typer.Option("16x4", metavar="NxG|TYPE:NxG,...", help="The emulated cluster: N nodes of G GPUs, or nodes of named GPU types (e.g. k80:1x4,v100:1x4)."),
    time_scale: float = typer.Option(100.0, metavar="FACTOR", help="Emulated seconds per real second."),
    interval: float = typer.Option(60.0, metavar="SECONDS", help="Scheduling interval, emulated seconds."),
    restart_delay: float | None = typer.Option(None, metavar="SECONDS", show_default="each model's own in profiles of Sia's layout, else 30", help="Pause of a job whose placement changes (checkpoint and restart), emulated seconds, the same for every model."),
    mechanism: str = typer.Option("checkpoint-restart", metavar="MECHANISM", help="Resize mechanism (as `corral simulate --mechanism`)."),
    fill_in: bool = typer.Option(False, "--fill-in/--no-fill-in", help="Let the service start arrivals on idle GPUs at once (its default when serving; off here, as the simulator schedules)."),
    tick: float | None = typer.Option(None, metavar="SECONDS", help="The service's control-loop tick, real seconds (default: about 2 emulated seconds)."),
    limit: int = typer.Option(0, metavar="N", help="Only the first N jobs of the workload (0: all)."),
    timeout: float = typer.Option(3600.0, metavar="SECONDS", help="Real seconds one policy's run may take."),
    compare: bool = typer.Option(False, "--compare", help="Also simulate the same run (and it with arrivals shifted by up to 4 s) and print how far apart they are."),
    band: bool = typer.Option(True, "--band/--no-band", help="With --compare: judge against the band of the simulations with shifted arrivals too (--no-band: the unshifted one only: one simulation instead of seven)."),
    keep: bool = typer.Option(False, "--keep", help="Keep each run's service data directory (printed)."),
    seed: int = typer.Option(0, metavar="N", help="Seed of the built-in workload."),
    out: Path | None = typer.Option(None, metavar="DIR", help="Write summary.json and jobs.csv (and timelines) here."),
    wide: bool = typer.Option(False, "--wide", help="Every metric column, however wide the table (default: the ones that fit the terminal)."),
) -> None:
    """Run a workload through the real service, on simulated jobs.

    The service is `corral serve --executor emulated`; the same table as `corral simulate` is
    printed."""
    from corral.report import comparison_table, write_outputs
    from corral.sim.analysis.metrics import summarize
    from corral.sim.loop.engine import check_feasible
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads import Workload, builtin_default, load_workload

    if time_scale <= 0 or interval <= 0 or (restart_delay or 0.0) < 0 or timeout <= 0 or limit < 0:
        raise CorralError("--time-scale, --interval and --timeout must be > 0, --restart-delay "
                          "and --limit >= 0")
    shape = Cluster.parse(cluster)
    truth = TruthSource.of(profiles, catalog, shape.speeds).load()
    w = (load_workload(workload, truth.limits()) if workload is not None
         else builtin_default(truth.limits(), seed=seed))
    if limit:
        w = Workload(w.name if limit >= len(w.jobs) else f"{w.name}[:{limit}]", w.jobs[:limit],
                     source=w.source)
    check_feasible(w, shape, truth)
    policies = [p.strip() for p in policy.split(",") if p.strip()]
    opts = EmulationOptions(cluster=cluster, profiles=profiles, catalog=catalog,
                            time_scale=time_scale, interval_s=interval,
                            restart_delay_s=restart_delay, mechanism=mechanism, fill_in=fill_in,
                            tick_s=tick, timeout_s=timeout, keep=keep)
    span = max((s.submit_time_s for s in w.jobs), default=0.0)
    console.print(f"[dim]emulating {w.name} ({len(w.jobs)} jobs, submissions over "
                  f"{span:.0f} s = {span / time_scale:.0f} s real) on {shape.describe()} at "
                  f"{time_scale:g}x; policies: {', '.join(policies)}[/]")
    results: dict[str, list[SimResult]] = {}
    agreements = []
    for p in policies:
        if keep:
            opts.data_dir = Path(tempfile.mkdtemp(prefix=f"corral-emulate-{p}-"))
            err_console.print(f"[dim]{p}: service data in {opts.data_dir}[/]", highlight=False)
        # a bar on a terminal; elsewhere a line every tenth of the jobs (or 30 s), not each job
        with Counter(err_console, f"{p}: jobs ended", len(w.jobs)) as bar:
            def progress(submitted: int, ended: int, total: int, bar: Counter = bar) -> None:
                bar.update(ended, f"{submitted}/{total} submitted")
            result = run_emulation(w, p, truth, opts, set_ or [], on_progress=progress)
        results[p] = [result]
        if compare:
            agreements.append(agreement(
                result, simulate_same(w, p, truth, opts, set_ or []),
                reference_runs(w, p, truth, opts, set_ or []) if band else ()))
    print_table(comparison_table([(p, rs[0].workload, summarize(rs[0])) for p, rs in results.items()],
                                 title="emulated", width=None if wide else console.width), wide)
    for line in agreement_lines(agreements):
        console.print(line, highlight=False, soft_wrap=True)
    if out is not None:
        paths = write_outputs(out, results, plots=False)
        if agreements:
            paths["agreement"] = out / "agreement.json"
            paths["agreement"].write_text(json.dumps(agreements, indent=2) + "\n")
        console.print(f"[dim]wrote {', '.join(str(p) for p in paths.values())}[/]")
