"""Where the tests find the public datasets (issue 37): in the team's `../shared/data` checkout
(`$CORRAL_SHARED_DATA` names another place, e.g. from a git worktree) or in `corral data`'s cache
(`corral data fetch NAME` puts a dataset there), as `corral.datasets.locate` finds them. A test
whose dataset is in neither skips, and its reason names the `corral data fetch` command that
would bring it.

A few files are in no dataset (the Pollux reference simulator's results, `pollux/reference/`):
`shared(relpath)` reads those from the team's checkout only, and says so when it skips.

tests/conftest.py puts this folder on sys.path, so test modules `import datafiles`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corral import datasets


def need(name: str) -> Path:
    """The dataset's file or folder (`pollux-profiles` -> `.../pollux/profiles`); skips the test,
    naming `corral data fetch NAME`, where neither the shared checkout nor the cache has it."""
    found = datasets.locate(name)
    if found is None:
        pytest.skip(datasets.missing_reason(name))
    return found


def needs(*names: str) -> pytest.MarkDecorator:
    """A skipif mark for tests that read these datasets (through `need`), with every missing
    one's `corral data fetch` command in the reason."""
    missing = [n for n in names if datasets.locate(n) is None]
    return pytest.mark.skipif(bool(missing), reason="; ".join(
        datasets.missing_reason(n) for n in missing) or f"datasets {', '.join(names)} found")


def shared(relpath: str) -> Path:
    """A file of the team's shared data checkout that no dataset holds; skips the test, saying
    so, where the checkout does not have it (no `corral data fetch` brings it)."""
    root = datasets.shared_data_dir()
    path = root / relpath
    if not path.exists():
        pytest.skip(f"{relpath} not found in {root}: it is in the team's shared data checkout only "
                    f"(../shared/data beside the repository, or ${datasets.SHARED_ENV}), in no "
                    "dataset `corral data fetch` brings")
    return path
