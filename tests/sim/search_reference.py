"""Pollux's genetic search on mid-size synthetic problems, and the stored run it must match.

The shared 160-job workloads (`reference_run.py`) run on 16 equal nodes. These cases add what
they do not reach: hundreds of jobs, nodes of mixed sizes (slots beyond a node's size), jobs
needing at least 2 GPUs, interference avoidance off, a 3-node cap, p in {-4, -1, 0, 0.5}, early
stops, and a warm start from the first search's population after one job left.

`tests/sim/data/pollux_search_reference.json` holds, for each case, the fitness, generations
and hashes of the allocation and of the final population of both searches, under
`numerics_env` (numpy's AVX2 kernels, as the reference summaries). It was first made with the
search as it was before issue 18's speed work (commit f9a4da3), which that work matched to the
last bit; it was made again, on purpose, when the growth mutation came to grow jobs on their
own nodes as the artifact's does (issue 15), which changes every search:

    NPY_DISABLE_CPU_FEATURES="<numerics_env()'s value>" PYTHONPATH=src \\
        python tests/sim/search_reference.py --out tests/sim/data/pollux_search_reference.json

Only public APIs that exist before and after the change are used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REFERENCE_FILE = Path(__file__).resolve().parent / "data" / "pollux_search_reference.json"
#: Node sizes (GPUs) of the cases' clusters: mixed, so some slots are beyond a node's size.
NODES = [4, 4, 8, 2, 4, 3, 4, 4, 8, 4, 1, 4]
#: (name, seed, jobs, nodes repeated, p, SearchSettings fields)
CASES: list[tuple[str, int, int, int, float, dict]] = [
    ("harmonic", 1, 120, 2, -1.0, dict(generations=25, patience=0)),
    ("geometric-no-avoidance", 2, 90, 2, 0.0, dict(generations=20, patience=3,
                                                   avoid_interference=False)),
    ("p0.5-three-nodes", 3, 150, 2, 0.5, dict(generations=15, patience=0, max_nodes_per_job=3)),
    ("p-4-small-population", 4, 60, 2, -4.0, dict(generations=30, patience=5, population=40)),
    ("600-jobs", 5, 600, 16, -1.0, dict(generations=8, patience=0)),
]


def problem(seed: int, jobs: int, node_gpus: list[int], p: float):
    """A random problem: caps 1-16 GPUs, some jobs needing 2, speedups rising with GPUs and
    falling with nodes, half the jobs placed."""
    from corral.policies.pollux.search import AllocationProblem, SpeedupTable

    rng = np.random.default_rng(seed)
    gpus = np.array(node_gpus, dtype=np.int64)
    caps = rng.choice([1, 2, 3, 4, 8, 16], size=jobs)
    min_gpus = np.where(rng.random(jobs) < 0.15, np.minimum(2, caps), 1)
    tables = []
    for cap in caps:
        gains = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 1.0, cap))])
        rows = [np.zeros(cap + 1)] + [gains * 0.9 ** n for n in range(min(16, len(gpus), cap))]
        tables.append(np.vstack(rows))
    base = np.zeros((jobs, len(gpus)), dtype=np.int64)
    free = gpus.copy()
    for j in rng.permutation(jobs)[: jobs // 2]:
        n = int(rng.integers(len(gpus)))
        k = min(int(caps[j]), int(free[n]))
        if k >= min_gpus[j]:
            base[j, n] = k
            free[n] -= k
    return AllocationProblem(node_gpus=gpus, base=base, max_gpus=caps, min_gpus=min_gpus,
                             speedup=SpeedupTable(tables), penalty=rng.uniform(0.2, 1.0, jobs),
                             p=p)


def digest(result) -> list:
    """Fitness, generations and hashes of the allocation and the final population."""
    alloc = np.ascontiguousarray(result.allocation, dtype=np.int64).tobytes()
    pop = np.ascontiguousarray(result.population, dtype=np.int64).tobytes()
    return [result.fitness, result.generations, hashlib.sha256(alloc).hexdigest()[:16],
            hashlib.sha256(pop).hexdigest()[:16]]


def run_case(seed: int, jobs: int, repeat: int, p: float, settings: dict) -> list:
    """Digests of a search and of a warm-started search after job jobs // 3 left."""
    from corral.policies.pollux.search import SearchSettings, genetic_search, remap_population

    nodes = NODES * repeat
    st = SearchSettings(**settings)
    first = genetic_search(problem(seed, jobs, nodes, p), st, np.random.default_rng(seed))
    stays = np.arange(jobs) != jobs // 3
    old_to_new = np.where(stays, np.cumsum(stays) - 1, -1)
    seeds = remap_population(first.population, old_to_new, jobs - 1)
    second = genetic_search(problem(seed + 100, jobs - 1, nodes, p), st,
                            np.random.default_rng(seed + 1), seeds)
    return [digest(first), digest(second)]


def digests() -> dict[str, list]:
    return {name: run_case(*case) for name, *case in CASES}


def digests_in_subprocess() -> dict[str, list]:
    """`digests()` in a child process with the stored run's numpy kernels."""
    from reference_run import numerics_env

    done = subprocess.run([sys.executable, __file__, "--print"], capture_output=True, text=True,
                          env={**os.environ, **numerics_env()}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"search_reference.py --print failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="store a run here")
    ap.add_argument("--print", action="store_true", help="print the digests as JSON")
    args = ap.parse_args()
    out = digests()
    if args.print:
        print(json.dumps(out))
        return
    if args.out is None:
        ap.error("--out or --print is needed")
    import corral

    doc = {"made_by": "tests/sim/search_reference.py", "code": str(Path(corral.__file__).parent),
           "numpy": np.__version__, "digests": out}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
