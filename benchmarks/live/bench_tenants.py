"""Teams can trust it (issue 43), live: two teams on one `corral serve --queues`, one team's
work arriving while the other borrows everything, a quota raise, and a job of one team
attacking the other's files.

A real `corral serve --slots t4:2,a100:2 --queues FILE` (CPU slots standing in for two GPU
types: the local executor takes type names as labels, each type one node; a `corral.train` job
reports its steps as its slot's type), queues vision and nlp of quota 2 each
(`min_runtime_s = 10`), each team submitting with its own token. The jobs are the live
benchmarks' real training jobs (examples/digits_elastic.py with `bench_mechanism_live.py`'s
emulated accelerator, on the CPU, loopback only). One run per inner policy: pollux (elastic:
jobs of 1-2 GPUs, shrunk in place) and tiresias-las (gangs of 2, preempted whole):

1. vision submits two 2-GPU jobs and borrows all 4 GPUs (nlp's quota too); once both train on
   2 and are past `min_runtime_s` since they last changed (a steady borrower: a job restarted
   under `min_runtime_s` ago is not taken out, by design),
2. nlp submits a 2-GPU job: measured from its submission, the round that gives nlp its quota
   back, the slots free (nlp's worker launched) and nlp training on 2 GPUs, beside the round
   interval and the time vision's jobs took to give the GPUs back until then (the longest
   resize pause, or a preempted job's stop);
3. nlp submits a 1-GPU job, which waits: nlp holds its quota and nothing is idle;
4. the admin raises nlp's quota to 3 (vision's to 1) with `PUT /queues` (what `corral queues
   --set` sends): measured from the request, the `queues-changed` event, nlp's share at 3 and
   nlp holding 3 GPUs (the round that gives them), beside the round interval;
5. two more rounds, then every job is cancelled.

From the service's store (its assignments, events and the jobs' reports), over the run:

* idle GPU-seconds while a job that fits waits, beyond one round: at every moment, the GPUs no
  job is given while some waiting job's `min_gpus` fit on one type's free GPUs; counted only
  where such a spell has lasted longer than one round interval (a job waits for the next round
  by design). Target 0;
* steps lost: per job, at each new launch, the steps its earlier launches had reported beyond
  the step it resumed from (a fresh start resumes from 0). Target 0;
* restarts to the same slots: a launch that is not an in-place resize, on the placement the
  job's previous launch had, while no other job was given any GPU of it in between (a restart
  that bought nothing: issue 43's churn). Target 0.

Then the in-job attack matrix (`bench_faults.py`'s, on the same service once the training jobs
are cancelled): a vision job writes a log and a checkpoint; an nlp job
(tests/service/attack_job.py) tries every file of the data directory, the admin token, vision's
token, log and checkpoint, the service's environment and signalling the service, each printed
with the OS error that refused it; its own checkpoint is written and its retry resumes it.

Last run (2026-11-29, at 89ecac2, on the 2-core shared machine, load average 13-15;
benchmarks/results/bench_tenants_89ecac2.txt; seconds): the round gave nlp its quota 2.10 s
(pollux) and 1.08 s (tiresias-las) after it submitted, against one round (3 s) plus the resize
time; nlp's job trained on 2 GPUs at 20.3 and 19.3 s. The raise: nlp's share was 3 after 2.3
and 1.8 s; tiresias-las gave nlp 3 GPUs 1.7 s after the request, pollux never in the run: the
layer offered nlp the GPU of the other type (`shape.movable`) and pollux's objective declined
the move (its restart factors; `pollux_move_fitness.py` and docs/queues.md, "Teams, live",
have the figures). 0 GPU-seconds idle while a job that fits waited beyond a round, 0 steps
lost, 0 restarts to the same slots under both; 58 and 54 attacks, every one refused, the
attacker's own checkpoint resumed.

Every wait is bounded (`--budget` per policy, default 240 s); the service and every worker are
stopped by pid at the end. Run: python benchmarks/live/bench_tenants.py [--only pollux]
[--interval 3] [--budget 240] [--no-attacks] [--keep DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "service"))
import livecluster as live  # noqa: E402  (the tests' helper that runs `corral serve`)
from _common import Printed, machine  # noqa: E402
from bench_faults import attack_matrix  # noqa: E402
from bench_mechanism_live import ADAPTIVE  # noqa: E402
from bench_reclaim_live import _origin, close_run, first  # noqa: E402

from corral.service.records import IN_PLACE  # noqa: E402
from corral.service.store import Store  # noqa: E402

SLOTS = "t4:2,a100:2"
NODES = {"localhost-t4": 2, "localhost-a100": 2}
MIN_RUNTIME_S = 10
QUEUES = f"min_runtime_s = {MIN_RUNTIME_S}\n[queue.vision]\nquota = 2\n[queue.nlp]\nquota = 2\n"
RAISED = f"min_runtime_s = {MIN_RUNTIME_S}\n[queue.vision]\nquota = 1\n[queue.nlp]\nquota = 3\n"
EPOCHS = "100"  # no job ends within a run: all are cancelled once measured


@dataclass(frozen=True)
class Setup:
    """One run: the inner policy and the jobs' shapes (two-GPU jobs, then nlp's one-GPU job)."""

    policy: str
    two: dict[str, Any]
    one: dict[str, Any]
    settings: tuple[str, ...] = ()


SETUPS = (
    Setup("pollux", dict(ADAPTIVE, gpus=2, min_gpus=1, max_gpus=2),
          dict(ADAPTIVE, gpus=1, min_gpus=1, max_gpus=1)),
    Setup("tiresias-las", dict(batch_size=32, gpus=2, min_gpus=2, max_gpus=2),
          dict(batch_size=32, gpus=1, min_gpus=1, max_gpus=1)),
)


def wait(predicate: Callable[[], Any], timeout_s: float, poll_s: float = 0.2) -> Any:
    """`predicate`'s first true value within `timeout_s`, else None (a target not met is a
    figure, not an error)."""
    try:
        return live.wait_until(predicate, timeout_s, "", poll_s=poll_s)
    except TimeoutError:
        return None


def held(svc: live.LiveService, queue: str) -> int:
    return next((q["used"] for q in svc.client.queues()["queues"] if q["name"] == queue), 0)


def _nodes(text: str) -> dict[str, int]:
    """`localhost-t4:2+localhost-a100:1` -> {node: GPUs}; "-" -> {}."""
    if not text or text == "-":
        return {}
    return {node: int(g) for node, _, g in (p.rpartition(":") for p in text.split("+"))}


def run(setup: Setup, directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One live run under `setup.policy`; its figures."""
    data = directory / "data"  # the jobs' working directory is outside it (the sandbox's rule)
    work = directory / "work"
    data.mkdir(parents=True)
    work.mkdir()
    (directory / "queues.toml").write_text(QUEUES)
    svc = live.LiveService(data, setup.policy, slots=SLOTS, interval_s=args.interval,
                           extra_args=("--queues", str(directory / "queues.toml"), *setup.settings))
    began = time.monotonic()
    left = lambda: max(5.0, args.budget - (time.monotonic() - began))  # noqa: E731
    digits = ("digits_elastic.py", "--epochs", EPOCHS, "--device-ms-per-sample",
              str(args.device_ms))
    out: dict[str, Any] = {"policy": setup.policy}
    tenants: list[Any] = []
    ids: list[str] = []
    try:
        svc.start()
        origin = _origin(data)
        now = lambda: time.time() - origin  # noqa: E731  (service time)
        vision, nlp = svc.tenant("vision"), svc.tenant("nlp")
        tenants += [vision, nlp]
        v_ids = [svc.submit(*digits, client=vision, queue="vision", name=f"vision-{i}",
                            **setup.two) for i in (1, 2)]
        ids += v_ids

        def vision_trains() -> bool:
            jobs = [vision.job(i) for i in v_ids]
            return all(j["gpus"] == 2 and j["steps"] > 0 for j in jobs)
        if wait(vision_trains, left()) is None:
            raise RuntimeError("vision's jobs did not both train on 2 GPUs")
        # vision borrows in a steady state: both its jobs past min_runtime_s since they last
        # changed (pollux grows a job by a restart; a job restarted under min_runtime_s ago is
        # not taken out, by design, and would hold nlp's quota that much longer)
        def settled() -> bool:
            last = max(e["time_s"] for i in v_ids for e in vision.job(i)["events"]
                       if e["kind"] in ("started", "resized"))
            if now() - last >= MIN_RUNTIME_S + args.interval:
                return True
            time.sleep(min(5.0, max(0.0, last + MIN_RUNTIME_S + args.interval - now())))
            return False
        wait(settled, min(90.0, left()), poll_s=0.0)

        # 2: nlp's work arrives while vision borrows everything
        n1 = svc.submit(*digits, client=nlp, queue="nlp", name="nlp-1", **setup.two)
        ids.append(n1)
        wait(lambda: held(svc, "nlp") >= 2, min(60.0, left()))

        def n1_trains_on_2() -> bool:
            job = nlp.job(n1)
            return job["gpus"] == 2 and (job.get("report") or {}).get("world_size") == 2 \
                and job["steps"] > 0
        wait(n1_trains_on_2, min(90.0, left()))

        # 3: a second nlp job waits (nlp at its quota, nothing idle), two rounds
        n2 = svc.submit(*digits, client=nlp, queue="nlp", name="nlp-2", **setup.one)
        ids.append(n2)
        time.sleep(2 * args.interval)

        # 4: the quota raise
        out["put"] = now()
        svc.client.put_queues(RAISED)

        def share(queue: str) -> float | None:
            row = next(q for q in svc.client.queues()["queues"] if q["name"] == queue)
            return now() if row.get("share") is not None and row["share"] >= 3 else None
        out["share3"] = wait(lambda: share("nlp"), min(30.0, left()))
        out["hold3"] = wait(lambda: held(svc, "nlp") >= 3 and now(), min(60.0, left()))
        wait(lambda: nlp.job(n2)["steps"] > 0, min(60.0, left()))
        time.sleep(2 * args.interval)  # two more rounds: does anything move back and forth?
        out["end"] = now()
        out["jobs"] = {i: svc.client.job(i) for i in ids}
        out["wall"] = time.monotonic() - began
        svc.cancel_all(ids, timeout_s=60)
        ids = []
        if not args.no_attacks:
            try:
                out["attacks"] = attack_matrix(svc, nlp, vision, work)
            except (AssertionError, TimeoutError) as exc:
                out["attacks_failed"] = " ".join(str(exc).split())[:300]
    finally:
        close_run(svc, tenants, ids, setup.policy)
    out["load"] = os.getloadavg()[0]
    store = Store(data / "state.db")
    try:
        measure(out, store, v_ids, n1, n2, args.interval)
    finally:
        store.close()
    return out


