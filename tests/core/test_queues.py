"""The queues file (`corral.core.queues`): what it accepts, and one line naming what is wrong."""

from __future__ import annotations

import pytest

from corral.core.errors import InputError
from corral.core.queues import (
    DEFAULT_QUEUE,
    load_queues,
    parse_queues,
    proportional_queues,
    shares,
)

TWO_LEVELS = """
min_runtime_s = 300
usage_half_life_s = 3600

[queue.research]
quota = 8
[queue.vision]
parent = "research"
quota = 4
weight = 2
[queue.nlp]
parent = "research"
quota = 4
[queue.prod]
quota = 8
limit = 12
priority = 1
"""


def test_a_two_level_tree_reads_with_an_implicit_default_queue():
    tree = parse_queues(TWO_LEVELS, total_gpus=16)
    assert tree.leaves == ("vision", "nlp", "prod", DEFAULT_QUEUE)
    assert [tree.quota(q) for q in ("research", "vision", "prod", DEFAULT_QUEUE)] == [8, 4, 8, 0]
    assert tree["vision"].weight == 2.0 and tree["prod"].priority == 1
    assert tree["prod"].any_limit == 12
    assert tree.ancestors("vision") == ("research",)
    assert tree.min_runtime_s == 300 and tree.usage_half_life_s == 3600
    assert tree.leaf_for("vision") == "vision"
    assert tree.leaf_for(None) == tree.leaf_for("research") == tree.leaf_for("x") == DEFAULT_QUEUE


def test_a_cohort_without_quota_guarantees_its_childrens_sum():
    tree = parse_queues('[queue.r]\n[queue.a]\nparent="r"\nquota=3\n[queue.b]\nparent="r"\nquota=2')
    assert tree.quota("r") == 5


def test_load_names_the_file(tmp_path):
    path = tmp_path / "queues.toml"
    path.write_text('[queue.vision]\nquota = 64\n')
    with pytest.raises(InputError) as err:
        load_queues(path, total_gpus=48)
    assert str(err.value) == ('queues.toml: queue "vision": quota 64 exceeds the cluster\'s '
                              '48 GPUs')
    with pytest.raises(InputError, match="cannot read"):
        load_queues(tmp_path / "absent.toml")


@pytest.mark.parametrize("text, message", [
    ('[queue.vision]\nquota = 64', 'queue "vision": quota 64 exceeds the cluster\'s 48 GPUs'),
    ('[queue.a]\nquotaa = 1', 'queue "a": unknown key \'quotaa\' (did you mean "quota"?)'),
    ('min_runtime = 1', 'unknown key \'min_runtime\' (did you mean "min_runtime_s"?)'),
    ('[queue.a]\nparent = "b"\n[queue.b]\nparent = "a"', 'queue "a": cycle of parents: a -> b -> a'),
    ('[queue.a]\nparent = "a"', 'queue "a": cycle of parents: a -> a'),
    ('[queue.a]\nparent = "reserch"\n[queue.research]', 'queue "a": unknown parent "reserch" '
                                                       '(did you mean "research"?)'),
    ('[queue.p]\nquota = 4\n[queue.a]\nparent = "p"\nquota = 3\n[queue.b]\nparent = "p"\nquota = 2',
     'queue "p": its children\'s quotas add up to 5 GPUs, above its quota 4'),
    ('[queue.a]\nquota = -1', 'queue "a": quota must be >= 0, got -1'),
    ('[queue.a]\nlimit = -2', 'queue "a": limit must be >= 0, got -2'),
    ('[queue.a]\nweight = 0', 'queue "a": weight must be > 0, got 0'),
    ('[queue.a]\nquota = 1.5', 'queue "a": quota must be a whole number, got 1.5'),
    ('[queue.a]\nquota = 8\nlimit = 4', 'queue "a": limit 4 is below its quota 8'),
    ('[queue.a]\nquota = 30\n[queue.b]\nquota = 30', "top-level queues' quotas add up to 60 GPUs"),
    ('min_runtime_s = -5', 'min_runtime_s: value must be >= 0'),
    ('[queue.a\nquota = 1', 'not valid TOML'),
    ('[queue.x]\nparent = "default"\n', 'queue "default" takes unnamed jobs'),
])
def test_bad_input_is_one_line_naming_what_and_where(text, message):
    with pytest.raises(InputError) as err:
        parse_queues(text, "queues.toml", total_gpus=48)
    line = str(err.value)
    assert "\n" not in line and line.startswith("queues.toml: ")
    assert message in line


def test_proportional_quotas_sum_to_at_most_the_cluster():
    tree = proportional_queues({"a": 50.0, "b": 30.0, "c": 20.0, None: 0.0}, 7)
    quotas = {q: tree.quota(q) for q in tree.leaves}
    assert sum(quotas.values()) == 7
    assert quotas == {"a": 4, "b": 2, "c": 1, DEFAULT_QUEUE: 0}


# --- shares -----------------------------------------------------------------------------------


@pytest.fixture
def tree():
    return parse_queues(TWO_LEVELS, total_gpus=16)


