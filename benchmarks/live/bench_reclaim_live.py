"""Elastic reclaim, live (issue 36): the time until a queue's work runs on its quota while
another queue borrows it, shrinking in place against checkpoint-restart and preemption.

The live half of `speed/bench_queues.py`'s "elastic reclaim" figure. A real `corral serve
--queues` on 2 CPU slots, queues a and b of quota 1 each, each tenant submitting with its own
token (DATA_DIR/tokens/QUEUE). Tenant a's `corral.train` job (examples/digits_elastic.py, with
`bench_mechanism_live.py`'s emulated accelerator so that two workers train faster than one)
asks for 2 slots, borrowing b's idle one, and trains on both; then tenant b submits a 1-slot
job. Measured from b's submission (the service's `submitted` event), from the jobs' events and
b's first report:

* the round in which the layer gives b its slot (b's `started` event) and tells a (a's
  `resized` to 1 GPU, or `preempted`);
* the slot free and b's worker launched on it (the executor records a launch's worker pids
  as it starts them: b's `workers.json` is written then, its mtime is the launch);
* b's first training step (its report's `first_step_time`);
* what happened to a (in place, checkpoint-restart or preempted whole), its training pause
  and the time until it trains again at 1 worker (`resizes` of the job).

Runs, one after the other in one invocation:

* pollux (elastic) with `--mechanism in-place`: a is shrunk from 2 workers to 1 in place;
* pollux with `--mechanism checkpoint-restart`: a checkpoints, stops and restarts on 1;
* fifo (gang; `--mechanism in-place`, unused): a's 2-slot gang is preempted whole and waits.

`--repeats` runs of each (default 3, their order alternating), each bounded (`--budget`,
default 180 s); a run takes 15-25 s on the 2-core development machine. The table gives each
measurement's median and range over the runs. `--only` picks setups by label, `--keep DIR`
keeps each run's data directory, `--out FILE` also writes what was printed there.

Last run (2026-11-28, at cc485d2, on the 2-core shared AMD EPYC, load average 6-7 from other
work; 3 runs each, medians; benchmarks/results/bench_reclaim_live_cc485d2.txt): the layer gave
b its slot 0.65 s (in place), 0.43 s (checkpoint-restart) and 0.93 s (fifo) after b submitted,
the slot was free at 1.63, 0.92 and 1.44 s, b's first step came at 5.69, 6.11 and 5.58 s (its
own start-up on the loaded cores dominates); a paused 0.52 s shrunk in place against 5.87 s by
checkpoint-restart, and fifo preempted a's gang whole.

Run: python benchmarks/live/bench_reclaim_live.py [--repeats 3] [--only pollux/in-place,fifo/gang]
         [--budget 180] [--device-ms 3] [--keep DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import Printed, machine
from bench_mechanism_live import ADAPTIVE, POLICY_SETTINGS, REPO  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "service"))

import livecluster as live  # noqa: E402  (the tests' helper that runs `corral serve`)

from corral.service.store import Store  # noqa: E402

QUEUES = "[queue.a]\nquota = 1\n[queue.b]\nquota = 1\n"
EPOCHS = "100"  # neither job ends within a run: both are cancelled once measured


@dataclass(frozen=True)
class Setup:
    """One run: the inner policy, the resize mechanism and a's job."""

    label: str
    policy: str
    mechanism: str
    a_fields: dict[str, Any]
    settings: tuple[str, ...] = ()


SETUPS = (
    Setup("pollux/in-place", "pollux", "in-place", dict(ADAPTIVE, gpus=2, max_gpus=2),
          POLICY_SETTINGS),
    Setup("pollux/ckpt-restart", "pollux", "checkpoint-restart",
          dict(ADAPTIVE, gpus=2, max_gpus=2), POLICY_SETTINGS),
    Setup("fifo/gang", "fifo", "in-place", dict(batch_size=32, gpus=2, min_gpus=2, max_gpus=2)),
)


