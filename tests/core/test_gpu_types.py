"""GPU types in decisions: check_decision's refusals, JobSpec.gpu_type, and the layer that keeps
a type-unaware policy's jobs within one type (`within_one_type`), with a property test over
random mixed clusters and decisions."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.cluster import Cluster, Node, Placement
from corral.core.errors import DecisionError
from corral.core.gpu_types import within_one_type
from corral.core.jobs import Assignment, BatchConfig, Decision, JobSpec, LrRule, check_decision

MIXED = Cluster.parse("k80:6x4,p100:3x8,v100:2x8")  # k80 nodes 0-5, p100 6-8, v100 9-10


def _spec(name: str = "j", gpu_type: str | None = None, **kw) -> JobSpec:
    base = dict(name=name, submit_time_s=0.0, app="a", gpus=2, batch_size=96, init_bsz=32,
                max_bsz=512, min_local_bsz=4, max_local_bsz=32, gpu_type=gpu_type)
    return JobSpec(**{**base, **kw})


def _a(slots: dict[int, int], batch: BatchConfig | None = None) -> Assignment:
    return Assignment(Placement.of(slots), batch)


# --- check_decision ----------------------------------------------------------------------------

def test_check_decision_refuses_a_job_across_types() -> None:
    d = Decision({"a": _a({0: 4}), "b": _a({5: 2, 6: 8, 9: 1})})
    with pytest.raises(DecisionError) as err:
        check_decision(d, {"a", "b"}, MIXED, "pollux")
    assert str(err.value).startswith(
        "policy pollux placed job 'b' across GPU types k80, p100 and v100")
    assert "\n" not in str(err.value)
    check_decision(d, {"a", "b"}, MIXED, "pollux", allow_mixed_types=True)
    check_decision(Decision({"a": _a({0: 4, 1: 4}), "b": _a({9: 8, 10: 8})}), {"a", "b"},
                   MIXED, "p")


def test_check_decision_refuses_a_job_off_its_type() -> None:
    specs = {"a": _spec("a", "v100"), "b": _spec("b")}
    check_decision(Decision({"a": _a({9: 8}), "b": _a({0: 4})}), specs, MIXED, "p")
    with pytest.raises(DecisionError, match=r"^policy p placed job 'a' on k80 GPUs, but it may "
                                            r"run only on v100$"):
        check_decision(Decision({"a": _a({0: 4})}), specs, MIXED, "p")
    # allowed to span types, still not off its own type
    with pytest.raises(DecisionError, match="'a' on k80 and v100 GPUs, but it may run only on v100"):
        check_decision(Decision({"a": _a({0: 4, 9: 8})}), specs, MIXED, "p",
                       allow_mixed_types=True)
    # a set of names carries no specs: the restriction is not checked
    check_decision(Decision({"a": _a({0: 4})}), {"a"}, MIXED, "p")
    with pytest.raises(DecisionError, match="'a' on \\(unnamed\\) GPUs, but it may run only on v100"):
        check_decision(Decision({"a": _a({0: 4})}), specs, Cluster.parse("2x4"), "p")


def test_check_decision_keeps_its_other_refusals() -> None:
    specs = {"a": _spec("a", "k80")}
    with pytest.raises(DecisionError, match="unknown or finished job 'x'"):
        check_decision(Decision({"x": _a({0: 1})}), specs, MIXED, "p")
    with pytest.raises(DecisionError, match="used node 11, which does not exist"):
        check_decision(Decision({"a": _a({11: 1})}), specs, MIXED, "p")
    with pytest.raises(DecisionError, match="over-allocated node k80-0: 5 GPUs assigned, 4"):
        check_decision(Decision({"a": _a({0: 5})}), specs, MIXED, "p")


# --- JobSpec.gpu_type --------------------------------------------------------------------------

def test_jobspec_gpu_type_round_trips() -> None:
    spec = _spec("a", "v100", lr_rule=LrRule.SQRT)
    assert _spec("b").gpu_type is None
    assert _spec("y", "V100").gpu_type == "v100"  # matched by its lower-case key
    with pytest.raises(ValueError, match="job x: GPU type 'V100!' has odd characters"):
        _spec("x", "V100!")
    # the emulated executor's checkpoint form: asdict, lr_rule as its value
    from corral.executors.emulated.executor import _spec_doc, _spec_from

    assert _spec_from(_spec_doc(spec)) == spec
    old = {k: v for k, v in _spec_doc(spec).items() if k != "gpu_type"}  # written before
    assert _spec_from(old) == dataclasses.replace(spec, gpu_type=None)


def test_submission_carries_gpu_type() -> None:
    pytest.importorskip("pydantic")
    from corral.core.errors import InputError
    from corral.service.submission import Submission, check_body

    sub = Submission(command=["python", "train.py"], gpu_type="v100").checked(16)
    # the service's store keeps the submission as JSON and rebuilds the spec from it
    again = Submission.model_validate(sub.model_dump(mode="json"))
    assert again.spec("j1", 3.0).gpu_type == "v100"
    assert Submission(command=["python", "t.py"]).checked(4).spec("j", 0.0).gpu_type is None
    with pytest.raises(InputError, match="gpu_type: .*odd characters"):
        check_body({"command": ["python", "t.py"], "gpu_type": "V100!"})


# --- within_one_type ---------------------------------------------------------------------------

def test_one_type_cluster_returns_the_decision_itself() -> None:
    d = Decision({"a": _a({0: 4, 1: 4})})
    assert within_one_type(d, Cluster.parse("2x4"), {}) is d
    assert within_one_type(d, Cluster.parse("v100:2x4"), {"a": _spec("a", "k80")}) is d
    fine = Decision({"a": _a({0: 4}), "b": _a({9: 8}), "c": _a({})})
    assert within_one_type(fine, MIXED, {}) is fine


def test_a_spanning_job_moves_to_the_type_holding_most_of_it() -> None:
    b1, b2 = BatchConfig(16, 1), BatchConfig(8)
    d = Decision({"a": _a({0: 2, 9: 6}, b1), "keep": _a({10: 8}), "c": _a({5: 4, 6: 4}, b2)})
    out = within_one_type(d, MIXED, {})
    assert list(out.assignments) == ["a", "keep", "c"]
    assert out.assignments["keep"] is d.assignments["keep"]
    # a: most on v100 (6 of 8), and v100-0 is free once a's own GPUs are not counted
    assert out.assignments["a"] == _a({9: 8}, b1)
    # c: 4 on k80 and 4 on p100, a tie: then the type with more free GPUs (both 24), then the
    # cluster's order: k80, where its 8 GPUs take two whole nodes
    assert out.assignments["c"] == _a({0: 4, 1: 4}, b2)
    check_decision(out, set(d.assignments), MIXED, "p")


def test_kept_assignments_take_their_gpus_first_and_a_job_without_room_gets_none() -> None:
    small = Cluster.parse("k80:1x4,v100:1x4")
    d = Decision({"span": _a({0: 2, 1: 2}), "k": _a({0: 2}), "v": _a({1: 2})})
    out = within_one_type(d, small, {})
    assert list(out.assignments) == ["k", "v"]  # span's 4 fit on no single type now
    # a tie in what it holds: the type with more free GPUs (v100: 4 against k80's 2)
    d = Decision({"span": _a({0: 1, 1: 1}), "k": _a({0: 2})})
    assert within_one_type(d, small, {}).assignments["span"] == _a({1: 2})
    d = Decision({"span": _a({0: 1, 1: 1}), "v": _a({1: 3})})
    assert within_one_type(d, small, {}).assignments["span"] == _a({0: 2})


def test_a_restricted_job_moves_to_its_type() -> None:
    d = Decision({"a": _a({0: 4}), "b": _a({6: 8})})
    specs = {"a": _spec("a", "v100"), "b": _spec("b", "p100")}
    out = within_one_type(d, MIXED, specs)
    assert out.assignments["a"] == _a({9: 4}) and out.assignments["b"] is d.assignments["b"]
    gone = within_one_type(Decision({"a": _a({0: 4})}), MIXED, {"a": _spec("a", "a100")})
    assert gone.assignments == {}


def test_a_job_larger_than_any_node_packs_on_few_nodes_of_one_type() -> None:
    out = within_one_type(Decision({"a": _a({0: 4, 6: 8})}), MIXED, {})
    # 4 on k80 and 8 on p100: p100 holds most; 12 GPUs as one whole node and a best fit
    assert out.assignments["a"] == _a({6: 8, 7: 4})


# --- the property test -------------------------------------------------------------------------

@st.composite
def _cases(draw: st.DrawFn) -> tuple[Cluster, Decision, dict[str, JobSpec]]:
    names = ["k80", "p100", "v100", "a100", "t4"]
    num_types = draw(st.integers(2, 4))
    nodes: list[Node] = []
    for t in names[:num_types]:
        for i in range(draw(st.integers(1, 4))):
            nodes.append(Node(f"{t}-{i}", draw(st.integers(1, 8)), t))
    if draw(st.booleans()):  # types interleaved in node order
        nodes = draw(st.permutations(nodes))
    cluster = Cluster(tuple(nodes))
    free = list(cluster.gpus_per_node)
    assignments: dict[str, Assignment] = {}
    specs: dict[str, JobSpec] = {}
    for j in range(draw(st.integers(0, 10))):
        name = f"j{j}"
        want = draw(st.integers(0, max(0, min(sum(free), 24))))
        order = draw(st.permutations(range(len(free))))
        slots: dict[int, int] = {}
        for n in order:
            if want == 0:
                break
            k = min(free[n], want, draw(st.integers(1, 8)))
            if k:
                slots[n] = k
                free[n] -= k
                want -= k
        batch = draw(st.sampled_from([None, BatchConfig(8), BatchConfig(4, 2)]))
        assignments[name] = Assignment(Placement.of(slots), batch)
        gpu_type = draw(st.sampled_from([None, None, *names[:num_types], "h100"]))
        specs[name] = _spec(name, gpu_type)
    return cluster, Decision(assignments), specs


@settings(deadline=None, max_examples=600)
@given(_cases())
def test_within_one_type_properties(case: tuple[Cluster, Decision, dict[str, JobSpec]]) -> None:
    cluster, decision, specs = case
    out = within_one_type(decision, cluster, specs)
    assert within_one_type(decision, cluster, specs) == out  # deterministic
    # never over-allocates, never spans types, honours gpu_type (the check says all three)
    check_decision(out, specs, cluster, "p")
    assert list(out.assignments) == [n for n in decision.assignments if n in out.assignments]
    free = list(cluster.gpus_per_node)
    for a in out.assignments.values():
        for node, gpus in a.placement.slots:
            free[node] -= gpus
    for name, before in decision.assignments.items():
        wanted = specs[name].gpu_type
        placed = cluster.placement_type(before.placement)
        after = out.assignments.get(name)
        if not before.placement or (placed is not None and wanted in (None, placed)):
            assert after is before  # never moved
            continue
        allowed = cluster.gpu_types if wanted is None else (wanted,)
        never_fits = before.num_gpus > max(cluster.gpus_of_type(t) for t in allowed)
        if after is None:  # no room: then no allowed type has its count free even now
            k = 1 if never_fits else before.num_gpus
            assert all(sum(free[n] for n in cluster.nodes_of_type(t)) < k for t in allowed)
            continue
        if never_fits:  # more than any allowed type holds: shrunk, its batch left to the job
            assert 1 <= after.num_gpus < before.num_gpus and after.batch is None
        else:
            assert after.num_gpus == before.num_gpus and after.batch == before.batch
        assert cluster.placement_type(after.placement) in ((wanted,) if wanted else
                                                           cluster.gpu_types)
