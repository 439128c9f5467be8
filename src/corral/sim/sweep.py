"""Run several policies over several workloads: the matrix `corral simulate` reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from corral.core.cluster import Cluster
from corral.core.errors import UnknownPolicyError
from corral.core.policy import create_policy, param_fields, policy_class
from corral.sim.config import EngineConfig
from corral.sim.engine import Simulator
from corral.sim.results import SimResult
from corral.sim.truth.base import Truth
from corral.sim.workloads import Workload


@dataclass(frozen=True)
class PolicyChoice:
    """A policy name and the parameters set for it."""

    name: str
    overrides: Mapping[str, str]


def parse_settings(policies: Sequence[str], settings: Sequence[str]) -> list[PolicyChoice]:
    """Resolve `--set policy.key=value` (or `key=value` for every policy that has `key`)."""
    per_policy: dict[str, dict[str, str]] = {p: {} for p in policies}
    for name in policies:
        policy_class(name)  # unknown policy -> one-line error
    for item in settings:
        if "=" not in item:
            raise UnknownPolicyError(f"--set {item!r}: expected policy.key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if "." in key:
            pol, param = key.split(".", 1)
            if pol not in per_policy:
                raise UnknownPolicyError(f"--set {item!r}: policy {pol!r} is not among those run ({', '.join(policies)})")
            per_policy[pol][param] = value.strip()
        else:
            owners = [p for p in policies if key in {n for n, _, _ in param_fields(policy_class(p))}]
            if not owners:
                raise UnknownPolicyError(f"--set {item!r}: no policy run here has a parameter {key!r}")
            for pol in owners:
                per_policy[pol][key] = value.strip()
    choices = [PolicyChoice(p, per_policy[p]) for p in policies]
    for c in choices:
        create_policy(c.name, c.overrides)  # validate names and values up front
    return choices


def run_matrix(truth: Truth, choices: Sequence[PolicyChoice], workloads: Sequence[Workload],
               cluster: Cluster, config: EngineConfig,
               on_run_done: Callable[[str, str], None] | None = None) -> dict[str, list[SimResult]]:
    """Each policy (a fresh instance per workload) on each workload."""
    out: dict[str, list[SimResult]] = {}
    for choice in choices:
        runs = []
        for workload in workloads:
            policy = create_policy(choice.name, choice.overrides)
            runs.append(Simulator(truth, policy, cluster, config).run(workload))
            if on_run_done:
                on_run_done(choice.name, workload.name)
        out[choice.name] = runs
    return out