def first(events: list[dict], kind: str, after: float, prefix: str = "") -> float | None:
    """The time of the first `kind` event at or after `after` whose detail starts with
    `prefix`."""
    return next((e["time_s"] for e in events if e["kind"] == kind and e["time_s"] >= after
                 and e["detail"].startswith(prefix)), None)


def close_run(svc: live.LiveService, tenants: list, ids: list[str], label: str) -> None:
    """The end of a run, however it went: the tenants' clients closed, the jobs still listed
    in `ids` cancelled (a failure to is said, not raised: the run's figures stand) and the
    service stopped."""
    for client in tenants:
        client.close()
    if svc.client is not None and ids:
        try:
            svc.cancel_all(ids, timeout_s=60)
        except Exception as exc:  # noqa: BLE001 - say it, and stop the service anyway
            print(f"  ({label}: cancelling its jobs: {exc})")
    svc.close()


def run(setup: Setup, directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One live run of `setup`; its measurements, in seconds after b's submission."""
    directory.mkdir(parents=True)
    svc = live.LiveService(directory, setup.policy, slots=2, interval_s=args.interval,
                           extra_args=("--queues", str(directory / "queues.toml"),
                                       "--mechanism", setup.mechanism, *setup.settings))
    (directory / "queues.toml").write_text(QUEUES)
    began = time.monotonic()
    left = lambda: max(5.0, args.budget - (time.monotonic() - began))  # noqa: E731
    tenants: list[Any] = []
    ids: list[str] = []
    try:
        svc.start()
        a, b = svc.tenant("a"), svc.tenant("b")
        tenants += [a, b]
        digits = ("digits_elastic.py", "--epochs", EPOCHS, "--device-ms-per-sample",
                  str(args.device_ms))
        a_id = svc.submit(*digits, client=a, queue="a", name="a-borrower", **setup.a_fields)
        ids.append(a_id)

        def a_on_two() -> bool:
            job = a.job(a_id)
            report = job.get("report") or {}
            return job["gpus"] == 2 and report.get("world_size") == 2 and job["steps"] > 0
        live.wait_until(a_on_two, left(), "a to train on 2 slots", poll_s=0.2)
        time.sleep(args.settle)  # a trains at 2 workers for a while, as a borrower would
        b_id = svc.submit(*digits, client=b, queue="b", name="b-reclaims", gpus=1, max_gpus=1,
                          batch_size=32)
        ids.append(b_id)

        def measured() -> bool:
            ja, jb = a.job(a_id), b.job(b_id)
            a_done = any(r["to_gpus"] == 1 for r in ja.get("resizes") or []) or any(
                e["kind"] == "preempted" for e in ja["events"])
            return a_done and jb["steps"] > 0 and (jb.get("report") or {}).get(
                "first_step_time") is not None
        live.wait_until(measured, left(), "b's first step and a's resize", poll_s=0.2)
        ja, jb = a.job(a_id), b.job(b_id)
        origin = _origin(directory)
        b_launch = (directory / "jobs" / b_id / "workers.json").stat().st_mtime - origin
    finally:
        close_run(svc, tenants, ids, setup.label)
    t0 = first(jb["events"], "submitted", 0.0)
    assert t0 is not None
    rel = lambda t: None if t is None else t - t0  # noqa: E731
    a_told = first(ja["events"], "resized", t0, "1 GPU") or first(ja["events"], "preempted", t0)
    resize = next((r for r in ja.get("resizes") or [] if r["to_gpus"] == 1), None)
    preempted = first(ja["events"], "preempted", t0) is not None
    fallback = first(ja["events"], "resize-fallback", t0) is not None
    if preempted:
        what = "preempted whole (waits)"
    elif resize is None:
        what = "?"
    else:
        what = ("shrunk in place" if resize["mechanism"] == "in-place" else
                "checkpoint-restart") + f" {resize['from_gpus']}->{resize['to_gpus']}"
    return {
        "label": setup.label,
        "decision": rel(first(jb["events"], "started", t0)), "a_told": rel(a_told),
        "b_launch": b_launch - t0,
        "b_step": jb["report"]["first_step_time"] - origin - t0,
        "what": what + (" (after a resize-fallback)" if fallback else ""),
        "pause": resize["pause_s"] if resize else None,
        "a_again": (rel(a_told) or 0.0) + resize["to_new_size_s"] if resize else None,
        "wall": time.monotonic() - began, "load": os.getloadavg()[0],
    }


def _origin(directory: Path) -> float:
    """The wall-clock time of the service's t = 0 (its events' `time_s` count from it)."""
    store = Store(directory / "state.db")
    try:
        return store.origin()
    finally:
        store.close()


def cell(values: list[Any]) -> str:
    """One table cell: the median of the runs' numbers (with their range when they are
    several), or their distinct words."""
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    if not all(isinstance(v, float) for v in known):
        return "/".join(dict.fromkeys(str(v) for v in known))
    mid = f"{statistics.median(known):.2f}"
    return mid if len(known) == 1 else f"{mid} ({min(known):.2f}-{max(known):.2f})"


ROWS = (("layer gives b its slot (b started)", "decision"),
        ("a told to give it back (resized/preempted)", "a_told"),
        ("slot free: b's worker launched", "b_launch"),
        ("b's first training step", "b_step"),
        ("what happened to a", "what"),
        ("a's training pause", "pause"),
        ("a trains again at 1 worker", "a_again"),
        ("run's wall time", "wall"),
        ("load average after the run", "load"))


def table(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The setups side by side, one line per measurement, each cell over the setup's runs."""
    cells = {label: [cell([r[key] for r in rs]) for _, key in ROWS] for label, rs in runs.items()}
    width = 2 + max(len(c) for cs in cells.values() for c in [*cs, "x" * 22])
    lines = [f"  {'seconds after b submits':44s}" + "".join(f"{k:>{width}s}" for k in cells)]
    for i, (label, _) in enumerate(ROWS):
        lines.append(f"  {label:44s}" + "".join(f"{cs[i]:>{width}s}" for cs in cells.values()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated run labels (default: all)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setup")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds per run, at most")
    ap.add_argument("--interval", type=float, default=1.0, help="the service's round interval")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds a trains on 2 slots before b submits")
    ap.add_argument("--device-ms", type=float, default=3.0,
                    help="emulated accelerator time per sample (digits_elastic.py)")
    ap.add_argument("--keep", type=Path, help="keep each run's data directory here")
    ap.add_argument("--out", type=Path, help="also write the printed output here")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    out = Printed()
    wanted = set(filter(None, args.only.split(",")))
    setups = [s for s in SETUPS if not wanted or s.label in wanted]
    out(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    out("== elastic reclaim (live): corral serve on 2 CPU slots, queues a and b of quota 1; a's "
        "digits job (asks 2 slots) borrows b's; b submits a 1-slot job ==")
    out(f"  interval {args.interval:g} s, {args.device_ms:g} ms per sample (emulated "
        f"accelerator), a trains {args.settle:g} s on 2 slots before b submits")
    out(f"  {args.repeats} run(s) of each, alternating their order; cells: median (min-max)")
    runs: dict[str, list[dict[str, Any]]] = {s.label: [] for s in setups}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for repeat in range(args.repeats):
            for setup in (setups if repeat % 2 == 0 else setups[::-1]):
                name = f"{setup.label.replace('/', '-')}-{repeat}"
                row = run(setup, root / name, args)
                runs[setup.label].append(row)
                out(f"  ran {name}: b started {row['decision']:.2f} s, launched "
                    f"{row['b_launch']:.2f} s, first step {row['b_step']:.2f} s; a "
                    f"{row['what']}, pause {cell([row['pause']])} s ({row['wall']:.0f} s, "
                    f"load {row['load']:.1f})")
    for line in table(runs):
        out(line)
    out.save(args.out)


if __name__ == "__main__":
    main()
