"""Tests of corral.sim.workloads: the loaders, generators, tuned configurations and errors."""

from __future__ import annotations

import csv
from pathlib import Path

import datafiles
import numpy as np
import pytest

from corral.core.errors import InputError
from corral.core.jobs import JobSpec, LrRule
from corral.sim.workloads import (
    POLLUX_MIX,
    SIZE_CLASS_APPS,
    TUNED_GPUS,
    Workload,
    builtin_default,
    describe_workload,
    format_description,
    load_philly,
    load_pollux_csv,
    load_tiresias_csv,
    load_workload,
    load_workloads,
    natural_key,
    size_class,
    synthetic,
    tuned_config,
)
from corral.sim.workloads.builtin import BUILTIN_JOBS, BUILTIN_RATE_PER_HOUR

# The reference files are read in place (../shared/data or `corral data`'s cache), never copied
# into the repo; a test skips, naming the `corral data fetch` command, where one is missing.
needs_workloads = datafiles.needs("pollux-workloads")
needs_philly = datafiles.needs("philly")
needs_tiresias = datafiles.needs("tiresias")

POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"
TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, text: str, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def expect_error(fn, *fragments: str) -> str:
    with pytest.raises(InputError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


def check_invariants(w: Workload) -> None:
    submits = [j.submit_time_s for j in w.jobs]
    assert submits == sorted(submits)
    assert len({j.name for j in w.jobs}) == len(w.jobs)


# --- tuned configuration ------------------------------------------------------------------------

def test_tuned_config_reproduces_reference_pairs(apps):
    pairs = {("cifar10", 6): 2048, ("cifar10", 8): 2048, ("cifar10", 12): 4096,
             ("cifar10", 16): 4096, ("deepspeech2", 6): 320, ("deepspeech2", 8): 320,
             ("deepspeech2", 12): 640, ("yolov3", 4): 64, ("bert", 12): 384, ("bert", 16): 384,
             ("ncf", 1): 32768}
    for (app, gpus), batch in pairs.items():
        assert tuned_config(apps[app], gpus) == (gpus, batch), (app, gpus)


def test_tuned_config_rule(apps):
    assert tuned_config(apps["cifar10"], 1) == (1, 256)  # 2 x M0 on one GPU
    assert tuned_config(apps["bert"], 6) == (6, 192)
    assert tuned_config(apps["imagenet"], 64) == (64, 12800)  # clamped to max_bsz
    assert tuned_config(apps["yolov3"], 500) == (128, 512)  # capped: 512 / min_local 4
    assert tuned_config(apps["ncf"], 8) == (8, 32768)  # fixed total batch
    for limits in apps.values():
        for g in (1, 2, 3, 5, 7, 16, 48):
            gg, b = tuned_config(limits, g)
            assert 1 <= gg <= g
            top = limits.fixed_bsz or limits.max_bsz
            assert gg * limits.min_local_bsz <= b <= top
    with pytest.raises(ValueError):
        tuned_config(apps["bert"], 0)


@needs_workloads
def test_tuned_config_matches_most_reference_jobs(apps):
    total = same = 0
    for path in sorted(datafiles.need("pollux-workloads").glob("*.csv")):
        with path.open() as fh:
            for row in csv.DictReader(fh):
                gpus, batch = int(row["num_replicas"]), int(row["batch_size"])
                total += 1
                same += tuned_config(apps[row["application"]], gpus) == (gpus, batch)
    assert total == 1280
    assert same / total > 0.9


# --- Pollux CSV ---------------------------------------------------------------------------------

def test_pollux_csv_good(tmp_path, apps):
    path = write(tmp_path, POLLUX_HEADER
                 + "b,300,ncf,1,1024\n"
                 + "\n"
                 + "a,107.5,cifar10,6,2048\n"
                 + " c , 300 , bert , 12 , 384 \n")
    w = load_pollux_csv(path, apps)
    assert w.name == "w" and str(path) in w.source and w.trace_gpu_s is None
    assert [j.name for j in w.jobs] == ["a", "b", "c"]  # by submit time, ties in file order
    assert w.jobs[0] == JobSpec("a", 107.5, "cifar10", 6, 2048, 128, 4096, 32, 1024,
                                adaptive=True, lr_rule=LrRule.ADASCALE, epochs=100,
                                one_gpu_split_bsz=128)
    # ncf runs at its fixed total batch whatever the file says; above its smallest validated
    # batch (M0), one GPU runs it in two or more micro-batches, as the Pollux artifact did
    assert w.jobs[1] == JobSpec("b", 300.0, "ncf", 1, 32768, 32768, 32768, 32, 32768,
                                adaptive=False, lr_rule=LrRule.SQRT, epochs=10,
                                one_gpu_split_bsz=256)
    assert w.jobs[2] == JobSpec("c", 300.0, "bert", 12, 384, 12, 384, 4, 12,
                                adaptive=True, lr_rule=LrRule.SQRT, epochs=2, one_gpu_split_bsz=12)
    check_invariants(w)


@pytest.mark.parametrize("rows, row, fragments", [
    ("a,x,cifar10,6,2048\n", 2, ["time", "not a number", "'x'"]),
    ("a,1,cifar10,6,2048\nb,-5,cifar10,6,2048\n", 3, ["time", "negative"]),
    ("a,1,cifar10,6,2048\nb,2,cifar10,0,2048\n", 3, ["num_replicas", ">= 1"]),
    ("a,1,cifar10,-2,2048\n", 2, ["num_replicas"]),
    ("a,1,cifar10,2.5,2048\n", 2, ["num_replicas", "whole number"]),
    ("a,1,cifar10,2,abc\n", 2, ["batch_size", "not a number"]),
    ("a,1,cifar10,2,nan\n", 2, ["batch_size", "finite"]),
    ("a,1,cifar10,2,2048\nb,1,resnet,2,2048\n", 3,
     ["unknown application 'resnet'", "known: bert, cifar10, deepspeech2, imagenet, ncf, yolov3"]),
    ("a,1,cifar10,2,2048\n\nb,1,cifar10,2,2048\na,3,ncf,1,32768\n", 5,
     ["duplicate job name 'a'", "first at row 2"]),
    ("a,1,cifar10,2\n", 2, ["expected 5 fields", "got 4"]),
    (",1,cifar10,2,2048\n", 2, ["empty job name"]),
])
def test_pollux_csv_bad_rows(tmp_path, apps, rows, row, fragments):
    path = write(tmp_path, POLLUX_HEADER + rows)
    expect_error(lambda: load_pollux_csv(path, apps), str(path), f"row {row}:", *fragments)


def test_pollux_csv_bad_files(tmp_path, apps):
    missing = tmp_path / "nope.csv"
    expect_error(lambda: load_pollux_csv(missing, apps), str(missing), "no such file")
    empty = write(tmp_path, "", "empty.csv")
    expect_error(lambda: load_pollux_csv(empty, apps), str(empty), "empty")
    blank = write(tmp_path, "\n \n", "blank.csv")
    expect_error(lambda: load_pollux_csv(blank, apps), "empty")
    header_only = write(tmp_path, POLLUX_HEADER, "header.csv")
    expect_error(lambda: load_pollux_csv(header_only, apps), "no jobs")
    cols = write(tmp_path, "name,time,app,gpus\na,1,cifar10,2\n", "cols.csv")
    expect_error(lambda: load_pollux_csv(cols, apps), "row 1:",
                 "missing column(s) application, num_replicas, batch_size")
    expect_error(lambda: load_pollux_csv(tmp_path, apps), "directory")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage")
    expect_error(lambda: load_pollux_csv(binary, apps), str(binary))


# --- Tiresias CSV -------------------------------------------------------------------------------

def test_tiresias_csv_good(tmp_path, apps):
    path = write(tmp_path, TIRESIAS_HEADER
                 + "7,2,50,100,vgg16,36000,30\n"          # 20 GPU-h: yolov3
                 + "3,4,0,100,resnet50,360000,30\n"       # 400 GPU-h: imagenet
                 + "9,1,20,100,alexnet,7200,30\n"         # 2 GPU-h: deepspeech2 or bert
                 + "4,8,20,100,vgg19,120,30\n")           # 0.27 GPU-h: cifar10 or ncf
    w = load_tiresias_csv(path, apps, seed=3)
    check_invariants(w)
    assert [j.submit_time_s for j in w.jobs] == [0, 20, 20, 50]
    assert w.jobs[0] == JobSpec("imagenet-3", 0.0, "imagenet", 4, 1600, 200, 12800, 20, 200,
                                adaptive=True, lr_rule=LrRule.ADASCALE, epochs=90,
                                one_gpu_split_bsz=200)
    assert w.jobs[3] == JobSpec("yolov3-7", 50.0, "yolov3", 2, 32, 8, 512, 4, 8,
                                adaptive=True, lr_rule=LrRule.ADASCALE, epochs=50, one_gpu_split_bsz=8)
    medium, small = w.jobs[1], w.jobs[2]
    assert medium.app in ("deepspeech2", "bert") and medium.name == f"{medium.app}-9"
    assert (medium.gpus, medium.batch_size) == tuned_config(apps[medium.app], 1)
    assert small.app in ("cifar10", "ncf") and small.gpus == 8
    assert small.batch_size == tuned_config(apps[small.app], 8)[1]
    assert w.trace_gpu_s == {"imagenet-3": 1_440_000.0, f"{medium.app}-9": 7200.0,
                             f"{small.app}-4": 960.0, "yolov3-7": 72_000.0}
    assert load_tiresias_csv(path, apps, seed=3) == w  # seeded


def test_tiresias_seed_changes_mapping(tmp_path, apps):
    rows = "".join(f"{i},1,{i * 10},100,vgg16,100,10\n" for i in range(40))
    path = write(tmp_path, TIRESIAS_HEADER + rows)
    runs = [[j.app for j in load_tiresias_csv(path, apps, seed=s).jobs] for s in range(3)]
    assert all(set(r) <= {"cifar10", "ncf"} for r in runs)
    assert runs[0] != runs[1] or runs[0] != runs[2]
    assert {"cifar10", "ncf"} == set(runs[0])


@pytest.mark.parametrize("rows, row, fragments", [
    ("1,1,0,10,vgg,100,1\n1,2,5,10,vgg,100,1\n", 3, ["duplicate job_id '1'", "first at row 2"]),
    ("1,0,0,10,vgg,100,1\n", 2, ["num_gpu", ">= 1"]),
    ("1,1,0,10,vgg,1e2x,1\n", 2, ["duration", "not a number"]),
    ("1,1,-3,10,vgg,100,1\n", 2, ["submit_time", "negative"]),
])
def test_tiresias_bad_rows(tmp_path, apps, rows, row, fragments):
    path = write(tmp_path, TIRESIAS_HEADER + rows)
    expect_error(lambda: load_tiresias_csv(path, apps), str(path), f"row {row}:", *fragments)


def test_tiresias_missing_columns(tmp_path, apps):
    path = write(tmp_path, "job_id,submit_time,duration\n1,0,100\n")
    expect_error(lambda: load_tiresias_csv(path, apps), "row 1:", "missing column(s) num_gpu")


def test_size_class_bounds():
    gpu_h = np.array([0, 0.99, 1.0, 9.9, 10, 99, 100, 999])
    assert size_class(gpu_h * 3600).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


# --- Philly -------------------------------------------------------------------------------------

def philly_file(tmp_path: Path) -> Path:
    rows = [
        ("2017-10-01 00:00:00", 600, 1, 600),          # day 1: sparse
        ("2017-10-01 12:00:00", 600, 2, 1200),
        ("2017-10-02 10:00:00", 30, 1, 30),            # too short: dropped
        ("2017-10-02 10:00:05", 7200, 4, 28800),       # 8 GPU-h: medium
        ("2017-10-02 10:30:00", 36000, 1, 36000),      # 10 GPU-h: yolov3
        ("2017-10-02 11:00:00", 90000, 8, 720000),     # 200 GPU-h: imagenet
        ("2017-10-02 09:59:59", 4_000_000, 1, 4_000_000),  # > 1000 GPU-h: dropped
        ("2017-10-02 12:00:00", 120, 1, 120),          # small
        ("2017-10-03 12:00:00", 120, 1, 120),
    ]
    text = PHILLY_HEADER + "".join(f"{t},{d},{g},{gt},c1\n" for t, d, g, gt in rows) + "\n"
    return write(tmp_path, text, "philly.csv")


def test_philly_busiest_window(tmp_path, apps):
    path = philly_file(tmp_path)
    w = load_philly(path, apps, hours=8)
    check_invariants(w)
    assert "2017-10-02 10:00:05" in w.source
    assert [j.submit_time_s for j in w.jobs] == [0.0, 1795.0, 3595.0, 7195.0]
    assert [j.gpus for j in w.jobs] == [4, 1, 8, 1]
    assert w.jobs[0].app in ("deepspeech2", "bert")
    assert w.jobs[1] == JobSpec("yolov3-1", 1795.0, "yolov3", 1, 16, 8, 512, 4, 8,
                                adaptive=True, lr_rule=LrRule.ADASCALE, epochs=50,
                                one_gpu_split_bsz=8, queue="c1")
    assert w.jobs[2] == JobSpec("imagenet-2", 3595.0, "imagenet", 8, 3200, 200, 12800, 20, 200,
                                adaptive=True, lr_rule=LrRule.ADASCALE, epochs=90, one_gpu_split_bsz=200,
                                queue="c1")  # the virtual cluster is the job's queue
    assert w.jobs[3].app in ("cifar10", "ncf") and w.jobs[3].name.endswith("-3")
    assert sorted(w.trace_gpu_s.values()) == [120.0, 28800.0, 36000.0, 720000.0]
    assert load_philly(path, apps, hours=8) == w


def test_philly_explicit_windows(tmp_path, apps):
    path = philly_file(tmp_path)
    w = load_philly(path, apps, start="2017-10-01 00:00:00", hours=24)
    assert [j.submit_time_s for j in w.jobs] == [0.0, 43200.0]
    assert [j.gpus for j in w.jobs] == [1, 2]
    same = load_philly(path, apps, start=0, hours=24)
    assert [j.submit_time_s for j in same.jobs] == [0.0, 43200.0]
    offset = load_philly(path, apps, start="36000", hours=3)  # seconds from the first timestamp
    assert [j.submit_time_s for j in offset.jobs] == [7200.0]
    capped = load_philly(path, apps, start="2017-10-02 10:00:00", hours=72, max_jobs=2)
    assert [j.submit_time_s for j in capped.jobs] == [5.0, 1800.0]
    expect_error(lambda: load_philly(path, apps, start="2017-09-01 00:00:00"), "no jobs in the window")
    expect_error(lambda: load_philly(path, apps, start="yesterday"), "window start 'yesterday'")
    expect_error(lambda: load_philly(path, apps, hours=0), "hours")
    expect_error(lambda: load_philly(path, apps, max_jobs=0), "max_jobs")


@pytest.mark.parametrize("row, bad, fragments", [
    (3, "2017-13-45 99:00:00,600,1,600,c", ["timestamp"]),
    (2, ",600,1,600,c", ["timestamp"]),
    (4, "2017-10-01 00:00:00,600,0,600,c", ["num_gpus", ">= 1"]),
    (3, "2017-10-01 00:00:00,-1,1,600,c", ["duration", "negative"]),
    (2, "2017-10-01 00:00:00,600,1,lots,c", ["gpu_time", "not a number"]),
    (3, "2017-10-01 00:00:00,600,1.5,600,c", ["num_gpus", "whole number"]),
])
def test_philly_bad_rows(tmp_path, apps, row, bad, fragments):
    good = "2017-10-01 00:00:00,600,1,600,c\n"
    lines = [good] * 4
    lines[row - 2] = bad + "\n"
    path = write(tmp_path, PHILLY_HEADER + "".join(lines))
    expect_error(lambda: load_philly(path, apps), str(path), f"row {row}:", *fragments)


def test_philly_missing_columns(tmp_path, apps):
    path = write(tmp_path, "timestamp,duration\n2017-10-01 00:00:00,600\n")
    expect_error(lambda: load_philly(path, apps), "missing column(s) num_gpus, gpu_time")


def test_missing_class_app_is_input_error(tmp_path, apps):
    path = philly_file(tmp_path)
    no_imagenet = {k: v for k, v in apps.items() if k != "imagenet"}
    expect_error(lambda: load_philly(path, no_imagenet, hours=8), "imagenet", "catalog lacks")


# --- synthetic and built-in ---------------------------------------------------------------------

def test_synthetic_reproducible_and_rate(apps):
    a = synthetic(apps, num_jobs=3000, rate_per_hour=30.0, seed=7)
    b = synthetic(apps, num_jobs=3000, rate_per_hour=30.0, seed=7)
    c = synthetic(apps, num_jobs=3000, rate_per_hour=30.0, seed=8)
    assert a == b and a != c
    check_invariants(a)
    assert a.jobs[0].submit_time_s == 0.0
    span_h = a.jobs[-1].submit_time_s / 3600
    assert abs((len(a) - 1) / span_h - 30.0) / 30.0 < 0.06
    counts = describe_workload(a)["apps"]
    for app, p in POLLUX_MIX.items():
        assert abs(counts.get(app, 0) / len(a) - p) < 0.03, app
    for job in a.jobs:
        assert job.gpus in TUNED_GPUS[job.app]
        assert (job.gpus, job.batch_size) == tuned_config(apps[job.app], job.gpus)


def test_synthetic_mix_and_choices(apps):
    w = synthetic(apps, num_jobs=50, rate_per_hour=10, mix={"bert": 1, "yolov3": 0},
                  gpus_choices={"bert": [2, 4]}, seed=1)
    assert {j.app for j in w.jobs} == {"bert"}
    assert {j.gpus for j in w.jobs} <= {2, 4}
    expect_error(lambda: synthetic(apps, num_jobs=5, rate_per_hour=1, mix={"gpt": 1}),
                 "unknown application(s) gpt", "known: bert")
    expect_error(lambda: synthetic(apps, num_jobs=5, rate_per_hour=1, mix={"bert": -1}), "mix")
    expect_error(lambda: synthetic(apps, num_jobs=0, rate_per_hour=1), "num_jobs")
    expect_error(lambda: synthetic(apps, num_jobs=5, rate_per_hour=0), "rate_per_hour")
    expect_error(lambda: synthetic(apps, num_jobs=5, rate_per_hour=1, mix={"bert": 1},
                                   gpus_choices={"bert": [0]}), "GPU choices")


def test_builtin_default(apps):
    w = builtin_default(apps)
    assert w == builtin_default(apps)
    assert w.name == "default" and len(w) == 40
    check_invariants(w)
    span_h = w.jobs[-1].submit_time_s / 3600  # Poisson arrivals: about (n - 1) / rate hours
    expected_h = (BUILTIN_JOBS - 1) / BUILTIN_RATE_PER_HOUR
    assert 0.5 * expected_h < span_h < 2.0 * expected_h
    assert max(j.gpus for j in w.jobs) <= 16
    assert {j.app for j in w.jobs} <= {"cifar10", "ncf", "deepspeech2", "bert"}


def test_builtin_default_tells_the_story():
    """Issue 14: on the default workload the policies differ clearly (it was so lightly loaded
    that fifo and tiresias-las had identical figures)."""
    from corral.core import Cluster
    from corral.policies import create_policy
    from corral.sim.analysis.metrics import summarize
    from corral.sim.loop.engine import Simulator
    from corral.sim.truth.catalog import CatalogTruth

    truth = CatalogTruth()
    w = builtin_default(truth.limits())
    avg = {p: summarize(Simulator(truth, create_policy(p), Cluster.parse("16x4")).run(w)).avg_jct_s
           for p in ("fifo", "tiresias-las", "pollux")}
    assert avg["fifo"] / avg["pollux"] >= 1.5, avg
    assert abs(avg["tiresias-las"] - avg["fifo"]) / avg["fifo"] > 0.05, avg


# --- dispatch, directories, describe ------------------------------------------------------------

def test_load_workload_dispatch(tmp_path, apps):
    p = write(tmp_path, POLLUX_HEADER + "a,1,cifar10,6,2048\n", "p.csv")
    t = write(tmp_path, TIRESIAS_HEADER + "1,1,0,10,vgg,100,1\n", "t.csv")
    assert load_workload(p, apps) == load_pollux_csv(p, apps)
    assert load_workload(t, apps, seed=2) == load_tiresias_csv(t, apps, seed=2)
    ph = philly_file(tmp_path)
    assert load_workload(ph, apps) == load_philly(ph, apps)
    odd = write(tmp_path, "foo,bar\n1,2\n", "odd.csv")
    expect_error(lambda: load_workload(odd, apps), str(odd), "unrecognized workload header")
    partial = write(tmp_path, "name,time,application\na,1,cifar10\n", "partial.csv")
    expect_error(lambda: load_workload(partial, apps), "missing column(s) num_replicas, batch_size")
    expect_error(lambda: load_workload(tmp_path / "x.csv", apps), "no such file")
    expect_error(lambda: load_workload(write(tmp_path, "", "e.csv"), apps), "empty")


def test_load_workloads_natural_order(tmp_path, apps):
    d = tmp_path / "wl"
    d.mkdir()
    for i in (10, 2, 1):
        write(d, POLLUX_HEADER + f"j{i},{i},cifar10,6,2048\n", f"workload-{i}.csv")
    write(d, "not a workload", "notes.txt")
    extra = write(tmp_path, POLLUX_HEADER + "x,0,ncf,1,32768\n", "extra.csv")
    ws = load_workloads([d, extra], apps)
    assert [w.name for w in ws] == ["workload-1", "workload-2", "workload-10", "extra"]
    assert [w.name for w in load_workloads(str(d), apps)][:2] == ["workload-1", "workload-2"]
    empty = tmp_path / "none"
    empty.mkdir()
    expect_error(lambda: load_workloads([empty], apps), "no *.csv")
    assert sorted(["w-10", "w-2", "W-1"], key=natural_key) == ["W-1", "w-2", "w-10"]


def test_describe(tmp_path, apps):
    path = write(tmp_path, POLLUX_HEADER + "a,0,cifar10,6,2048\nb,1800,ncf,1,32768\n"
                 "c,3600,cifar10,8,2048\n")
    d = describe_workload(load_pollux_csv(path, apps))
    assert d["jobs"] == 3 and d["apps"] == {"cifar10": 2, "ncf": 1}
    assert d["gpus"] == {1: 1, 6: 1, 8: 1} and d["requested_gpus"] == 15
    assert d["span_s"] == 3600 and d["arrival_rate_per_hour"] == pytest.approx(2.0)
    assert d["configs"]["cifar10"] == {"6x2048": 1, "8x2048": 1}
    assert d["adaptive_jobs"] == 2 and d["trace_gpu_hours"] is None
    assert "3 jobs" in format_description(d)
    t = write(tmp_path, TIRESIAS_HEADER + "1,2,0,10,vgg,1800,1\n", "t.csv")
    assert describe_workload(load_tiresias_csv(t, apps))["trace_gpu_hours"] == pytest.approx(1.0)


def test_workload_type_sorts_and_rejects_duplicates(apps):
    w = synthetic(apps, num_jobs=3, rate_per_hour=10, seed=0)
    shuffled = Workload("x", list(reversed(w.jobs)), "test")
    assert shuffled.jobs == w.jobs
    with pytest.raises(ValueError):
        Workload("x", [w.jobs[0], w.jobs[0]], "test")


# --- the real shared files ----------------------------------------------------------------------

@needs_workloads
def test_real_pollux_workloads(apps):
    ws = load_workloads([datafiles.need("pollux-workloads")], apps)
    assert [w.name for w in ws] == [f"workload-{i}" for i in range(1, 9)]
    assert all(len(w) == 160 for w in ws)
    for w in ws:
        check_invariants(w)
    w1 = ws[0]
    assert w1.jobs[0] == JobSpec("cifar10-0", 107.0, "cifar10", 6, 2048, 128, 4096, 32, 1024,
                                 adaptive=True, lr_rule=LrRule.ADASCALE, epochs=100,
                                 one_gpu_split_bsz=128)
    assert all(j.batch_size == 32768 and not j.adaptive for j in w1.jobs if j.app == "ncf")
    counts = describe_workload(ws[5])["apps"]  # the testbed workload (spec §5.2)
    assert counts == {"bert": 15, "cifar10": 67, "deepspeech2": 16, "imagenet": 3, "ncf": 54,
                      "yolov3": 5}


@needs_tiresias
def test_real_tiresias_trace(apps):
    w = load_workload(datafiles.need("tiresias") / "60_job.csv", apps)
    assert len(w) == 60
    check_invariants(w)
    assert {j.app for j in w.jobs} <= {"cifar10", "ncf"}  # every job is under 1 GPU-hour
    assert sorted({j.gpus for j in w.jobs}) == [1, 2, 4, 8]


@needs_philly
def test_real_philly_busiest_window(apps):
    philly = datafiles.need("philly")
    w = load_philly(philly, apps)  # busiest 8-hour window
    check_invariants(w)
    assert len(w) > 1000
    assert 7 * 3600 < w.jobs[-1].submit_time_s < 8 * 3600 and w.jobs[0].submit_time_s == 0
    names = [j.name for j in w.jobs]
    classes = size_class(np.array([w.trace_gpu_s[n] for n in names]))
    for job, k in zip(w.jobs, classes.tolist()):
        assert job.app in SIZE_CLASS_APPS[k], (job.name, k)
        assert (job.gpus, job.batch_size) == tuned_config(apps[job.app], job.gpus)
    assert all(0 <= v < 1000 * 3600 for v in w.trace_gpu_s.values())
    # no 8-hour window holds more jobs than the chosen one
    later = load_philly(philly, apps, start="2017-10-09 07:00:00", hours=8)
    assert len(later) <= len(w)


@needs_philly
def test_real_philly_large_window_loads(apps):
    # speed is measured in benchmarks/speed/bench_sim.py, not asserted here
    philly = datafiles.need("philly")
    w = load_philly(philly, apps, start=0, hours=24 * 60)
    assert len(w) > 10_000
    capped = load_philly(philly, apps, start=0, hours=24 * 60, max_jobs=100)
    assert capped.jobs == w.jobs[:100]
