"""Early initialisation in the local executor (corral.executors.early, SideCar spec 1.3/1.6):
a job placed on slots a running job (the donor) gives up starts its workers while the donor
trains on; the donor gives the slots up only once they are ready; the job then trains there.

The incoming job's initialisation lasts until the test creates a file (tiny_job.py
--init-hold-file), so "not ready yet" is a state the test holds, not a race; every other wait
is for a state, bounded in time. Jobs are endless by construction and cancelled at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainjobs import (  # noqa: E402  (on sys.path)
    LEAVE_CPU,
    TIMEOUT_S,
    on_node0,
    own_hold_file,
    tiny,
    trains_on,
    wait,
)

from corral.executors.base import ExecState, JobLaunch  # noqa: E402
from corral.executors.local import LocalExecutor  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _tiny(job_id: str, hold: Path | None = None, early_init: bool | None = True) -> JobLaunch:
    """The tiny trainer; with `hold`, its initialisation waits for that file (a state the test
    holds, not a race)."""
    return tiny(job_id, *LEAVE_CPU, *(("--init-hold-file", str(hold)) if hold else ()),
                early_init=early_init)


def _steps(ex: LocalExecutor, job_id: str) -> int:
    report = ex.files.report(job_id)
    return (report.steps or 0) if report is not None else 0


def _events(ex: LocalExecutor, job_id: str, kind: str) -> list[str]:
    return [d for k, d in ex.status(job_id).events if k == kind]


def _waiting(hold: Path, rank: int = 0) -> Path:
    return hold.with_name(f"{hold.name}.waiting-r{rank}")


@pytest.fixture
def make_executor(tmp_path: Path):
    made = []

    def make(**options) -> LocalExecutor:
        ex = LocalExecutor(tmp_path / "data", slots=2, report_interval_s=0.2,
                           checkpoint_interval_s=1.0, stop_timeout_s=30, max_retries=1, **options)
        made.append(ex)
        return ex
    yield make
    for ex in made:
        ex.shutdown(timeout_s=30)


def _hand_over(ex: LocalExecutor, donor_world: int | None, incoming: JobLaunch,
               incoming_world: int) -> None:
    """One round: the donor shrinks to `donor_world` workers (None: it is preempted) and the
    incoming job is placed on what it gives up."""
    with ex.applying():
        if donor_world is None:
            ex.stop("donor")
        else:
            ex.place(_tiny("donor"), on_node0(donor_world))
        ex.place(incoming, on_node0(incoming_world))


@pytest.mark.parametrize("preempt", [False, True], ids=["shrink", "preempt"])
def test_donor_trains_until_the_incoming_job_is_ready(make_executor, tmp_path: Path,
                                                      preempt: bool) -> None:
    ex = make_executor()
    hold = own_hold_file(tmp_path / "data")
    ex.place(_tiny("donor"), on_node0(2))
    first = trains_on(ex, "donor", 0, 2, after_steps=3)
    world = 2 if preempt else 1
    _hand_over(ex, None if preempt else 1, _tiny("incoming", hold), world)

    # the incoming job's workers have started and are initialising ...
    wait(lambda: all(_waiting(hold, r).exists() for r in range(world)), "the early workers")
    started_at = _steps(ex, "donor")
    assert _events(ex, "incoming", "early-init")
    # ... while the donor keeps stepping on all its slots (the incoming job cannot be ready)
    wait(lambda: _steps(ex, "donor") > started_at + 5, "the donor to keep training")
    donor, incoming = ex.status("donor"), ex.status("incoming")
    assert donor.state is ExecState.RUNNING and len(donor.workers) == 2 and donor.launches == 1
    assert incoming.state is ExecState.QUEUED and not incoming.workers
    assert not _events(ex, "donor", "donated")
    # slot books: the donor holds both slots; the incoming job holds none and is promised its own
    assert ex.pool.held("donor") == [0, 1]
    assert ex.pool.promised("incoming") == ([0, 1] if preempt else [1])
    assert ex.pool.held("incoming") == []

    hold.touch()  # initialisation ends: the workers report ready; the donor gives the slots up
    trained = trains_on(ex, "incoming", 0, world, after_steps=3)  # (b) it trains on the slots
    assert trained.resumed is None  # its first launch, from scratch
    donated = _events(ex, "donor", "donated")
    assert len(donated) == 1 and "initialised early" in donated[0]
    summary, = _events(ex, "incoming", "early-started")
    assert "started early" in summary and "overlap" in summary
    assert ex.pool.held("incoming") == ([0, 1] if preempt else [1])
    assert ex.pool.promised() == []
    if preempt:
        ex.wait_for("donor", ExecState.STOPPED, TIMEOUT_S)
        assert ex.pool.held("donor") == []
    else:
        shrunk = trains_on(ex, "donor", 1, 1, after_steps=first.steps)
        assert shrunk.resumed["in_place"] == 1  # it shrank by its own mechanism (in place)
        assert ex.pool.held("donor") == [0]
    assert ex.status("incoming").crashes == 0 == ex.status("donor").crashes
    ex.stop("incoming", cancel=True)
    ex.stop("donor", cancel=True)
    ex.wait_for("incoming", ExecState.CANCELLED, 60)


@pytest.mark.parametrize("where", ["job", "executor"])
def test_opting_out_starts_the_job_after_the_donor_gave_up(make_executor, tmp_path: Path,
                                                           where: str) -> None:
    ex = make_executor(early_init=where != "executor")
    hold = own_hold_file(tmp_path / "data")
    hold.touch()  # no initialisation hold: the order is what is tested
    ex.place(_tiny("donor"), on_node0(2))
    first = trains_on(ex, "donor", 0, 2, after_steps=3)
    _hand_over(ex, 1, _tiny("incoming", hold, early_init=where != "job"), 1)
    wait(lambda: _waiting(hold).exists(), "the incoming job to start")
    # its worker started only once the donor had shrunk and freed the slot (as before)
    assert ex.status("donor").launches == 2 and len(ex.status("donor").workers) == 1
    trains_on(ex, "incoming", 0, 1)
    trains_on(ex, "donor", 1, 1, after_steps=first.steps)
    assert not _events(ex, "incoming", "early-init") and not _events(ex, "donor", "donated")
    assert not _events(ex, "incoming", "early-started")
    ex.stop("incoming", cancel=True)
    ex.stop("donor", cancel=True)
    ex.wait_for("incoming", ExecState.CANCELLED, 60)


def test_an_early_worker_that_dies_leaves_the_donor_alone(make_executor, tmp_path: Path) -> None:
    ex = make_executor()
    hold = own_hold_file(tmp_path / "data")
    ex.place(_tiny("donor"), on_node0(2))
    first = trains_on(ex, "donor", 0, 2, after_steps=3)
    _hand_over(ex, 1, _tiny("incoming", hold), 1)
    wait(lambda: _waiting(hold).exists(), "the early worker")
    ex._jobs["incoming"].early.procs[0].kill()  # white-box: it dies while it initialises

    fallback = wait(lambda: _events(ex, "incoming", "early-init-fallback"), "the fallback")
    assert "exited" in fallback[0] and "starts normally" in fallback[0]
    # the donor was not harmed: it shrinks in place as decided, no restart, no crash
    shrunk = trains_on(ex, "donor", 1, 1, after_steps=first.steps)
    assert shrunk.resumed["in_place"] == 1 and ex.status("donor").crashes == 0
    hold.touch()
    trains_on(ex, "incoming", 0, 1)  # started normally on the freed slot
    st = ex.status("incoming")
    assert st.crashes == 0 and len(_events(ex, "incoming", "early-init")) == 1  # no retry early
    assert not _events(ex, "incoming", "early-started")
    assert ex.pool.held("incoming") == [1] and ex.pool.held("donor") == [0]
    ex.stop("incoming", cancel=True)
    ex.stop("donor", cancel=True)
    ex.wait_for("incoming", ExecState.CANCELLED, 60)
