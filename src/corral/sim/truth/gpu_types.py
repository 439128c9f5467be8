"""Per-GPU-type speed of the built-in catalog's models, derived from Gavel's measurements.

The figures live in `corral/data/gpu_types.json`; `derive` makes them from Gavel's
`simulation_throughputs.json` (the shared data's `gavel/`; Gavel (OSDI'20), MIT), and
tests/sim/test_truth_types.py checks the shipped figures against it; `python -m
corral.sim.truth.gpu_types THROUGHPUTS -o FILE` rewrites the file. A type divides a step's
compute part (Pollux's T_grad) by its speed relative to the anchor type at that per-GPU batch
(`speed_at`, from Gavel's single-GPU throughput ratios) and multiplies the sync part by its
`sync_factor` (1.0 for all three: see `ASSUMPTIONS`); `CatalogApp.for_type` applies it.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path

GPU_TYPES: tuple[str, ...] = ("k80", "p100", "v100")

#: The type the catalog's measured figures stand for (ratio 1).
ANCHOR = "p100"

#: Catalog model -> Gavel job family (the nearest by architecture and task; the Gavel data's
#: README suggests the same). yolov3 has no close counterpart in Gavel's table.
MODEL_MAP: dict[str, str] = {
    "bert": "Transformer",
    "cifar10": "ResNet-18",
    "deepspeech2": "LM",
    "imagenet": "ResNet-50",
    "ncf": "Recommendation",
    "yolov3": "ResNet-50",
}

MAP_NOTES: dict[str, str] = {
    "bert": "Transformer (translation, Multi30k): the only transformer in Gavel's table",
    "cifar10": "ResNet-18 on CIFAR-10: the same model and data set",
    "deepspeech2": "LM (recurrent language model, WikiText-2): the nearest recurrent sequence model",
    "imagenet": "ResNet-50 on ImageNet: the same model and data set",
    "ncf": "Recommendation (ML-20M): the same task (collaborative filtering)",
    "yolov3": ("no close counterpart; assumed ResNet-50's (a convolutional network on "
               "ImageNet-sized images, compute-bound like YOLOv3)"),
}

SOURCE = ("Derived by corral.sim.truth.gpu_types.derive from Gavel's simulation_throughputs.json "
          "(solo, consolidated, scale factor 1): Deepak Narayanan, Keshav Santhanam, Fiodar "
          "Kazhamiaka, Amar Phanishayee, Matei Zaharia, \"Heterogeneity-Aware Cluster Scheduling "
          "Policies for Deep Learning Workloads\", OSDI 2020; stanford-futuredata/gavel at c4fa400, "
          "MIT licence. Only ratios derived from it are stored here, not its measurements.")

ASSUMPTIONS = {
    "anchor": ("The built-in catalog was fitted from the Pollux artifact's profiles, measured on "
               "NVIDIA T4 GPUs (4 per node, PCIe; nodes on 50 Gb/s Ethernet). Gavel measured no "
               "T4; the catalog's figures are taken as the P100's (nearest in FP32 throughput: "
               "8.1 vs 9.3 TFLOPS), so p100 reproduces the catalog and k80 and v100 are scaled "
               "relative to it."),
    "compute": ("compute time (Pollux's T_grad, per micro-step) on a type = the catalog's / "
                "speed, speed = the Gavel model's single-GPU throughput on the type over its "
                "throughput on the P100 at the same batch size, interpolated linearly over "
                "log2(per-GPU batch) between Gavel's batch sizes and held at the ends."),
    "communication": ("gradient synchronisation time = the catalog's (measured on the T4 "
                      "cluster's interconnect) x the type's sync_factor, 1.0 for every type: "
                      "each type's nodes are assumed to have that interconnect (PCIe within a "
                      "node, the same network between nodes). Gavel's table measures a GPU and "
                      "its server together and gives no separate communication figure. So a "
                      "faster type shortens compute only, and scales worse over GPUs, as Gavel's "
                      "V100 figures do."),
}

_FAMILY = re.compile(r"^(?P<family>.+?) \(batch size (?P<bsz>\d+)\)$")


def _solo_single(throughputs: Mapping, worker: str) -> dict[str, dict[int, float]]:
    """{family: {batch: iterations/s}} of the solo single-GPU entries of a worker type."""
    out: dict[str, dict[int, float]] = {}
    for key, entry in throughputs[worker].items():
        job_type, scale = ast.literal_eval(key)
        m = _FAMILY.match(job_type)
        if scale != 1 or m is None or not entry.get("null"):
            continue
        out.setdefault(m["family"], {})[int(m["bsz"])] = float(entry["null"])
    return out


def derive(throughputs_json: Path | str) -> dict:
    """The per-type document (`corral/data/gpu_types.json`) from Gavel's throughput file."""
    data = json.loads(Path(throughputs_json).read_text())
    solo = {t: _solo_single(data, t) for t in GPU_TYPES}
    models = {}
    for model, family in MODEL_MAP.items():
        base = solo[ANCHOR][family]
        batches = sorted(b for b in base if all(b in solo[t][family] for t in GPU_TYPES))
        speed = {t: [[b, round(solo[t][family][b] / base[b], 4)] for b in batches] for t in GPU_TYPES}
        models[model] = {"gavel": family, "note": MAP_NOTES[model], "speed": speed}
    return {
        "version": 1,
        "source": SOURCE,
        "anchor": ANCHOR,
        "assumptions": ASSUMPTIONS,
        "types": {t: {"sync_factor": 1.0} for t in GPU_TYPES},
        "models": models,
    }


def speed_at(points: list[list[float]], local_bsz: float) -> float:
    """A type's speed at a per-GPU batch: linear over log2(batch) between the points, held at
    the ends."""
    if local_bsz <= points[0][0]:
        return float(points[0][1])
    if local_bsz >= points[-1][0]:
        return float(points[-1][1])
    x = math.log2(local_bsz)
    for (b0, s0), (b1, s1) in zip(points, points[1:]):
        if local_bsz <= b1:
            w = (x - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
            return float(s0 + (s1 - s0) * w)
    return float(points[-1][1])  # not reached


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("throughputs", help="Gavel's simulation_throughputs.json")
    ap.add_argument("-o", "--out", help="write here (default: print)")
    args = ap.parse_args(argv)
    text = json.dumps(derive(args.throughputs), indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
