"""The ONES and SideCar papers' comparisons, in simulation, on workloads built like theirs.

ONES (SC'21 §4.2, Fig. 15a): on 64 GPUs, ONES's average JCT is 45.6% below Tiresias's and 41.7%
below Optimus's. SideCar (SC'20 §VI, Fig. 6b): average JCT up to 63% below the Kubernetes
default scheduler's and 37% below the termination-based scheduler's (27-37% over its four
workloads; makespan 34-45% and 17-20%).

Workloads (ground truth: the Pollux profiles; spec ones.md §6, sidecar.md §4):
* ONES-like: 64 GPUs (16 x 4, as the Longhorn testbed); Poisson arrivals; short jobs from the
  profiles' smaller models -- cifar10 (3-30 epochs), deepspeech2 (1-6), yolov3 (1-3), ncf (2-10)
  -- standing in for the paper's dataset subsets, so that jobs take minutes to an hour (ImageNet
  and BERT epochs alone take ~2 GPU-hours here and are left out). Users ask for 1, 2, 4 or 8 GPUs
  at the tuned batch for that count (used by Tiresias and Optimus; ONES picks its own).
  ONES runs on in-place scaling (~1 s) every 60 s; Tiresias (2D-LAS) on checkpoint-restart
  (30 s) every 60 s; Optimus on checkpoint-restart every 10 min (its paper's interval, which
  ONES compared against). Also all on checkpoint-restart every 60 s.
* SideCar-like: 16 GPUs on two 8-GPU servers; 40 (Workload One-like) or 20 (Two-like) jobs of
  Job Set One -- ResNet ImageNet types (1 epoch; batch 64/128/256; the profiles' imagenet) and
  a CIFAR-10 type (10 epochs, batch 1024) -- or 40 jobs of a mixed set (Three-like: imagenet 1
  epoch, cifar10 10, deepspeech2 3, yolov3 2, ncf 10 epochs); arrivals exponential, scaled into
  [0, 11000] s; allowed GPU counts {1, 2, 4, 8}; each job's request for the default scheduler
  drawn at random from them. SideCar = `sidecar` on the `sidecar` mechanism; termination =
  `sidecar-termination` on the `termination` mechanism; default = `fifo` with backfilling
  (greedy, out of order) on the `termination` mechanism (Kubernetes job starts).

Run: python benchmarks/fidelity/ones_sidecar_papers.py [--part ones|sidecar|both] [--seeds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import mechanism_named
from corral.sim.truth.profiles import ProfileTruth
from corral.sim.workloads import Workload
from corral.sim.workloads.synthetic import synthetic

ONES_EPOCHS = {"cifar10": (3, 30), "deepspeech2": (1, 6), "yolov3": (1, 3), "ncf": (2, 10)}
SIDECAR_SETS = {
    # (app, batch, epochs) per job type; types drawn uniformly
    "one": [("imagenet", 64, 1), ("imagenet", 128, 1), ("imagenet", 256, 1), ("imagenet", 64, 1),
            ("imagenet", 128, 1), ("imagenet", 64, 1), ("cifar10", 1024, 10)],
    "three": [("imagenet", 256, 1), ("imagenet", 128, 1), ("cifar10", 1024, 10),
              ("deepspeech2", 160, 3), ("yolov3", 64, 2), ("ncf", 32768, 10),
              ("imagenet", 128, 1)],
}


def ones_workload(truth: ProfileTruth, seed: int, jobs: int = 120, gap_s: float = 20.0) -> Workload:
    apps = truth.limits()
    base = synthetic(apps, num_jobs=jobs, rate_per_hour=3600.0 / gap_s,
                     mix={a: 1.0 for a in ONES_EPOCHS}, seed=seed,
                     gpus_choices={a: (1, 2, 4, 8) for a in ONES_EPOCHS}, name=f"ones-like-{seed}")
    rng = np.random.default_rng(seed + 1000)
    specs = [dataclasses.replace(s, epochs=int(rng.integers(*ONES_EPOCHS[s.app], endpoint=True)))
             for s in base.jobs]
    return Workload(base.name, specs, base.source + "; epochs drawn per application")


def sidecar_workload(truth: ProfileTruth, kind: str, jobs: int, seed: int) -> Workload:
    apps = truth.limits()
    rng = np.random.default_rng(seed)
    types = SIDECAR_SETS[kind]
    times = np.cumsum(rng.exponential(11000.0 / jobs, jobs)) - 0.0
    times = times - times[0]
    if times[-1] > 11000.0:
        times *= 11000.0 / times[-1]
    base = synthetic(apps, num_jobs=jobs, rate_per_hour=1.0, seed=seed,
                     mix={a: 1.0 for a, _, _ in types}, name="tmp")
    specs = []
    for i, spec in enumerate(base.jobs):
        app, batch, epochs = types[int(rng.integers(len(types)))]
        lim = apps[app]
        specs.append(dataclasses.replace(
            spec, name=f"{app}-{i}", submit_time_s=float(times[i]), app=app,
            gpus=int(rng.choice([1, 2, 4, 8])), batch_size=lim.fixed_bsz or batch,
            init_bsz=lim.fixed_bsz or lim.init_bsz, max_bsz=lim.fixed_bsz or lim.max_bsz,
            min_local_bsz=lim.min_local_bsz, max_local_bsz=lim.max_local_bsz,
            adaptive=lim.adaptive, lr_rule=lim.lr_rule, epochs=epochs, max_gpus=8))
    return Workload(f"sidecar-{kind}-{jobs}-{seed}", specs, f"SideCar Job Set {kind}, seed {seed}")


def run(truth, workload: Workload, cluster: str, policy: str, mechanism: str, interval_s: float = 60.0,
        **params):
    config = EngineConfig(interval_s=interval_s, mechanism=mechanism_named(mechanism))
    sim = Simulator(truth, create_policy(policy, params), Cluster.parse(cluster), config)
    result = sim.run(workload)
    return summarize(result)


def table(title: str, rows: dict[str, list], ref: str, others: list[str]) -> dict:
    """Print mean metrics per approach and `ref`'s reductions against `others`; the means."""
    print(f"\n{title}")
    print(f"{'approach':38s} {'avg JCT':>9s} {'p99 JCT':>9s} {'makespan':>9s} {'restarts':>8s}")
    means = {}
    for name, sums in rows.items():
        means[name] = {k: statistics.mean(getattr(s, k) for s in sums)
                       for k in ("avg_jct_s", "p99_jct_s", "makespan_s", "restarts_per_job")}
        m = means[name]
        print(f"{name:38s} {m['avg_jct_s']:9.0f} {m['p99_jct_s']:9.0f} {m['makespan_s']:9.0f} "
              f"{m['restarts_per_job']:8.2f}")
    for other in others:
        for key, label in (("avg_jct_s", "avg JCT"), ("makespan_s", "makespan")):
            per = [1 - getattr(a, key) / getattr(b, key)
                   for a, b in zip(rows[ref], rows[other])]
            print(f"  {ref} vs {other}: {label} {100 * statistics.mean(per):.1f}% lower "
                  f"(per seed: {', '.join(f'{100 * p:.1f}%' for p in per)})")
    return means


