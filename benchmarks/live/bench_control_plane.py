"""Control-plane scale: a Philly-derived window through the live service's REST API on 1,024
emulated GPUs, and the same run with the service killed (-9) half-way (issue 13 item 6).

For each policy a real `corral serve --executor emulated --cluster 256x4` (the built-in catalog)
gets the first --jobs jobs of the Philly-derived trace (the jobs bench_sim.py simulates;
--pollux-jobs for pollux), each submitted through POST /jobs when the service's emulated clock
reaches its trace time, and runs until every job has ended. Printed per run:

* jobs done / failed / lost (a job the service does not list, or that never ended);
* round time p50/p99 (deciding and handing the decision to the executor, real ms, every round
  read from /cluster's recent rounds, polled every 0.5 s) and the policy's decide time;
* API latency p50/p99 of POST /jobs under the submission stream, and of GET /jobs (called
  every 10 s once every job is submitted, to see whether all have ended);
* service RSS and state.db size after 1k, 5k, 10k submitted jobs and at the end;
* the control loop's period (the /healthz last-round age, sampled every 0.5 s) and from it the
  highest time scale that keeps rounds on schedule: a round starts at the first loop tick after
  it is due, so it is late by up to one loop period times the scale; on schedule means late by
  at most 10 % of the interval, so the highest scale is 0.1 x interval / (p99 loop period).

--kill repeats the first policy's run with the service killed with SIGKILL when half the jobs
have been submitted and started again on the same data directory; it prints the downtime (in
emulated seconds, from the kill until the new service answers: the emulated clock runs on),
each job's JCT growth against the first run (overall, and by what the job was doing at the
kill) and the jobs whose growth exceeds the downtime. The emulated workers outlive the kill as
real ones do (corral.executors.emulated.executor): a job that was running trained on through the
downtime, is reclaimed by the new service and placed again at its first round, paying the
restart pause; one that finished meanwhile is done when its truth finished it; a queued job
waits for the new service. So each job's growth is expected within the downtime, give or take
the runs' own jitter (a few loop periods times the scale).

The 10,000-job window runs in about 11 minutes real at 3000x on a 2-core machine (a run per
policy; pollux's 1,000 jobs in under 2 minutes), the four runs with --kill in about 34 minutes.

Run: python benchmarks/live/bench_control_plane.py [--jobs 10000] [--pollux-jobs 1000]
     [--policies fifo,tiresias-las,pollux] [--time-scale 3000] [--kill] [--timeout 1800]

Measured (2-core AMD EPYC shared with other work, 1-min load average 0.1-4.6, 2026-11-24,
branch `ctrl2`; --jobs 10000 --pollux-jobs 1000 --kill at 3000x, 34 minutes):
  fifo          10,000 of 10,000 done, none lost; round p50 0.5 ms, p99 5.0 ms; POST /jobs p50
                44 ms, p99 91 ms; GET /jobs (10,000) p50 0.95 s; RSS 121 / 122 / 123 / 124 MiB
                after 1k / 2k / 5k / 10k jobs (+1.6 % from 2k to 10k), 126 MiB at the end;
                state.db 16 / 28 / 62 / 121 MiB; loop period p99 62 ms: on schedule up to 97x
  tiresias-las  10,000 done, none lost; round p50 0.3 ms, p99 1.7 ms; POST /jobs p99 72 ms;
                RSS 121 / 122 / 124 / 124 MiB (+1.6 %); state.db 16 / 29 / 64 / 123 MiB; loop
                period p99 25 ms: on schedule up to 240x
  pollux        1,000 done, none lost; round p50 476 ms, p99 1.10 s (decide p50 462 ms, 20 jobs
                a round on 1,024 GPUs); RSS 185 MiB; loop period p99 1.14 s: on schedule up to
                5x only, so at 3000x its rounds came every ~1,900 emulated s, not every 60 s
  fifo, killed (-9) after 5,000 submissions (that run): back after 1.3 s real (3,929 emulated
                s); JCT growth p50 -6 s, p99 144 s, max 6,828 s: not all within the downtime
                (the emulated workers died with the service then, losing what they trained
                since their last checkpoint written, and did not train through the downtime).
With the emulated workers outliving the kill (2-core Intel Xeon @ 2.50GHz shared with other
work, 1-min load average 1.5-4.2, 2026-11-26, branch `kill13`; --jobs 10000 --policies fifo
--time-scale 3000 --kill --timeout 1500, 23 minutes):
  fifo          10,000 done, none lost; round p50 1.4 ms, p99 8.3 ms; POST /jobs p50 52 ms, p99
                116 ms; GET /jobs (10,000) p50 2.9 s (the machine was busier); RSS 134 / 134 /
                136 / 136 MiB after 1k / 2k / 5k / 10k jobs, 138 MiB at the end; state.db 16 /
                27 / 60 / 114 MiB; loop period p99 95 ms: on schedule up to 63x
  fifo, killed (-9) after 5,000 submissions: back after 2.7 s real (7,948 emulated s); 10,000
                done in both runs, none lost; JCT growth p50 -4 s, p99 254 s, max 643 s: all
                10,000 within the downtime. By what a job was doing at the kill: running (27)
                p50 -22 s, max 643 s; done before it (4,973) max 639 s, not yet submitted
                (5,000) max 452 s - the kill cannot have touched those, so about 650 s is the
                two runs' own jitter at 3000x; none was queued. The restarted service's RSS was
                148 MiB after 10k, 150 MiB at the end (136 / 138 MiB unkilled; not looked into).
Before (branch `ctrl`, --jobs 2000, load 9-11): loop period p99 ~0.5 s (on schedule up to 11x),
RSS 136 MiB after 1k and 201 MiB at the end of 2,000 jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.cli.emulate_cmd import EmulatedService, EmulationOptions, submission_body
from corral.core.cluster import Cluster
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import load_philly

MARKS = (1000, 2000, 5000, 10_000)  # submitted jobs at which RSS and state.db are printed


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else math.nan


def _ms(values: list[float]) -> str:
    return f"p50 {1000 * _q(values, 0.5):.1f} ms, p99 {1000 * _q(values, 0.99):.1f} ms"


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def _db_mib(data: Path) -> float:
    return sum(p.stat().st_size for p in data.glob("state.db*")) / 2**20


@dataclass
class Run:
    """What one run measured."""

    policy: str
    rounds: dict[float, dict[str, Any]] = field(default_factory=dict)  # by emulated time
    ages: list[float] = field(default_factory=list)  # /healthz last-round ages, s
    submit_s: list[float] = field(default_factory=list)
    list_s: list[float] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    jcts: dict[str, float] = field(default_factory=dict)
    times: dict[str, tuple] = field(default_factory=dict)  # name -> (submit, first start, finish)
    statuses: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    downtime_s: float | None = None  # emulated
    killed_at_s: float | None = None  # the service's time (emulated s) at the kill
    back_at_s: float | None = None  # ... when the restarted service first answered
    wall_s: float = 0.0


class _Sampler(threading.Thread):
    """Polls /cluster (every round) and /healthz (the loop's last-round age) every 0.5 s."""

    def __init__(self, run: Run) -> None:
        super().__init__(daemon=True)
        self.run_, self.client, self.stop = run, None, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            client = self.client
            if client is None:
                continue
            try:
                health = client._http.request("GET", "/healthz").json()
                age = (health.get("loop") or {}).get("last_round_age_s")
                if age is not None:
                    self.run_.ages.append(float(age))
                for r in client.cluster().get("recent_rounds") or []:
                    self.run_.rounds[r["time_s"]] = r
            except Exception:  # noqa: BLE001 - the service is down (the kill) or busy
                pass


def run_policy(policy: str, specs: list, opts: EmulationOptions, total_gpus: int,
               kill_at: int | None, timeout_s: float) -> Run:
    run = Run(policy)
    data = Path(tempfile.mkdtemp(prefix=f"corral-control-plane-{policy}-"))
    started = time.monotonic()
    service = EmulatedService(data, policy, (), opts)
    sampler = _Sampler(run)
    try:
        client = service.connect()
        sampler.client = client
        sampler.start()
        t0 = time.monotonic()
        service_t0 = float(client.cluster()["time_s"])
        offset = math.ceil((service_t0 + opts.time_scale) / opts.interval_s) * opts.interval_s

        def due_in(spec: Any) -> float:  # real seconds until the job's trace time
            now = service_t0 + opts.time_scale * (time.monotonic() - t0)
            return (offset + spec.submit_time_s - now) / opts.time_scale

        for i, spec in enumerate(specs):
            while (wait := due_in(spec)) > 0:
                time.sleep(min(wait, 0.5))
            t = time.perf_counter()
            client.submit(submission_body(spec, total_gpus))
            run.submit_s.append(time.perf_counter() - t)
            if i + 1 in MARKS:
                run.marks.append(f"after {i + 1} jobs: RSS {_rss_mib(service.proc.pid):.0f} MiB, "
                                 f"state.db {_db_mib(data):.1f} MiB")
            if kill_at is not None and i + 1 == kill_at:
                run.killed_at_s = service_t0 + opts.time_scale * (time.monotonic() - t0)
                service.proc.kill()
                killed = time.monotonic()
                service.proc.wait(timeout=30)
                service.client.close()
                service = EmulatedService(data, policy, (), opts)
                client = sampler.client = service.connect()
                run.downtime_s = opts.time_scale * (time.monotonic() - killed)
                run.back_at_s = float(client.cluster()["time_s"])
                print(f"  killed (-9) after {kill_at} submissions; back after "
                      f"{time.monotonic() - killed:.1f} s real = {run.downtime_s:.0f} emulated s",
                      flush=True)
        run.marks.append(f"all {len(specs)} submitted: RSS {_rss_mib(service.proc.pid):.0f} MiB, "
                         f"state.db {_db_mib(data):.1f} MiB")
        deadline = started + timeout_s
        while True:
            t = time.perf_counter()
            rows = client.jobs()
            run.list_s.append(time.perf_counter() - t)
            if sum(r["status"] in ("queued", "running") for r in rows) == 0:
                break
            if time.monotonic() > deadline:
                print(f"  timed out after {timeout_s:.0f} s real")
                break
            time.sleep(10.0)  # GET /jobs of thousands of jobs is itself a load on the service
        run.marks.append(f"at the end: RSS {_rss_mib(service.proc.pid):.0f} MiB, "
                         f"state.db {_db_mib(data):.1f} MiB")
        names = {s.name for s in specs}
        seen = {r["name"]: r for r in rows if r["name"] in names}
        run.lost = len(names - set(seen))
        for r in seen.values():
            run.statuses[r["status"]] = run.statuses.get(r["status"], 0) + 1
            if r["status"] == "done":
                run.jcts[r["name"]] = float(r["finish_s"]) - float(r["submit_time_s"])
                run.times[r["name"]] = (float(r["submit_time_s"]), r["first_start_s"],
                                        float(r["finish_s"]))
    finally:
        sampler.stop.set()
        service.close()
    run.wall_s = time.monotonic() - started
    return run


def report(run: Run, opts: EmulationOptions) -> None:
    rounds = list(run.rounds.values())
    regular = [r for r in rounds if not r.get("fill_in")]
    print(f"{run.policy}: {sum(run.statuses.values())} jobs listed, {run.statuses}, lost "
          f"{run.lost}; {run.wall_s:.0f} s real")
    print(f"  rounds seen {len(rounds)} ({len(regular)} regular): round time "
          f"{_ms([r.get('round_s', r['decide_s']) for r in rounds])}; decide "
          f"{_ms([r['decide_s'] for r in rounds])}; jobs per round p50 "
          f"{_q([r['jobs'] for r in rounds], 0.5):.0f}, max {max((r['jobs'] for r in rounds), default=0)}")
    print(f"  POST /jobs under the submission stream: {_ms(run.submit_s)} ({len(run.submit_s)}); "
          f"GET /jobs: {_ms(run.list_s)} ({len(run.list_s)})")
    for line in run.marks:
        print(f"  {line}")
    period = _q(run.ages, 0.99)
    print(f"  loop period (last-round age) p50 {_q(run.ages, 0.5) * 1000:.0f} ms, p99 "
          f"{period * 1000:.0f} ms; rounds late by up to {period * opts.time_scale:.0f} emulated s "
          f"at {opts.time_scale:g}x; highest time scale on schedule (late <= 10 % of "
          f"{opts.interval_s:g} s): {0.1 * opts.interval_s / period:.0f}x")
    if run.jcts:
        jcts = list(run.jcts.values())
        print(f"  JCT avg {statistics.fmean(jcts):.0f} s, p50 {_q(jcts, 0.5):.0f} s, p99 "
              f"{_q(jcts, 0.99):.0f} s (emulated)")


def _phase(times: tuple, at_s: float) -> str:
    """What a job was doing at the service's time `at_s`, by its times in a run."""
    submit, start, finish = times
    if submit > at_s:
        return "not submitted"
    if finish <= at_s:
        return "done"
    return "queued" if start is None or start > at_s else "running"


def compare(base: Run, killed: Run, opts: EmulationOptions) -> None:
    grew = {n: killed.jcts[n] - base.jcts[n] for n in base.jcts if n in killed.jcts}
    down = killed.downtime_s or 0.0
    values = list(grew.values())
    over = sorted(((g - down, n) for n, g in grew.items() if g > down), reverse=True)
    print(f"kill -9 at half-way: downtime {down:.0f} emulated s; {len(grew)} jobs done in both "
          f"runs; JCT growth p50 {_q(values, 0.5):.0f} s, p99 {_q(values, 0.99):.0f} s, max "
          f"{max(values, default=0):.0f} s; within the downtime: {len(grew) - len(over)} of "
          f"{len(grew)}")
    if killed.killed_at_s is None:
        return
    at = killed.killed_at_s
    phases: dict[str, list[float]] = {}
    for n, g in grew.items():
        phases.setdefault(_phase(killed.times[n], at), []).append(g)
    print("  growth by what the job was doing at the kill: " + "; ".join(
        f"{p} {len(v)}: p50 {_q(v, 0.5):.0f} s, max {max(v):.0f} s"
        for p, v in sorted(phases.items())))
    for excess, n in over[:5]:
        print(f"  {n}: +{excess:.0f} s over the downtime ({_phase(killed.times[n], at)} at the "
              f"kill, {at:.0f} s; back at {killed.back_at_s:.0f} s): (submit, first start, "
              f"finish) undisturbed {base.times[n]}, killed {killed.times[n]}")


def fill_store(data: Path, n: int) -> None:
    """`n` ended jobs in `data`'s state.db, written directly (one job's document and summary
    copied with new ids): what a long-lived service's store holds, made in seconds. Marked as
    read under this version's documents, as the service that stored them left it (its start
    read the then empty store): a restart then reads only the unfinished jobs."""
    from corral.service.jobs import LiveJob, LiveStatus
    from corral.service.store import Store
    from corral.service.submission import Submission

    store = Store(data / "state.db")
    sub = Submission(command=["python", "train.py", "--epochs", "90"], name="resnet",
                     app="cifar10").checked(4)
    job = LiveJob("job-0", sub, sub.spec("job-0", 0.0))
    job.status = LiveStatus.DONE
    doc, summary = job.record()
    rows = []
    for i in range(1, n + 1):
        job_id = f"job-{i}"
        rows.append((i, job_id, json.dumps({**doc, "id": job_id}),
                     summary.replace('"id": "job-0"', f'"id": "{job_id}"')))
    store._exec_many("INSERT INTO jobs(seq, id, status, doc, summary, queue, name) "
                     "VALUES(?, ?, ?, ?, ?, 'default', 'resnet')",
                     [(seq, i, "done", d, sm) for seq, i, d, sm in rows])
    store.set_meta("docs_read_version", LiveJob.doc_version())
    store.close()


def bench_list(sizes: list[int], opts: EmulationOptions, calls: int = 200) -> None:
    """At each store size: the service's start on it (restart time), GET /jobs?limit=100
    (first page, a page deep in the list, a filtered one) p50/p99 over `calls` calls each, and
    the service's RSS. Target (issue 45): p99 <= 50 ms and a start <= 10 s at 100,000 jobs."""
    for n in sizes:
        data = Path(tempfile.mkdtemp(prefix=f"corral-list-{n}-"))
        t = time.perf_counter()
        fill_store(data, n)
        filled = time.perf_counter() - t
        t = time.perf_counter()
        service = EmulatedService(data, "fifo", (), opts)
        try:
            client = service.connect()
            started = time.perf_counter() - t
            http = client._http
            lat: dict[str, list[float]] = {}
            for what, params in (("first page", {"limit": 100}),
                                 ("deep page", {"limit": 100, "after": f"job-{n // 2}"}),
                                 ("newest, status=done, name=res", {
                                     "limit": 100, "order": "newest", "status": "done",
                                     "name": "res"})):
                for _ in range(calls):
                    t = time.perf_counter()
                    resp = http.get("/jobs", params=params)
                    lat.setdefault(what, []).append(time.perf_counter() - t)
                    assert resp.status_code == 200 and resp.json()["total"] == n
            print(f"  {n:>7,} jobs (filled in {filled:.1f} s, state.db {_db_mib(data):.0f} MiB): "
                  f"start {started:.2f} s; RSS {_rss_mib(service.proc.pid):.0f} MiB; "
                  + "; ".join(f"GET /jobs {w} {_ms(v)}" for w, v in lat.items()), flush=True)
        finally:
            service.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs of the fifo/tiresias window")
    ap.add_argument("--pollux-jobs", type=int, default=1000)
    ap.add_argument("--policies", default="fifo,tiresias-las,pollux")
    ap.add_argument("--cluster", default="256x4")
    ap.add_argument("--time-scale", type=float, default=3000.0)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--checkpoint-interval", type=float, default=600.0)
    ap.add_argument("--report-interval", type=float, default=None,
                    help="emulated s (default: max(30, time scale / 4): four reports per "
                         "running job a real second)")
    ap.add_argument("--kill", action="store_true", help="also the first policy killed half-way")
    ap.add_argument("--timeout", type=float, default=1800.0, help="real seconds per run")
    ap.add_argument("--list-at", default=None, metavar="N,N,...",
                    help="only the job list: a store of N ended jobs each (e.g. "
                         "10000,50000,100000): start time, GET /jobs?limit=100 p50/p99, RSS")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"# {machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.list_at:
        print("## GET /jobs pages on a large store (corral serve --executor emulated, fifo)")
        bench_list([int(x) for x in args.list_at.split(",")],
                   EmulationOptions(cluster=args.cluster, time_scale=args.time_scale,
                                    interval_s=args.interval, fill_in=True))
        return
    catalog = CatalogTruth()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    most = max(args.pollux_jobs if p == "pollux" else args.jobs for p in policies)
    philly = load_philly(require(POLLUX / "philly.csv"), catalog.limits(), start=None,
                         hours=24 * 30, max_jobs=most)
    specs = sorted(philly.jobs, key=lambda s: s.submit_time_s)
    cluster = Cluster.parse(args.cluster)
    report_s = args.report_interval or max(30.0, args.time_scale / 4)
    opts = EmulationOptions(cluster=args.cluster, time_scale=args.time_scale,
                            interval_s=args.interval, fill_in=True,
                            checkpoint_interval_s=args.checkpoint_interval,
                            report_interval_s=report_s)
    print(f"# Philly window: first {most} jobs; {cluster.describe()} ({cluster.total_gpus} "
          f"GPUs); time scale {args.time_scale:g}; interval {args.interval:g} s; reports every "
          f"{report_s:g} s, checkpoints every {args.checkpoint_interval:g} s (emulated)")
    runs = {}
    for policy in policies:
        n = args.pollux_jobs if policy == "pollux" else args.jobs
        print(f"## {policy}, {n} jobs", flush=True)
        runs[policy] = run_policy(policy, specs[:n], opts, cluster.total_gpus, None, args.timeout)
        report(runs[policy], opts)
    if args.kill:
        policy = policies[0]
        n = args.pollux_jobs if policy == "pollux" else args.jobs
        print(f"## {policy}, {n} jobs, killed (-9) half-way", flush=True)
        killed = run_policy(policy, specs[:n], opts, cluster.total_gpus, n // 2, args.timeout)
        report(killed, opts)
        compare(runs[policy], killed, opts)
    load = os.getloadavg()
    print(f"# load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