def test_quota_is_honoured_and_idle_quota_lent_through_the_cohort_first(tree):
    # nlp is idle: its quota goes to its sibling vision before prod (root) sees any of it
    s = shares(tree, {"vision": 16, "prod": 16}, {}, 16)
    assert s.share["prod"] == 8 and s.share["vision"] == 8
    s = shares(tree, {"vision": 16, "prod": 2}, {}, 16)
    assert s.share == {"vision": 14, "nlp": 0, "prod": 2, DEFAULT_QUEUE: 0}
    assert s.guaranteed["vision"] == 8  # the cohort's quota, its sibling idle


def test_borrowing_goes_by_weight():
    tree = parse_queues('[queue.a]\nweight = 3\n[queue.b]\nweight = 1\n[queue.c]\nquota = 4')
    s = shares(tree, {"a": 100, "b": 100}, {}, 12)
    assert (s.share["a"], s.share["b"], s.share["c"]) == (9, 3, 0)


def test_limits_are_respected(tree):
    s = shares(tree, {"prod": 16}, {}, 16)
    assert s.share["prod"] == 12
    capped = parse_queues(TWO_LEVELS.replace("[queue.research]\nquota = 8",
                                             "[queue.research]\nquota = 8\nlimit = 10"))
    s = shares(capped, {"vision": 16, "nlp": 16}, {}, 16)
    assert s.share["vision"] + s.share["nlp"] == 10
    # what a cohort holds above its limit is trimmed, lowest priority first
    s = shares(capped, {"vision": 16, "nlp": 16}, {"vision": 8, "nlp": 6}, 16)
    assert s.share["vision"] + s.share["nlp"] <= 10


def test_a_queue_keeps_what_it_borrowed_until_a_queue_below_its_quota_wants_it(tree):
    s = shares(tree, {"vision": 16, "prod": 1}, {"vision": 15, "prod": 1}, 16)
    assert s.share["vision"] == 15 and not s.reclaimed_from
    # prod's work arrives: it gets its quota back at once
    s = shares(tree, {"vision": 16, "prod": 8}, {"vision": 15, "prod": 1}, 16)
    assert s.share["prod"] == 8 and s.share["vision"] == 8 and s.reclaimed_from == ("vision",)


def test_reclaim_takes_from_the_lowest_priority_then_furthest_above_fair_share():
    tree = parse_queues("[queue.a]\nquota = 2\npriority = 1\n[queue.b]\nquota = 2\n"
                        "[queue.c]\nquota = 2\n[queue.d]\nquota = 6\n")
    # a, b, c borrowed d's idle quota; d's work arrives and wants 2 back
    s = shares(tree, {"a": 4, "b": 5, "c": 4, "d": 2}, {"a": 4, "b": 5, "c": 3}, 12)
    assert s.share["d"] == 2
    assert s.reclaimed_from == ("b",)  # priority 0 and furthest above its fair share
    assert s.share["a"] == 4  # the high-priority borrower is left alone
    s = shares(tree, {"a": 4, "b": 5, "c": 4, "d": 6}, {"a": 4, "b": 5, "c": 3}, 12)
    assert s.share["d"] == 6 and s.reclaimed_from[:2] == ("b", "c")
    assert s.share["a"] >= s.fair["a"]


def test_two_level_cohorts_lend_to_the_sibling_before_the_other_cohort():
    tree = parse_queues(
        "[queue.r]\nquota = 8\n[queue.r1]\nparent = 'r'\n[queue.x]\nparent = 'r1'\nquota = 2\n"
        "[queue.y]\nparent = 'r1'\nquota = 2\n[queue.z]\nparent = 'r'\nquota = 4\n"
        "[queue.s]\nquota = 8\n[queue.t]\nparent = 's'\nquota = 8\n")
    assert tree.quota("r1") == 4 and tree.ancestors("x") == ("r1", "r")
    # y idle: x takes y's quota (same cohort r1); z idle: r1 takes z's (cohort r); t is served
    s = shares(tree, {"x": 16, "t": 8}, {}, 16)
    assert s.share["x"] == 8 and s.share["t"] == 8
    s = shares(tree, {"x": 16, "z": 1, "t": 4}, {}, 16)
    assert (s.share["x"], s.share["z"], s.share["t"]) == (11, 1, 4)


def test_a_quota_guarantees_only_the_base_demand_growth_is_borrowed():
    tree = parse_queues("[queue.a]\nquota = 6\n[queue.b]\n")
    # a's jobs asked for 2 GPUs and could grow to 8: the quota covers the 2, the rest is shared
    s = shares(tree, {"a": 8, "b": 8}, {}, 8, base={"a": 2, "b": 8})
    assert (s.guaranteed["a"], s.share["a"], s.share["b"]) == (2, 5, 3)
    s = shares(tree, {"a": 8, "b": 8}, {}, 8)
    assert (s.guaranteed["a"], s.share["a"], s.share["b"]) == (6, 7, 1)


def test_elastic_growth_goes_back_to_a_queue_below_its_fair_share_without_quota():
    tree = parse_queues("[queue.a]\n[queue.b]\n")
    # a's elastic jobs asked for 2 GPUs and grew into all 8; b's job asks for 2
    s = shares(tree, {"a": 16, "b": 2}, {"a": 8}, 8, base={"a": 2, "b": 2})
    assert (s.share["a"], s.share["b"]) == (6, 2) and s.reclaimed_from == ("a",)
    # gang jobs (all they hold was asked for) are not preempted for a share beyond quota
    s = shares(tree, {"a": 8, "b": 2}, {"a": 8}, 8)
    assert (s.share["a"], s.share["b"]) == (8, 0)
