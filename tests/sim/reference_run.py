"""Non-timing summary figures of the shared 160-job workloads, and the stored run they must match.

`tests/sim/data/reference_summaries.json` holds a run of this module. It was first written
against the code at commit 9f38669, before the simulator's speed work (issue 18), which then
changed no figure. It was written again, on purpose, when issue 15's fidelity fixes changed
figures (a fixed batch above the smallest validated one runs on one GPU in micro-batches, as
in the Pollux artifact; optimus-oracle reads the true step times and caps a fixed batch at the
largest validated one): every policy's mean moved towards the reference simulator's but
tiresias-las's (-1.4 % to -1.8 %). Pollux's cells were written again, on purpose, when its
growth mutation came to grow jobs on their own nodes as the artifact's does (issue 15: mean
average JCT 2829 -> 2831 s against the reference simulator's 2751 s, each workload within 4.9 %
of it instead of 5.5 %; `--policies pollux`). Pollux's workload-2 and workload-8 cells were
written again, on purpose, for its idle-GPU fill (issue 45: jobs the search left out take idle
GPUs where the fitness rises): average JCT 3459.8 -> 3424.2 s and 3097.6 -> 3118.4 s; with
`fill_idle_gpus=false` both give their old cells to the last digit, and the other six
cells did not move (`--policies pollux --workloads workload-2,workload-8`). The speed work's result-preserving changes (fit
memo, cheaper objective) were checked against the first run and are checked against this one:

    <numerics_env()'s variables> python tests/sim/reference_run.py \
        --out tests/sim/data/reference_summaries.json

The stored run was made on a CPU without AVX-512. numpy picks its exp/log/sum kernels by CPU
(AVX2 or AVX-512), and their last bits differ; `optimus-oracle` turns such a last-bit difference
into another decision (its average JCT on workload-1: 4470 s with the AVX2 kernels, 4436 s with
the AVX-512 ones, before and after the speed work alike). So the comparison runs in a process
with numpy's AVX-512 kernels switched off and OpenBLAS's kernel pinned to Haswell's
(`numerics_env`; scipy's L-BFGS-B, under every throughput fit, calls BLAS): the stored figures
then hold on any x86-64 CPU with AVX2 (checked on an AMD EPYC and an Intel Skylake-X).

It holds only figures this project computed (summaries of its own simulations), none of the
shared data. Only public APIs that exist before and after the change are used, so the same
function computes the stored and the current figures. `test_reference.py` compares a subset
in CI; `benchmarks/speed/bench_scale.py --check-reference` compares every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: The datasets `figures` reads, from ../shared/data or `corral data`'s cache (corral.datasets).
DATASETS: tuple[str, ...] = ("pollux-profiles", "pollux-workloads")
REFERENCE_FILE = Path(__file__).resolve().parent / "data" / "reference_summaries.json"
#: Every simulator policy that needs no extra mechanism, compared on the eight workloads.
POLICIES: tuple[str, ...] = ("fifo", "srtf", "tiresias-las", "tiresias-gittins", "optimus",
                             "optimus-oracle", "pollux")
WORKLOADS: tuple[str, ...] = tuple(f"workload-{i}" for i in range(1, 9))
CLUSTER = "16x4"
#: Summary fields that measure the machine, not the schedule.
TIMING_FIELDS: frozenset[str] = frozenset({"wall_s"})


def missing_data() -> str | None:
    """Why `figures` cannot run here, naming the `corral data fetch` command that would bring
    what is missing (a skip reason); None where every dataset it reads is found."""
    from corral import datasets

    reasons = [datasets.missing_reason(n) for n in DATASETS if datasets.locate(n) is None]
    return "; ".join(reasons) or None


def figures(policy: str, workload: str, profiles: Path | None = None,
            workloads: Path | None = None) -> dict[str, object]:
    """Every non-timing summary field of `policy` on one shared workload (measured profiles);
    the Pollux profiles and workloads folders default to where corral.datasets finds them."""
    from corral import datasets
    from corral.core import Cluster
    from corral.policies import create_policy
    from corral.sim.analysis.metrics import summarize
    from corral.sim.loop.engine import Simulator
    from corral.sim.truth.profiles import ProfileTruth
    from corral.sim.workloads import load_pollux_csv

    profiles = profiles or datasets.locate("pollux-profiles")
    workloads = workloads or datasets.locate("pollux-workloads")
    if profiles is None or workloads is None:
        raise SystemExit(missing_data())
    truth = ProfileTruth(profiles)
    wl = load_pollux_csv(workloads / f"{workload}.csv", truth.limits())
    result = Simulator(truth, create_policy(policy), Cluster.parse(CLUSTER)).run(wl)
    summary = summarize(result).to_dict()
    out = {k: v for k, v in summary.items() if k not in TIMING_FIELDS}
    out["rounds"] = result.rounds
    return out


def numerics_env() -> dict[str, str]:
    """Environment for a process that computes figures with the stored run's kernels: numpy's
    AVX2 ones (every AVX-512 dispatch target this CPU has is disabled,
    NPY_DISABLE_CPU_FEATURES) and OpenBLAS's Haswell ones (OPENBLAS_CORETYPE; the stored run's
    AMD CPU used those). scipy's L-BFGS-B calls BLAS, whose kernels OpenBLAS picks by CPU: on
    an Intel Skylake-X the throughput fits, and so pollux's and optimus's figures, differed in
    the last bits from the stored ones until the kernel was pinned."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # another numpy layout: leave its choice alone
        return {}
    env = {"OPENBLAS_CORETYPE": "Haswell"} if __cpu_features__.get("AVX2") else {}
    wide = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)
            and (f.startswith("AVX512") or f == "X86_V4")]
    if wide:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(wide)
    return env


def figures_in_subprocess(cells: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """`figures` of each (policy, workload) cell, computed in a child process under
    `numerics_env` (numpy's kernels are chosen when it is imported, so not in this process)."""
    import subprocess

    cells = list(cells)
    spec = ";".join(f"{p}:{w}" for p, w in cells)
    done = subprocess.run([sys.executable, __file__, "--print", spec], capture_output=True,
                          text=True, env={**os.environ, **numerics_env()}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"reference_run.py --print failed: {done.stderr[-3000:]}")
    out = json.loads(done.stdout)
    return {(p, w): out[f"{p}:{w}"] for p, w in cells}


def load_reference(path: Path = REFERENCE_FILE) -> dict[str, dict[str, dict[str, object]]]:
    """{policy: {workload: figures}} of the stored run."""
    return json.loads(path.read_text())["figures"]


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--print", metavar="POLICY:WORKLOAD;...",
                    help="print these cells' figures as JSON instead of storing a run")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args(list(argv) if argv is not None else None)
    if args.print:
        cells = [c.split(":", 1) for c in args.print.split(";")]
        print(json.dumps({f"{p}:{w}": figures(p, w) for p, w in cells}))
        return
    if args.out is None:
        ap.error("--out or --print is needed")
    import corral

    doc: dict = {"made_by": "tests/sim/reference_run.py", "code": str(Path(corral.__file__).parent),
                 "cluster": CLUSTER, "truth": "measured profiles (../shared/data/pollux/profiles)",
                 "figures": {}}
    if args.out.exists():
        doc = json.loads(args.out.read_text())
    for policy in args.policies.split(","):
        for workload in args.workloads.split(","):
            started = time.perf_counter()
            doc["figures"].setdefault(policy, {})[workload] = figures(policy, workload)
            print(f"{policy} {workload}: {time.perf_counter() - started:.1f} s", file=sys.stderr,
                  flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
