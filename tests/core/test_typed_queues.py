"""Quotas per GPU type (`corral.core.queues`): `quota = { v100 = 8 }` in the queues file, the
tree one type sees (`QueueTree.for_type`), and one line naming what is wrong."""

from __future__ import annotations

import pytest

from corral.core.cluster import Cluster
from corral.core.errors import InputError
from corral.core.queues import DEFAULT_QUEUE, parse_queues, shares, type_capacity

MIXED = Cluster.parse("k80:2x4,v100:1x8")  # 8 k80, 8 v100
TYPED = """
[queue.research]
quota = { v100 = 6, k80 = 4 }
limit = { v100 = 8 }
[queue.vision]
parent = "research"
quota = { v100 = 4 }
[queue.nlp]
parent = "research"
quota = { k80 = 4, v100 = 2 }
limit = { k80 = 6, v100 = 2 }
[queue.prod]
quota = { k80 = 4 }
"""


def test_a_typed_tree_reads_and_each_type_sees_its_own_quotas_and_limits():
    tree = parse_queues(TYPED, total_gpus=16, gpus_by_type=type_capacity(MIXED))
    assert tree.typed and tree.declared_types == ("v100", "k80")
    assert tree.quota("research") == 10 and tree.quota("prod") == 4  # over all types
    assert tree.type_quotas("nlp", MIXED.gpu_types) == {"k80": 4, "v100": 2}
    v100, k80 = tree.for_type("v100"), tree.for_type("k80")
    assert [v100.quota(q) for q in ("research", "vision", "nlp", "prod", DEFAULT_QUEUE)] == \
        [6, 4, 2, 0, 0]  # a type a table leaves out is 0
    assert [k80.quota(q) for q in ("research", "vision", "nlp", "prod")] == [4, 0, 4, 4]
    assert v100["research"].any_limit == 8 and k80["research"].any_limit is None  # unlimited
    assert k80["nlp"].any_limit == 6 and not v100.typed and v100.leaves == tree.leaves
    assert tree.for_type("v100") is v100  # made once


def test_a_cohort_without_quota_guarantees_its_childrens_sum_per_type():
    tree = parse_queues('[queue.r]\n[queue.a]\nparent="r"\nquota={v100=3}\n'
                        '[queue.b]\nparent="r"\nquota={v100=2,k80=1}\n')
    assert tree.for_type("v100").quota("r") == 5 and tree.for_type("k80").quota("r") == 1


def test_an_untyped_tree_is_its_own_per_type_tree_and_reads_as_before():
    tree = parse_queues("[queue.a]\nquota = 4\n", total_gpus=16,
                        gpus_by_type=type_capacity(MIXED))
    assert not tree.typed and tree.for_type("v100") is tree and tree.quota("a") == 4


CLUSTER = {"k80": 8, "v100": 8}


@pytest.mark.parametrize("text, message", [
    ('[queue.a]\nquota = { a100 = 2 }',
     'queue "a": quota names GPU type "a100", which the cluster does not have (it has k80, '
     'v100) (did you mean "v100"?)'),
    ('[queue.a]\nlimit = { p100 = 2 }', 'queue "a": limit names GPU type "p100"'),
    ('[queue.a]\nquota = { v100 = 9 }', 'queue "a": v100 quota 9 exceeds the cluster\'s 8 v100 GPUs'),
    ('[queue.a]\nquota = { v100 = 5 }\n[queue.b]\nquota = { v100 = 4, k80 = 1 }',
     "the top-level queues' v100 quotas add up to 9 GPUs, above the cluster's 8 v100 GPUs"),
    ('[queue.a]\nquota = { v100 = -1 }', 'queue "a": quota.v100 must be >= 0, got -1'),
    ('[queue.a]\nquota = { v100 = 1.5 }', 'queue "a": quota.v100 must be a whole number, got 1.5'),
    ('[queue.a]\nquota = { v100 = "2" }', "queue \"a\": quota.v100 must be a whole number, got '2'"),
    ('[queue.a]\nlimit = { k80 = true }', 'queue "a": limit.k80 must be a whole number'),
    ('[queue.a]\nquota = { "V100!" = 1 }', "queue \"a\": quota: GPU type 'V100!' has odd characters"),
    ('[queue.a]\nquota = { v100 = 4 }\nlimit = { v100 = 2 }',
     'queue "a": v100 limit 2 is below its v100 quota 4'),
    ('[queue.p]\nquota = { v100 = 2 }\n[queue.a]\nparent = "p"\nquota = { v100 = 3 }',
     'queue "p": its children\'s v100 quotas add up to 3 GPUs, above its v100 quota 2 (a 3)'),
    ('[queue.p]\nquota = { v100 = 4 }\n[queue.a]\nparent = "p"\nquota = { k80 = 1 }',
     'queue "p": its children\'s k80 quotas add up to 1 GPUs, above its k80 quota 0'),
    ('[queue.a]\nquota = { v100 = 4 }\n[queue.b]\nquota = 3',
     'queue "b": quota 3 is for any GPU type, but queue "a" gives its quota per type; give '
     'every quota and limit per type, e.g. quota = { v100 = 3 }'),
    ('[queue.a]\nquota = { v100 = 4 }\nlimit = 6', 'queue "a": limit 6 is for any GPU type'),
])
def test_bad_typed_input_is_one_line_naming_what_and_where(text, message):
    with pytest.raises(InputError) as err:
        parse_queues(text, "queues.toml", total_gpus=16, gpus_by_type=CLUSTER)
    line = str(err.value)
    assert "\n" not in line and line.startswith("queues.toml: ")
    assert message in line


