"""`corral`: corral's own policy (issue 42); importing this package registers it."""

from corral.policies.corral.policy import CorralParams, CorralPolicy

__all__ = ["CorralParams", "CorralPolicy"]
