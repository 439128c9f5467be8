"""The live commands: `corral serve`, `submit`, `jobs [--watch]`, `cancel`, `logs [--follow]`,
`describe` (registered on the main `corral` app). Thin: they parse arguments and call
corral.service."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from corral.cli.main import app, console, err_console, print_table, user_errors
from corral.core.errors import CorralError, InputError
from corral.protocol.report import Report, ReportError
from corral.report.tables import Col, fitted_table

if TYPE_CHECKING:  # the service is imported when a command runs, not when the CLI starts
    from corral.service.client import Client

_DATA_DIR_HELP = "Service data directory (default: $CORRAL_HOME or ~/.corral)."
# `corral serve --help`: what every operator sets first, then these panels.
_POLICY = "Policy"
_JOBS = "Jobs and the control loop"
_START = "When jobs start"
_RAY = "--executor ray"
# `corral submit --help`: the job's command and size, then these panels.
_BATCH = "Batch size and early start"
_SERVICE = "Which service"
_EMULATED = "--executor emulated"


def _load_policy_modules(paths: list[Path]) -> None:
    """Import Python files that register extra policies (`@register_policy`)."""
    for i, path in enumerate(paths):
        if not path.is_file():
            raise InputError(f"--policy-module {path}: no such file")
        spec = importlib.util.spec_from_file_location(f"corral_user_policies_{i}", path)
        if spec is None or spec.loader is None:  # (not a .py file: no loader for it)
            raise InputError(f"--policy-module {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)


def _client(data_dir: Path | None, url: str | None, token: str | None) -> Client:
    from corral.service.client import Client
    from corral.service.endpoint import client_token, read_url
    from corral.service.endpoint import data_dir as resolve

    directory = resolve(data_dir)
    return Client(read_url(directory, url), client_token(directory, token))


@app.command()
@user_errors
def serve(
    policy: str = typer.Option("pollux", "--policy", "-p", metavar="POLICY", help="Scheduling policy (`corral policies`)."),
    executor: str = typer.Option("local", metavar="EXECUTOR", help="Where workers run: local, ray or emulated (panels below)."),
    gpus: str | None = typer.Option(None, metavar="ID[,ID]", help="GPU ids to use (default: all visible)."),
    slots: str | None = typer.Option(None, metavar="N|T:N,..", help="CPU slots instead of GPUs (default: the GPUs, else one per CPU), or TYPE:N,... of GPU types."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Address to listen on."),
    port: int = typer.Option(8642, metavar="PORT", help="Port (0: any free one)."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token (default: $CORRAL_TOKEN, else the stored or a new one)."),
    interval: float = typer.Option(60.0, metavar="SECONDS", help="Scheduling interval."),
    set_: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help="Policy parameter (repeatable).", rich_help_panel=_POLICY),
    policy_module: list[Path] | None = typer.Option(None, metavar="FILE", help="Python file registering extra policies (repeatable).", rich_help_panel=_POLICY),
    max_retries: int = typer.Option(3, metavar="N", help="Restarts after worker failures before a job fails.", rich_help_panel=_JOBS),
    stop_timeout: float = typer.Option(30.0, metavar="SECONDS", help="Seconds a job may take to checkpoint and exit before it is killed.", rich_help_panel=_JOBS),
    report_interval: float = typer.Option(30.0, metavar="SECONDS", help="Seconds between a job's reports.", rich_help_panel=_JOBS),
    checkpoint_interval: float = typer.Option(600.0, metavar="SECONDS", help="Seconds between a job's periodic checkpoints (--executor emulated: emulated seconds).", rich_help_panel=_JOBS),
    retry_backoff: float = typer.Option(1.0, metavar="SECONDS", help="Seconds before a crashed job's first retry; doubles at every retry (at most 300).", rich_help_panel=_JOBS),
    mechanism: str | None = typer.Option(None, metavar="MECHANISM", help="How running jobs are resized: in-place (the default: jobs that use corral.train keep their workers; any other job, and a failed in-place resize, checkpoint-restart) or checkpoint-restart (every job). --executor local and ray. --executor emulated: a simulator mechanism (default checkpoint-restart; see `corral simulate --help`).", rich_help_panel=_JOBS),
    tick: float | None = typer.Option(None, metavar="SECONDS", help="Real seconds between the control loop's looks at the jobs (default 0.2; --executor emulated: about 2 emulated seconds, 0.01 to 0.2).", rich_help_panel=_JOBS),
    queues: Path | None = typer.Option(None, "--queues", metavar="FILE", help="Teams share the cluster: a TOML file of queues (docs/queues.md). The policy runs once per queue on the queue's share; each queue gets a token (DATA_DIR/tokens/QUEUE) that sees only its own jobs; PUT /queues (`corral queues --set FILE`) changes them while the service runs, kept in DATA_DIR/queues-changed.toml for the next start while FILE is unchanged.", rich_help_panel=_POLICY),
    allow_shared_user: bool = typer.Option(False, "--allow-shared-user", help="With --queues on a kernel without Landlock (no job sandbox): run the teams' jobs all the same, as the service's user, where any job can read the data directory (the tokens, state.db, every job's logs and checkpoints).", rich_help_panel=_POLICY),
    fill_in: bool = typer.Option(True, "--fill-in/--no-fill-in", help="Start a job that arrives while GPUs are idle at once (a fill-in round) instead of at the next round, as the simulator does.", rich_help_panel=_START),
    early_init: bool = typer.Option(True, "--early-init/--no-early-init", help="--executor local and ray: start a job placed on GPUs that another job gives up while that job trains on; it gives them up once the new job's workers are initialised (SideCar's early initialisation; a job opts out with `corral submit --no-early-init`).", rich_help_panel=_START),
    ray_address: str | None = typer.Option(None, metavar="ADDRESS", help="Ray cluster to join (default $RAY_ADDRESS, else a local Ray).", rich_help_panel=_RAY),
    ray_storage: Path | None = typer.Option(None, metavar="PATH", help="Checkpoint/log path every Ray node can read (default: the data directory).", rich_help_panel=_RAY),
    ray_resource: str | None = typer.Option(None, metavar="RESOURCE", help="Ray resource a worker takes (default GPU, else CPU).", rich_help_panel=_RAY),
    cluster: str | None = typer.Option(None, metavar="NxG|TYPE:NxG,...|FILE", show_default="16x4", help="The emulated cluster: N nodes of G GPUs, nodes of named GPU types (e.g. k80:1x4,v100:1x4: each job runs at its type's speed), or a file with one 'name gpus [type]' line per node.", rich_help_panel=_EMULATED),
    profiles: Path | None = typer.Option(None, metavar="DIR", help="Measured profiles (Pollux format) the jobs follow (default: the built-in catalog).", rich_help_panel=_EMULATED),
    catalog: Path | None = typer.Option(None, metavar="FILE", help="A catalog file made by `corral calibrate` instead of the built-in one.", rich_help_panel=_EMULATED),
    time_scale: float = typer.Option(1.0, metavar="FACTOR", help="Emulated seconds per real second.", rich_help_panel=_EMULATED),
    restart_delay: float | None = typer.Option(None, metavar="SECONDS", show_default="each model's own in profiles of Sia's layout, else 30", help="Pause of a job whose placement changes (checkpoint and restart), emulated seconds, the same for every model.", rich_help_panel=_EMULATED),
    lockstep_jobs: int = typer.Option(0, metavar="N", help="A scripted run (corral emulate): emulated time moves a second at a time between the control loop's looks, each of which comes at the next second at which a job reported or ended or a round or an arrival falls, at most --time-scale times real time, from when N jobs are stored; each submission names its arrival (arrive_at_s). The run is then the same however loaded the machine is.", rich_help_panel=_EMULATED),
) -> None:
    """Run the live scheduler: the API, control loop and workers.

    The API (REST, on --host and --port), the control loop that calls the policy every
    --interval, and the workers of every job, on --executor."""
    from corral.executors import EXECUTORS
    from corral.service.endpoint import data_dir as resolve
    from corral.service.server import ServeOptions
    from corral.service.server import serve as run_service
    from corral.sim.batch.sweep import parse_settings

    _load_policy_modules(policy_module or [])
    overrides = parse_settings([policy], [s if "." in s.split("=", 1)[0] else f"{policy}.{s}"
                                          for s in (set_ or [])])[0].overrides
    if interval <= 0 or stop_timeout <= 0 or report_interval <= 0 or checkpoint_interval <= 0:
        raise CorralError("--interval, --stop-timeout, --report-interval and --checkpoint-interval must be > 0")
    if retry_backoff < 0 or max_retries < 0:
        raise CorralError("--retry-backoff and --max-retries must be >= 0")
    gpu_ids = None
    if gpus:
        try:
            gpu_ids = [int(g) for g in gpus.split(",") if g.strip()]
        except ValueError:
            raise InputError(f"--gpus {gpus!r}: expected comma-separated GPU ids, e.g. 0,1") from None
    slot_types = None
    if slots is not None:
        from corral.executors.slots import parse_slots

        slot_types = parse_slots(slots)
    from corral.executors.resize import MECHANISMS

    if mechanism is not None and mechanism not in MECHANISMS and executor != "emulated":
        raise InputError(f"--mechanism {mechanism!r}: choose one of {', '.join(MECHANISMS)}")
    options: dict[str, Any]
    options = dict(slots=len(slot_types) if slot_types else None, gpus=gpu_ids,
                   max_retries=max_retries, stop_timeout_s=stop_timeout,
                   report_interval_s=report_interval, checkpoint_interval_s=checkpoint_interval,
                   retry_backoff_s=retry_backoff)
    emulated_only = {"--cluster": cluster, "--profiles": profiles, "--catalog": catalog,
                     "--time-scale": time_scale != 1.0, "--restart-delay": restart_delay is not None,
                     "--lockstep-jobs": lockstep_jobs}
    if executor != "emulated" and any(emulated_only.values()):
        raise InputError(f"{', '.join(k for k, v in emulated_only.items() if v)} need(s) "
                         "--executor emulated")
    if tick is not None and tick <= 0:
        raise InputError("--tick must be > 0")
    tick_s = tick if tick is not None else 0.2
    if executor == "emulated":
        if time_scale <= 0 or (restart_delay or 0.0) < 0 or lockstep_jobs < 0:
            raise InputError("--time-scale must be > 0, --restart-delay and --lockstep-jobs >= 0")
        if slots is not None or gpus or ray_address or ray_storage or ray_resource:
            raise InputError("--slots, --gpus and --ray-* do not apply to --executor emulated "
                             "(its cluster is --cluster)")
        from corral.sim.loop.mechanism import mechanism_named

        mechanism_named(mechanism or "checkpoint-restart")  # a one-line error for a bad name
        options = dict(cluster=cluster or "16x4", profiles=profiles, catalog=catalog,
                       time_scale=time_scale, mechanism=mechanism or "checkpoint-restart",
                       restart_delay_s=restart_delay, report_interval_s=report_interval,
                       checkpoint_interval_s=checkpoint_interval, lockstep=lockstep_jobs > 0)
        if tick is None:
            tick_s = min(0.2, max(0.01, 2.0 / time_scale))
    elif executor == "ray":
        if slot_types and any(slot_types):
            raise InputError("--slots TYPE:N,... needs --executor local (the Ray executor "
                             "reads GPU types from its nodes)")
        options.update(address=ray_address, storage=ray_storage, resource=ray_resource,
                       early_init=early_init)
        if mechanism is not None:
            options.update(mechanism=mechanism)
    elif ray_address or ray_storage or ray_resource:
        raise InputError("--ray-address, --ray-storage and --ray-resource need --executor ray")
    else:
        options.update(early_init=early_init)
        if slot_types and any(slot_types):
            options.update(slot_types=slot_types)
        if mechanism is not None:
            options.update(mechanism=mechanism)
    if queues is not None and executor in ("local", "ray") and not allow_shared_user:
        options.update(sandbox=True)  # every worker sandboxed, or none starts (a Ray node too)
    opts = ServeOptions(data_dir=resolve(data_dir), executors=EXECUTORS, policy=policy,
                        policy_params=overrides,
                        executor=executor, executor_options=options, host=host, port=port,
                        interval_s=interval, token=token, stop_timeout_s=stop_timeout,
                        tick_s=tick_s, fill_in=fill_in, queues=queues,
                        start_after_jobs=lockstep_jobs,
                        allow_shared_user=allow_shared_user)

    def ready(url: str, _token: str) -> None:
        err_console.print(f"corral: serving {url} (policy {policy}, executor {executor}, "
                          f"data {opts.data_dir})", highlight=False, soft_wrap=True)

    run_service(opts, on_ready=ready)


@app.command(context_settings={"allow_interspersed_args": False})
@user_errors
def submit(
    command: list[str] = typer.Argument(..., metavar="COMMAND", help="The command to run, after --."),
    name: str | None = typer.Option(None, metavar="NAME", help="A name to show (default: the script's name)."),
    app: str | None = typer.Option(None, "--app", metavar="MODEL", help="The job's model (needed by --executor emulated: a catalog or profile name)."),
    queue: str | None = typer.Option(None, "--queue", "-q", metavar="NAME", help="The queue (team) to run in (corral serve --queues; default: the token's queue, or `default` for the admin token)."),
    gpus: int | None = typer.Option(None, metavar="N", help="The GPUs the job is tuned for (default: --min-gpus)."),
    min_gpus: int = typer.Option(1, metavar="N", help="Fewest GPUs the job can run on."),
    max_gpus: int | None = typer.Option(None, metavar="N", help="Most GPUs the job can use (default: the cluster)."),
    gpu_type: str | None = typer.Option(None, metavar="TYPE", help="Run only on GPUs of this type (e.g. a100; default: any type). The service refuses a type its cluster lacks, or a job larger than that type's GPUs."),
    batch_size: int = typer.Option(32, metavar="N", help="Total batch size the job is tuned for (M0)."),
    max_batch_size: int | None = typer.Option(None, metavar="N", help="Largest total batch (adaptive jobs; default 8x).", rich_help_panel=_BATCH),
    min_local_bsz: int | None = typer.Option(None, metavar="N", help="Smallest per-GPU batch.", rich_help_panel=_BATCH),
    max_local_bsz: int | None = typer.Option(None, metavar="N", help="Largest per-GPU batch that fits in memory.", rich_help_panel=_BATCH),
    adaptive: bool = typer.Option(False, "--adaptive/--fixed-batch", help="Let corral.train adapt the batch size.", rich_help_panel=_BATCH),
    lr_rule: str = typer.Option("adascale", metavar="RULE", help="Learning-rate scaling: adascale, sqrt or linear.", rich_help_panel=_BATCH),
    epochs: int | None = typer.Option(None, metavar="N", help="Epochs the job trains for, as you declare it: policies that weigh a job's remaining work (corral) read it, and the emulated executor ends the job after them (default: not declared)."),
    early_init: bool | None = typer.Option(None, "--early-init/--no-early-init", help="May its workers start and initialise on GPUs a job giving them up still trains on (default: once it has shown it runs corral.train; a plain script opts in by calling wait_for_start() from corral.protocol.early).", rich_help_panel=_BATCH),
    env: list[str] | None = typer.Option(None, metavar="KEY=VALUE", help="Environment variable of the workers (repeatable)."),
    cwd: Path | None = typer.Option(None, metavar="DIR", help="Working directory of the workers (default: here)."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP, rich_help_panel=_SERVICE),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL (default: $CORRAL_URL or the data directory's).", rich_help_panel=_SERVICE),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token (default: $CORRAL_TOKEN or the data directory's).", rich_help_panel=_SERVICE),
) -> None:
    """Submit a job: `corral submit --adaptive -- python train.py`."""
    from corral.service.submission import check_body, safe_text

    extra = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--env {safe_text(item)!r}: expected KEY=VALUE")
        extra[key] = value
    workdir = (cwd or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise InputError(f"--cwd {safe_text(str(workdir))}: no such directory")
    body = {"command": list(command), "name": name, "app": app, "cwd": str(workdir),
            "env": extra, "gpus": gpus, "min_gpus": min_gpus, "max_gpus": max_gpus,
            "batch_size": batch_size, "max_batch_size": max_batch_size,
            "min_local_bsz": min_local_bsz, "max_local_bsz": max_local_bsz,
            "adaptive": adaptive, "lr_rule": lr_rule, "early_init": early_init,
            "gpu_type": gpu_type}
    if epochs is not None:
        body["epochs"] = epochs
    if queue is not None:
        body["queue"] = queue
    check_body(body)  # one line for what the service would refuse (bad UTF-8, NUL, bounds)
    with _client(data_dir, url, token) as client:
        job = client.submit(body)
    for change in job.get("adjusted") or []:
        err_console.print(f"note: {escape(change)}", soft_wrap=True)
    console.print(job["id"])


@app.command("queues")
@user_errors
def queues_(
    set_file: Path | None = typer.Option(None, "--set", metavar="FILE", help="Replace the running service's queues with this TOML file (admin token; the old ones stay on an error). The service keeps them for its next start (docs/queues.md)."),
    drop: bool = typer.Option(False, "--drop", help="With --set: confirm dropping the queues FILE lacks (their tokens stop working); without it such a file is refused. Queues with active jobs are refused either way."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL."),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token."),
) -> None:
    """Queues: quota, GPUs used and borrowed; --set changes them.

    A queue's token sees its own queues only; --set needs the admin token."""
    with _client(data_dir, url, token) as client:
        if set_file is not None:
            try:
                text = set_file.read_text()
            except OSError as exc:
                raise InputError(f"{set_file}: {exc.strerror or exc}") from None
            done = client.put_queues(text, drop=drop)
            err_console.print(f"queues changed: {escape(done['changed'])}", soft_wrap=True)
            for path in done.get("new_tokens") or []:
                err_console.print(f"new token: DATA_DIR/{escape(path)}", soft_wrap=True)
        doc = client.queues()
    if as_json:
        console.print_json(json.dumps(doc))
        return
    table = Table(title="queues")
    for col in ("queue", "parent", "quota", "limit", "used", "borrowed", "share", "jobs",
                "waiting"):
        table.add_column(col, justify="left" if col in ("queue", "parent") else "right")
    for r in doc["queues"]:
        shown = {**r, **{k: _per_type(r[f"{k}_by_type"]) for k in ("quota", "limit")
                         if r.get(f"{k}_by_type")}}
        table.add_row(*(escape(str("-" if shown[k] is None else shown[k])) for k in (
            "name", "parent", "quota", "limit", "used", "borrowed", "share", "jobs",
            "waiting")))
    print_table(table, True)
    console.print(_taking_back_line(doc), soft_wrap=True)
    for change in doc.get("changes") or []:  # PUT /queues, newest last (a tenant: its own)
        console.print(f"changed at {change['time_s']:.1f} s: {escape(change['detail'])}",
                      highlight=False)