def ones_part(truth, seeds: list[int]) -> dict:
    runs = {
        "ones (in-place, 60 s)": ("ones", "in-place", 60.0),
        "tiresias-las (ckpt-restart, 60 s)": ("tiresias-las", "checkpoint-restart", 60.0),
        "optimus (ckpt-restart, 10 min)": ("optimus", "checkpoint-restart", 600.0),
        "ones (ckpt-restart, 60 s)": ("ones", "checkpoint-restart", 60.0),
        "optimus (ckpt-restart, 60 s)": ("optimus", "checkpoint-restart", 60.0),
    }
    rows = {name: [] for name in runs}
    for seed in seeds:
        workload = ones_workload(truth, seed)
        for name, (policy, mech, interval) in runs.items():
            rows[name].append(run(truth, workload, "16x4", policy, mech, interval))
    table("ONES-like workload, 64 GPUs (120 jobs, one per 20 s), each policy on its own mechanism",
          {k: rows[k] for k in list(runs)[:3]}, "ones (in-place, 60 s)",
          ["tiresias-las (ckpt-restart, 60 s)", "optimus (ckpt-restart, 10 min)"])
    table("... all on checkpoint-restart (30 s), every 60 s",
          {k: rows[k] for k in ("ones (ckpt-restart, 60 s)", "tiresias-las (ckpt-restart, 60 s)",
                                "optimus (ckpt-restart, 60 s)")},
          "ones (ckpt-restart, 60 s)",
          ["tiresias-las (ckpt-restart, 60 s)", "optimus (ckpt-restart, 60 s)"])
    return rows


