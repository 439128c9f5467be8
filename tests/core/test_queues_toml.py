"""`queues_toml`: the queue tree written back as a queues file, read back as the same tree."""

from __future__ import annotations

import random
import tomllib

import pytest

from corral.core.queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueTree,
    _toml_value,
    any_type,
    parse_queues,
    queues_toml,
)

DOCS_EXAMPLE = """
min_runtime_s = 600
usage_half_life_s = 86400
[queue.research]
quota = 32
[queue.vision]
parent = "research"
quota = 16
limit = 24
weight = 2
priority = 1
[queue.nlp]
parent = "research"
quota = 16
[queue.prod]
quota = 16
"""


def _random_tree(rng: random.Random) -> QueueTree:
    """A valid tree: random nesting, names that need quoting, quotas that add up."""
    alphabet = "abz09_-. \"\\é\t"
    names: list[str] = []
    while len(names) < rng.randint(1, 8):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        if name not in names and name != DEFAULT_QUEUE:
            names.append(name)
    parents = {n: (rng.choice(names[:i]) if i and rng.random() < 0.6 else None)
               for i, n in enumerate(names)}
    quota: dict[str, int | None] = {}
    guaranteed: dict[str, int] = {}  # a cohort without a quota guarantees its children's sum
    for n in reversed(names):  # children come after their parents: fill quotas bottom-up
        below = sum(guaranteed[k] for k in names if parents[k] == n)
        kids = any(parents[k] == n for k in names)
        quota[n] = None if kids and rng.random() < 0.5 else below + rng.randint(0, 4)
        guaranteed[n] = below if quota[n] is None else quota[n]
    queues = []
    for n in names:
        q = quota[n]
        limit = None if rng.random() < 0.5 else guaranteed[n] + rng.randint(0, 5)
        queues.append(Queue(n, quota=any_type(q), limit=any_type(limit),
                            weight=rng.choice([1.0, 2.0, 0.3, 1e-3]),
                            parent=parents[n], priority=rng.randint(-3, 3)))
    queues.append(Queue(DEFAULT_QUEUE, quota=any_type(0)))
    half = None if rng.random() < 0.5 else rng.uniform(1, 1e6)
    tree = QueueTree(tuple(queues), rng.choice([0.0, 600.0, 12.5]), half, "random")
    tree.validate()
    return tree


def test_the_docs_example_round_trips() -> None:
    tree = parse_queues(DOCS_EXAMPLE, "queues.toml")
    text = queues_toml(tree)
    assert parse_queues(text, "queues.toml") == tree
    assert "[queue.vision]" in text and 'parent = "research"' in text  # readable, bare keys
    assert queues_toml(parse_queues(text, "queues.toml")) == text  # canonical: a fixed point


@pytest.mark.parametrize("seed", range(200))
def test_random_trees_round_trip(seed: int) -> None:
    tree = _random_tree(random.Random(seed))
    assert parse_queues(queues_toml(tree), tree.source) == tree


def test_values_generically_a_mapping_as_an_inline_table() -> None:
    """A table-valued field (a quota per GPU type, say) is written as an inline table."""
    value = {"v100": 8, "a100-80gb": 2, "odd.key": 1.5, "nested": {"x": "y\n"}}
    assert tomllib.loads(f"k = {_toml_value(value)}")["k"] == value
    assert _toml_value({}) == "{}"
    assert _toml_value(True) == "true"
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError):
            _toml_value(bad)
    with pytest.raises(TypeError):
        _toml_value(object())
