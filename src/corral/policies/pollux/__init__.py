"""Pollux (OSDI'21): goodput-optimised co-adaptive scheduling; the policy, its genetic search
over allocations, the speed-up tables it searches with and its node-count helper."""

from corral.policies.pollux import policy as _policy  # noqa: F401 - registers the policy
