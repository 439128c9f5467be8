"""Adaptive jobs that converge under a policy that resizes them: three digits jobs
(examples/digits_elastic.py, adaptive, batch 32 up to 256) trained for 100 epochs each on
`corral serve --slots 2 --policy pollux`, submitted a few seconds apart so the policy shares
and re-shares the two slots. Seen live before issue 11's trainer: accuracy 0.96 at epoch 2,
then a total batch flipping every epoch and a collapse to chance (0.086) at epoch 19, the job
ending "done" at chance. Target: every job >= 0.95.

Printed per job: final test accuracy, lowest accuracy after epoch 5, launches, batch changes
seen in its reports, divergence restores, JCT; and the machine.

Run: python benchmarks/live/bench_convergence.py [--epochs 100] [--jobs 3] [--slots 2]
         [--policy pollux] [--timeout 1800]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "service"))
FIELDS = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
              min_local_bsz=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--policy", default="pollux")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args()
    import livecluster as live

    sys.stdout.reconfigure(line_buffering=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    settings = ("--set", "restart_penalty_s=1") if args.policy == "pollux" else ()
    with tempfile.TemporaryDirectory() as tmp:
        svc = live.LiveService(Path(tmp), args.policy, slots=args.slots,
                               interval_s=args.interval, extra_args=settings)
        try:
            svc.start()
            started = time.monotonic()
            ids = []
            for i in range(args.jobs):
                ids.append(svc.submit("digits_elastic.py", "--epochs", str(args.epochs),
                                      **FIELDS))
                if i + 1 < args.jobs:
                    svc.wait_training(ids[-1], 120, steps=100)
            jobs = svc.wait_all_done(ids, args.timeout)
            wall = time.monotonic() - started
            print(f"{args.jobs} jobs x {args.epochs} epochs on {args.slots} slots under "
                  f"{args.policy} (interval {args.interval:g} s): {wall:.0f} s")
            ok = True
            for job in jobs:
                rows = svc.client.telemetry(job["id"])
                detail = svc.job(job["id"])
                totals = [r["total_bsz"] for r in rows if r["total_bsz"]]
                changes = sum(a != b for a, b in zip(totals, totals[1:]))
                metrics = [m for _, e, m in (detail["report"] or {}).get("metrics", []) if e > 5]
                events = [e for e in detail["events"] if e["kind"] == "training-diverged"]
                final = live.final_accuracy(svc.client.logs(job["id"]))
                ok &= final >= 0.95
                print(f"  {job['id']}: final accuracy {final:.4f}, lowest after epoch 5 "
                      f"{min(metrics):.4f}, launches {job['launches']}, batch changes {changes} "
                      f"(totals seen {sorted(set(totals))}), divergence restores {len(events)}, "
                      f"JCT {job['finish_s'] - job['submit_time_s']:.0f} s")
            print(f"target >= 0.95 on every job: {'met' if ok else 'NOT met'}")
        finally:
            svc.close()


if __name__ == "__main__":
    main()