def _taking_back_line(doc: dict) -> str:
    """Under `corral queues`' table: how long a job runs before it may be taken back for
    another queue (`min_runtime_s`), and the usage half-life where one is set."""
    line = (f"min_runtime_s {doc['min_runtime_s']:g}: a job (re)started less than "
            f"{doc['min_runtime_s']:g} s ago is not preempted for another queue "
            "(shrinking in place is not held back)")
    if doc.get("usage_half_life_s") is not None:
        line += f"; usage_half_life_s {doc['usage_half_life_s']:g}"
    return line


def _per_type(gpus: dict[str, int]) -> str:
    """Quotas or limits per GPU type in a cell: `v100 8, k80 4`."""
    return ", ".join(f"{t} {g}" for t, g in gpus.items())


#: `corral jobs`' columns: rank 0 always shown, the others in rank order while they fit.
_JOB_COLUMNS = (Col("id", style="bold"), Col("name"), Col("status"), Col("why", rank=1),
                Col("queue", rank=1),
                Col("gpus", justify="right"), Col("type", rank=1),
                Col("batch", rank=1), Col("steps", rank=2, justify="right"),
                Col("epoch", rank=4, justify="right"), Col("loss", rank=3, justify="right"),
                Col("metric", rank=6, justify="right"), Col("launches", rank=7, justify="right"),
                Col("preempted", rank=8, justify="right"), Col("retries", rank=9, justify="right"),
                Col("resized", rank=6, justify="right"), Col("restarts", rank=5, justify="right"),
                Col("message", wrap=True))


