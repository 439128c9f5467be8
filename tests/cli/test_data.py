"""`corral data`: the dataset list, and fetches from a loopback mirror (never a real host): one
that verifies, a tampered file, and no server at all."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import tarfile
from pathlib import Path

import pytest
from loopback import serve  # noqa: F401 - the fixture
from typer.testing import CliRunner

from corral import datasets
from corral.cli.main import app

runner = CliRunner()
# The team's checkout of the public datasets sits beside the repository (CORRAL_SHARED_DATA
# names another place, e.g. from a git worktree).
SHARED = Path(os.environ.get(datasets.SHARED_ENV)
              or Path(__file__).resolve().parents[2].parent / "shared" / "data")
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"shared data not found at {SHARED} (set {datasets.SHARED_ENV} to its place): the "
    "loopback mirror serves it")


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in text
    assert len([ln for ln in text.splitlines() if ln.strip()]) == 1, text


@pytest.fixture(autouse=True)
def _no_real_hosts(monkeypatch, tmp_path):
    """No test reaches the network: the upstream base points at a closed loopback port, the mirror
    is unset unless a test sets it, and the cache is the test's own."""
    monkeypatch.setenv(datasets.GITHUB_ENV, f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.delenv(datasets.MIRROR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_list_names_each_dataset_with_its_source_licence_and_paper():
    result = invoke("data", "list")
    assert result.exit_code == 0, result.output
    out = result.output
    for ds in datasets.datasets().values():
        assert ds.name in out and ds.commit in out and ds.license in out
        assert ds.citation.split(". ")[1][:20] in " ".join(out.split())  # the paper's title
    assert "petuum/adaptdl (osdi21-artifact)\n  commit:  de25dcc90c350b8ade3a710e437a651a8d2efae6" in out
    assert "abbreviated; each file's SHA-256 pins it" in out  # Gavel's commit is short, and says so
    # one fact per line, none that a terminal folds
    assert max(len(ln) for ln in out.splitlines()) <= 100
    assert {"pollux-profiles", "pollux-workloads", "philly", "tiresias", "itp",
            "gavel-throughputs", "gavel-traces"} <= set(datasets.datasets())


def test_manifest_is_package_data_and_every_file_has_a_checksum():
    for ds in datasets.datasets().values():
        assert ds.files and ds.repo.count("/") == 1
        for f in ds.files:
            assert len(f.sha256) == 64 and f.size > 0
            assert f.path == ds.path or f.path.startswith(ds.path + "/")


@needs_shared
def test_manifest_matches_the_published_files():
    for ds in datasets.datasets().values():
        for f in ds.files:
            data = (SHARED / f.path).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (f.size, f.sha256), f.path


@needs_shared
def test_fetch_downloads_verifies_and_prints_the_path(serve, monkeypatch, tmp_path):
    url, log = serve(SHARED)
    monkeypatch.setenv(datasets.MIRROR_ENV, url)
    dest = tmp_path / "data"
    result = invoke("data", "fetch", "tiresias", "--dir", str(dest))
    assert result.exit_code == 0, result.output
    assert "5 downloaded, 0 already there" in result.output
    assert f"path: {dest / 'tiresias'}" in result.output
    for f in datasets.get("tiresias").files:
        assert (dest / f.path).read_bytes() == (SHARED / f.path).read_bytes()
    assert not [p for p in _leftovers(dest) if p.name.endswith(".part")]

    served = len(log)
    again = invoke("data", "fetch", "tiresias", "--dir", str(dest))
    assert again.exit_code == 0, again.output
    assert "0 downloaded, 5 already there" in again.output
    assert len(log) == served  # verified files are not downloaded again


@needs_shared
def test_fetch_into_the_cache_is_found_by_locate(serve, monkeypatch, tmp_path):
    url, _ = serve(SHARED)
    monkeypatch.setenv(datasets.MIRROR_ENV, url)
    monkeypatch.setenv(datasets.SHARED_ENV, str(tmp_path / "no-shared"))
    assert datasets.locate("pollux-workloads") is None
    assert "corral data fetch pollux-workloads" in datasets.missing_reason("pollux-workloads")
    result = invoke("data", "fetch", "pollux-workloads")
    assert result.exit_code == 0, result.output
    cached = tmp_path / "xdg" / "corral" / "pollux" / "workloads"
    assert datasets.locate("pollux-workloads") == cached
    assert len(list(cached.glob("workload-*.csv"))) == 8
    assert datasets.find("pollux/workloads/workload-3.csv") == cached / "workload-3.csv"


@needs_shared
def test_a_checksum_mismatch_is_one_line_and_leaves_no_file(serve, monkeypatch, tmp_path):
    mirror = tmp_path / "mirror" / "tiresias"
    mirror.mkdir(parents=True)
    files = datasets.get("tiresias").files
    for f in files:
        (mirror / Path(f.path).name).symlink_to(SHARED / f.path)
    bad = files[-1]
    tampered = bytearray((SHARED / bad.path).read_bytes())
    tampered[-2] = ord("7") if tampered[-2] != ord("7") else ord("8")
    (mirror / Path(bad.path).name).unlink()
    (mirror / Path(bad.path).name).write_bytes(bytes(tampered))
    url, _ = serve(tmp_path / "mirror")
    monkeypatch.setenv(datasets.MIRROR_ENV, url)

    dest = tmp_path / "data"
    result = invoke("data", "fetch", "tiresias", "--dir", str(dest))
    assert_one_line_error(result, "checksum mismatch", bad.path, bad.sha256,
                          hashlib.sha256(bytes(tampered)).hexdigest())
    assert not (dest / bad.path).exists()
    assert not [p for p in _leftovers(dest) if p.name.endswith(".part")]


def test_offline_is_one_line_and_leaves_no_file(monkeypatch, tmp_path):
    monkeypatch.setenv(datasets.MIRROR_ENV, f"http://127.0.0.1:{_closed_port()}")
    dest = tmp_path / "data"
    result = invoke("data", "fetch", "itp", "--dir", str(dest))
    assert_one_line_error(result, "cannot download", "itp/195job.csv")
    assert not dest.exists()  # no file, and no empty folder either


def test_no_mirror_means_the_pinned_commit_upstream(monkeypatch, tmp_path):
    # the autouse fixture points the upstream base at a closed loopback port
    result = invoke("data", "fetch", "pollux-profiles", "--dir", str(tmp_path / "d"))
    assert_one_line_error(result, "cannot download",
                          "/petuum/adaptdl/raw/de25dcc90c350b8ade3a710e437a651a8d2efae6/"
                          "simulator/traces/bert/placements.csv")


@needs_shared
def test_a_file_inside_an_archive_is_extracted_and_verified(serve, monkeypatch, tmp_path):
    ds = datasets.get("itp")
    (f,) = ds.files
    archive = tmp_path / "gh" / ds.repo / "raw" / ds.commit / f.source
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(SHARED / f.path, arcname=f"elasticflow-traces/{f.member}")
        extra = b"job_id\n"
        info = tarfile.TarInfo("elasticflow-traces/other.csv")
        info.size = len(extra)
        tar.addfile(info, io.BytesIO(extra))
    url, _ = serve(tmp_path / "gh")
    monkeypatch.setenv(datasets.GITHUB_ENV, url)
    dest = tmp_path / "data"
    result = invoke("data", "fetch", "itp", "--dir", str(dest))
    assert result.exit_code == 0, result.output
    assert (dest / f.path).read_bytes() == (SHARED / f.path).read_bytes()
    assert [p.name for p in _leftovers(dest)] == ["195job.csv"]


def test_an_unknown_dataset_is_one_line():
    assert_one_line_error(invoke("data", "fetch", "nope"), "unknown dataset", "pollux-profiles")
    # names are checked before anything is downloaded
    assert_one_line_error(invoke("data", "fetch", "itp", "nope"), "unknown dataset")


@needs_shared
def test_fetch_all(serve, monkeypatch, tmp_path):
    url, _ = serve(SHARED)
    monkeypatch.setenv(datasets.MIRROR_ENV, url)
    result = invoke("data", "fetch", "all", "--dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    for name in datasets.datasets():
        assert datasets.locate(name, roots=[tmp_path / "d"]) is not None
