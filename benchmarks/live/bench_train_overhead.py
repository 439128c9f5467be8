"""corral.train's per-step overhead against the plain data-parallel loop a user writes.

Two settings, one script:

* `--device cpu` (default): the example's digits CNN (examples/digits_common.py, 16 per
  worker) at widths 16, 64 and 128 (a ~1 ms toy step to tens of ms), on 1 and 2 gloo workers.
  "plain" is DistributedDataParallel on 2 workers (the bare model on one), each worker indexing
  its share of a shuffled pass.
* `--device cuda`: ResNet-18 on 32x32 images (batch 256 per GPU) and ResNet-50 on 224x224
  (batch 64 per GPU) on synthetic data in host memory, fp32 and bf16 autocast, one worker per
  GPU (`--workers`). "plain" is DDP (several GPUs) over a DataLoader with pinned memory, worker
  processes and non_blocking copies. "resident" is the same loop on batches gathered from a
  copy of the data already on the GPU: no input cost at all, the floor of a step. On an H100
  (first run, 2026-11-27) "plain" took 45 ms/step on ResNet-50 in fp32 and in bf16 alike, the
  DataLoader's pace, not the GPU's: the overhead against "plain" there measures the input
  path, the one against "resident" the trainer's own cost. ResNet-18's epochs here are 8 steps
  (2,048 images), so per-epoch work weighs 25x what it does on CIFAR-10: the second run's
  profile (`--profile 10`) found its +18.5 % was mostly the epoch-end copy of the state to the
  host, 37 synchronous pageable copies a step (now corral.train.host_copy: +9.3 %). Third
  run (2026-11-27, H100, `benchmarks/gpu_check.sh`), against "resident", median of rounds:
  ResNet-18 +6.7 % at 8-step epochs and +3.0 % at CIFAR-10's 196 (`--epoch-steps 196`);
  ResNet-50 +3.9 % at 8-step epochs and +2.1 % at 196 (38.14 against 37.34 ms/step). What is
  left at short epochs is the epoch end's copy of the state (ResNet-50: 200 MB each epoch).

"corral" is the same model under `ElasticTrainer` with the batch fixed (as a non-adaptive job
runs), doing what it does under the service: DDP with the noise-statistics hook, the
noise-scale estimate on the device, LR scaling, the divergence guard, step profiling into the
JobEstimator, a report every second. Both time the same steps after a warm-up (GPU work
synchronised at both ends) and take turns, round after round, so a busy machine slows both
alike: on the CPU both run in the same worker processes (the plain loop's DDP on the trainer's
process group), a block of steps each in turn, first one then the other going first; on GPUs
(and with --separate) each variant is a launch of its own, launches alternating. Printed: the
median and the best round of each, and the median of the per-round ratios. Targets (issue 11): <= 5 % on CPU
at width 128 with 2 workers; <= 5 % ResNet-18 and <= 3 % ResNet-50 on one GPU.

Run: python benchmarks/live/bench_train_overhead.py [--device cpu|cuda] [--steps N] [--rounds 5]
         [--workers 1 2] [--widths 16 64 128] [--models resnet18 resnet50] [--separate]
         [--baselines plain resident] [--device-data] [--epoch-steps 8]
         [--profile STEPS [--trace DIR [--python]]]
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
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
WARMUP_STEPS = 20
PROFILE_ROWS = 25  # ops shown per profiled variant
#: Fewest timed steps per CPU run: a 60-step window (about 1 s at width 128) let one scheduling
#: hiccup on a 2-core machine move a run's figure by +-7 % (rounds of 18.3 to 31 ms/step seen).
MIN_CPU_STEPS = 200
RUN_TIMEOUT_S = 300.0
DIGITS_BSZ = 16
GPU_MODELS = {"resnet18": (18, 32, 256), "resnet50": (50, 224, 64)}  # depth, image side, batch
#: Steps per epoch on GPUs by default (the synthetic dataset's size): short, so epoch-end work
#: weighs heavily; CIFAR-10 at batch 256 is 196 (`--epoch-steps`).
GPU_EPOCH_STEPS = 8


def _build(spec: dict):
    """(model, train set, per-worker batch) for a benchmark spec."""
    import torch

    if spec["model"] == "digits":
        from digits_common import digits, make_model
        return make_model(spec["width"]), digits()[0], DIGITS_BSZ
    from resnet import resnet
    depth, side, batch = GPU_MODELS[spec["model"]]
    g = torch.Generator().manual_seed(0)
    n = batch * spec.get("epoch_steps", GPU_EPOCH_STEPS)
    images = torch.randn(n, 3, side, side, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return (resnet(depth, small_input=side <= 64), torch.utils.data.TensorDataset(images, labels),
            batch)


def _batches_plain(data, local_bsz: int, rank: int, world: int, cuda: bool,
                   resident: torch.device | None = None):
    """The plain loop's batches: a DataLoader with pinned memory on GPUs, direct indexing of
    a shuffled pass on the CPU (as the example's users write it); with `resident`, indexing of
    a copy of the data on that device (no input cost)."""
    import torch

    if cuda and resident is None:
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(data, world, rank, seed=0, drop_last=True)
        loader = DataLoader(data, batch_size=local_bsz, sampler=sampler, drop_last=True,
                            pin_memory=True, num_workers=4, persistent_workers=True)
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1
    x_all, y_all = data.tensors
    perm = torch.randperm(len(y_all), generator=torch.Generator().manual_seed(0))
    if resident is not None:
        x_all, y_all, perm = x_all.to(resident), y_all.to(resident), perm.to(resident)
    step = 0
    while True:
        lo = ((step * world + rank) * local_bsz) % (len(perm) - local_bsz)
        idx = perm[lo:lo + local_bsz]
        yield x_all[idx], y_all[idx]
        step += 1


def _plain_loop(model, data, local_bsz: int, rank: int, world: int, device, amp,
                resident: bool = False):
    """run(n): n steps of the plain loop a user writes (DDP on several workers); with
    `resident`, on batches gathered on the device (`_batches_plain`)."""
    import torch
    import torch.nn.functional as F

    cuda = device.type == "cuda"
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if cuda else None)
    batches = _batches_plain(data, local_bsz, rank, world, cuda,
                             device if resident and cuda else None)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run


def _corral_loop(model, data, local_bsz: int, world: int, device, precision: str):
    """(run(n), trainer): n steps of the same model under ElasticTrainer."""
    import torch
    import torch.nn.functional as F

    from corral.train import ElasticTrainer

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = ElasticTrainer(model, opt, data, batch_size=local_bsz * world,
                             device=str(device), precision=precision)

    def batches():
        for _ in trainer.epochs(10**9):
            yield from trainer.batches()
    stream = batches()

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(stream)
            with trainer.autocast():
                loss = F.cross_entropy(trainer.model(x), y)
            trainer.backward(loss)
    return run, trainer


def _busy_ms(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals (microseconds in, milliseconds out)."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy / 1000


def _gpu_summary(prof, steps: int, wall_ms: float) -> str:
    """Whether a GPU step is bound by the GPU or by the host: the device's busy time (the
    union of its kernels and copies) against the wall time, kernels per step, and the host
    calls that wait for the device (a wait lets the GPU run dry while the host queues)."""
    from torch.autograd import DeviceType

    device, waits = [], {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            device.append((e.time_range.start, e.time_range.end))
        elif "Synchronize" in e.name or e.name in ("cudaMemcpy", "cudaHostAlloc", "cudaFreeHost",
                                                   "cudaMalloc", "cudaFree"):
            n, t = waits.get(e.name, (0, 0.0))
            waits[e.name] = (n + 1, t + e.time_range.elapsed_us() / 1000)
    busy = _busy_ms(device)
    calls = ", ".join(f"{name} {n / steps:.2f}/step {t / steps:.3f} ms/step"
                      for name, (n, t) in sorted(waits.items())) or "none"
    return (f"GPU busy {busy / steps:.2f} ms/step of {wall_ms / steps:.2f} ms/step wall "
            f"({100 * busy / max(wall_ms, 1e-9):.0f} %), {len(device) / steps:.0f} kernels and "
            f"copies/step; host calls that wait on the device: {calls}")


def _profile_table(run, steps: int, cuda: bool, trace: str | None = None,
                   python: bool = False) -> str:
    """torch.profiler's view of `steps` more steps of `run`: on a GPU the busy summary
    (`_gpu_summary`), then the ops by their own device time and by their own host time; on
    the CPU by host time. With `trace`, the chrome trace is written there (gzipped); with
    `python`, it holds the Python calls too (the host's time by function; slows the host)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync = torch_sync(cuda)
    sync()
    with profile(activities=activities, with_stack=python) as prof:
        start = time.perf_counter()
        run(steps)
        sync()
        wall_ms = 1000 * (time.perf_counter() - start)
    if trace:
        import gzip
        import shutil
        raw = trace.removesuffix(".gz")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(trace, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
    table = prof.key_averages()
    if not cuda:
        return table.table(sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS)
    return "\n".join([_gpu_summary(prof, steps, wall_ms),
                      table.table(sort_by="self_cuda_time_total", row_limit=PROFILE_ROWS),
                      table.table(sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS)])


def torch_sync(cuda: bool):
    """A function that waits for the GPU's queued work (a no-op on the CPU)."""
    import torch
    return torch.cuda.synchronize if cuda else (lambda: None)


def _worker(mode: str, steps: int, rounds: int, spec: dict) -> None:
    """One benchmark worker: `plain` or `corral` times `steps` steps after a warm-up;
    `paired` builds both (the plain loop's DDP on the trainer's process group) and times them in
    turn, `rounds` blocks of `steps` steps each, so both see the same machine at the same time.
    With `spec["profile"]` steps, each variant is then profiled that long (`_profile_table`)."""
    import copy
    import gc

    import torch

    torch.set_num_threads(1 if spec["device"] == "cpu" else 4)
    torch.manual_seed(0)
    model, data, local_bsz = _build(spec)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    cuda = spec["device"] == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda \
        else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    amp = torch.bfloat16 if spec["precision"] == "bf16" else None
    sync = torch_sync(cuda)
    loops, trainer = {}, None
    if mode in ("corral", "corral_device", "paired"):  # first: the trainer joins the group
        if mode == "corral_device":  # the user's dataset already on the GPU: no input path
            data = torch.utils.data.TensorDataset(*(t.to(device) for t in data.tensors))
        loops[mode if mode != "paired" else "corral"], trainer = _corral_loop(
            copy.deepcopy(model), data, local_bsz, world, device, spec["precision"])
    if mode in ("plain", "resident", "paired"):
        if world > 1 and trainer is None:
            import torch.distributed as dist
            dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
        loops["resident" if mode == "resident" else "plain"] = _plain_loop(
            model, data, local_bsz, rank, world, device, amp, resident=mode == "resident")
    times: dict[str, list[float]] = {name: [] for name in loops}
    for run in loops.values():
        run(WARMUP_STEPS)
    order = list(loops.items())
    for _ in range(rounds if mode == "paired" else 1):
        for name, run in order:
            sync()
            start = time.perf_counter()
            run(steps)
            sync()
            times[name].append(1000 * (time.perf_counter() - start) / steps)
        order.reverse()  # turns alternate who goes first
    tables = {}
    if spec.get("profile"):
        for name, run in loops.items():
            trace = None
            if spec.get("trace_dir") and rank == 0:
                model = spec["model"] + (f"{spec['width']}" if "width" in spec else "")
                trace = str(Path(spec["trace_dir"]) / f"{model}_{spec['precision']}_{name}.json.gz")
            tables[name] = _profile_table(run, spec["profile"], cuda, trace,
                                          spec.get("python", False))
    loops.clear()
    gc.collect()  # DDP wrappers let go of while the group still works (a later drop can hang)
    if trainer is not None:
        trainer.group.close()
    elif world > 1:
        import torch.distributed as dist
        dist.barrier()  # leave together (a lone teardown can hang the peer's)
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"ms_per_step": times, "profile": tables}), flush=True)