def test_types_are_checked_against_the_cluster_only_where_it_is_known():
    text = '[queue.a]\nquota = { a100 = 64 }\n'
    assert parse_queues(text).quota("a") == 64  # no cluster yet: read as written
    with pytest.raises(InputError, match="its GPUs have no type"):
        parse_queues(text).validate(16, type_capacity(Cluster.parse("2x8")))
    with pytest.raises(InputError, match="add up to 64 GPUs, above the cluster's 16"):
        parse_queues(text).validate(16)  # the whole cluster's size alone still bounds them


# --- shares, one type at a time ------------------------------------------------------------------


def test_each_type_is_shared_by_its_own_quotas():
    tree = parse_queues(TYPED, gpus_by_type=CLUSTER)
    # v100: vision 4 and nlp 2 guaranteed; prod has no v100 quota and only borrows what is left
    v100 = shares(tree.for_type("v100"), {"vision": 8, "nlp": 8, "prod": 8}, {}, 8)
    assert v100.guaranteed == {"vision": 4, "nlp": 2, "prod": 0, DEFAULT_QUEUE: 0}
    # the 2 left over are lent by weight: one into research (to vision: nlp is at its v100
    # limit 2), one to prod
    assert v100.share == {"vision": 5, "nlp": 2, "prod": 1, DEFAULT_QUEUE: 0}
    # k80: nlp 4 and prod 4 guaranteed; vision's k80 demand is borrowed, nothing is left
    k80 = shares(tree.for_type("k80"), {"vision": 8, "nlp": 8, "prod": 8}, {}, 8)
    assert k80.share == {"vision": 0, "nlp": 4, "prod": 4, DEFAULT_QUEUE: 0}
    # with nlp idle on k80, its quota is lent within research first (to vision), up to limits
    k80 = shares(tree.for_type("k80"), {"vision": 8, "prod": 2}, {}, 8)
    assert k80.share == {"vision": 6, "nlp": 0, "prod": 2, DEFAULT_QUEUE: 0}


def test_a_queue_holding_another_types_quota_gives_it_back_on_that_type():
    tree = parse_queues('[queue.a]\nquota = { v100 = 8 }\n[queue.b]\nquota = { k80 = 8 }\n')
    # b borrowed all v100s; a's work arrives: b's v100s are reclaimed, its k80s untouched
    v100 = shares(tree.for_type("v100"), {"a": 8, "b": 8}, {"b": 8}, 8)
    assert v100.share == {"a": 8, "b": 0, DEFAULT_QUEUE: 0} and v100.reclaimed_from == ("b",)


def test_a_typed_tree_is_written_back_as_a_queues_file_and_read_back_the_same():
    from corral.core.queues import queues_toml

    tree = parse_queues(TYPED + "[queue.idle]\nquota = {}\n", gpus_by_type=CLUSTER)
    text = queues_toml(tree)
    assert "quota = { v100 = 6, k80 = 4 }" in text and "limit = { k80 = 6, v100 = 2 }" in text
    again = parse_queues(text, gpus_by_type=CLUSTER)
    assert again.queues == tree.queues and again.typed
