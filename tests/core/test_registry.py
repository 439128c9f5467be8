"""The policy registry: core holds its code and imports no policy; `corral.policies` is where
the built-in ones are found, and callers take them from there."""

import subprocess
import sys

import pytest

from corral.core.errors import UnknownPolicyError
from corral.core.jobs import Decision
from corral.core.policy import NoParams, Policy, PolicyRegistry, Promises


class _Idle(Policy):
    name = "idle-test"
    Params = NoParams
    promises = Promises()

    def decide(self, snapshot):
        return Decision()


def test_core_imports_no_policy():
    """Core's registry, asked for names and for a policy, loads no policy module: nothing of
    core reaches up to corral.policies, not even by a string at run time (on main before this
    change, the first lookup imported the package by name)."""
    code = ("import sys, corral.core.policy as p\n"
            "from corral.core.errors import UnknownPolicyError\n"
            "names = p.REGISTERED.names()\n"
            "try:\n    p.REGISTERED.policy_class('fifo')\n"
            "except UnknownPolicyError as exc:\n    print(exc)\n"
            "print(sorted(m for m in sys.modules if m.startswith('corral.policies')), names)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["unknown policy 'fifo'; known: none", "[] []"]


def test_the_policies_package_registers_every_builtin():
    from corral.policies import POLICIES, create_policy

    assert {"fifo", "pollux", "sia", "srtf", "tiresias-las"} <= set(POLICIES.names())
    assert "srtf" in POLICIES.oracles() and "fifo" not in POLICIES.oracles()
    assert create_policy("fifo").name == "fifo"


def test_a_registry_of_its_own_finds_only_what_it_was_given():
    reg = PolicyRegistry()
    reg.register(_Idle)
    assert reg.names() == ["idle-test"]
    assert isinstance(reg.create("idle-test"), _Idle)
    with pytest.raises(UnknownPolicyError, match="unknown policy 'fifo'; known: idle-test"):
        reg.policy_class("fifo")
    with pytest.raises(UnknownPolicyError, match="has no parameter 'x'"):
        reg.create("idle-test", {"x": "1"})


def test_a_name_registered_twice_is_refused():
    reg = PolicyRegistry()
    reg.register(_Idle)
    reg.register(_Idle)  # the same class again: fine (a module imported twice)
    other = type("Other", (_Idle,), {"name": "idle-test"})
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(other)
