"""Optimus's convergence predictor on the six Pollux profiles' validation curves.

For every validated batch size of every model, the job owner's threshold δ is the one at which
the fit of the whole curve stops at the curve's length (`delta_at_epochs`); the predictor then
sees only the first fraction of the curve and predicts the total epochs. Printed: mean |error|
of (predicted - actual) / actual per model and fraction seen (Optimus Fig. 7 / §6.3.1 find ~15%
tolerable), the same with the per-application δ the `optimus` policy uses (median of the
curves' δ, `corral.policies.optimus.USER_DELTA`), and those medians.

Run: python benchmarks/fidelity/optimus_convergence.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import POLLUX, machine, require

from corral.perf.convergence import delta_at_epochs, predict_total_epochs
from corral.policies.optimus import USER_DELTA
from corral.sim.truth.profiles import ProfileTruth

FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def curves(truth: ProfileTruth) -> dict[str, list[tuple[int, list[float]]]]:
    """{model: [(batch size, metric after each epoch)]}."""
    out = {}
    for name, app in sorted(truth.apps().items()):
        epochs = app.limits.epochs
        out[name] = [(int(b), [app.metric(e, b) for e in range(1, epochs + 1)])
                     for b in app.batch_sizes]
    return out


def errors(values: list[float], delta: float) -> list[float]:
    n = len(values)
    out = []
    for f in FRACTIONS:
        seen = max(1, round(f * n))
        pred = predict_total_epochs(values[:seen], delta)
        out.append((pred.total_epochs - n) / n)
    return out


def table(title: str, rows: dict[str, list[list[float]]]) -> None:
    print(f"\n{title}")
    print(f"{'model':12s} " + " ".join(f"{f:>6.0%}" for f in FRACTIONS))
    everything: list[list[float]] = []
    for model, errs in rows.items():
        everything += errs
        cols = zip(*errs)
        print(f"{model:12s} " + " ".join(f"{statistics.mean(abs(e) for e in c):6.1%}" for c in cols))
    print(f"{'all':12s} " + " ".join(f"{statistics.mean(abs(e) for e in c):6.1%}"
                                     for c in zip(*everything)))


def main() -> None:
    print(f"machine: {machine()}")
    truth = ProfileTruth(require(POLLUX / "profiles"))
    started = time.perf_counter()
    own: dict[str, list[list[float]]] = {}
    per_app: dict[str, list[list[float]]] = {}
    medians: dict[str, float] = {}
    for model, runs in curves(truth).items():
        if len(runs[0][1]) < 3:
            print(f"{model}: {len(runs[0][1])} epochs, too few to fit (the policy uses its fallback)")
            continue
        deltas = [delta_at_epochs(values) for _, values in runs]
        medians[model] = statistics.median(deltas)
        own[model] = [errors(values, d) for (_, values), d in zip(runs, deltas)]
        app_delta = USER_DELTA.get(model, medians[model])
        per_app[model] = [errors(values, app_delta) for _, values in runs]
    table("mean |error| of predicted total epochs vs fraction of the curve seen "
          "(each curve's own δ)", own)
    table("same, with the per-application δ the optimus policy uses (USER_DELTA)", per_app)
    print("\nmedian δ per model (USER_DELTA should match): "
          + ", ".join(f"{m}={d:.2g}" for m, d in medians.items()))
    print(f"wall: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