def _run(mode: str, workers: int, steps: int, spec: dict, rounds: int = 1,
         attempts: int = 3) -> dict[str, list[float]]:
    """ms per step of one launch of the workers, per variant and round; a launch whose workers
    hang (seen rarely in gloo's rendezvous on this machine) is killed after RUN_TIMEOUT_S and
    tried again, at most `attempts` times."""
    for attempt in range(attempts):
        try:
            return _run_once(mode, workers, steps, spec, rounds)
        except subprocess.TimeoutExpired:
            print(f"  ({mode}, {workers} workers, {spec}: hung, killed; "
                  f"attempt {attempt + 1} of {attempts})", flush=True)
    raise RuntimeError(f"{mode} workers hung {attempts} times")


def _run_once(mode: str, workers: int, steps: int, spec: dict,
              rounds: int) -> dict[str, list[float]]:
    from corral.executors.procs import free_port
    from corral.protocol.env import ENV_CONFIG, JobConfig, WorkerEnv

    port = free_port()
    launched = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        local = DIGITS_BSZ if spec["model"] == "digits" else GPU_MODELS[spec["model"]][2]
        config = JobConfig(init_bsz=local * workers, max_bsz=local * workers,
                           max_local_bsz=local, batch=(local, 0),
                           report_path=str(Path(tmp) / "report.json"), report_interval_s=1.0)
        procs = []
        for rank in range(workers):
            env = {**os.environ, "OMP_NUM_THREADS": "1",
                   **WorkerEnv(rank=rank, world_size=workers, local_rank=rank,
                               local_world_size=workers, master_port=port).to_env()}
            if mode != "plain":
                env[ENV_CONFIG] = config.to_json()
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", mode, "--steps", str(steps),
                 "--rounds", str(rounds), "--spec", json.dumps(spec)],
                env=env, stdout=subprocess.PIPE, text=True))
        deadline = time.monotonic() + RUN_TIMEOUT_S * max(1, rounds // 2)
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
    result = json.loads(outs[0].strip().splitlines()[-1])
    if spec["device"] == "cuda":  # what a launch costs beside its timed steps
        print(f"  ({mode} launch: {time.monotonic() - launched:.1f} s)", flush=True)
    for name, text in result.get("profile", {}).items():
        print(f"  profile of {name}, {spec['profile']} steps ({spec}):\n{text}", flush=True)
    return result["ms_per_step"]


def _compare(label: str, workers: int, steps: int, rounds: int, spec: dict,
             paired: bool, baselines: tuple[str, ...] = ("plain",),
             device_data: bool = False) -> None:
    """Prints the median and best round of corral against each baseline: in one launch taking
    turns (`paired`, against "plain" only), or launch by launch, alternating. With
    `device_data` (GPU), corral on a dataset already on the device against "resident" too:
    the trainer's own cost, its input path left out."""
    if paired:
        times = _run("paired", workers, steps, spec, rounds)
    else:
        times = {name: [] for name in (*baselines, "corral",
                                       *(["corral_device"] if device_data else []))}
        for _ in range(rounds):
            for mode in times:
                times[mode] += _run(mode, workers, steps, spec)[mode]
    pairs = [(base, "corral") for base in times if not base.startswith("corral")]
    if "corral_device" in times and "resident" in times:
        pairs.append(("resident", "corral_device"))
    names = {"plain": f"plain {'DDP ' if workers > 1 else ''}loop",
             "resident": "plain loop, data on the device", "corral": "corral.train",
             "corral_device": "corral.train, data on the device"}
    for base, ours in pairs:
        for name, pick in (("median", statistics.median), ("best", min)):
            plain, corral = pick(times[base]), pick(times[ours])
            print(f"{label}, {workers} worker(s), {steps} steps, {name} of rounds: "
                  f"{names[base]} {plain:.2f} ms/step, {names[ours]} {corral:.2f} ms/step, "
                  f"overhead {100 * (corral / plain - 1):+.1f} %")
        ratios = sorted(c / p for p, c in zip(times[base], times[ours]))
        print(f"  rounds: {base} {[round(t, 2) for t in times[base]]}, "
              f"{ours} {[round(t, 2) for t in times[ours]]}; per-round overhead median "
              f"{100 * (statistics.median(ratios) - 1):+.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps (CPU: at width 16, proportionally fewer wider but at least "
                         f"{MIN_CPU_STEPS}; GPU: 200)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, nargs="+", default=None)
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--models", nargs="+", default=list(GPU_MODELS), choices=list(GPU_MODELS))
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--separate", action="store_true",
                    help="CPU: each variant in processes of its own, launch by launch (the "
                         "default on GPUs) instead of both in the same workers taking turns")
    ap.add_argument("--baselines", nargs="+", default=["plain", "resident"],
                    choices=["plain", "resident"],
                    help="GPU: what corral is compared with (see the docstring)")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS",
                    help="after timing, profile STEPS more steps of each variant and print "
                         "the ops by their own time (device time on a GPU)")
    ap.add_argument("--trace", metavar="DIR",
                    help="with --profile: write each variant's chrome trace to DIR")
    ap.add_argument("--epoch-steps", type=int, default=GPU_EPOCH_STEPS,
                    help="GPU: steps per epoch (the synthetic dataset's size in batches); "
                         "CIFAR-10 at batch 256 has 196")
    ap.add_argument("--python", action="store_true",
                    help="with --trace: the traces hold the Python calls too")
    ap.add_argument("--device-data", action="store_true",
                    help="GPU: also corral on a dataset already on the device, against "
                         "'resident' (the trainer's own cost without its input path)")
    ap.add_argument("--worker", choices=["plain", "resident", "corral", "corral_device",
                                         "paired"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.steps, args.rounds, json.loads(args.spec))
        return
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it goes
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("skipped: --device cuda needs a CUDA GPU and a CUDA build of torch")
        print(f"GPU: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, "
              f"torch {torch.__version__}; synthetic data in host memory, SGD momentum, "
              f"{WARMUP_STEPS} warm-up steps, {args.rounds} rounds (median and best), "
              f"{args.epoch_steps} steps an epoch")
        for model in args.models:
            depth, side, batch = GPU_MODELS[model]
            for precision in args.precisions:
                for workers in args.workers or [1]:
                    spec = {"model": model, "device": "cuda", "precision": precision,
                            "profile": args.profile, "trace_dir": args.trace,
                            "python": args.python, "epoch_steps": args.epoch_steps}
                    _compare(f"{model} {side}x{side} batch {batch} {precision}", workers,
                             args.steps or 200, args.rounds, spec, paired=False,
                             baselines=tuple(args.baselines), device_data=args.device_data)
        return
    print(f"digits CNN, {DIGITS_BSZ} per worker, {WARMUP_STEPS} warm-up steps, "
          f"{args.rounds} rounds (median and best)")
    for width in args.widths:
        steps = max(MIN_CPU_STEPS, (args.steps or 600) * 16 // width)
        for workers in args.workers or [1, 2]:
            spec = {"model": "digits", "width": width, "device": "cpu", "precision": "fp32",
                    "profile": args.profile, "trace_dir": args.trace, "python": args.python}
            _compare(f"width {width:3d}", workers, steps, args.rounds, spec,
                     paired=not args.separate)


if __name__ == "__main__":
    main()
