"""Run several policies over several workloads: the matrix `corral simulate` reports.

Each (policy, workload) cell is one independent simulation; `run_matrix` hands the cells to a
runner (`corral.sim.batch.runners`: this process, worker processes, or Ray tasks) and puts their
results back in matrix order, so a parallel sweep reports exactly what a serial one does. A cell
that raises is kept as a `CellFailure` naming its cell; the other cells' results are kept.
Given a `CellStore`, each finished cell is kept on disk as it finishes, and a resumed sweep
(`reuse=True`) takes the kept cells of the same inputs instead of running them again.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.cluster import Cluster
from corral.core.errors import InputError, UnknownPolicyError
from corral.core.policy import param_fields
from corral.policies import create_policy, policy_class
from corral.policies.tenancy import QueuedPolicy
from corral.sim.analysis.allocations import record_allocations
from corral.sim.analysis.bound_jobs import workload_lp_bound
from corral.sim.analysis.queue_metrics import QueueSetup, resolve_queues
from corral.sim.batch.cellstore import CellStore, cell_key, workload_digest
from corral.sim.batch.runners import ProcessRunner, RayRunner, Runner, SerialRunner, Task
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.results import SimResult
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import Workload


@dataclass(frozen=True)
class PolicyChoice:
    """A policy name and the parameters set for it."""

    name: str
    overrides: Mapping[str, str]


def parse_settings(policies: Sequence[str], settings: Sequence[str],
                   seed: int | None = None) -> list[PolicyChoice]:
    """Resolve `--set policy.key=value` (or `key=value` for every policy that has `key`).

    `seed` (`corral simulate --seed`) is the `seed` parameter of every randomized policy that
    has one; a `--set` of it wins."""
    per_policy: dict[str, dict[str, str]] = {p: {} for p in policies}
    for name in policies:
        cls = policy_class(name)  # unknown policy -> one-line error
        if seed is not None and "seed" in {n for n, _, _ in param_fields(cls)}:
            per_policy[name]["seed"] = str(seed)
    for item in settings:
        if "=" not in item:
            raise UnknownPolicyError(f"--set {item!r}: expected policy.key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if "." in key:
            pol, param = key.split(".", 1)
            if pol not in per_policy:
                raise UnknownPolicyError(f"--set {item!r}: policy {pol!r} is not among those run ({', '.join(policies)})")
            per_policy[pol][param] = value.strip()
        else:
            owners = [p for p in policies if key in {n for n, _, _ in param_fields(policy_class(p))}]
            if not owners:
                raise UnknownPolicyError(f"--set {item!r}: no policy run here has a parameter {key!r}")
            for pol in owners:
                per_policy[pol][key] = value.strip()
    choices = [PolicyChoice(p, per_policy[p]) for p in policies]
    for c in choices:
        create_policy(c.name, c.overrides)  # validate names and values up front
    return choices


@dataclass(frozen=True)
class CellFailure:
    """A cell of the matrix whose simulation raised: which cell, and the error."""

    policy: str
    workload: str
    error: str  # one line: the exception's type and message
    detail: str  # the traceback, for a log

    def describe(self) -> str:
        return f"{self.policy} on {self.workload}: {self.error}"


@dataclass
class MatrixResult:
    """Every finished cell's result, by policy in workload order, and the cells that failed."""

    results: dict[str, list[SimResult]]
    failures: list[CellFailure]
    #: Lines about the LP bounds that could not be computed (`run_matrix(bound=True)`).
    notes: list[str] = field(default_factory=list)
    #: Cells taken from the `CellStore` instead of run (`run_matrix(reuse=True)`).
    reused: int = 0


CellOutcome = tuple[SimResult | None, CellFailure | None]


def run_cell(source: TruthSource, choice: PolicyChoice, workload: Workload, cluster: Cluster,
             config: EngineConfig,
             on_progress: Callable[[float], None] | None = None,
             queues: QueueSetup | None = None) -> CellOutcome:
    """One simulation (a fresh policy instance); an exception becomes a `CellFailure`.

    Runs in whichever process or Ray worker the runner chose; the truth is loaded there once.
    `on_progress(fraction of jobs finished)` only where the cell runs in this process. With
    `queues`, the policy runs once per queue on the queue's share (`QueuedPolicy`), and each
    job's record names the queue it ran in.
    """
    try:
        tree = None if queues is None else resolve_queues(queues, workload, cluster.total_gpus)
        if tree is None:
            policy = create_policy(choice.name, choice.overrides)
        else:
            policy = QueuedPolicy(lambda: create_policy(choice.name, choice.overrides), tree)
        allocations = record_allocations(policy)
        sim = Simulator(source.load(), policy, cluster, config)
        result = sim.run(workload, on_progress=on_progress)
        result.allocations = allocations
        named = {spec.name: spec.queue for spec in workload.jobs}
        for record in result.jobs:
            queue = named.get(record.name)
            record.queue = queue if tree is None else tree.leaf_for(queue)
        return result, None
    except Exception as exc:  # noqa: BLE001 - reported with its cell, the others go on
        return None, CellFailure(choice.name, workload.name, f"{type(exc).__name__}: {exc}",
                                 traceback.format_exc())


