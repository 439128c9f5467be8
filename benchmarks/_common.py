"""Shared bits of the benchmark scripts: where the shared data is, what machine this is, and
printed lines kept for an `--out` file."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import platform  # noqa: E402
from pathlib import Path  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
POLLUX = SHARED / "pollux"


def machine() -> str:
    """One line naming the CPU, core count and Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def require(path: Path) -> Path:
    """`path` under SHARED, else the same file in `corral data`'s cache (`corral data fetch NAME`
    puts it there); exits naming the fetch command where neither has it."""
    if path.exists():
        return path
    from corral import datasets

    try:
        rel = path.relative_to(SHARED).as_posix()
    except ValueError:
        rel = None
    found = datasets.find(rel) if rel else None
    if found is not None:
        return found
    ds = datasets.dataset_of(rel) if rel else None
    fetch = f"; `corral data fetch {ds.name}` downloads it" if ds else ""
    raise SystemExit(f"skipped: {path} not found (the shared data sits beside the repo){fetch}")


class Printed:
    """`say(line)` prints a line and keeps it; `save(path)` writes the kept lines (a script's
    `--out FILE`: what it printed, as it printed it), nothing when `path` is None."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def save(self, path: Path | None) -> None:
        if path is not None:
            path.write_text("\n".join(self.lines) + "\n")
