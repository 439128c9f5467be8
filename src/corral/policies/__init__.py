"""The scheduling policies; importing this package registers all of them.

A policy is a module here (or a subpackage, for a policy of several modules, whose
`__init__` imports the module that registers it) with a `@register_policy` class: it is found
automatically. `POLICIES` is the registry with every one of them (and any a user's file
registers); the cli, the service and the simulator take policies from it, so that core, which
holds the registry's code, imports no policy.
"""

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from corral.core.policy import REGISTERED, Policy, PolicyRegistry

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name != "placement":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["POLICIES", "create_policy", "policy_class", "policy_names"]

#: Every registered policy by name, the built-in ones loaded.
POLICIES: PolicyRegistry = REGISTERED


def policy_names() -> list[str]:
    return POLICIES.names()


def policy_class(name: str) -> type[Policy]:
    return POLICIES.policy_class(name)


def create_policy(name: str, overrides: Mapping[str, Any] | None = None) -> Policy:
    """Policy `name` with the named parameters set (strings are converted); one line naming
    the policy or parameter when either is unknown."""
    return POLICIES.create(name, overrides)
