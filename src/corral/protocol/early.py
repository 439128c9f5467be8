"""The early-initialisation protocol (SideCar (SC'20) §III-A, §III-B-3). Torch-free.

A job placed on slots a running job (the donor) is giving up starts its workers while the
donor keeps training. Each worker, started with `CORRAL_EARLY_START=g`, sets up on its given
device, writes the ready marker `ready-g<g>-r<rank>` in `CORRAL_CONTROL_DIR` (as in-place
joiners do) and waits for the gate file `start-g<g>`. Once every rank is ready the executor
lets the donor give its slots up, then writes the gate; SIGTERM/SIGKILL while waiting calls the
early start off. `wait_for_start()` returns at once without `CORRAL_EARLY_START`. Only jobs
submitted with `early_init: true` are pre-started: any other would train on the donor's GPUs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from corral.protocol.inplace import ENV_CONTROL_DIR, mark_ready, ready_path

__all__ = ["ENV_EARLY_START", "START_TIMEOUT_S", "gate_path", "open_gate", "clear_gate",
           "early_generation", "wait_for_start"]

ENV_EARLY_START = "CORRAL_EARLY_START"
#: How long a ready worker waits at the gate before it gives up (the executor calls an early
#: start off long before; this only bounds a worker whose executor is gone).
START_TIMEOUT_S = 3600.0


def gate_path(control_dir: str | Path, generation: int) -> Path:
    return Path(control_dir) / f"start-g{generation}"


def open_gate(control_dir: str | Path, generation: int) -> None:
    """Let the waiting workers of launch `generation` start (the executor's side)."""
    path = gate_path(control_dir, generation)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def clear_gate(control_dir: str | Path, generation: int, world_size: int) -> None:
    """Remove the gate and ready markers of launch `generation` (before it is pre-started, so
    that an earlier attempt at the same launch number leaves nothing behind)."""
    gate_path(control_dir, generation).unlink(missing_ok=True)
    for rank in range(world_size):
        ready_path(control_dir, generation, rank).unlink(missing_ok=True)


def early_generation(environ: Mapping[str, str] | None = None) -> int | None:
    """The launch this worker was pre-started for, or None for a normal start."""
    value = (os.environ if environ is None else environ).get(ENV_EARLY_START)
    return int(value) if value not in (None, "") else None


def wait_for_start(rank: int | None = None, *, should_stop: Callable[[], bool] | None = None,
                   timeout_s: float = START_TIMEOUT_S, poll_s: float = 0.02,
                   environ: Mapping[str, str] | None = None) -> bool:
    """Mark this worker ready and wait at the gate (see the module docstring). Returns True
    when it may start (at once after a normal start); False when `should_stop()` said so or
    the wait timed out - the caller then exits without training."""
    env = os.environ if environ is None else environ
    generation = early_generation(env)
    control_dir = env.get(ENV_CONTROL_DIR)
    if generation is None or not control_dir:
        return True
    mark_ready(control_dir, generation, int(env.get("RANK", "0")) if rank is None else rank)
    gate = gate_path(control_dir, generation)
    deadline = time.monotonic() + timeout_s
    while not gate.exists():
        if (should_stop is not None and should_stop()) or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