def _gpu_type_text(job: dict) -> str:
    """The GPU type a job runs on (from its placement; an ended job's, the last it reported)
    and the one it is restricted to: `a100`, `a100 only` (restricted; placed on it or waiting
    for it), `-` (neither, or the unnamed type)."""
    wanted = (job.get("spec") or {}).get("gpu_type")
    runs = job.get("gpu_type")
    if runs is None and job.get("status") not in ("queued", "running"):
        runs = job.get("reported_gpu_type")  # ended: the type it last reported training on
    if wanted:
        return f"{wanted} only" if runs in (None, wanted) else f"{runs or '-'} ({wanted} only)"
    return runs or "-"


def _why_text(job: dict) -> str:
    """Why a waiting job waits, in a word or two (its reason's kind: `quota`, `ranked lower`;
    `corral describe` gives the whole reason); `-` for a job that does not wait."""
    reason = job.get("reason") if job.get("status") == "queued" else None
    return str(reason.get("kind", "-")).replace("_", " ") if isinstance(reason, dict) else "-"


def _jobs_table(rows: list[dict], width: int | None = None, total: int | None = None) -> Table:
    """`corral jobs`: the columns that fit `width` (None: all); message only when one has one;
    the title says how many of the `total` matching jobs are shown."""
    cells = []
    for r in rows:
        batch = f"{r['batch'][0]}x{r['batch'][1] + 1}" if r.get("batch") else "-"
        fmt = (lambda v: "-" if v is None else f"{v:.4g}")
        cells.append([str(c) for c in (
            r["id"], r["name"], r["status"], _why_text(r),
            (r.get("spec") or {}).get("queue") or "-",
            r["gpus"], _gpu_type_text(r), batch, r["steps"], r["epoch"],
            fmt(r.get("loss")), fmt(r.get("metric")), r.get("launches", 0),
            r.get("preemptions", 0), r.get("crash_retries", 0), r.get("in_place_resizes", 0),
            r["restarts"] - r.get("in_place_resizes", 0), r.get("message") or "")])
    cols = list(_JOB_COLUMNS)
    # no column that says nothing: message when no job has one, queue on a service without
    # queues, type on a cluster without GPU types, why when none waits (right to left, so
    # indices hold)
    for i, blank in ((len(cols) - 1, ""), (6, "-"), (4, "-"), (3, "-")):
        if all(c[i] == blank for c in cells):
            cols, cells = cols[:i] + cols[i + 1:], [c[:i] + c[i + 1:] for c in cells]
    # names and messages are user text: fitted_table escapes every cell
    title = "jobs" if total is None else f"jobs: {len(rows)} of {total}" + (
        " (the newest; --limit for more)" if len(rows) < total else "")
    return fitted_table(cols, cells, width, title=title, more="--wide or --json")[0]