def measure(out: dict[str, Any], store: Store, v_ids: list[str], n1: str, n2: str,
            interval: float) -> None:
    """The run's figures from the store (service time, seconds)."""
    jobs: dict[str, dict[str, Any]] = out["jobs"]
    end = out["end"]
    events = {i: store.events(i) for i in jobs}
    t_n1 = first(events[n1], "submitted", 0.0) or 0.0
    rel = lambda t: None if t is None else t - t_n1  # noqa: E731
    out["n1_decided"] = rel(first(events[n1], "started", t_n1))
    out["full"] = rel(_queue_reaches(store, [n1], 2, t_n1))
    out["n1_launch"] = rel(_launch_time(store, n1, t_n1))
    out["n1_on_2"] = rel(_first_at(store, n1, 2))
    # what vision gave up for it (from nlp's submission to nlp holding 2), and how long that took
    full = None if out["full"] is None else out["full"] + t_n1
    given, took = [], []
    for v in v_ids:
        ev = events[v]
        for e in ev:
            if full is None or not t_n1 <= e["time_s"] <= full:
                continue
            if e["kind"] == "resized" and "; by " in e["detail"]:  # a shrink
                pause = next((x for x in ev if x["kind"] == "resize-pause"
                              and x["time_s"] >= e["time_s"]), None)
                secs = _pause(pause["detail"]) if pause else None
                given.append(f"{e['detail'].split(' GPU')[0]} GPU(s) left, "
                             + (pause["detail"].split(":")[0] if pause else "?"))
                if secs is not None:
                    took.append(secs)
            elif e["kind"] == "preempted":
                given.append("preempted whole")
                stopped = _stopped(store, v, e["time_s"])
                if stopped is not None:
                    took.append(max(0.0, stopped - e["time_s"]))
    out["given"] = "; ".join(given) or "-"
    out["resize_s"] = max(took) if took else None
    # the quota raise
    put = out["put"]
    changed = next((e["time_s"] for e in store.events() if e["kind"] == "queues-changed"
                    and e["time_s"] >= put - 1.0), None)
    out["changed"] = None if changed is None else changed - put
    out["share3"] = None if out.get("share3") is None else out["share3"] - put
    hold3 = _queue_reaches(store, [n1, n2], 3, put)
    out["hold3_decided"] = None if hold3 is None else hold3 - put
    n2_step = _launch_time(store, n2, put)
    out["n2_launch"] = None if n2_step is None else n2_step - put
    # over the run
    out["idle_gpu_s"], out["idle_worst"] = _idle_beyond_round(store, jobs, end, interval)
    out["lost"] = {i: _steps_lost(store, i) for i in jobs}
    out["same_slots"] = _same_slot_restarts(store, jobs)
    out["restarts"] = {i: jobs[i]["restarts"] for i in jobs}


