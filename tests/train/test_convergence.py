"""Adaptive training that converges: the digits example's model and data with its batch forced
to flip between the initial and a 6x larger batch at every epoch (what pollux did live when a
job collapsed to chance accuracy), under AdaScale with SGD momentum. The bounded, ramped LR
factor keeps it converging; the divergence guard is there if it does not. And a rate beyond
the model's stable one: the guard's restore lowers it instead of replaying the divergence."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
import torch.nn.functional as F  # noqa: E402

from corral.core.jobs import BatchConfig  # noqa: E402
from corral.protocol.env import ENV_CONFIG, JobConfig  # noqa: E402
from corral.train import ElasticTrainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from digits_common import TARGET_ACCURACY, accuracy, digits, make_model  # noqa: E402

pytestmark = [pytest.mark.slow]

EPOCHS = 12


@pytest.fixture(autouse=True)
def _own_sigterm(monkeypatch):
    old = signal.getsignal(signal.SIGTERM)
    for var in ("RANK", "WORLD_SIZE", ENV_CONFIG, "CORRAL_CHECKPOINT_DIR", "CORRAL_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    yield
    signal.signal(signal.SIGTERM, old)


def test_forced_batch_flips_every_epoch_still_reach_the_target(monkeypatch, tmp_path) -> None:
    config = JobConfig(init_bsz=32, max_bsz=256, min_local_bsz=8, max_local_bsz=256,
                       adaptive=True, checkpoint_dir=str(tmp_path))
    monkeypatch.setenv(ENV_CONFIG, config.to_json())
    torch.set_num_threads(1)
    torch.manual_seed(0)
    train, test = digits()
    model = make_model(16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    trainer = ElasticTrainer(model, optimizer, train, batch_size=32, max_batch_size=256)
    flips, scales = [], []
    for epoch in trainer.epochs(EPOCHS):
        forced = BatchConfig(192, 0) if epoch % 2 else BatchConfig(32, 0)
        trainer._set_batch(forced)  # as a policy re-deciding the batch at every epoch would
        flips.append(trainer.total_bsz)
        for x, y in trainer.batches():
            trainer.backward(F.cross_entropy(trainer.model(x), y))
            scales.append(trainer.lr_scale)
        trainer.record_metric(accuracy(model, test, trainer.device))
    assert flips[:4] == [32, 192, 32, 192]
    assert max(scales) <= trainer.lr.max_scale and max(scales) > 1.5  # the LR did scale up
    # no collapse on the way (a collapse goes to chance, 0.1): each epoch of the second half
    # well above it, and on average near the target; one epoch right after a flip dipped to
    # 0.856 on an Intel Skylake-X (its CPU kernels differ from the AMD's, where none was < 0.9)
    late = [m for _, _, m in trainer.metrics[EPOCHS // 2:]]
    assert min(late) >= 0.8 and sum(late) / len(late) >= 0.93, late
    assert accuracy(model, test, trainer.device) >= TARGET_ACCURACY


def test_a_rate_beyond_the_stable_one_is_backed_off_instead_of_replayed(monkeypatch) -> None:
    """The example's former rate, 0.1, held constant: the loss never settles and the model
    collapses after 15 to 25 epochs (in a plain PyTorch loop too). The divergence guard
    restores the last epoch end and halves the rate, instead of replaying the same divergence
    from the same state until the job fails; the job ends at the target."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    train, test = digits()
    model = make_model(16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    trainer = ElasticTrainer(model, optimizer, train, batch_size=32)  # fixed batch, on its own
    for _ in trainer.epochs(40):
        for x, y in trainer.batches():
            trainer.backward(F.cross_entropy(trainer.model(x), y))
        trainer.record_metric(accuracy(model, test, trainer.device))
    restores = len(trainer.events)
    assert restores >= 1  # seen at epoch 18 on the project's machine
    assert trainer.lr.backoff == pytest.approx(0.5 ** restores)
    assert accuracy(model, test, trainer.device) >= TARGET_ACCURACY
