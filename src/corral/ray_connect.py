"""Attaching this process to Ray, for the live Ray executor and the simulator's Ray sweeps.

A HOST:PORT address is checked first (`check_address`: a one-line error at once where nothing
answers; Ray itself retries for minutes). For a Ray on this machine (no address, or a loopback
one) Ray's replacement of a loopback address by the machine's outward IP is turned off:
a head started on 127.0.0.1 listens nowhere else, and `ray.init` would wait forever (seen with
`corral simulate --ray-address 127.0.0.1:PORT`). Ray is imported only when a function here is
called, so the layers that never use Ray do not need it installed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from corral.core.errors import CorralError

__all__ = ["connect", "check_address"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _use_loopback() -> None:
    """Keep a Ray on this machine on 127.0.0.1. Ray replaces a loopback address by the machine's
    outward IP unless multi-node support is off (its macOS/Windows default); for a cluster on
    one machine that is what we want (a private flag, set only if it exists)."""
    import ray._private.ray_constants as constants

    if hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray; True if this call did (so the caller disconnects later).
    No address: start a single-node Ray on 127.0.0.1 without the dashboard."""
    import ray

    if ray.is_initialized():
        return False
    host = check_address(address) if address else None
    if address is None or host in _LOOPBACK:
        _use_loopback()
    common: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                  logging_level="warning")
    try:
        if address:
            ray.init(address=address, **common)
        else:  # "local": a Ray of its own, not the last one `ray start` left on this machine
            ray.init(address="local", num_cpus=num_cpus, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorralError(f"cannot connect to {where}: {first}{_auth_hint(address)}") from None
    return True


def _auth_hint(address: str | None) -> str:
    """What to try when a named cluster refused us and token authentication may be why: a
    cluster made by `ray start` asks for the token it wrote to ~/.ray/auth_token, which Ray
    sends to an address given explicitly only under RAY_AUTH_MODE=token (seen with Ray 2.60)."""
    if not address or os.environ.get("RAY_AUTH_MODE"):
        return ""
    if not (Path.home() / ".ray" / "auth_token").is_file():
        return ""
    return ("; if that cluster was started with `ray start` (token authentication), set "
            "RAY_AUTH_MODE=token so Ray sends the token in ~/.ray/auth_token")


def check_address(address: str, timeout_s: float = 5.0) -> str | None:
    """The host of a HOST:PORT Ray address, once something answers there (CorralError at once
    otherwise: Ray itself retries for minutes); None for `auto` and `ray://` addresses."""
    if address == "auto" or "://" in address:
        return None
    parts = urlsplit(f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise CorralError(f"Ray address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise CorralError(f"cannot reach the Ray cluster at {address}: "
                          f"{exc.strerror or exc}") from None
    return parts.hostname
