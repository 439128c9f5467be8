"""`corral serve` as a process guarding its data directory: one service per directory, a start
that fails changes no file (the token above all), modes 0700/0600, and the reproductions of the
bad submissions that once stopped all scheduling answered 422 while jobs still run."""

from __future__ import annotations

import socket
import stat
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("uvicorn")

import livecluster as live  # noqa: E402  (tests/service is on sys.path: conftest.py)


def snapshot(directory: Path) -> dict[str, tuple]:
    """Every file under `directory` with its size, mode and modification time."""
    out = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(directory))] = (st.st_size, st.st_mode, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = live.LiveService(tmp_path_factory.mktemp("guard"), "fifo", slots=2, interval_s=1)
    svc.start()
    yield svc
    svc.close()


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_a_second_service_on_the_directory_exits_2_naming_the_first(service) -> None:
    files = ("token", "service.json", "service.lock")
    before = {name: (service.data_dir / name).read_bytes() for name in files}
    done = service.cli("serve", "--port", "0", "--slots", "1", "--token", "other", timeout_s=120)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"another corral service is running on {service.data_dir}" in line
    assert f"pid {service.proc.pid}" in line and service.client.url in line
    assert {name: (service.data_dir / name).read_bytes() for name in files} == before
    assert service.client.cluster()["total_gpus"] == 2  # the first one still serves


def test_a_start_that_fails_changes_no_file(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir(mode=0o700)
    (directory / "token").write_text("the-real-token\n")
    (directory / "token").chmod(0o600)
    before = snapshot(directory)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        svc = live.LiveService(directory, "fifo", slots=1)
        done = svc.cli("serve", "--port", str(port), "--token", "X", timeout_s=120)
    assert done.returncode == 2
    assert "cannot listen on 127.0.0.1:" in one_line(done.stderr)
    after = snapshot(directory)
    assert after.pop("service.lock")[0] == 0  # the only new file: the empty lock
    assert after == before
    assert (directory / "token").read_text() == "the-real-token\n"


def test_data_directory_is_private(service) -> None:
    job = service.client.submit({"command": [sys.executable, "-c", "print('hi')"], "cwd": str(live.REPO)})
    service.wait_all_done([job["id"]], 60)
    d = service.data_dir
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for name in ("token", "state.db", "service.json", "service.lock"):
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600, name
    job_dir = d / "jobs" / job["id"]
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((job_dir / "job.log").stat().st_mode) == 0o600


@pytest.mark.parametrize("raw, field", [
    (rb'{"command":["python","-c","print(1)\u0000"],"cwd":"/tmp"}', "command.2"),
    # a lone surrogate: the strict JSON parser refuses the body itself
    (rb'{"command":["python","-c","print(\"\ud800\")"],"cwd":"/tmp"}', "body"),
    (rb'{"command":["true"],"env":{"A=B":"1"}}', "env.A=B"),
    (rb'{"command":["true"],"batch_size":1000000000000000000000000000000}', "batch_size"),
])
def test_the_reproductions_get_422_and_scheduling_goes_on(service, raw, field) -> None:
    headers = {"Authorization": f"Bearer {(service.data_dir / 'token').read_text().strip()}",
               "Content-Type": "application/json"}
    resp = httpx.post(f"{service.client.url}/jobs", content=raw, headers=headers, timeout=20)
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"].startswith(f"invalid submission: {field}")
    too_big = httpx.post(f"{service.client.url}/jobs", headers=headers, timeout=20,
                         content=b'{"command":["' + b"x" * (2 << 20) + b'"]}')
    assert too_big.status_code == 413
    assert service.client.jobs() is not None
    job = service.client.submit({"command": [sys.executable, "-c", "pass"], "cwd": str(live.REPO)})
    service.wait_all_done([job["id"]], 60)
