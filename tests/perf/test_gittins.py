"""Gittins index from an empirical GPU-time distribution (Tiresias Pseudocode 1)."""

from __future__ import annotations

from pathlib import Path

import datafiles
import pytest

from corral.core.errors import InputError
from corral.perf.gittins import ServiceDistribution, load_service_distribution


def test_index_on_a_hand_computed_distribution() -> None:
    d = ServiceDistribution([8, 1, 4, 2])  # order does not matter
    # a = 0, Δ = 3: P = #{s <= 3}/4 = 1/2; E = (1 + 2 + 3 + 3)/4 = 9/4; G = 2/9.
    assert d.gittins_index(0.0, 3.0) == pytest.approx(2 / 9)
    # a = 1.5, Δ = 3: survivors {2, 4, 8}; P = 2/3; E = (0.5 + 2.5 + 3)/3 = 2; G = 1/3.
    assert d.gittins_index(1.5, 3.0) == pytest.approx(1 / 3)


def test_supremum_over_quanta_is_reached_at_a_sample() -> None:
    d = ServiceDistribution([1, 2, 4, 8])
    # Δ = 1: 1/4 / 1 = 0.25; Δ = 2: (2/4)/(7/4) = 2/7; Δ = 4: (3/4)/(11/4) = 3/11; Δ = 8: 4/15.
    assert d.gittins_index(0.0) == pytest.approx(2 / 7)
    assert d.gittins_index(0.0) >= max(d.gittins_index(0.0, q) for q in (0.5, 1.5, 3, 5, 9))


def test_job_past_every_sample_gets_index_zero() -> None:
    d = ServiceDistribution([1, 2, 4])
    assert d.gittins_index(4.0, 10.0) == 0.0
    assert d.gittins_index(100.0) == 0.0
    assert d.survival(2.0) == pytest.approx(1 / 3)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        ServiceDistribution([])
    with pytest.raises(ValueError):
        ServiceDistribution([1, 2]).gittins_index(0.0, 0.0)


def test_load_csv(tmp_path: Path) -> None:
    f = tmp_path / "gput.csv"
    f.write_text("duration\n10\n20\n\n30\n")
    assert len(load_service_distribution(f)) == 3
    f.write_text("duration\n10\nabc\n")
    with pytest.raises(InputError, match="row 3"):
        load_service_distribution(f)
    with pytest.raises(InputError, match="not found"):
        load_service_distribution(tmp_path / "missing.csv")


def test_tiresias_yarn_samples_load() -> None:
    path = datafiles.need("tiresias") / "yarn-gput10000.csv"
    d = load_service_distribution(path)
    assert len(d) > 9000
    # Short jobs are likely to finish soon: index falls as attained service grows.
    assert d.gittins_index(0.0, 3600) > d.gittins_index(3000.0, 600)
