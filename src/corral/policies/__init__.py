"""The scheduling policies; importing this package registers every built-in policy."""

from corral.policies import fifo, srtf  # noqa: F401
