"""Help that reads and progress that counts (issue 37 item 3): metavars that say what to type,
true defaults, one short line per command in `corral --help`, what an operator sets first on
the first screen of `corral serve --help`, and progress as whole counts ("simulations 2/5")
that, without a terminal, prints a line per step rather than per job."""

from __future__ import annotations

import io
import re

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from corral.cli.main import app
from corral.cli.progress import Counter

ROOT = typer.main.get_command(app)
COMMANDS = sorted(ROOT.commands)


def command_paths(group, prefix=()) -> list[tuple[str, ...]]:
    """Every command and group under `group`, as the words that name it (`("data", "fetch")`)."""
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((*prefix, name))
        if getattr(command, "commands", None):
            out += command_paths(command, (*prefix, name))
    return out


PATHS = command_paths(ROOT)
GROUPS = [()] + [p for p in PATHS if getattr(ROOT.commands[p[0]], "commands", None) and len(p) == 1]
# what typer shows for an option without a metavar: <int>, <float>, <bool>, <list[Path]>, ...
PYTHON_TYPE = re.compile(r"<\s*(list\[[^\]]*\]|bool|int|float|str|path|file|directory|text"
                         r"|choice|datetime|uuid)\s*>", re.IGNORECASE)


def help_text(*args: str, width: int = 80) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(width),
                                                              "TERMINAL_WIDTH": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_walked():
    assert {"simulate", "serve", "submit", "jobs", "describe", "emulate", "replay",
            "autoscale", "policies", "workloads", "calibrate", "report", "cancel",
            "logs"} <= set(COMMANDS)


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "corral")
@pytest.mark.parametrize("width", [80, 120])
def test_help_has_no_python_types_and_cuts_nothing(path, width):
    text = help_text(*path, width=width)
    assert not PYTHON_TYPE.search(text), PYTHON_TYPE.search(text).group(0)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width


def test_metavars_say_what_to_type():
    text = help_text("simulate", width=120)
    for metavar in ("FILE|DIR", "POLICY[,POLICY]", "NxG|TYPE:NxG,...|FILE", "SECONDS", "[P.]KEY=VALUE"):
        assert metavar in text, metavar
    assert "PATH" in help_text("serve", width=120)  # --ray-storage
    assert "JOB_ID" in help_text("describe") and "COMMAND" in help_text("submit")


def option_help(text: str, option: str) -> str:
    """The rows of one option in a help panel, joined."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.match(rf"│ {option}\b", ln))
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"[│╰] ?(-|─)", lines[i]))
    return " ".join(" ".join(ln.strip("│ ").split()) for ln in lines[start:end])


def test_jobs_default_is_what_it_means():
    jobs = option_help(help_text("simulate"), "--jobs")
    assert "[default: 0]" not in jobs and "[default: (the CPU count)]" in jobs, jobs


@pytest.mark.parametrize("group", GROUPS, ids=lambda p: " ".join(p) or "corral")
def test_command_summaries_are_one_short_line(group):
    text = help_text(*group)
    panel = text[text.index("Commands"):]
    rows = [ln for ln in panel.splitlines()[1:] if ln.startswith("│")]
    names = [p[-1] for p in PATHS if p[:-1] == group]
    assert len(rows) == len(names), panel  # no summary wraps onto a second line
    for name in names:
        assert any(row.startswith(f"│ {name} ") for row in rows), name


def test_serve_first_screen_has_what_operators_set():
    text = help_text("serve")
    first = "\n".join(text.splitlines()[:24])
    for option in ("--policy", "--executor", "--gpus", "--host", "--port", "--data-dir",
                   "--token", "--interval"):
        assert option in first, option
    for panel in ("--executor ray", "--executor emulated"):
        assert panel in text  # the rest, grouped
    assert len(text.splitlines()) < 150  # was 193


def render_counter(terminal: bool, total: int, steps) -> str:
    out = Console(file=io.StringIO(), force_terminal=terminal, width=100, color_system=None)
    with Counter(out, "simulations", total) as bar:
        for done, note, fraction in steps:
            bar.update(done, note, fraction)
            if bar.bar is not None:
                bar.bar.refresh()
    return out.file.getvalue()


def test_progress_counts_whole_things_on_a_terminal():
    text = render_counter(True, 5, [(0, "fifo on default: 50% of jobs finished", 0.5),
                                    (2, "srtf on default done", 0.0)])
    assert "simulations 0/5" in text and "simulations 2/5" in text
    assert "0.50" not in text and "Runner" not in text


def test_progress_without_a_terminal_is_a_line_per_step():
    text = render_counter(False, 5, [(0, "fifo: 10% of jobs", 0.1), (0, "fifo: 20% of jobs", 0.2),
                                     *((n, f"cell {n} done", 0.0) for n in range(1, 6))])
    lines = text.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"simulations {n}/5" for n in range(1, 6)]
    # 160 jobs ending one by one: a line a tenth, not one a job
    text = render_counter(False, 160, [(n, f"{n}/160 submitted", 0.0) for n in range(161)])
    assert 10 <= len(text.splitlines()) <= 11 and "160/160" in text.splitlines()[-1]


def test_simulate_progress_without_a_terminal(tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\n")
    result = CliRunner().invoke(app, ["simulate", "-w", str(csv), "-p", "fifo,srtf", "-j", "1",
                                      "--no-lp-bound"])
    assert result.exit_code == 0, result.output
    progress = [ln for ln in result.stderr.splitlines() if ln.startswith("simulations")]
    assert [ln.split(":")[0] for ln in progress] == ["simulations 1/2", "simulations 2/2"]
    assert "Runner" not in result.stderr and ".00/" not in result.stderr
