"""The early-initialisation protocol (SideCar §III-A, spec 1.3 and 1.6): a job placed on slots
that a running job is giving up starts its workers while that job (the donor) keeps training;
they initialise and wait at a start gate; the donor gives its slots up only once every one of
them is ready, and the gate opens once the slots are free. Torch-free: executors and plain
scripts import it.

1. The executor starts each worker of launch g with its ordinary environment (the rendezvous
   of the launch, CUDA_VISIBLE_DEVICES of the slots it will run on) plus `CORRAL_EARLY_START=g`.
2. The worker starts, imports, loads its data and builds its model - on the device it was
   given, which the donor is still using - then calls `wait_for_start()`: it writes the same
   ready marker in-place joiners write (`ready-g<g>-r<rank>` in `CORRAL_CONTROL_DIR`,
   corral.protocol.inplace) and waits until the gate file `start-g<g>` exists. Only then does
   it join the process group and take its first step.
3. When every rank is ready the executor lets the donor shrink or stop (by its own
   mechanism); once the slots are free it writes the gate file. SIGTERM or SIGKILL while a
   worker waits means the early start was called off: it exits (nothing to checkpoint).

`wait_for_start()` returns at once for a worker started without `CORRAL_EARLY_START` (a normal
start), so a script can call it unconditionally. corral.train's trainer calls it; a plain
script allows early initialisation by calling it after its set-up and before
`init_process_group` and its first step, and by being submitted with `early_init: true`
(`corral submit --early-init`): the executor never pre-starts a job it does not know to wait at
the gate, since such a job would train on GPUs the donor still uses.
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
