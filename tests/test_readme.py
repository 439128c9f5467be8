"""The documentation's code runs as written: the "Adding a policy" example of docs/policies.md
in the simulator, and every `corral <command>` in the shell blocks of the README and of the
docs pages is a command of the CLI."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from corral.core import Cluster
from corral.core.policy import REGISTERED
from corral.policies import create_policy
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import builtin_default

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def test_policy_example_runs():
    text = (DOCS / "policies.md").read_text()
    section = text.split("## Adding a policy", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    REGISTERED._classes.pop("mine", None)
    module = types.ModuleType("docs_policy_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up here
    try:
        exec(compile(code, "docs/policies.md example", "exec"), module.__dict__)
        policy = create_policy("mine", {"share": "4"})
        truth = CatalogTruth()
        result = Simulator(truth, policy, Cluster.parse("16x4")).run(builtin_default(truth.limits()))
        assert all(j.finish_s is not None for j in result.jobs)
    finally:
        REGISTERED._classes.pop("mine", None)
        sys.modules.pop(module.__name__, None)


def _named_commands(path: Path) -> set[str]:
    """The `corral <command>` names in `path`'s ``` and ```bash blocks."""
    shell, lang = [], None  # lang None: outside a block
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            lang = line[3:].strip() if lang is None else None
        elif lang in ("", "bash"):
            shell.append(line)
    return set(re.findall(r"(?<![\w./-])corral ([a-z][a-z-]*)", "\n".join(shell)))


def test_documented_commands_exist():
    """Every `corral <command>` in the shell blocks of the README and of docs/*.md is a
    subcommand of the CLI; the README's quick start and docs/service.md name the main ones."""
    import typer.main

    from corral.cli.main import app

    known = set(typer.main.get_command(app).commands)
    assert {"simulate", "serve", "submit", "replay"} <= _named_commands(README)
    assert {"serve", "submit", "jobs", "logs", "describe", "cancel", "replay",
            "emulate"} <= _named_commands(DOCS / "service.md")
    assert {"simulate", "policies", "workloads", "calibrate", "autoscale",
            "report"} <= _named_commands(DOCS / "commands.md")
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        unknown = _named_commands(path) - known
        assert not unknown, f"{path.name}: not corral commands: {sorted(unknown)}"