def _job_rows(client: Client, limit: int, status: list[str], queue: list[str],
              name: str | None) -> tuple[list[dict], int]:
    """The newest `limit` jobs the filters match, oldest of them first, and how many match."""
    page = client.jobs_page(limit, status=status, queue=queue, name=name, newest_first=True)
    return page["jobs"][::-1], int(page["total"])


@app.command("jobs")
@user_errors
def jobs_(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Redraw the table every --every seconds until every job it shows has ended, or Ctrl-C."),
    every: float = typer.Option(2.0, metavar="SECONDS", help="Seconds between redraws with --watch."),
    wide: bool = typer.Option(False, "--wide", help="Every column, however wide the table (default: the ones that fit the terminal)."),
    status: list[str] = typer.Option([], "--status", metavar="STATUS", help="Only jobs in this status (queued, running, done, failed, cancelled); repeat for several."),
    queue: list[str] = typer.Option([], "--queue", metavar="QUEUE", help="Only jobs of this queue; repeat for several."),
    name: str | None = typer.Option(None, "--name", metavar="TEXT", help="Only jobs whose name contains TEXT."),
    limit: int = typer.Option(100, "--limit", metavar="N", help="Show the newest N jobs that match (at most 1000); the title says how many match in all."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL."),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token."),
) -> None:
    """List the newest jobs with their status, GPUs, batch and progress.

    --status, --queue and --name filter; the title says N of TOTAL matching jobs."""
    if watch and as_json:
        raise InputError("--watch and --json do not go together")
    width = None if wide else console.width
    if every <= 0:
        raise InputError("--every must be > 0")
    if not 1 <= limit <= 1000:
        raise InputError("--limit must be within 1..1000")
    with _client(data_dir, url, token) as client:
        def table() -> Table:
            return _jobs_table(*_job_rows(client, limit, status, queue, name), width)

        if not watch:
            rows, total = _job_rows(client, limit, status, queue, name)
            if as_json:
                console.print_json(json.dumps(rows))
                err_console.print(f"{len(rows)} of {total} jobs")
            else:
                print_table(_jobs_table(rows, width, total), wide)
            return
        from rich.live import Live

        def all_ended() -> bool:  # jobs match the filters and none is queued or running
            matched = client.jobs_page(0, status=status, queue=queue, name=name)["total"]
            active = [s for s in ("queued", "running") if not status or s in status]
            return matched > 0 and (not active or client.jobs_page(
                0, status=active, queue=queue, name=name)["total"] == 0)

        try:
            if not console.is_terminal:  # a file or pipe: one table after another
                while True:
                    ended = all_ended()
                    print_table(table(), wide)
                    sys.stdout.flush()
                    if ended:
                        return
                    time.sleep(every)
            with Live(table(), console=console, auto_refresh=False) as view:
                while not all_ended():  # a terminal: the table redrawn in place
                    time.sleep(every)
                    view.update(table(), refresh=True)
        except KeyboardInterrupt:
            pass


