"""Rendezvous ports lie outside the kernel's ephemeral range, so a worker that connects before
the listener is up can never be handed the same port as its source port (a TCP self-connect,
which hangs the rendezvous: seen as two 2-worker gloo jobs stuck in CI)."""

from __future__ import annotations

import socket

from corral.executors.procs import ephemeral_ports, free_port


def test_rendezvous_ports_are_free_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_ports()
    assert 0 < low <= high <= 65535
    ports = [free_port() for _ in range(50)]
    assert not [p for p in ports if low <= p <= high], (low, high, ports)
    assert len(set(ports)) > 1  # drawn, not one fixed port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[0]))  # free a moment ago: free now


def test_a_port_in_use_is_never_handed_out() -> None:
    held = []
    try:
        for _ in range(20):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        in_use = {s.getsockname()[1] for s in held}
        assert len(in_use) == len(held)
        assert not in_use & {free_port() for _ in range(50)}
    finally:
        for s in held:
            s.close()
