"""Peak memory of a simulation run, as the operating system counted it (for `corral simulate`)."""

from __future__ import annotations

import resource
import sys


def _mib(maxrss: int) -> float:
    # ru_maxrss is in KiB on Linux, in bytes on macOS
    return maxrss / (1024.0 * 1024.0) if sys.platform == "darwin" else maxrss / 1024.0


def peak_rss_mib() -> tuple[float, float]:
    """(this process's peak resident set, the largest finished child process's), MiB.

    Worker processes of a parallel sweep count as children once they have exited; Ray workers
    are not children of this process and are not counted.
    """
    return (_mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss),
            _mib(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