def _pause(detail: str) -> float | None:
    """The seconds of a resize-pause event's "... after a pause of X s"."""
    words = detail.rsplit("pause of ", 1)
    try:
        return float(words[1].split()[0]) if len(words) == 2 else None
    except ValueError:
        return None


def _launch_time(store: Store, job_id: str, after: float) -> float | None:
    """When the job's first launch after `after` took its first step (service time)."""
    return next((r["first_step_s"] for r in store.telemetry(job_id)
                 if r["first_step_s"] is not None and r["first_step_s"] >= after), None)


def _first_at(store: Store, job_id: str, world: int) -> float | None:
    """The time of the job's first report at `world` workers with steps taken."""
    return next((r["time_s"] for r in store.telemetry(job_id)
                 if r["world_size"] == world and (r["steps"] or 0) > 0), None)


def _stopped(store: Store, job_id: str, after: float) -> float | None:
    """When the job's launch that ran at `after` sent its last report (about when it
    stopped)."""
    rows = store.telemetry(job_id)
    running = [r for r in rows if r["time_s"] <= after]
    if not running:
        return None
    launch = running[-1]["launch"]
    return max(r["time_s"] for r in rows if r["launch"] == launch)


def _timeline(store: Store, ids: list[str]) -> list[tuple[float, str, dict[str, int]]]:
    """Every assignment of `ids`, (time, job, {node: GPUs}), in time order."""
    rows = [(a["time_s"], a["seq"], job, _nodes(a["placement"])) for job in ids
            for a in store.assignments(job)]
    return [(t, job, nodes) for t, _, job, nodes in sorted(rows, key=lambda r: (r[0], r[1]))]


