"""The fault catalogue of issue 12, thrown at a real `corral serve` on loopback.

Every fault runs `--trials` times, each on a fresh service (fifo, CPU slots, 1 s interval) with
its own data directory, while ordinary jobs run (tests/executors/worker.py: counts 20 ms steps,
checkpoints on SIGTERM, resumes from its checkpoint). Per fault it prints the trials, the jobs
that finished, the jobs lost (an ordinary job that did not end `done`; the job a fault is aimed
at counts only if the fault should not end it) and the worst recovery time, measured as:

* bad submissions (NUL byte, lone surrogate, env key with '=', a huge number, a 2 MiB body,
  raw non-JSON bytes): the answer must be 4xx; recovery = from the request to the end of a job
  submitted right after it (the service still schedules);
* an unstartable job (no such program; working directory removed before it starts): that job
  must fail with an event; recovery = as above;
* a second `corral serve` on the data directory: it must exit 2 naming the first, which keeps
  serving; recovery = until it exited;
* a start on a port in use: exit 2 and no file of the data directory changed (the token!);
  recovery = until it exited;
* kill -9 of a worker: recovery = from the kill to the job running its next launch;
* kill -9 of the service / SIGTERM to it: a new service on the directory; recovery = from the
  kill to every unfinished job running again; every process of the old launches must be gone;
* corrupt checkpoints (a corral.train job, examples/digits_elastic.py, long by construction:
  every checkpoint truncated, then its worker killed): the job must start fresh with the event
  "started fresh (no usable checkpoint)" and train again (then the benchmark cancels it; it
  counts as finished); recovery = from the kill to its next launch running;
* kill -9 of a torchrun agent: its trainers (sessions of their own) must end; recovery = from
  the kill to the trainers gone and the job running again;
* a burst of 1,000 submissions from 16 client threads: every job must finish; recovery = from
  the first submission to the last job done (submission and GET /jobs latencies are printed);
* a burst of 1,000 concurrent GET /jobs (one thread each) on a store of jobs whose commands are
  as long as allowed: every answer 200 or 503 (the concurrency limit), none lost, and the
  service's memory (RSS) printed before, at its peak during and after; it must stay within
  256 MiB of where it began; recovery = the burst's length;
* in-job attacks (issue 43; needs Landlock): under `--queues` (nlp, vision) a vision job writes
  a log and a checkpoint, then an nlp job (tests/service/attack_job.py) tries to read every file
  of the data directory (listed from outside), the admin token, vision's token, log and
  checkpoint, the service's /proc environ, to list the data directory and to signal the
  service: each attempt must be refused (the matrix is printed with each OS error), and its own
  checkpoint written, then resumed by its retry; recovery = the attacker's submission to its end.

Run: python benchmarks/live/bench_faults.py [--trials 2] [--burst 1000] [--only NAME,...]
Everything listens on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "service"))
import livecluster as live  # noqa: E402  (the tests' helper that runs `corral serve`)

from corral.executors.procs import tagged_pids  # noqa: E402

WORKER = REPO / "tests" / "executors" / "worker.py"
ATTACK_JOB = REPO / "tests" / "service" / "attack_job.py"
TIMEOUT_S = 180.0
TRAINER = """
import os, sys, time
ckpt = os.environ["CORRAL_CHECKPOINT_DIR"]
with open(os.path.join(ckpt, f"trainer-{os.environ['RANK']}-{os.getpid()}.pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(float(sys.argv[1]))
"""


@dataclass
class Row:
    """What one fault did over its trials."""

    fault: str
    trials: int = 0
    finished: int = 0
    lost: int = 0
    worst_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def add(self, finished: int, lost: int, recovery_s: float) -> None:
        self.trials += 1
        self.finished += finished
        self.lost += lost
        self.worst_s = max(self.worst_s, recovery_s)


class Check(Exception):
    """The service did not do what it must under this fault."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Check(what)


# -- helpers ----------------------------------------------------------------------------------
def start(root: Path, name: str, slots: int = 2, interval_s: float = 1.0,
          extra: tuple[str, ...] = ()) -> live.LiveService:
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    return live.LiveService(directory, "fifo", slots=slots, interval_s=interval_s,
                            extra_args=("--retry-backoff", "0.2", *extra)).start()


def counting_job(svc: live.LiveService, steps: int = 150) -> str:
    return svc.client.submit({"command": [sys.executable, str(WORKER), "count", str(steps)],
                              "cwd": str(WORKER.parent)})["id"]


def settle(svc: live.LiveService, ids: list[str], timeout_s: float = TIMEOUT_S) -> tuple[int, int]:
    """Wait until the jobs ended (bounded); (done, not done)."""
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = {j["id"]: j for j in svc.client.jobs()}
        ended = [i for i in ids if jobs[i]["status"] not in ("queued", "running")]
        if len(ended) == len(ids) or time.monotonic() > deadline:
            done = sum(jobs[i]["status"] == "done" for i in ids)
            return done, len(ids) - done
        time.sleep(0.1)


def probe(svc: live.LiveService, since: float) -> tuple[float, int, int]:
    """Submit a quick job; (seconds from `since` to its end, done, lost)."""
    job = svc.client.submit({"command": [sys.executable, "-c", "pass"],
                             "cwd": str(WORKER.parent)})["id"]
    done, lost = settle(svc, [job], 60)
    return time.monotonic() - since, done, lost


def running_launch(svc: live.LiveService, job_id: str, after: int, timeout_s: float = 60) -> None:
    """Until the job runs a launch numbered above `after` (its workers started)."""
    def again() -> bool:
        job = svc.job(job_id)
        return job["status"] == "running" and job["launches"] > after

    live.wait_until(again, timeout_s, f"{job_id} to run again")


def started(svc: live.LiveService, ids: list[str]) -> dict[str, int]:
    """Until every job runs a launch the service has counted; {job: launches}."""
    def counted() -> dict[str, int] | None:
        jobs = {j["id"]: j for j in svc.client.jobs()}
        ok = all(jobs[i]["status"] == "running" and jobs[i]["launches"] >= 1 for i in ids)
        return {i: jobs[i]["launches"] for i in ids} if ok else None

    return live.wait_until(counted, 60, f"{ids} to run")


def worker_pids(svc: live.LiveService, job_id: str) -> list[int]:
    path = svc.data_dir / "jobs" / job_id / "workers.json"
    return [int(p) for p in json.loads(path.read_text())]


def launch_tag(svc: live.LiveService, job_id: str) -> str:
    return json.loads((svc.data_dir / "jobs" / job_id / "launch.tag").read_text())


def raw_post(svc: live.LiveService, body: bytes) -> int:
    import httpx

    token = (svc.data_dir / "token").read_text().strip()
    return httpx.post(f"{svc.client.url}/jobs", content=body, timeout=30,
                      headers={"Authorization": f"Bearer {token}",
                               "Content-Type": "application/json"}).status_code


# -- the faults -------------------------------------------------------------------------------
BAD_BODIES = {
    "bad submission: NUL byte": rb'{"command":["python","-c","print(1)\u0000"],"cwd":"/tmp"}',
    "bad submission: lone surrogate": rb'{"command":["python","-c","print(\"\ud800\")"]}',
    "bad submission: env key with '='": rb'{"command":["true"],"env":{"A=B":"1"}}',
    "bad submission: batch_size 10^30": rb'{"command":["true"],"batch_size":1' + b"0" * 30 + b"}",
    "bad submission: 2 MiB body": b'{"command":["' + b"x" * (2 << 20) + b'"]}',
    "bad submission: raw bytes": bytes(range(256)),
}


def beside_a_job(name: str, fault: Callable[[live.LiveService, Path], None]
                 ) -> Callable[[Path], tuple[int, int, float]]:
    """A trial of a fault that must leave scheduling alone: `fault(svc, root)` runs (and checks
    what it must) while a counting job runs; recovery = until a job submitted after it ends."""
    def run(root: Path) -> tuple[int, int, float]:
        svc = start(root, name)
        try:
            job = counting_job(svc)
            t0 = time.monotonic()
            fault(svc, root)
            took, done, lost = probe(svc, t0)
            d2, l2 = settle(svc, [job])
            return done + d2, lost + l2, took
        finally:
            svc.close()
    return run


def bad_body(body: bytes) -> Callable[[live.LiveService, Path], None]:
    def send(svc: live.LiveService, root: Path) -> None:
        code = raw_post(svc, body)
        expect(400 <= code < 500, f"answered {code}")
    return send


def unstartable(kind: str) -> Callable[[live.LiveService, Path], None]:
    def submit(svc: live.LiveService, root: Path) -> None:
        if kind == "program":
            bad = svc.client.submit({"command": ["/nonexistent/program"],
                                     "cwd": str(WORKER.parent)})["id"]
        else:
            gone = Path(tempfile.mkdtemp(dir=root))
            # 2 slots: it waits for the counting job, long after its directory is gone
            bad = svc.client.submit({"command": ["true"], "cwd": str(gone), "gpus": 2})["id"]
            gone.rmdir()
        settle(svc, [bad], 60)
        failed = svc.job(bad)
        expect(failed["status"] == "failed" and failed["message"], f"the bad job {failed['status']}")
        expect(any(e["kind"] == "start-failed" for e in failed["events"]), "no start-failed event")
    return submit


def second_service(root: Path) -> tuple[int, int, float]:
    svc = start(root, "second")
    try:
        job = counting_job(svc)
        before = {n: (svc.data_dir / n).read_bytes() for n in ("token", "service.json")}
        t0 = time.monotonic()
        done_proc = svc.cli("serve", "--port", "0", "--slots", "1", "--token", "other", timeout_s=120)
        took = time.monotonic() - t0
        expect(done_proc.returncode == 2, f"second service exited {done_proc.returncode}")
        expect(f"pid {svc.proc.pid}" in done_proc.stderr, "the message does not name the first")
        expect({n: (svc.data_dir / n).read_bytes() for n in before} == before, "files changed")
        done, lost = settle(svc, [job])
        return done, lost, took
    finally:
        svc.close()


def port_in_use(root: Path) -> tuple[int, int, float]:
    directory = Path(tempfile.mkdtemp(prefix="port-", dir=root))
    (directory / "token").write_text("kept\n")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in directory.iterdir())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        svc = live.LiveService(directory, "fifo", slots=1)
        t0 = time.monotonic()
        proc = svc.cli("serve", "--port", str(busy.getsockname()[1]), "--token", "X")
        took = time.monotonic() - t0
    expect(proc.returncode == 2 and "cannot listen" in proc.stderr, proc.stderr.strip())
    after = sorted((p.name, p.stat().st_mtime_ns) for p in directory.iterdir()
                   if p.name != "service.lock")
    expect(after == before and (directory / "token").read_text() == "kept\n", "files changed")
    return 0, 0, took


def kill_worker(root: Path) -> tuple[int, int, float]:
    svc = start(root, "kill-worker")
    try:
        job = counting_job(svc, 200)
        launches = started(svc, [job])[job]
        t0 = time.monotonic()
        os.kill(worker_pids(svc, job)[0], signal.SIGKILL)
        running_launch(svc, job, launches)
        took = time.monotonic() - t0
        done, lost = settle(svc, [job])
        expect(svc.job(job)["crash_retries"] == 1, "the crash retry was not counted")
        return done, lost, took
    finally:
        svc.close()


def service_dies(how: int) -> Callable[[Path], tuple[int, int, float]]:
    def run(root: Path) -> tuple[int, int, float]:
        svc = start(root, "service-dies")
        try:
            jobs = [counting_job(svc, 300), counting_job(svc, 300)]
            launches = started(svc, jobs)
            tags = [launch_tag(svc, j) for j in jobs]
            t0 = time.monotonic()
            if how == signal.SIGKILL:
                svc.kill9()
            else:
                svc.proc.send_signal(how)
                svc.proc.wait(60)
                expect(svc.proc.returncode == 0, f"SIGTERM exit status {svc.proc.returncode}")
            svc.start()
            for j in jobs:
                running_launch(svc, j, launches[j])
            took = time.monotonic() - t0
            left = [p for t in tags for p in tagged_pids(t)]
            expect(not left, f"processes of the old launches still alive: {left}")
            done, lost = settle(svc, jobs)
            return done, lost, took
        finally:
            svc.close()
    return run


def corrupt_checkpoints(root: Path) -> tuple[int, int, float]:
    svc = start(root, "corrupt", extra=("--checkpoint-interval", "1"))
    try:
        # long by construction (minutes of training): it is still training when its
        # checkpoints are corrupted and its worker killed, however fast the machine
        job = svc.submit("digits_elastic.py", "--epochs", "1000", batch_size=32, max_local_bsz=64)
        ckpts = svc.data_dir / "jobs" / job / "checkpoints"
        live.wait_until(lambda: list(ckpts.glob("ckpt-*.pt")) and svc.job(job)["steps"] > 0,
                        120, "a checkpoint")
        launches = svc.job(job)["launches"]
        for path in ckpts.glob("ckpt-*.pt"):
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        t0 = time.monotonic()
        for pid in worker_pids(svc, job):
            os.kill(pid, signal.SIGKILL)
        running_launch(svc, job, launches, 120)
        took = time.monotonic() - t0
        live.wait_until(lambda: "fresh" in [e["kind"] for e in svc.job(job)["events"]], 120,
                        "the 'started fresh' event")
        steps = svc.job(job)["steps"]
        live.wait_until(lambda: svc.job(job)["steps"] > steps, 120, "the job to train again")
        svc.client.cancel(job)
        live.wait_until(lambda: svc.job(job)["status"] == "cancelled", 60, "the cancel")
        return 1, 0, took  # recovered: trained again from scratch (then cancelled, as planned)
    finally:
        svc.close()


def torchrun_agent(root: Path) -> tuple[int, int, float]:
    work = Path(tempfile.mkdtemp(prefix="torchrun-work-", dir=root))  # not a data dir's parent:
    script = work / "trainer.py"  # the job sandbox refuses a working directory holding one
    script.write_text(TRAINER)
    svc = start(root, "torchrun")
    try:
        job = svc.client.submit({"command": [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "--monitor-interval", "0.2", str(script), "4"], "cwd": str(work),
            "env": {"OMP_NUM_THREADS": "1"}})["id"]
        ckpts = svc.data_dir / "jobs" / job / "checkpoints"
        live.wait_until(lambda: len(list(ckpts.glob("trainer-*.pid"))) >= 2, 120, "the trainers")
        trainers = [int(p.read_text()) for p in ckpts.glob("trainer-*.pid")]
        launches = svc.job(job)["launches"]
        t0 = time.monotonic()
        os.kill(worker_pids(svc, job)[0], signal.SIGKILL)
        live.wait_until(lambda: not any(_alive(p) for p in trainers), 60, "the trainers to end")
        running_launch(svc, job, launches, 120)
        took = time.monotonic() - t0
        done, lost = settle(svc, [job], 180)
        return done, lost, took
    finally:
        svc.close()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def burst(count: int) -> Callable[[Path], tuple[int, int, float]]:
    def run(root: Path) -> tuple[int, int, float]:
        svc = start(root, "burst", slots=8, interval_s=0.2)
        latencies: list[float] = []
        lists: list[float] = []
        stop = threading.Event()
        try:
            def submit(i: int) -> str:
                t = time.monotonic()
                job = svc.client.submit({"command": ["true"], "cwd": str(WORKER.parent),
                                         "name": f"b{i}"})["id"]
                latencies.append(time.monotonic() - t)
                return job

            def lister() -> None:
                while not stop.is_set():
                    t = time.monotonic()
                    svc.client.jobs()
                    lists.append(time.monotonic() - t)
                    stop.wait(0.5)

            watcher = threading.Thread(target=lister, daemon=True)
            t0 = time.monotonic()
            watcher.start()
            with ThreadPoolExecutor(16) as pool:
                ids = list(pool.map(submit, range(count)))
            done, lost = settle(svc, ids, 900)
            took = time.monotonic() - t0
            stop.set()
            watcher.join(5)
            q = statistics.quantiles(latencies, n=100)
            ql = statistics.quantiles(lists, n=100) if len(lists) > 1 else [float("nan")] * 99
            print(f"  burst: POST /jobs p50 {q[49] * 1000:.0f} ms p99 {q[98] * 1000:.0f} ms; "
                  f"GET /jobs ({len(lists)} calls) p50 {ql[49] * 1000:.0f} ms "
                  f"p99 {ql[98] * 1000:.0f} ms; {count} jobs in {took:.0f} s", flush=True)
            return done, lost, took
        finally:
            stop.set()
            svc.close()
    return run


def get_burst(count: int) -> Callable[[Path], tuple[int, int, float]]:
    def run(root: Path) -> tuple[int, int, float]:
        import psutil

        from corral.service.submission import MAX_COMMAND_CHARS, MAX_STRING

        svc = start(root, "get-burst", slots=2)
        try:
            args = ["x" * MAX_STRING] * (MAX_COMMAND_CHARS // MAX_STRING - 1)
            ids = [svc.client.submit({"command": ["true", *args], "cwd": str(WORKER.parent),
                                      "name": f"long{i}"})["id"] for i in range(100)]
            settle(svc, ids, 120)
            service = psutil.Process(svc.proc.pid)
            before = service.memory_info().rss
            peak, sampling = before, threading.Event()

            def sample() -> None:
                nonlocal peak
                while not sampling.is_set():
                    peak = max(peak, service.memory_info().rss)
                    sampling.wait(0.02)

            codes: list[int] = []
            port = int(svc.client.url.rsplit(":", 1)[1])
            token = (svc.data_dir / "token").read_text().strip()

            def get() -> None:
                with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
                    conn.sendall(f"GET /jobs?limit=1000 HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                 f"Bearer {token}\r\nConnection: close\r\n\r\n".encode())
                    head = conn.recv(64)
                    while conn.recv(1 << 16):  # read the whole answer, as a client does
                        pass
                codes.append(int(head.split()[1]))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t0 = time.monotonic()
            threads = [threading.Thread(target=get, daemon=True) for _ in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            took = time.monotonic() - t0
            time.sleep(1.0)  # what the service keeps once the burst is over
            sampling.set()
            sampler.join(5)
            after = service.memory_info().rss
            mib = 1 << 20
            print(f"  GET burst: {count} concurrent GET /jobs?limit=1000 of 100 jobs with "
                  f"{MAX_COMMAND_CHARS:,}-character commands: {codes.count(200)} answered 200, "
                  f"{codes.count(503)} 503 (busy), {count - len(codes)} unanswered in {took:.1f}"
                  f" s; service RSS {before / mib:.0f} MiB before, {peak / mib:.0f} MiB at its "
                  f"peak, {after / mib:.0f} MiB after", flush=True)
            expect(len(codes) == count and set(codes) <= {200, 503},
                   f"answers {sorted(set(codes))}, {count - len(codes)} unanswered")
            expect(peak - before < 256 * mib, f"RSS grew {(peak - before) / mib:.0f} MiB")
            done, lost = settle(svc, ids, 10)
            return done, lost, took
        finally:
            svc.close()
    return run


ATTACK_QUEUES = "[queue.nlp]\nquota = 1\n[queue.vision]\nquota = 1\n"
VICTIM = ("import os; open(os.path.join(os.environ['CORRAL_CHECKPOINT_DIR'], 'vision.pt'), 'w')"
          ".write('vision weights'); print('vision log line', flush=True)")


@dataclass
class Attacks:
    """What one in-job attack run saw: each attempt with what it got ("ok" or the OS error's
    errno name), those that got through (beyond what the kernel's Landlock ABI cannot refuse),
    whether the attacker's own checkpoint was resumed, and seconds from its submission to its
    end."""

    attempts: list[tuple[str, str]]
    through: list[str]
    resumed: bool
    took_s: float


def attack_matrix(svc: live.LiveService, attacker: Any, victim: Any, work: Path,
                  gpu_type: str | None = None) -> Attacks:
    """Under `--queues` with queues nlp and vision: a vision job (`victim`'s client) writes
    a log and a checkpoint, then an nlp job (`attacker`'s client; tests/service/attack_job.py,
    run in `work`) tries to read every file of the data directory (listed from outside), the
    admin token, vision's token, log and checkpoint, the service's /proc environ, to list the
    data directory and to signal the service, writes its own checkpoint, crashes and is
    resumed by its retry (bounded: 60 s for the victim, 90 s for the attacker)."""
    from corral.executors import sandbox

    body: dict[str, Any] = {"cwd": str(work), "gpus": 1}
    if gpu_type:
        body["gpu_type"] = gpu_type
    victim_id = victim.submit({"command": [sys.executable, "-c", VICTIM], **body})["id"]
    svc.wait_all_done([victim_id], 60)
    data = svc.data_dir
    listing = work / "paths.txt"  # what is there to steal, listed from outside
    listing.write_text("\n".join(str(p) for p in sorted(data.rglob("*")) if p.is_file()))
    t0 = time.monotonic()
    attacker_id = attacker.submit({"command": [sys.executable, str(ATTACK_JOB), str(data),
                                               victim_id, str(listing)], **body})["id"]
    [job] = svc.wait_all_done([attacker_id], 90)
    took = time.monotonic() - t0
    log = attacker.logs(attacker_id)
    attempts = [tuple(json.loads(line.split("ATTEMPT ", 1)[1])) for line in log.splitlines()
                if line.startswith("ATTEMPT ")]
    allowed = [] if sandbox.abi() >= 6 else ["signal service"]  # ABI 6 scopes signals
    through = [what for what, got in attempts if got == "ok" and what not in allowed]
    resumed = 'resumed {"step": 7}' in log and job["status"] == "done"
    return Attacks(attempts, through, resumed, took)


def in_job_attacks(root: Path) -> tuple[int, int, float]:
    from corral.executors import sandbox

    expect(sandbox.available(), "this kernel has no Landlock: no job sandbox to attack")
    home = Path(tempfile.mkdtemp(prefix="attacks-", dir=root))
    work = home / "work"
    work.mkdir()
    (home / "queues.toml").write_text(ATTACK_QUEUES)
    svc = start(home, "service", extra=("--queues", str(home / "queues.toml"),
                                        "--max-retries", "2"))
    nlp, vision = svc.tenant("nlp"), svc.tenant("vision")
    try:
        got = attack_matrix(svc, nlp, vision, work)
        for what, answer in got.attempts:
            print(f"    {what:<56} {answer}", flush=True)
        print(f"  in-job attacks: {len(got.attempts)} attempts, {len(got.through)} got through; "
              f"own checkpoint resumed: {got.resumed}", flush=True)
        expect(len(got.attempts) > 10, f"only {len(got.attempts)} attempts ran")
        expect(not got.through, f"got through: {got.through}")
        expect(got.resumed, "the attacker's own checkpoint was not resumed")
        return 1, len(got.through), got.took_s
    finally:
        nlp.close()
        vision.close()
        svc.close()


def catalogue(burst_size: int) -> dict[str, Callable[[Path], tuple[int, int, float]]]:
    faults: dict[str, Callable[[Path], tuple[int, int, float]]] = {
        name: beside_a_job("bad", bad_body(body)) for name, body in BAD_BODIES.items()}
    faults.update({
        "unstartable job: no such program": beside_a_job("unstartable", unstartable("program")),
        "unstartable job: cwd removed": beside_a_job("unstartable", unstartable("cwd")),
        "second service on the data dir": second_service,
        "start on a port in use": port_in_use,
        "kill -9 of a worker": kill_worker,
        "kill -9 of the service": service_dies(signal.SIGKILL),
        "SIGTERM to the service": service_dies(signal.SIGTERM),
        "corrupt checkpoints (corral.train)": corrupt_checkpoints,
        "kill -9 of a torchrun agent": torchrun_agent,
        f"burst of {burst_size} submissions": burst(burst_size),
        f"burst of {burst_size} concurrent GET /jobs": get_burst(burst_size),
        "in-job attacks (queues, sandbox)": in_job_attacks,
    })
    return faults


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated substrings of fault names")
    args = ap.parse_args()
    faults = catalogue(args.burst)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        faults = {k: v for k, v in faults.items() if any(w in k for w in wanted)}
    print(f"# {machine()}; {args.trials} trial(s) per fault (the burst: 1)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="corral-faults-") as tmp:
        for name, fault in faults.items():
            row = Row(name)
            for _ in range(1 if name.startswith(("burst", "in-job")) else args.trials):
                try:
                    row.add(*fault(Path(tmp)))
                except (Check, TimeoutError, AssertionError, RuntimeError) as exc:
                    row.trials += 1
                    row.problems.append(" ".join(str(exc).split())[:160])
            rows.append(row)
            print(f"  {name}: {row.trials} trial(s), {row.finished} finished, {row.lost} lost, "
                  f"worst {row.worst_s:.1f} s" + (f"; FAILED: {row.problems}" if row.problems
                                                  else ""), flush=True)
    width = max(len(r.fault) for r in rows)
    print(f"\n{'fault':<{width}}  trials  finished  lost  worst recovery  survived")
    for r in rows:
        print(f"{r.fault:<{width}}  {r.trials:>6}  {r.finished:>8}  {r.lost:>4}  "
              f"{r.worst_s:>12.1f} s  {'yes' if not r.problems and not r.lost else 'NO'}")
    bad = [r.fault for r in rows if r.problems or r.lost]
    print("every fault survived, zero jobs lost" if not bad else f"NOT survived: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
