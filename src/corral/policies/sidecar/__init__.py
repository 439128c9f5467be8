"""The SideCar elastic scheduler (Wang et al., SC'20) and its termination-time variant."""

from corral.policies.sidecar import policy as _policy  # noqa: F401 - registers the policies
from corral.policies.sidecar import termination as _termination  # noqa: F401
