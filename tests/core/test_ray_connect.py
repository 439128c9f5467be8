"""corral.ray_connect: a cluster that refuses the connection is one line, with the token
hint where a `ray start` cluster's token authentication may be why."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from corral.core.errors import CorralError  # noqa: E402
from corral.ray_connect import connect  # noqa: E402


@pytest.fixture
def listening_address():
    """A loopback address something answers at (check_address passes), nothing Ray-like."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("token, mode, hinted", [(True, None, True), (True, "token", False),
                                                 (False, None, False)])
def test_a_refused_connection_names_the_token_setting_only_where_it_may_help(
        monkeypatch, tmp_path: Path, listening_address: str, token: bool, mode: str | None,
        hinted: bool) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    if token:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("secret")
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def refused(**_kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {listening_address}.\nmore")
    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(CorralError) as err:
        connect(listening_address)
    message = str(err.value)
    assert message.startswith(f"cannot connect to the Ray cluster at {listening_address}: "
                              "Failed to connect") and "\n" not in message
    assert ("RAY_AUTH_MODE=token" in message) == hinted
