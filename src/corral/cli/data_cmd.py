"""`corral data`: the public datasets the README, tests and benchmarks use. `list` shows each one's
source (repository and pinned commit), licence, size and paper; `fetch NAME` downloads it into the
cache, verified against the checksums shipped with corral, and prints the path to pass on.

Registered on the main `corral` app when this module is imported. Thin: the registry and the
fetcher are `corral.datasets`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer

from corral.cli.main import app, console, user_errors

data_app = typer.Typer(no_args_is_help=True,
                       help="Public datasets: list and fetch them.\n\n"
                            "Pollux, Philly, Tiresias, ITP and Gavel traces and profiles.")
app.add_typer(data_app, name="data")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1000 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


@data_app.command("list")
@user_errors
def list_() -> None:
    """Each dataset: contents, source, licence, size, paper, where.

    Its contents, source repository at its pinned commit, licence, size, paper, and where it is
    found here (the data checkout or the cache), if anywhere."""
    from corral.datasets import SHARED_ENV, cache_dir, datasets, locate, shared_data_dir

    out = []
    for ds in datasets().values():
        where = locate(ds.name)
        files = f"{len(ds.files)} file{'s' * (len(ds.files) > 1)}"
        ref = f" ({ds.ref})" if ds.ref else ""
        commit = ds.commit if ds.pinned else f"{ds.commit} (abbreviated; each file's SHA-256 pins it)"
        out += [f"[bold]{ds.name}[/]  {_size(ds.size)}, {files}, {ds.license}",
                *textwrap.wrap(ds.title, 96, initial_indent="  ", subsequent_indent="  "),
                f"  source:  https://github.com/{ds.repo}{ref}",
                f"  commit:  {commit}",
                *textwrap.wrap(ds.citation, 96, initial_indent="  paper:   ",
                               subsequent_indent=" " * 11),
                f"  here:    {where if where else 'not fetched'}"]
        out += [f"  use:     corral simulate {ds.use}"] if ds.use else []
        out.append("")
    shared = shared_data_dir()
    out.append(f"data checkout: {shared}" + ("" if shared.is_dir() else " (not present: "
               f"${SHARED_ENV} names another)"))
    out.append(f"cache: {cache_dir()}")
    for line in out:
        console.print(line, highlight=False, soft_wrap=True)


@data_app.command()
@user_errors
def fetch(
    names: list[str] = typer.Argument(..., metavar="NAME", help="Dataset name(s) (see `corral data list`), or `all`."),
    dir_: Path | None = typer.Option(None, "--dir", metavar="DIR", help="Keep the files here instead of the cache ($XDG_CACHE_HOME/corral or ~/.cache/corral)."),
) -> None:
    """Download datasets, verify them, print the path to use.

    From their source at the pinned commit; each file's SHA-256 is verified, and the path to
    pass to `corral simulate` printed. Files already there and verified are kept."""
    from corral.datasets import datasets, get
    from corral.datasets import fetch as run_fetch

    chosen = list(datasets()) if "all" in names else [get(n).name for n in names]
    for name in chosen:
        res = run_fetch(name, dir_)
        ds = res.dataset
        console.print(f"{ds.name}: {len(ds.files)} file(s) verified in {res.root} "
                      f"({len(res.downloaded)} downloaded, {len(res.present)} already there)",
                      highlight=False, soft_wrap=True)
        console.print(f"path: {res.path}" + (f"  (corral simulate {ds.use})" if ds.use else ""),
                      highlight=False, soft_wrap=True)