@app.command()
@user_errors
def cancel(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id (see `corral jobs`)."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL."),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token."),
) -> None:
    """Cancel a job (its workers are stopped)."""
    with _client(data_dir, url, token) as client:
        client.cancel(job_id)
    console.print(f"cancelling {job_id}")


@app.command()
@user_errors
def logs(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id."),
    rank: int = typer.Option(0, metavar="N", help="Which worker's output (0 also has the executor's notes)."),
    tail: int | None = typer.Option(None, metavar="BYTES", help="Only the last BYTES bytes."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing what is added until the job ends."),
    every: float = typer.Option(1.0, metavar="SECONDS", help="Seconds between polls with --follow."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL."),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token."),
) -> None:
    """Print a job's log (--follow: until the job ends).

    With --follow, keep printing what is added until the job ends."""
    if every <= 0:
        raise InputError("--every must be > 0")
    with _client(data_dir, url, token) as client:
        text = client.logs(job_id, rank, tail)
        sys.stdout.write(text)
        sys.stdout.flush()
        if not follow:
            return
        # where the whole log ends: follow from there
        size = len(text) if tail is None else len(client.logs(job_id, rank))
        try:
            while True:
                ended = client.job(job_id)["status"] not in ("queued", "running")
                whole = client.logs(job_id, rank)
                if len(whole) < size:  # a new launch truncated the log: print it anew
                    size = 0
                sys.stdout.write(whole[size:])
                sys.stdout.flush()
                size = len(whole)
                if ended:
                    return
                time.sleep(every)
        except KeyboardInterrupt:
            pass


@app.command()
@user_errors
def describe(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id."),
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    url: str | None = typer.Option(None, metavar="URL", help="Service URL."),
    token: str | None = typer.Option(None, metavar="TOKEN", help="API token."),
) -> None:
    """Everything about one job: spec, events, launches, ...

    Its spec, events, launches, assignments, checkpoints and last report."""
    with _client(data_dir, url, token) as client:
        job = client.job(job_id)
        telemetry = client.telemetry(job_id)
    _describe(job, telemetry)


def restarts_text(job: dict) -> str:
    """`2 restart(s)`, or `1 restart(s), 1 in-place resize(s)`: a resize in place is no
    restart, though the books count every placement change."""
    in_place = job.get("in_place_resizes", 0)
    text = f"{job['restarts'] - in_place} restart(s)"
    return text + (f", {in_place} in-place resize(s)" if in_place else "")


def _describe(job: dict, telemetry: list[dict]) -> None:
    """`corral describe`'s output: a line, the command whole, four tables (key columns on one
    line, text that wraps or folds, nothing cut at any width) and two lines."""
    out = console.print
    runs = job.get("gpu_type")
    wanted = (job.get("spec") or {}).get("gpu_type")
    types = ((f", type {escape(runs)}" if runs else "")
             + (f", only on {escape(wanted)}" if wanted else ""))
    queue = (job.get("spec") or {}).get("queue")
    out(f"[bold]{escape(job['id'])}[/] {escape(job['name'])}"
        + (f" (queue {escape(queue)})" if queue else "")
        + f": {job['status']} on {job['gpus']} "
        f"GPU(s) ({escape(job['placement'])}{types}), {job['steps']} steps, epoch {job['epoch']}, "
        f"{job['launches']} launch(es), {restarts_text(job)}"
        + (f" - {escape(job['message'])}" if job.get("message") else ""), soft_wrap=True)
    reason = job.get("reason") if job.get("status") == "queued" else None
    if isinstance(reason, dict):  # why it waits, whole
        out(f"waiting: {escape(str(reason.get('kind', '')).replace('_', ' '))}: "
            f"{escape(str(reason.get('text', '')))}", soft_wrap=True)
    command = (job.get("spec") or {}).get("command") or job.get("command") or []
    # whole, on a line of its own: a table folds a long path mid-word at the terminal's width
    out("command: " + escape(shlex.join(command)), soft_wrap=True)
    spec = Table(title="spec", show_header=False)
    spec.add_column(no_wrap=True, overflow="fold")
    spec.add_column(overflow="fold")
    for key, value in {"command": job.get("command"), **job["spec"]}.items():
        spec.add_row(key, escape(json.dumps(value)))
    out(spec)
    events = Table(title="events")
    events.add_column("time (s)", justify="right", no_wrap=True, overflow="fold")
    events.add_column("event", no_wrap=True, overflow="fold")
    events.add_column("detail", overflow="fold")
    for e in job["events"]:
        events.add_row(f"{e['time_s']:.1f}", escape(e["kind"]), escape(e["detail"]))
    out(events)
    launches = Table(title="launches (first report of each)")
    for col in ("launch", "time (s)", "workers", "GPU\ntype", "batch", "resumed\nfrom step",
                "how it\nstarted"):
        launches.add_column(col, justify="left" if col in ("batch", "how it\nstarted", "GPU\ntype")
                            else "right", no_wrap=True, overflow="fold")
    seen: set = set()
    for t in telemetry:
        if t["launch"] is None or t["launch"] in seen:
            continue
        seen.add(t["launch"])
        batch = f"{t['local_bsz']}x{(t['accum_steps'] or 0) + 1}" if t["local_bsz"] else "-"
        launches.add_row(str(t["launch"]), f"{t['time_s']:.1f}", str(t["world_size"]),
                         escape(t.get("gpu_type") or "-"), batch,
                         "-" if t["resumed_steps"] is None else str(t["resumed_steps"]),
                         t.get("launch_start") or "-")  # corral.service.records' words
    out(launches)
    assigned = Table(title="assignments")
    assigned.add_column("time (s)", justify="right", no_wrap=True, overflow="fold")
    assigned.add_column("placement", overflow="fold")
    assigned.add_column("GPUs", justify="right", no_wrap=True, overflow="fold")
    assigned.add_column("batch", overflow="fold")
    for a in job["assignments"]:
        assigned.add_row(f"{a['time_s']:.1f}", escape(a["placement"]), str(a["num_gpus"]),
                         escape(str(a["batch"] or "-")))
    out(assigned)
    checkpoints = [e for e in job["events"] if e["kind"] in ("resumed", "fresh")]
    out("checkpoints: " + ("; ".join(escape(e["detail"]) for e in checkpoints) if checkpoints
                           else "no launch has resumed from one"), soft_wrap=True)
    out("last report: " + escape(last_report_text(job.get("report"))), soft_wrap=True)
    out("batch AxB: A samples per GPU per micro-batch, B micro-batches per step (gradient "
        "accumulation); the step's batch is A x B x GPUs", style="dim")


def last_report_text(doc: Any) -> str:
    """The `report` of GET /jobs/{id} in words (`report_text`), or why there is none."""
    if not doc:
        return "none (the job has not reported; a script without corral.train never does)"
    try:
        return report_text(Report.parse(doc))
    except ReportError as exc:
        return f"unreadable ({exc})"


def report_text(report: Report) -> str:
    """A job's last report in words: when (local time, and how long ago), its state, where it
    trains, its step, epoch, loss, batch, last metric and how its launch started."""
    parts = []
    stamp = report.time
    if stamp is not None:
        ago = max(0.0, time.time() - stamp)
        parts.append(time.strftime("%H:%M:%S", time.localtime(stamp)) + f" ({ago:.0f} s ago)")
    if report.state:
        parts.append(report.state)
    if report.world_size is not None:
        where = f" on {report.gpu_type}" if report.gpu_type else ""
        launch = "-" if report.launch is None else report.launch
        parts.append(f"launch {launch}, {report.world_size} worker(s){where}")
    if report.steps is not None:
        parts.append(f"step {report.steps}")
    if report.epoch is not None:
        parts.append(f"epoch {report.epoch}")
    if report.loss is not None:
        parts.append(f"loss {report.loss:.4g}")
    if report.batch is not None:
        total = f" (step batch {report.total_bsz})" if report.total_bsz else ""
        parts.append(f"batch {report.batch[0]}x{report.batch[1] + 1}{total}")
    if report.metrics:
        _, epoch, value = report.metrics[-1]
        parts.append(f"metric {value:.4g} at epoch {epoch}")
    resumed = report.resumed
    if resumed is not None and resumed.get("steps") is not None:
        how = "in place" if resumed.get("in_place") else "from a checkpoint"
        pause = (f", paused {resumed['pause_s']:.2f} s"
                 if isinstance(resumed.get("pause_s"), (int, float)) else "")
        parts.append(f"resumed {how} at step {resumed['steps']}{pause}")
    return ", ".join(parts)

