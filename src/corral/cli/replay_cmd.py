"""`corral replay`: a finished live run replayed in the simulator from what its jobs measured;
prints each job's real and simulated JCT, then the median and worst error and the jobs left
out (and why), and can write the measured catalog for `simulate`.

Registered on the main `corral` app when this module is imported. Thin: parses arguments and
joins `corral.service.run_record` (reads the run) and `corral.sim.analysis.measured_run` (replays it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from corral.cli.live import _DATA_DIR_HELP, _load_policy_modules
from corral.cli.main import app, console, user_errors
from corral.report.tables import Col, fitted_table

if TYPE_CHECKING:  # the simulator is imported when the command runs
    from corral.sim.analysis.measured_run import ReplayedJob
    from corral.sim.loop.mechanism import ReshapeOverheads


def replay_table(rows: Sequence[ReplayedJob], run_policy: str, policy: str,
                 o: ReshapeOverheads) -> Table:
    """Each job's real and simulated JCT; `o` the measured overheads replayed. Every column
    always (five narrow ones): ids and numbers on one line, the title wraps."""
    cols = [Col("job", style="bold"), Col("app"), Col("real JCT (s)", justify="right"),
            Col("simulated\nJCT (s)", justify="right"), Col("error", justify="right")]
    cells = [[r.job_id, r.app, f"{r.real_jct_s:.1f}",
              "unfinished" if r.sim_jct_s is None else f"{r.sim_jct_s:.1f}",
              "" if r.error is None else f"{r.error:+.1%}"] for r in rows]
    title = (f"live run under {run_policy} vs the simulator under {policy}, {o.name} (measured: "
             f"start {o.start_s:.2f} s, grow {o.grow_s:.2f} s, shrink {o.shrink_s:.2f} s)")
    return fitted_table(cols, cells, None, title=title)[0]


@app.command()
@user_errors
def replay(
    data_dir: Path | None = typer.Option(None, metavar="DIR", help=_DATA_DIR_HELP),
    policy: str | None = typer.Option(None, "--policy", "-p", metavar="POLICY", help="Replay under this policy instead of the run's own (a what-if)."),
    policy_module: list[Path] | None = typer.Option(None, metavar="FILE", help="Python file registering extra policies (repeatable)."),
    mechanism: str | None = typer.Option(None, "--mechanism", "-m", metavar="MECHANISM", help="Replay with this resize mechanism's measured pauses: in-place (the run's in-place resizes) or checkpoint-restart (its launches' start time). Default: the run's own."),
    catalog_out: Path | None = typer.Option(None, metavar="FILE", help="Write the measured catalog here (for `corral simulate --catalog`)."),
) -> None:
    """Replay a live run in the simulator and compare the JCTs.

    Each job's simulated JCT is printed beside the real one.
    The simulator charges the resize pauses the run measured; `--mechanism` replays the same
    jobs under the other mechanism (a what-if: how much in-place resizing saved)."""
    from corral.policies import create_policy
    from corral.service.endpoint import data_dir as resolve
    from corral.service.run_record import read_run
    from corral.sim.analysis.measured_run import MeasuredRun, measured_catalog, replay_summary
    from corral.sim.analysis.measured_run import replay as run_replay

    _load_policy_modules(policy_module or [])
    run = MeasuredRun.from_record(read_run(resolve(data_dir)))
    chosen = create_policy(policy) if policy else None
    rows, mech = run_replay(run, chosen, mechanism)
    o = mech.overheads
    console.print(replay_table(rows, run.policy, policy or run.policy, o))
    for line in replay_summary(rows, run.left_out, start_s=o.start_s):
        console.print(escape(line), soft_wrap=True)
    if catalog_out is not None:
        catalog_out.write_text(json.dumps(measured_catalog(run), indent=1) + "\n")
        console.print(f"wrote {catalog_out}")