def _queue_reaches(store: Store, ids: list[str], gpus: int, after: float) -> float | None:
    """The first time at or after `after` that `ids` together were given `gpus` GPUs."""
    placed: dict[str, dict[str, int]] = {}
    for t, job, nodes in _timeline(store, ids):
        placed[job] = nodes
        if t >= after and sum(sum(n.values()) for n in placed.values()) >= gpus:
            return t
    return None


def _idle_beyond_round(store: Store, jobs: dict[str, dict[str, Any]], end: float,
                       interval: float) -> tuple[float, float]:
    """GPU-seconds no job was given while a waiting job's `min_gpus` fit on one node's free
    GPUs, counted beyond the first `interval` of each such spell; and the longest spell."""
    timeline = _timeline(store, list(jobs))
    submitted = {i: j["submit_time_s"] for i, j in jobs.items()}
    need = {i: j["spec"].get("min_gpus") or 1 for i, j in jobs.items()}
    points = sorted({t for t, _, _ in timeline} | set(submitted.values()) | {end})
    placed: dict[str, dict[str, int]] = {}
    idle_s, spell_start, worst = 0.0, None, 0.0
    k = 0
    for a, b in zip(points, points[1:]):
        while k < len(timeline) and timeline[k][0] <= a:
            placed[timeline[k][1]] = timeline[k][2]
            k += 1
        if a >= end:
            break
        free = dict(NODES)
        for nodes in placed.values():
            for node, g in nodes.items():
                free[node] = free.get(node, 0) - g
        waiting = [i for i in jobs if submitted[i] <= a and not placed.get(i)]
        fits = any(max(free.values()) >= need[i] for i in waiting)
        if not fits:
            spell_start = None
            continue
        spell_start = a if spell_start is None else spell_start
        worst = max(worst, b - spell_start)
        counted_from = max(a, spell_start + interval)
        if b > counted_from:
            idle_s += sum(max(0, g) for g in free.values()) * (b - counted_from)
    return idle_s, worst


def _launches(store: Store, job_id: str) -> list[list[dict[str, Any]]]:
    """The job's reports, grouped by launch, in order."""
    out: list[list[dict[str, Any]]] = []
    for r in store.telemetry(job_id):
        if not out or out[-1][0]["launch"] != r["launch"]:
            out.append([])
        out[-1].append(r)
    return out


def _steps_lost(store: Store, job_id: str) -> int:
    """Steps earlier launches reported beyond where the next launch resumed."""
    lost, seen = 0, 0
    for i, rows in enumerate(_launches(store, job_id)):
        if i:
            resumed = rows[0]["resumed_steps"] or 0
            lost += max(0, seen - resumed)
        seen = max([seen, *(r["steps"] or 0 for r in rows)])
    return lost


