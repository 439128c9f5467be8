"""ONES (SC'21): online evolutionary batch-size scheduling; the policy and its search."""

from corral.policies.ones import policy as _policy  # noqa: F401 - registers the policy
