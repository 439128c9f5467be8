"""The README's "Adding a policy" example runs as written, in the simulator."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from corral.core import Cluster, create_policy
from corral.core.policy import _REGISTRY
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import builtin_default

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_policy_example_runs():
    text = README.read_text()
    section = text.split("## Adding a policy", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    _REGISTRY.pop("mine", None)
    module = types.ModuleType("readme_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up here
    try:
        exec(compile(code, "README-example", "exec"), module.__dict__)
        policy = create_policy("mine", {"share": "4"})
        truth = CatalogTruth()
        result = Simulator(truth, policy, Cluster.parse("16x4")).run(builtin_default(truth.limits()))
        assert all(j.finish_s is not None for j in result.jobs)
    finally:
        _REGISTRY.pop("mine", None)
        sys.modules.pop(module.__name__, None)


def test_readme_commands_exist():
    """Every `corral <command>` in the README's shell blocks is a subcommand of the CLI."""
    import typer.main

    from corral.cli.main import app

    shell, lang = [], None  # lines of ``` and ```bash blocks; lang None: outside a block
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            lang = line[3:].strip() if lang is None else None
        elif lang in ("", "bash"):
            shell.append(line)
    named = set(re.findall(r"(?<![\w./-])corral ([a-z][a-z-]*)", "\n".join(shell)))
    known = set(typer.main.get_command(app).commands)
    assert {"simulate", "serve", "submit", "replay"} <= named
    assert named <= known, f"not corral commands: {sorted(named - known)}"
