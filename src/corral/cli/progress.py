"""Progress of a count of things (simulations, a run's jobs) on stderr: a bar on a terminal,
plain lines elsewhere (a log, `2>&1 | cat`), one per step of the count rather than one per
update."""

from __future__ import annotations

import math
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class Counter:
    """`label done/total`, e.g. "simulations 2/5", whole counts.

    On a terminal a transient bar, moved by fractions of a thing (`update(done, fraction=)`)
    with `note` beside it. Elsewhere a line when the count has grown by a tenth of `total` (at
    least 1) or `every_s` seconds have passed since the last line with something new, and
    one at the end.
    """

    def __init__(self, console: Console, label: str, total: int, every_s: float = 30.0) -> None:
        self.console = console
        self.label = label
        self.total = total
        self.every_s = every_s
        self.step = max(1, math.ceil(total / 10))
        self.bar: Progress | None = None
        self.done = 0
        self.note = ""
        self._printed: tuple[int, str] | None = None
        self._printed_at = 0.0
        self._started = 0.0

    def __enter__(self) -> Counter:
        self._started = self._printed_at = time.monotonic()
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.fields[count]}"), BarColumn(),
                                TextColumn("{task.description}"), TimeElapsedColumn(),
                                console=self.console, transient=True)
            self.bar.__enter__()
            self._task = self.bar.add_task("", total=self.total, count=self._count())
        return self

    def __exit__(self, *exc: Any) -> None:  # (type, value, traceback), as Progress takes them
        if self.bar is not None:
            self.bar.__exit__(*exc)
        elif exc[0] is None and self._printed != (self.done, self.note):
            self._line()

    def _count(self) -> str:
        return f"{self.label} {self.done}/{self.total}"

    def _line(self) -> None:
        elapsed = time.monotonic() - self._started
        self.console.print(f"{self._count()}{': ' + self.note if self.note else ''} "
                           f"({elapsed:.0f} s)", highlight=False, markup=False, soft_wrap=True)
        self._printed = (self.done, self.note)
        self._printed_at = time.monotonic()

    def update(self, done: int, note: str = "", fraction: float = 0.0) -> None:
        """`done` things finished, `fraction` of the next one (a bar's position only)."""
        self.done, self.note = done, note
        if self.bar is not None:
            self.bar.update(self._task, completed=done + fraction, description=note,
                            count=self._count())
            return
        last = self._printed[0] if self._printed else 0
        if (done >= last + self.step or done == self.total and last < done
                or time.monotonic() - self._printed_at >= self.every_s
                and self._printed != (done, note)):
            self._line()
