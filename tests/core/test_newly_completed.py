"""`NewlyCompleted`: a policy reads each finished job once, and a list that is not a growth of
the last one is read whole again and said so."""

from __future__ import annotations

from corral.core.completed import NewlyCompleted
from corral.core.jobs import JobSpec
from tests.job_views import view


def _done(n: int, prefix: str = "j") -> list:
    return [view(JobSpec(name=f"{prefix}{i}", submit_time_s=0.0, app="m", gpus=1, batch_size=128,
                         init_bsz=128, max_bsz=128, min_local_bsz=128, max_local_bsz=128))
            for i in range(n)]


def test_each_finished_job_is_read_once_as_the_list_grows() -> None:
    reader = NewlyCompleted()
    jobs = _done(5)
    assert reader.read(()) == ((), False)
    new, again = reader.read(tuple(jobs[:2]))
    assert [v.spec.name for v in new] == ["j0", "j1"] and not again
    new, again = reader.read(tuple(jobs[:2]))
    assert list(new) == [] and not again
    new, again = reader.read(tuple(jobs))
    assert [v.spec.name for v in new] == ["j2", "j3", "j4"] and not again


def test_a_list_that_does_not_extend_the_last_is_read_from_its_start() -> None:
    reader = NewlyCompleted()
    reader.read(tuple(_done(3)))
    other = tuple(_done(4, prefix="k"))  # same length and more, but other jobs: another run
    new, again = reader.read(other)
    assert [v.spec.name for v in new] == ["k0", "k1", "k2", "k3"] and again
    new, again = reader.read(other[:2])  # shorter: not a growth either
    assert len(new) == 2 and again
    assert reader.read(()) == ((), True)