def bound_cell(source: TruthSource, workload: Workload,
               cluster: Cluster) -> tuple[float | None, str | None]:
    """The workload's LP bound on the average JCT (`corral.sim.analysis.bound_jobs`: the exact LP
    up to `MAX_EXACT_JOBS` jobs, its windowed relaxation above), or None and why not (a solver
    failure); never raises."""
    try:
        return workload_lp_bound(workload, source.load(), cluster).avg_jct_s, None
    except Exception as exc:  # noqa: BLE001 - the simulations are reported all the same
        return None, f"LP bound of {workload.name} failed: {type(exc).__name__}: {exc}"


def runner_for(jobs: int = 1, ray_address: str | None = None) -> Runner:
    """Ray tasks when an address is given, else `jobs` worker processes (1: this process)."""
    if ray_address is not None:
        return RayRunner(ray_address)
    if jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {jobs}")
    return SerialRunner() if jobs == 1 else ProcessRunner(jobs)


def run_matrix(source: TruthSource, choices: Sequence[PolicyChoice],
               workloads: Sequence[Workload], cluster: Cluster, config: EngineConfig,
               runner: Runner | None = None,
               on_cell_done: Callable[[int, int, str, str, bool], None] | None = None,
               on_job_progress: Callable[[str, str, float], None] | None = None,
               bound: bool = False, store: CellStore | None = None,
               reuse: bool = False, queues: QueueSetup | None = None) -> MatrixResult:
    """Each policy (a fresh instance per workload) on each workload, through `runner`.

    Results do not depend on the runner. `on_cell_done(done, total, policy, workload, ok)` is called
    as cells finish; `on_job_progress` too when cells run in this process. `bound=True` also
    computes each workload's LP bound (`bound_cell`, started first). With a `store` every finished
    cell is kept at once; with `reuse`, kept cells of the same inputs and code are taken. After a
    full matrix the store is pruned to it (`CellStore.prune`); after a failure it keeps all.
    `queues`: every cell runs under these queues (`run_cell`).
    """
    cells = [(choice, workload) for choice in choices for workload in workloads]
    keys: list[str] = []
    if store is not None:
        digests = {id(w): workload_digest(w) for w in workloads}
        tenancy = {} if queues is None else {"(queues)": repr(queues)}
        keys = [cell_key(source, c.name, {**c.overrides, **tenancy}, digests[id(w)], cluster,
                         config) for c, w in cells]
    outcomes: dict[int, CellOutcome] = {}
    if reuse and store is not None:
        for index, key in enumerate(keys):
            kept = store.get(key)
            if kept is not None:
                outcomes[index] = (kept, None)
                if on_cell_done is not None:
                    on_cell_done(len(outcomes), len(cells), cells[index][0].name, kept.workload,
                                 True)
    reused = len(outcomes)
    todo = [i for i in range(len(cells)) if i not in outcomes]
    if runner is None or len(todo) <= 1:
        runner = SerialRunner()

    def hook(choice: PolicyChoice, workload: Workload) -> Callable[[float], None] | None:
        if on_job_progress is None or not isinstance(runner, SerialRunner):
            return None
        return lambda fraction: on_job_progress(choice.name, workload.name, fraction)
    bounds = list(workloads) if bound else []
    tasks: list[Task] = [(bound_cell, (source, workload, cluster)) for workload in bounds]
    tasks += [(run_cell, (source, cells[i][0], cells[i][1], cluster, config, hook(*cells[i]),
                          queues)) for i in todo]
    lp: dict[int, tuple[float | None, str | None]] = {}
    store_notes: list[str] = []
    for index, outcome in runner.run(tasks):
        if index < len(bounds):
            lp[index] = outcome
            continue
        index = todo[index - len(bounds)]
        outcomes[index] = outcome
        if store is not None and outcome[0] is not None:
            try:
                store.put(keys[index], outcome[0])
            except OSError as exc:  # the sweep goes on; this cell cannot be resumed
                store_notes.append(f"{cells[index][0].name} on {cells[index][1].name} not kept "
                                   f"in {store.root}: {exc}")
        if on_cell_done is not None:
            choice, workload = cells[index]
            on_cell_done(len(outcomes), len(cells), choice.name, workload.name, outcome[1] is None)
    by_workload = {id(w): lp[i][0] for i, w in enumerate(bounds)}
    notes = [n for i in range(len(bounds)) if (n := lp[i][1])] + store_notes
    results: dict[str, list[SimResult]] = {c.name: [] for c in choices}
    failures: list[CellFailure] = []
    for index in range(len(cells)):
        result, failure = outcomes[index]
        if result is not None:
            result.lp_bound_avg_jct_s = by_workload.get(id(cells[index][1]))
            results[cells[index][0].name].append(result)
        else:
            assert failure is not None  # (a cell has its result or its failure)
            failures.append(failure)
    if store is not None and not failures:  # complete: earlier runs' cells are not needed
        gone = store.prune(set(keys))
        if gone:
            notes.append(f"removed {gone} simulation(s) of earlier runs with other inputs or "
                         f"code from {store.root}")
    return MatrixResult({p: rs for p, rs in results.items() if rs}, failures, notes, reused)
