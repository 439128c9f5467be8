"""Control-plane scale: 10,000 jobs through the live service on 1,024 emulated GPUs (issue 13
item 6).

A real `corral serve --executor emulated --cluster 256x4` (the built-in catalog) takes the first
10,000 jobs of the Philly-derived trace (the jobs bench_sim.py simulates) through its REST API
in one burst (one client, one request after another, whatever their trace times), then runs
them on the emulated clock for --run-s real seconds. Measured:

* submissions: POST /jobs rate and latency (p50, p99) while the queue grows to 10,000;
* the control loop with every job active: its period (the largest age of its last round that
  /healthz shows, sampled every 50 ms), rounds, the policy's decide time per round and jobs per
  round (/cluster's recent rounds);
* queries with 10,000 jobs: GET /jobs, GET /cluster and GET /metrics latency;
* the service's memory (RSS) and the jobs finished by the end.

Run: python benchmarks/bench_control_plane.py [--jobs 10000] [--policy fifo] [--time-scale 100]
     [--run-s 60]

First measurement (2-core AMD EPYC, 2026-11, branch `emu`; the run was stopped after 4,000+
submissions, so no full figures yet): submissions went at about 21/s (2,000 in 96 s, 4,000 in
195 s) and slowed as the queue grew; with about 2,900 jobs active the control loop went round
every 2 s real (its tick syncs and, every emulated second, saves every active job: O(active
jobs) SQLite writes per tick), so rounds came every ~150 emulated s instead of 60 while fifo's
decide took 1.5-2 ms; GET /jobs with ~5,000 jobs took 0.5 s; the service held 206 MiB. The
per-tick save of every active job is the first thing to change for 10,000 jobs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import POLLUX, machine, require

from corral.cli.emulate_cmd import EmulationOptions, _Service, submission_body
from corral.core.cluster import Cluster
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import load_philly


def _ms(values: list[float], q: float) -> str:
    values = sorted(values)
    return f"{1000 * values[min(len(values) - 1, int(q * len(values)))]:.1f} ms"


def _timed(fn, repeat: int = 5) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _loop_period(client, seconds: float) -> tuple[float, float]:
    """(median, max) of the control loop's last-round age seen by /healthz over `seconds`."""
    ages = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        doc = client._http.request("GET", "/healthz").json()  # 503 when stalled: read it too
        age = (doc.get("loop") or {}).get("last_round_age_s")
        if age is not None:
            ages.append(float(age))
        time.sleep(0.05)
    return (statistics.median(ages), max(ages)) if ages else (float("nan"), float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--cluster", default="256x4")
    ap.add_argument("--time-scale", type=float, default=100.0)
    ap.add_argument("--run-s", type=float, default=60.0, help="real seconds to run after the burst")
    args = ap.parse_args()
    print(f"# {machine()}")
    catalog = CatalogTruth()
    philly = load_philly(require(POLLUX / "philly.csv"), catalog.limits(), start=None,
                         hours=24 * 30, max_jobs=args.jobs)
    cluster = Cluster.parse(args.cluster)
    opts = EmulationOptions(cluster=args.cluster, time_scale=args.time_scale)
    data = Path(tempfile.mkdtemp(prefix="corral-control-plane-"))
    service = _Service(data, args.policy, (), opts)
    try:
        client = service.connect()
        print(f"# {len(philly.jobs)} Philly jobs, {args.policy}, {cluster.describe()} "
              f"({cluster.total_gpus} GPUs), time scale {args.time_scale:g}, data {data}")
        latencies = []
        started = time.perf_counter()
        for i, spec in enumerate(philly.jobs):
            body = submission_body(spec, cluster.total_gpus)
            t = time.perf_counter()
            client.submit(body)
            latencies.append(time.perf_counter() - t)
            if (i + 1) % 2000 == 0:
                print(f"  {i + 1} submitted, {time.perf_counter() - started:.1f} s", flush=True)
        burst = time.perf_counter() - started
        print(f"submissions: {len(latencies)} in {burst:.1f} s = {len(latencies) / burst:.0f}/s; "
              f"latency p50 {_ms(latencies, 0.5)}, p99 {_ms(latencies, 0.99)}, "
              f"max {_ms(latencies, 1.0)}")
        median_age, max_age = _loop_period(client, 5.0)
        print(f"control loop with the queue full: last-round age median {median_age:.2f} s, "
              f"max {max_age:.2f} s (tick {min(0.2, max(0.01, 2 / args.time_scale)):g} s)")
        for path in ("/jobs", "/cluster", "/metrics"):
            times = _timed(lambda: client._call("GET", path), repeat=5)
            print(f"GET {path}: median {_ms(times, 0.5)}, max {_ms(times, 1.0)}")
        end = time.monotonic() + args.run_s
        while time.monotonic() < end:
            time.sleep(1.0)
        c = client.cluster()
        recent = c.get("recent_rounds") or []
        decide = [r["decide_s"] for r in recent if not r.get("fill_in")]
        done = sum(j["status"] == "done" for j in client.jobs())
        print(f"after {args.run_s:.0f} s real more ({c['time_s']:.0f} emulated s in all): "
              f"{c['rounds']} rounds, {done} jobs done; last {len(decide)} rounds: decide "
              f"median {_ms(decide, 0.5) if decide else '-'}, max "
              f"{_ms(decide, 1.0) if decide else '-'}, jobs per round "
              f"{recent[-1]['jobs'] if recent else '-'}")
        median_age, max_age = _loop_period(client, 5.0)
        print(f"control loop now: last-round age median {median_age:.2f} s, max {max_age:.2f} s")
        print(f"service RSS: {_rss_mib(service.proc.pid):.0f} MiB")
    finally:
        service.close()


if __name__ == "__main__":
    main()
