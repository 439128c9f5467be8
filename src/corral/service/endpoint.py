"""Where a service lives and how clients find it: the data directory, its token, its address.

The data directory (`--data-dir`, else $CORRAL_HOME, else ~/.corral) holds state.db, jobs/
(logs, reports, checkpoints), `token` (mode 0600, made on first start unless --token or
$CORRAL_TOKEN gives one) and `service.json` ({"url", "pid"}) while a service runs. Clients use
--url/$CORRAL_URL and --token/$CORRAL_TOKEN when given, else these files.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from corral.core.errors import CorralError
from corral.train.files import atomic_write_json, read_json

__all__ = ["data_dir", "server_token", "client_token", "write_address", "read_url",
           "clear_address"]

_ADDRESS = "service.json"
_TOKEN = "token"


def data_dir(path: str | Path | None = None) -> Path:
    return Path(path or os.environ.get("CORRAL_HOME") or Path.home() / ".corral").expanduser()


def server_token(directory: Path, given: str | None = None) -> str:
    """The token the service accepts: given, $CORRAL_TOKEN, the stored one, or a new one."""
    token = given or os.environ.get("CORRAL_TOKEN")
    path = directory / _TOKEN
    if token is None and path.exists():
        token = path.read_text().strip()
    if not token:
        token = secrets.token_urlsafe(24)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def client_token(directory: Path, given: str | None = None) -> str:
    token = given or os.environ.get("CORRAL_TOKEN")
    if token:
        return token
    try:
        return (directory / _TOKEN).read_text().strip()
    except OSError:
        raise CorralError(f"no token: pass --token, set CORRAL_TOKEN, or use the data directory "
                          f"of a running service (looked in {directory})") from None


def write_address(directory: Path, url: str) -> None:
    atomic_write_json(directory / _ADDRESS, {"url": url, "pid": os.getpid()})


def clear_address(directory: Path) -> None:
    doc = read_json(directory / _ADDRESS)
    if isinstance(doc, dict) and doc.get("pid") == os.getpid():
        (directory / _ADDRESS).unlink(missing_ok=True)


def read_url(directory: Path, given: str | None = None) -> str:
    url = given or os.environ.get("CORRAL_URL")
    if url:
        return url.rstrip("/")
    doc = read_json(directory / _ADDRESS)
    if not isinstance(doc, dict) or "url" not in doc:
        raise CorralError(f"no corral service found in {directory}: start one with `corral serve`, "
                          "or pass --url")
    return str(doc["url"]).rstrip("/")
