"""JobSpec.user_batch: how the user's fixed total batch is split over GPUs."""

from __future__ import annotations

from corral.core.jobs import BatchConfig, JobSpec


def bert(batch: int = 384, split: int | None = 12) -> JobSpec:
    return JobSpec(name="b", submit_time_s=0.0, app="bert", gpus=8, batch_size=batch,
                   init_bsz=12, max_bsz=384, min_local_bsz=4, max_local_bsz=12,
                   one_gpu_split_bsz=split)


def test_per_gpu_batch_rounds_up_but_not_past_max_bsz() -> None:
    # 384 on 5 GPUs: 77 per GPU -> 7 micro-batches; 11 each would total 385 > 384, so 10.
    assert bert().user_batch(5) == BatchConfig(10, 6)
    # Below max_bsz the batch still rounds up (2048 on 6 GPUs: 342 each).
    s = JobSpec(name="c", submit_time_s=0.0, app="cifar10", gpus=6, batch_size=2048,
                init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)
    assert s.user_batch(6) == BatchConfig(342, 0)


def test_one_gpu_above_the_split_size_accumulates() -> None:
    ncf = JobSpec(name="n", submit_time_s=0.0, app="ncf", gpus=1, batch_size=32768,
                  init_bsz=32768, max_bsz=32768, min_local_bsz=32, max_local_bsz=32768,
                  one_gpu_split_bsz=256)
    assert ncf.user_batch(1) == BatchConfig(16384, 1)  # the artifact's 2 x 16384
    assert ncf.user_batch(2) == BatchConfig(16384, 0)  # several GPUs: no forced split
    plain = JobSpec(name="n", submit_time_s=0.0, app="ncf", gpus=1, batch_size=32768,
                    init_bsz=32768, max_bsz=32768, min_local_bsz=32, max_local_bsz=32768)
    assert plain.user_batch(1) == BatchConfig(32768, 0)  # no rule: one micro-batch


def test_max_user_gpus_keeps_min_local_bsz_per_gpu() -> None:
    assert bert().max_user_gpus(64) == 64  # 384 / 4 = 96, the cluster is smaller
    assert bert(batch=96).max_user_gpus(64) == 24
