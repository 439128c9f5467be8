"""Two gloo workers under DistributedDataParallel against the same steps computed in this
process from first principles: the averaged gradient, the gradient-noise statistics that the
communication hook carries in DDP's buckets (with accumulation, Adam's preconditioner and
clipping), and the weights after several steps."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from corral.executors.procs import free_port  # noqa: E402
from corral.protocol.env import ENV_CONFIG, JobConfig, WorkerEnv  # noqa: E402
from corral.train.noise import GradNoise  # noqa: E402
from corral.train.stream import SampleStream  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked import Worker  # noqa: E402  (workers forked from one torch import)

pytestmark = [pytest.mark.slow]

JOB = Path(__file__).resolve().parent / "ddp_stats_job.py"
TIMEOUT_S = 120
WORKERS = 2


def _job_module():
    spec = importlib.util.spec_from_file_location("ddp_stats_job_defs", JOB)
    mod = importlib.util.module_from_spec(spec)
    saved = sys.argv
    sys.argv = [str(JOB), "--out", "unused"]
    try:
        spec.loader.exec_module(mod)  # defines data() and model_and_optimizer(); runs nothing
    finally:
        sys.argv = saved
    return mod


def run_workers(batch: tuple[int, int], tmp: Path, *args: str, workers: int = WORKERS,
                codes: tuple[int, ...] | None = None, launch: int = 0) -> dict | None:
    port = free_port()
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=batch,
                       checkpoint_dir=str(tmp / "ckpt"), launch=launch)
    out = tmp / "result.json"
    procs = []
    for rank in range(workers):
        env = {**os.environ, ENV_CONFIG: config.to_json(), "OMP_NUM_THREADS": "1",
               "PYTHONFAULTHANDLER": "1",
               **WorkerEnv(rank=rank, world_size=workers, local_rank=rank,
                           local_world_size=workers, master_port=port,
                           backend="gloo").to_env()}
        procs.append(Worker(JOB, ["--out", str(out), *args], env,
                            tmp / f"rank{rank}-launch{launch}.log"))
    try:
        outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    except subprocess.TimeoutExpired:
        # a hung worker: SIGABRT makes each one still running print where its threads are
        # (PYTHONFAULTHANDLER), and the failure shows every rank's output
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGABRT)
        outputs = [p.communicate(timeout=30)[0] for p in procs]
        raise AssertionError(f"workers hung for {TIMEOUT_S} s:\n" + "\n".join(
            f"--- rank {r} (status {p.returncode}):\n{o[-4000:]}"
            for r, (p, o) in enumerate(zip(procs, outputs)))) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == list(codes or [0] * workers), outputs
    return json.loads(out.read_text()) if out.exists() else None


def reference(batch: tuple[int, int], steps: int, adam: bool = False,
              clip: float | None = None, workers: int = WORKERS) -> tuple[list, GradNoise]:
    """The same training computed in one process, sample gradient by sample gradient."""
    job = _job_module()
    data = job.data()
    model, opt = job.model_and_optimizer(adam)
    params = list(model.parameters())
    stream = SampleStream(len(data), seed=0)
    local, accum = batch
    noise = GradNoise()
    position = 0
    for _ in range(steps):
        samples = []
        for micro in range(accum + 1):
            for rank in range(workers):
                idx = torch.from_numpy(stream.micro_batch(position, rank, workers, local, micro))
                x, y = data.tensors[0][idx], data.tensors[1][idx]
                grads = torch.autograd.grad(F.cross_entropy(model(x), y), params)
                samples.append(torch.cat([g.reshape(-1) for g in grads]))
        pinv = None
        if adam and opt.state and float(opt.state[params[0]]["step"]) > 5:
            t = float(opt.state[params[0]]["step"])
            beta2, eps = opt.param_groups[0]["betas"][1], opt.param_groups[0]["eps"]
            pinv = torch.cat([((opt.state[p]["exp_avg_sq"] / (1 - beta2 ** t)).sqrt() + eps)
                              .reshape(-1) for p in params])
        stack = torch.stack(samples).double()
        mean = stack.mean(0)
        pre = stack / pinv.double() if pinv is not None else stack
        pmean = mean / pinv.double() if pinv is not None else mean
        noise.update(float((pre ** 2).sum(1).mean()), float(pmean @ pmean), len(samples), 1.0)
        offset = 0
        for p in params:
            p.grad = mean[offset:offset + p.numel()].view_as(p).float().clone()
            offset += p.numel()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        opt.zero_grad()
        position += local * workers * (accum + 1)
    return [p.detach().flatten().tolist() for p in params], noise


@pytest.mark.parametrize("batch,args", [((8, 0), ()), ((4, 1), ()), ((8, 0), ("--adam",)),
                                        ((4, 1), ("--clip", "0.05"))],
                         ids=["two-samples", "accumulation", "adam-preconditioned", "clipped"])
def test_ddp_hook_statistics_and_weights_match_a_direct_computation(batch, args,
                                                                    tmp_path: Path) -> None:
    steps = 9
    result = run_workers(batch, tmp_path, "--steps", str(steps), *args)
    clip = float(args[1]) if args[:1] == ("--clip",) else None
    weights, noise = reference(batch, steps, adam="--adam" in args, clip=clip)
    assert result["steps"] == steps
    for got, want in zip(result["weights"], weights):
        assert got == pytest.approx(want, abs=2e-5)
    ref = noise.state_dict()
    got = result["noise"]
    assert got["updates"] == ref["updates"] == steps
    for key in ("sqr", "var", "weight"):
        assert got[key] == pytest.approx(ref[key], rel=1e-3, abs=1e-9), key


def test_four_workers_with_accumulation_match_too(tmp_path: Path) -> None:
    result = run_workers((2, 1), tmp_path, "--steps", "6", workers=4)
    weights, noise = reference((2, 1), 6, workers=4)
    for got, want in zip(result["weights"], weights):
        assert got == pytest.approx(want, abs=2e-5)
    assert result["noise"]["sqr"] == pytest.approx(noise.state_dict()["sqr"], rel=1e-3)
    assert result["noise"]["var"] == pytest.approx(noise.state_dict()["var"], rel=1e-3)


def test_a_stop_signal_on_one_worker_stops_both_at_the_same_step(tmp_path: Path) -> None:
    from corral.protocol.env import STOP_EXIT_CODE
    from corral.train.checkpoint import CheckpointStore

    # rank 1 alone is signalled: the flag travels in the gradient buckets, both agree
    assert run_workers((8, 0), tmp_path, "--steps", "40", "--sigterm-rank", "1",
                       codes=(STOP_EXIT_CODE, STOP_EXIT_CODE)) is None
    state, _ = CheckpointStore(tmp_path / "ckpt").load()
    stopped = state["trainer"]["steps"]
    assert 3 < stopped <= 3 + 2 * 4 + 1  # within two host-view periods of the signal
    # the resumed run continues exactly: the same weights as an uninterrupted one
    result = run_workers((8, 0), tmp_path, "--steps", "12", launch=1)
    weights, _ = reference((8, 0), 12)
    for got, want in zip(result["weights"], weights):
        assert got == pytest.approx(want, abs=2e-5)
