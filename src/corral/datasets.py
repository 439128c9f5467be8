"""The public datasets corral's README, tests and benchmarks use, and how to get them without the
team's data checkout (`shared_data_dir`).

The registry is `corral/data/datasets.json`: per dataset its source repository, pinned commit,
licence, citation and every file's path, size and SHA-256. `fetch(name)` downloads the files at
the pinned commit into the user's cache (`$XDG_CACHE_HOME/corral`, else `~/.cache/corral`) in the
checkout's layout, each verified in a temporary file before it is moved into place; `locate(name)`
finds a dataset in either. `CORRAL_DATA_MIRROR` and `CORRAL_DATA_GITHUB` redirect downloads (a
mirror, a loopback test server). Imports only the standard library and `corral.core`.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import IO

from corral.core.errors import CorralError

MIRROR_ENV = "CORRAL_DATA_MIRROR"
GITHUB_ENV = "CORRAL_DATA_GITHUB"
SHARED_ENV = "CORRAL_SHARED_DATA"
GITHUB = "https://github.com"
TIMEOUT_S = 30.0
_CHUNK = 1 << 16


class DataError(CorralError):
    """A dataset that cannot be fetched: unknown name, unreachable source, or a checksum mismatch."""


@dataclass(frozen=True)
class DataFile:
    """One published file: `path` in the data folder, `source` in the repository at the commit
    (`member`: the file's name inside that archive, where the source is a .tar.gz)."""

    path: str
    source: str
    size: int
    sha256: str
    member: str | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    title: str
    repo: str
    commit: str
    license: str
    citation: str
    path: str  # the file or folder, relative to the data folder, to pass to `use`
    use: str  # the `corral simulate` option that reads it ("" where corral reads it by path only)
    files: tuple[DataFile, ...]
    ref: str | None = None
    commit_note: str | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def pinned(self) -> bool:
        """Whether the commit is a full 40-hex hash (not an abbreviation)."""
        return len(self.commit) == 40


def _load() -> dict[str, Dataset]:
    text = resources.files("corral.data").joinpath("datasets.json").read_text(encoding="utf-8")
    out = {}
    for name, d in json.loads(text)["datasets"].items():
        files = tuple(DataFile(**f) for f in d.pop("files"))
        out[name] = Dataset(name=name, files=files, **d)
    return out


_REGISTRY: dict[str, Dataset] | None = None


def datasets() -> dict[str, Dataset]:
    """Every dataset of the manifest, by name, in the manifest's order."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _load()
    return _REGISTRY


def get(name: str) -> Dataset:
    try:
        return datasets()[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(datasets())}") from None


# ---- where datasets are ----------------------------------------------------------------------

def repo_root() -> Path:
    """The source checkout this module runs from (src/corral/datasets.py -> the repository)."""
    return Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The team's data checkout: `$CORRAL_SHARED_DATA`, else `../shared/data` beside the repository
    (it may not exist)."""
    env = os.environ.get(SHARED_ENV)
    return Path(env) if env else repo_root().parent / "shared" / "data"


def cache_dir() -> Path:
    """Where `corral data fetch` keeps datasets: `$XDG_CACHE_HOME/corral`, else `~/.cache/corral`."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "corral"


def _complete(root: Path, ds: Dataset) -> bool:
    return all((root / f.path).is_file() for f in ds.files)


def locate(name: str, roots: list[Path] | None = None) -> Path | None:
    """The dataset's file or folder (the one to pass to its `use` option) in the data checkout or in
    `corral data`'s cache, whichever holds all of its files first; None where neither does.
    Files are checked for presence only (`fetch` verifies checksums)."""
    ds = get(name)
    for root in roots if roots is not None else [shared_data_dir(), cache_dir()]:
        if _complete(root, ds):
            return root / ds.path
    return None


def missing_reason(name: str) -> str:
    """Why a dataset is not available, naming the command that would bring it (a skip reason)."""
    ds = get(name)
    return (f"dataset {name} ({ds.path}) not found in {shared_data_dir()} nor in {cache_dir()}; "
            f"`corral data fetch {name}` downloads it")


def dataset_of(relpath: str | PurePosixPath) -> Dataset | None:
    """The dataset that holds a path of the data folder (a file, or a folder above files)."""
    rel = PurePosixPath(relpath).as_posix().strip("/")
    for ds in datasets().values():
        for f in ds.files:
            if f.path == rel or f.path.startswith(rel + "/"):
                return ds
    return None


def find(relpath: str | PurePosixPath) -> Path | None:
    """A path of the data folder (`pollux/profiles`, `itp/195job.csv`) in the data checkout or in
    the cache, whichever has it; None where neither does."""
    for root in (shared_data_dir(), cache_dir()):
        if (root / relpath).exists():
            return root / relpath
    return None


# ---- fetching --------------------------------------------------------------------------------

@dataclass
class FetchResult:
    dataset: Dataset
    root: Path
    downloaded: list[str]
    present: list[str]

    @property
    def path(self) -> Path:
        return self.root / self.dataset.path


def file_url(ds: Dataset, f: DataFile) -> str:
    """Where a file is downloaded from: the mirror's copy, else the raw file at the pinned commit
    (the archive that holds it, for a `member`)."""
    mirror = os.environ.get(MIRROR_ENV)
    if mirror:
        return f"{mirror.rstrip('/')}/{urllib.parse.quote(f.path)}"
    github = os.environ.get(GITHUB_ENV, GITHUB).rstrip("/")
    return f"{github}/{ds.repo}/raw/{ds.commit}/{urllib.parse.quote(f.source)}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def verified(path: Path, f: DataFile) -> bool:
    """Whether `path` holds the published file (size, then SHA-256)."""
    try:
        return path.stat().st_size == f.size and sha256_of(path) == f.sha256
    except OSError:
        return False


def _chunks(url: str, timeout: float) -> Iterator[bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http(s)/file)
            yield from iter(lambda: resp.read(_CHUNK), b"")
    except urllib.error.HTTPError as exc:
        raise DataError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise DataError(f"cannot download {url}: {reason} (offline? {MIRROR_ENV} names a "
                        "mirror)") from None


def _download(url: str, out: IO[bytes], timeout: float) -> None:
    for chunk in _chunks(url, timeout):
        out.write(chunk)


def _extract_member(url: str, member: str, out: IO[bytes], tmpdir: Path, timeout: float) -> None:
    """Download the archive at `url` into `tmpdir` and copy its file named `member` into `out`."""
    with tempfile.NamedTemporaryFile(dir=tmpdir, prefix=".archive.", suffix=".part") as arch:
        _download(url, arch, timeout)
        arch.flush()
        try:
            with tarfile.open(arch.name, "r:*") as tar:
                found = [m for m in tar.getmembers()
                         if m.isfile() and PurePosixPath(m.name).name == member]
                if not found:
                    raise DataError(f"{url}: no file named {member} in the archive")
                src = tar.extractfile(found[0])
                assert src is not None
                shutil.copyfileobj(src, out)
        except (tarfile.TarError, EOFError, OSError) as exc:  # a truncated or corrupt .tar.gz
            raise DataError(f"{url}: not a readable archive ({exc})") from None


def fetch_file(ds: Dataset, f: DataFile, root: Path, timeout: float = TIMEOUT_S) -> bool:
    """Put one verified file at `root/f.path`; False where it was already there. The file is
    written to a temporary file in the same folder, checked, then moved into place."""
    target = root / f.path
    if verified(target, f):
        return False
    made = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _fetch_into(ds, f, target, timeout)
    except BaseException:
        for folder in made:  # deepest first: a failed fetch leaves no empty folders behind
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (another file arrived), or not ours to remove
        raise
    return True


def _fetch_into(ds: Dataset, f: DataFile, target: Path, timeout: float) -> None:
    """Download `f` beside `target`, check it, then move it into place (nothing on failure)."""
    url = file_url(ds, f)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            if f.member and not os.environ.get(MIRROR_ENV):
                _extract_member(url, f.member, out, target.parent, timeout)
            else:
                _download(url, out, timeout)
        size, digest = tmp.stat().st_size, sha256_of(tmp)
        if size != f.size or digest != f.sha256:
            raise DataError(f"checksum mismatch for {f.path} (from {url}): expected sha256 "
                            f"{f.sha256} ({f.size} bytes), got {digest} ({size} bytes); "
                            "nothing written")
        tmp.chmod(0o644)  # mkstemp's 0600 is for the partial file only
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def fetch(name: str, dest: Path | None = None, *, timeout: float = TIMEOUT_S,
          progress: Callable[[DataFile, bool], None] | None = None) -> FetchResult:
    """Download every file of a dataset that is not already there, verified, into `dest` (default:
    the cache). `progress(file, downloaded)` is called after each file. Raises DataError (one
    line) where a file cannot be downloaded or does not match its checksum."""
    ds = get(name)
    root = Path(dest) if dest is not None else cache_dir()
    result = FetchResult(ds, root, [], [])
    for f in ds.files:
        try:
            got = fetch_file(ds, f, root, timeout)
        except OSError as exc:  # the destination: not writable, disk full
            raise DataError(f"cannot write {root / f.path}: {exc.strerror or exc}") from None
        (result.downloaded if got else result.present).append(f.path)
        if progress is not None:
            progress(f, got)
    return result
