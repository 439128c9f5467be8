"""Sia (SOSP'23): heterogeneity-aware, goodput-optimised scheduling; the policy and its integer
program over (GPU type, GPU count) configurations."""

from corral.policies.sia import policy as _policy  # noqa: F401 - registers the policy