def sidecar_part(truth, seeds: list[int]) -> dict:
    approaches = {
        "sidecar": ("sidecar", "sidecar", {"gpu_counts": "1,2,4,8"}),
        "termination": ("sidecar-termination", "termination", {"gpu_counts": "1,2,4,8"}),
        "default": ("fifo", "termination", {"backfill": True}),
    }
    out = {}
    for kind, jobs, label in (("one", 40, "One"), ("one", 20, "Two"), ("three", 40, "Three")):
        rows = {name: [] for name in approaches}
        for seed in seeds:
            workload = sidecar_workload(truth, kind, jobs, seed)
            for name, (policy, mech, params) in approaches.items():
                rows[name].append(run(truth, workload, "2x8", policy, mech, **params))
        table(f"SideCar Workload {label}-like: 16 GPUs (2 x 8), {jobs} jobs", rows, "sidecar",
              ["default", "termination"])
        out[label] = rows
    return out


def plot(out: Path, ones_rows: dict | None, sidecar_rows: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    if ones_rows:
        names = list(ones_rows)
        vals = [statistics.mean(s.avg_jct_s for s in ones_rows[n]) for n in names]
        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.barh(names, vals, color=["tab:green" if n.startswith("ones") else "tab:gray" for n in names])
        ax.set_xlabel("average JCT (s)")
        ax.set_title("ONES-like workload, 64 GPUs (cf. ONES Fig. 15a)")
        fig.tight_layout()
        fig.savefig(out / "ones_avg_jct.png", dpi=120)
        plt.close(fig)
    if sidecar_rows:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        labels = list(sidecar_rows)
        x = np.arange(len(labels))
        panels = ((axes[0], "makespan_s", "makespan (s)"), (axes[1], "avg_jct_s", "average JCT (s)"))
        for ax, key, title in panels:
            for k, name in enumerate(("sidecar", "termination", "default")):
                vals = [statistics.mean(getattr(s, key) for s in sidecar_rows[w][name]) for w in labels]
                ax.bar(x + (k - 1) * 0.27, vals, 0.27, label=name)
            ax.set_xticks(x, [f"WL {w}" for w in labels])
            ax.set_title(title)
        axes[0].legend()
        fig.suptitle("SideCar-like workloads, 16 GPUs (cf. SideCar Fig. 6)")
        fig.tight_layout()
        fig.savefig(out / "sidecar_makespan_jct.png", dpi=120)
        plt.close(fig)
    print(f"\nfigures in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=("ones", "sidecar", "both"), default="both")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write figures here")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    seeds = list(range(args.seeds))
    ones_rows = ones_part(truth, seeds) if args.part in ("ones", "both") else None
    sidecar_rows = sidecar_part(truth, seeds) if args.part in ("sidecar", "both") else None
    if args.out:
        plot(args.out, ones_rows, sidecar_rows)


if __name__ == "__main__":
    main()