def _same_slot_restarts(store: Store, jobs: dict[str, dict[str, Any]]) -> int:
    """Launches (not in-place) on the placement of the job's previous launch, with no other
    job given any GPU of it between the two."""
    timeline = _timeline(store, list(jobs))

    def placement_at(job: str, t: float) -> dict[str, int]:
        got: dict[str, int] = {}
        for when, who, nodes in timeline:
            if when > t:
                break
            if who == job:
                got = nodes
        return got

    count = 0
    for job in jobs:
        launches = _launches(store, job)
        for before, after in zip(launches, launches[1:]):
            if after[0]["launch_start"] == IN_PLACE:
                continue
            was = placement_at(job, before[0]["time_s"])
            now = placement_at(job, after[0]["time_s"])
            if not now or now != was:
                continue
            t0, t1 = before[-1]["time_s"], after[0]["time_s"]
            others = any(who != job and set(nodes) & set(now) and t0 <= when <= t1
                         for when, who, nodes in timeline)
            count += not others
    return count


def fmt(v: Any, unit: str = " s") -> str:
    return "not reached" if v is None else f"{v:.2f}{unit}" if isinstance(v, float) else str(v)


def report(r: dict[str, Any], interval: float) -> list[str]:
    """One policy's rows."""
    lost = sum(r["lost"].values())
    a = r.get("attacks")
    rows = [
        ("nlp's 2-GPU job arrives while vision borrows all 4 GPUs", ""),
        ("  nlp-1 started / round gives nlp its full quota (2)",
         f"{fmt(r['n1_decided'])} / {fmt(r['full'])}"),
        ("  nlp's worker launched (first step) / trains on 2", f"{fmt(r['n1_launch'])} / "
         f"{fmt(r['n1_on_2'])}"),
        ("  target: one round + resize time", f"{interval:g} s + {fmt(r.get('resize_s'))}"),
        ("  what vision gave up", r["given"]),
        ("quota raise nlp 2->3, vision 2->1 (PUT /queues)", ""),
        ("  queues-changed event / nlp's share 3", f"{fmt(r['changed'])} / {fmt(r['share3'])}"),
        ("  round gives nlp 3 GPUs / nlp-2's first step",
         f"{fmt(r['hold3_decided'])} / {fmt(r['n2_launch'])}"),
        ("  target: one round", f"{interval:g} s"),
        ("GPU-s idle while a job that fits waits, beyond a round",
         f"{r['idle_gpu_s']:.1f} (longest spell {r['idle_worst']:.1f} s; target 0)"),
        ("steps lost", f"{lost} (target 0)"),
        ("restarts to the same slots", f"{r['same_slots']} (target 0; restarts in all: "
         f"{sum(r['restarts'].values())})"),
    ]
    if r.get("attacks_failed"):
        rows.append(("in-job attacks by an nlp job", f"FAILED: {r['attacks_failed']}"))
    if a is not None:
        rows.append(("in-job attacks by an nlp job", f"{len(a.attempts)} tried, "
                     f"{len(a.through)} got through; own checkpoint resumed: {a.resumed}"))
    rows.append(("run's wall time / load average after", f"{r['wall']:.0f} s / {r['load']:.1f}"))
    return [f"  {label:58s}{value}" for label, value in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated policies (default: all)")
    ap.add_argument("--interval", type=float, default=3.0, help="the service's round interval")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds per run, at most")
    ap.add_argument("--device-ms", type=float, default=3.0,
                    help="emulated accelerator time per sample (digits_elastic.py)")
    ap.add_argument("--no-attacks", action="store_true", help="skip the in-job attack matrix")
    ap.add_argument("--keep", type=Path, help="keep each run's data directory here")
    ap.add_argument("--out", type=Path, help="also write the printed output here")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    say = Printed()
    wanted = set(filter(None, args.only.split(",")))
    setups = [s for s in SETUPS if not wanted or s.policy in wanted]
    say(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    say(f"== teams (live): corral serve --slots {SLOTS} --queues (vision, nlp: quota 2 each, "
        f"min_runtime_s 10), --interval {args.interval:g} ==")
    say("  digits_elastic.py jobs (CPU, emulated accelerator "
        f"{args.device_ms:g} ms/sample); seconds from nlp's submission, then from the raise")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for setup in setups:
            r = run(setup, root / setup.policy, args)
            say(f"-- {setup.policy} inside the queues")
            for line in report(r, args.interval):
                say(line)
            a = r.get("attacks")
            if a is not None:
                say("  in-job attack matrix (an nlp job; each refused with its OS error):")
                for what, got in a.attempts:
                    say(f"    {what:<60} {got}")
    say.save(args.out)


if __name__ == "__main__":
    main()
