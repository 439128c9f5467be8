"""Result-preserving changes to the Pollux search change no result: searches of mid-size
synthetic problems (`search_reference.py`: mixed node sizes, minimum GPUs, several p, warm
starts) give the same fitness, generations, allocation and final population as a stored run,
to the last bit, computed with the stored run's numpy kernels. (The stored run was made before
issue 18's speed work, which matched it, and again with issue 15's growth-in-place mutation.)"""

from __future__ import annotations

import json

from search_reference import CASES, REFERENCE_FILE, digests_in_subprocess


def test_search_matches_the_stored_run():
    stored = json.loads(REFERENCE_FILE.read_text())["digests"]
    assert sorted(stored) == sorted(name for name, *_ in CASES)
    now = digests_in_subprocess()
    for name in stored:
        assert now[name] == stored[name], f"{name} ({REFERENCE_FILE})"
