"""A live job's one-GPU profile per GPU type (`LiveJob.profile`, from `Runtime.profile`): its
estimator has a model of each profiled type before it reports and after, as a simulated job's
from its arrival; the profile is stored with the job."""

from __future__ import annotations

from corral.perf.estimator import JobEstimator
from corral.protocol.report import Report
from corral.service.jobs import LiveJob
from corral.service.submission import Submission

PROFILE = {"k80": (0.6, 128), "v100": (0.07, 128)}


def _job() -> LiveJob:
    sub = Submission(command=["python", "train.py"], batch_size=128, app="cifar10").checked(8)
    return LiveJob("job-1", sub, sub.spec("job-1", 0.0))


def test_the_estimator_has_each_profiled_type_before_any_report():
    job = _job()
    assert job.estimator.gpu_types() == ()
    job.profile = dict(PROFILE)
    assert set(job.estimator.gpu_types()) == {"k80", "v100"}
    assert job.estimator.max_gpus("v100") == 1


def test_a_report_keeps_its_own_models_and_gains_the_profiled_types_it_lacks():
    job = _job()
    job.profile = dict(PROFILE)
    s = job.spec
    est = JobEstimator(s.init_bsz, s.max_bsz, s.min_local_bsz, s.max_local_bsz)
    est.observe_step(1, 4, 32, 0.5, 0.1, count=3, gpu_type="v100")
    job.report = Report(time=5.0, estimator=est.to_dict())
    seen = job.estimator
    assert set(seen.gpu_types()) == {"k80", "v100"}
    assert seen.max_gpus("v100") == 4 and seen.max_gpus("k80") == 1
    assert seen.gpu_type == "v100"


def test_the_profile_is_stored_with_the_job():
    job = _job()
    job.profile = dict(PROFILE)
    assert LiveJob.from_doc(job.to_doc()).profile == PROFILE
    doc = job.to_doc()
    del doc["profile"]  # stored before profiles
    assert LiveJob.from_doc(doc).profile == {}
