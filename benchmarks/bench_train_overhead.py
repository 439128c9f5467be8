"""corral.train's per-step overhead against the same plain PyTorch loop.

The model and data are the example's (examples/digits_common.py: the digits CNN, batch 16 per
worker), at several widths so that a step takes from ~1 ms (the example's width 16, a toy) to
tens of ms (width 128; real models' steps on GPUs take 10s to 100s of ms): corral.train's cost
is mostly fixed per step, so the figure that matters is the overhead at a realistic step time. "plain" is the loop a user writes without corral: on 2 workers DistributedDataParallel
(gloo, CPU), one worker without it; each worker indexes its share of a shuffled pass. "corral"
is the same model under `ElasticTrainer` with the batch fixed (as a non-adaptive job runs),
doing what it does under the service: the gradient all-reduce with the noise statistics and
stop flag in one buffer, the noise-scale estimate, LR scaling, step profiling into the
JobEstimator, a report every second. Both time the same steps after a warm-up; the variants
take turns, round after round, so a busy machine slows both alike. Printed: the median and the
best round of each (on a machine shared with other work the best is the steadier figure).
Issue 6 goal: <= 5 % (AdaptDL users measured 2.6x).

Run: python benchmarks/bench_train_overhead.py [--steps 300] [--rounds 3] [--workers 1 2]
         [--widths 16 64 128]   (timed steps: --steps at width 16, proportionally fewer wider)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
WARMUP_STEPS = 20
RUN_TIMEOUT_S = 180.0
LOCAL_BSZ = 16


def _worker(mode: str, steps: int, width: int) -> None:
    import torch
    import torch.nn.functional as F

    from digits_common import digits, make_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    train, _ = digits()
    model = make_model(width)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    total = WARMUP_STEPS + steps
    if mode == "plain":
        import torch.distributed as dist

        net = model
        if world > 1:
            dist.init_process_group("gloo", init_method="env://")
            net = torch.nn.parallel.DistributedDataParallel(model)
        x_all, y_all = train.tensors
        perm = torch.randperm(len(y_all), generator=torch.Generator().manual_seed(0))
        for step in range(total):
            if step == WARMUP_STEPS:
                start = time.perf_counter()
            lo = ((step * world + rank) * LOCAL_BSZ) % (len(perm) - LOCAL_BSZ)
            idx = perm[lo:lo + LOCAL_BSZ]
            loss = F.cross_entropy(net(x_all[idx]), y_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        elapsed = time.perf_counter() - start
        if world > 1:
            dist.barrier()  # leave together (a lone teardown can hang the peer's)
            dist.destroy_process_group()
    else:
        from corral.train import ElasticTrainer

        trainer = ElasticTrainer(model, opt, train, batch_size=LOCAL_BSZ * world)
        step = 0
        for _ in trainer.epochs(10_000):
            for x, y in trainer.batches():
                if step == WARMUP_STEPS:
                    start = time.perf_counter()
                trainer.backward(F.cross_entropy(model(x), y))
                step += 1
                if step == total:
                    break
            if step == total:
                break
        elapsed = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"ms_per_step": 1000 * elapsed / steps}), flush=True)


def _run(mode: str, workers: int, steps: int, width: int, attempts: int = 3) -> float:
    """ms per step of one run; a run whose workers hang (seen rarely in gloo's rendezvous on
    this machine) is killed after RUN_TIMEOUT_S and tried again, at most `attempts` times."""
    for attempt in range(attempts):
        try:
            return _run_once(mode, workers, steps, width)
        except subprocess.TimeoutExpired:
            print(f"  ({mode}, {workers} workers, width {width}: hung, killed; "
                  f"attempt {attempt + 1} of {attempts})", flush=True)
    raise RuntimeError(f"{mode} workers hung {attempts} times")


def _run_once(mode: str, workers: int, steps: int, width: int) -> float:
    from corral.executors.procs import free_port
    from corral.train.env import ENV_CONFIG, JobConfig, WorkerEnv

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = JobConfig(init_bsz=LOCAL_BSZ * workers, max_bsz=LOCAL_BSZ * workers,
                           max_local_bsz=LOCAL_BSZ, batch=(LOCAL_BSZ, 0),
                           report_path=str(Path(tmp) / "report.json"), report_interval_s=1.0)
        procs = []
        for rank in range(workers):
            env = {**os.environ, "OMP_NUM_THREADS": "1",
                   **WorkerEnv(rank=rank, world_size=workers, local_rank=rank,
                               local_world_size=workers, master_port=port).to_env()}
            if mode == "corral":
                env[ENV_CONFIG] = config.to_json()
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", mode,
                                           "--steps", str(steps), "--widths", str(width)],
                                          env=env, stdout=subprocess.PIPE, text=True))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            outs = [p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
                    for p in procs]
        finally:
            for p in procs:  # only the workers this run started
                if p.poll() is None:
                    p.kill()
                    p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{mode} workers failed: {[p.returncode for p in procs]}")
    return json.loads(outs[0].strip().splitlines()[-1])["ms_per_step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--worker", choices=["plain", "corral"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.steps, args.widths[0])
        return
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it goes
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"digits CNN, {LOCAL_BSZ} per worker, {WARMUP_STEPS} warm-up steps, "
          f"{args.rounds} rounds (median and best)")
    for width in args.widths:
        steps = max(60, args.steps * 16 // width)
        for workers in args.workers:
            times: dict[str, list[float]] = {"plain": [], "corral": []}
            for _ in range(args.rounds):
                for mode in times:
                    times[mode].append(_run(mode, workers, steps, width))
            loop = f"plain {'DDP ' if workers > 1 else ''}loop"
            for name, pick in (("median", statistics.median), ("best", min)):
                plain, corral = pick(times["plain"]), pick(times["corral"])
                print(f"width {width:3d}, {workers} worker(s), {steps} steps, {name} of rounds: "
                      f"{loop} {plain:.2f} ms/step, corral.train {corral:.2f} ms/step, "
                      f"overhead {100 * (corral / plain - 1):+.1f} %")
            print(f"  rounds: plain {[round(t, 2) for t in times['plain']]}, "
                  f"corral {[round(t, 2) for t in times['corral']]}")


if __name__ == "__main__":
    main()
