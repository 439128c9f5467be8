"""Where a service lives and how clients find it: the data directory, its lock, its token, its
address.

The data directory (`--data-dir`, $CORRAL_HOME or ~/.corral; mode 0700, files 0600) holds
state.db, jobs/, `token`, `service.lock` and, while running, `service.json` ({"url", "pid"}).
Clients use --url/--token or $CORRAL_URL/$CORRAL_TOKEN, else these files. `ServiceLock` holds
an exclusive `flock` on `service.lock` for the service's life (dropped by the kernel on any
death), so a second service fails at once, naming the running one, before changing anything.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
from pathlib import Path

from corral.core.errors import CorralError
from corral.protocol.files import atomic_write_json, read_json

__all__ = ["data_dir", "resolve_token", "store_token", "client_token", "write_address",
           "read_url", "clear_address", "ServiceLock", "secure_dir"]

_ADDRESS = "service.json"
_TOKEN = "token"
_LOCK = "service.lock"


def data_dir(path: str | Path | None = None) -> Path:
    return Path(path or os.environ.get("CORRAL_HOME") or Path.home() / ".corral").expanduser()


class ServiceLock:
    """The exclusive lock of one data directory, held until `release()` or the process ends."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = directory / _LOCK
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise CorralError(f"another corral service is running on {directory} "
                              f"({_holder(self.path, directory)}); stop it first or pass "
                              "another --data-dir") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _holder(lock: Path, directory: Path) -> str:
    """Who holds `lock`: 'pid N, URL' as far as /proc/locks and service.json tell."""
    pid = None
    try:
        st = os.stat(lock)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "FLOCK" in fields and fields[-3] == dev:
                pid = int(fields[-4])
                break
    except (OSError, ValueError, IndexError):
        pass
    doc = read_json(directory / _ADDRESS)
    url = doc.get("url") if isinstance(doc, dict) and (pid is None or doc.get("pid") == pid) \
        else None
    return ", ".join(x for x in (f"pid {pid}" if pid else "", str(url or "")) if x) or \
        "pid unknown"


def secure_dir(directory: Path) -> None:
    """Make the data directory 0700 and its own files 0600 (those an older version left too)."""
    directory.chmod(0o700)
    for entry in directory.iterdir():
        try:
            mode = entry.lstat().st_mode
            if stat.S_ISDIR(mode):
                entry.chmod(0o700)
            elif stat.S_ISREG(mode):
                entry.chmod(0o600)
        except OSError:
            pass


def resolve_token(directory: Path, given: str | None = None) -> str:
    """The token the service accepts: given, $CORRAL_TOKEN, the stored one, or a new one
    (nothing is written: `store_token` does that once the service has started)."""
    token = given or os.environ.get("CORRAL_TOKEN")
    if not token:
        try:
            token = (directory / _TOKEN).read_text().strip()
        except OSError:
            token = ""
    return token or secrets.token_urlsafe(24)


def store_token(directory: Path, token: str) -> None:
    """Write `token` to the data directory (mode 0600) unless it is already there."""
    path = directory / _TOKEN
    try:
        if path.read_text().strip() == token:
            return
    except OSError:
        pass
    tmp = path.with_name(f".{_TOKEN}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)


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
