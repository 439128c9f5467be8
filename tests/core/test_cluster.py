"""Cluster shapes with GPU types: the forms `--cluster` takes, their errors, describe, and the
per-type tables; a cluster of the one unnamed type stays exactly what it was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corral.core.cluster import Cluster, Node, Placement, gpu_type_problem
from corral.core.errors import InputError
from corral.core.jobs import JobSpec

MIXED = "k80:6x4,p100:3x8,v100:2x8"


def test_unnamed_forms_mean_what_they_meant() -> None:
    c = Cluster.parse("16x4")
    assert c == Cluster.uniform(16, 4)
    assert [n.name for n in c.nodes[:2]] == ["node0", "node1"]
    assert all(n.gpu_type == "" for n in c.nodes)
    assert c.gpu_types == ("",) and not c.is_mixed and c.node_types == ("",) * 16
    assert c.gpus_of_type("") == 64 and c.nodes_of_type("") == tuple(range(16))
    assert c.describe() == "16x4" and c.total_gpus == 64 and c.gpus_per_node == (4,) * 16
    assert Cluster.parse(" 2 X 8 ").describe() == "2x8"
    odd = Cluster((Node("a", 4), Node("b", 8)))
    assert odd.describe() == "2 nodes, 12 GPUs" and not odd.is_mixed
    empty = Cluster(())
    assert empty.gpu_types == () and not empty.is_mixed and empty.describe() == "0 nodes, 0 GPUs"


def test_typed_form() -> None:
    c = Cluster.parse(MIXED)
    assert c.num_nodes == 11 and c.total_gpus == 24 + 24 + 16
    assert c.gpu_types == ("k80", "p100", "v100") and c.is_mixed
    assert [n.name for n in c.nodes] == [f"k80-{i}" for i in range(6)] + \
        [f"p100-{i}" for i in range(3)] + ["v100-0", "v100-1"]
    assert c.node_types == ("k80",) * 6 + ("p100",) * 3 + ("v100",) * 2
    assert c.gpus_of_type("k80") == 24 and c.gpus_of_type("p100") == 24
    assert c.gpus_of_type("v100") == 16 and c.gpus_of_type("a100") == 0
    assert c.nodes_of_type("p100") == (6, 7, 8) and c.nodes_of_type("t4") == ()
    assert c.describe() == MIXED
    assert Cluster.parse(" k80 : 6x4 , p100:3X8,v100:2x8 ") == c
    one = Cluster.parse("v100:2x8")
    assert not one.is_mixed and one.gpu_types == ("v100",) and one.describe() == "v100:2x8"
    assert Cluster.parse(one.describe()) == one and Cluster.parse(c.describe()) == c


@pytest.mark.parametrize("text, where, problem", [
    ("k80:0x4", "part 1 'k80:0x4' (column 1)", "zero nodes"),
    ("k80:2x0", "part 1 'k80:2x0' (column 1)", "zero GPUs per node"),
    ("k80:6x4,K80:2x8", "part 2 'K80:2x8' (column 9)", "type K80 given twice (first in part 1;"),
    ("k80:6x4,.v100:2x8", "part 2 '.v100:2x8' (column 9)", "odd characters"),
    ("k80:6x4,v1 00:2x8", "part 2 'v1 00:2x8' (column 9)", "is not TYPE:NODESxGPUS"),
    ("k80:6x4,v100:2x8,k80:1x4", "part 3 'k80:1x4' (column 18)", "type k80 given twice"),
    ("k80:6x4, v100", "part 2 'v100' (column 10)", "is not TYPE:NODESxGPUS"),
    ("k80:6x4,,v100:2x8", "part 2 '' (column 9)", "is empty"),
    ("k80:6x4,4x4", "part 2 '4x4' (column 9)", "is not TYPE:NODESxGPUS"),
    (":2x8", "part 1 ':2x8' (column 1)", "name is empty"),
    ("gpu$:2x8", "part 1 'gpu$:2x8' (column 1)", "odd characters"),
])
def test_typed_form_errors_name_the_part(text: str, where: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        Cluster.parse(text)
    message = str(err.value)
    assert "\n" not in message and where in message and problem in message, message


def test_other_errors() -> None:
    with pytest.raises(InputError, match="at least 1 node"):
        Cluster.parse("0x4")
    with pytest.raises(InputError, match="neither NODESxGPUS .* nor an existing file"):
        Cluster.parse("no-such-file")


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.txt"
    path.write_text(text)
    return path


def test_files_with_and_without_types(tmp_path: Path) -> None:
    plain = Cluster.parse(str(_file(tmp_path, "name gpus\na 4\nb,8  # big\n\n")))
    assert plain == Cluster((Node("a", 4), Node("b", 8))) and plain.gpu_types == ("",)
    typed = Cluster.parse(str(_file(tmp_path, "# our lab\nName GPUs Type\nx 4 k80\ny,8,v100\n"
                                              "z 4 k80\n")))
    assert typed.nodes == (Node("x", 4, "k80"), Node("y", 8, "v100"), Node("z", 4, "k80"))
    assert typed.gpu_types == ("k80", "v100") and typed.nodes_of_type("k80") == (0, 2)
    assert typed.describe() == "k80:2x4,v100:1x8"
    # a node whose name starts with "name" is a node, not a header
    assert Cluster.parse(str(_file(tmp_path, "namenode 4\n"))).nodes == (Node("namenode", 4),)


@pytest.mark.parametrize("text, line, problem", [
    ("a 4 k80\nb 4\n", 2, "has no GPU type but the node on line 1 has one"),
    ("a 4\nb 4 k80\n", 2, "has a GPU type but the node on line 1 has none"),
    ("a 4 V100!\n", 1, "odd characters"),
    ("a 4 k80 extra\n", 1, "k80='extra' is not TYPE=BASE*FACTOR"),  # the speed column
    ("a 4 k80 v100*2 extra\n", 1, "expected 'name gpus', 'name gpus type' or 'name gpus type speed'"),
    ("a 0 k80\n", 1, "gpus >= 1"),
])
def test_file_errors(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(InputError) as err:
        Cluster.parse(str(path))
    assert str(err.value).startswith(f"{path}:{line}: ") and problem in str(err.value)


def test_describe_of_a_type_with_mixed_sizes() -> None:
    c = Cluster((Node("a", 8, "v100"), Node("b", 4, "v100"), Node("c", 4, "k80")))
    assert c.describe() == "v100:2 nodes/12 GPUs,k80:1x4"


def test_placement_type() -> None:
    c = Cluster.parse(MIXED)
    assert c.placement_type(Placement.of({0: 4, 5: 2})) == "k80"
    assert c.placement_type(Placement.of({9: 8})) == "v100"
    assert c.placement_type(Placement.of({5: 4, 6: 8})) is None
    assert c.placement_type(Placement()) is None
    one = Cluster.parse("4x4")
    assert one.placement_type(Placement.of({0: 4, 3: 1})) == ""
    assert one.placement_type(Placement()) is None


def test_type_names() -> None:
    for good in ("k80", "v100", "a100-80g", "rtx_3090", "t4", "3090", "V100", "dgx-ext",
                 "A100-SXM4-80GB", "gh200.nvl"):
        assert gpu_type_problem(good) is None
    for bad in ("", "v100!", "-k80", ".k80", "a" * 33, "k 80", "a100/80"):
        assert gpu_type_problem(bad) is not None
    with pytest.raises(ValueError, match="node n: .*odd characters"):
        Node("n", 4, "V100!")
    assert Node("n", 4) == Node("n", 4, "") != Node("n", 4, "k80")


def test_type_names_match_whatever_their_case_and_show_as_written(tmp_path: Path) -> None:
    """Sia's published layout names its A100 nodes `dgx-ext`, Alibaba's trace `A100-SXM4-80GB`:
    a name is matched by its lower-case key and shown as the cluster was told it."""
    c = Cluster.parse("dgx-ext:2x8,A100-SXM4-80GB:1x8")
    assert c.gpu_types == ("dgx-ext", "a100-sxm4-80gb") and c.is_mixed
    assert c.describe() == "dgx-ext:2x8,A100-SXM4-80GB:1x8"
    assert c.type_label("a100-sxm4-80gb") == "A100-SXM4-80GB" and c.type_label("t4") == "t4"
    assert c.nodes[2].name == "A100-SXM4-80GB-0" and c.gpus_of_type("a100-sxm4-80gb") == 8
    assert Node("n", 8, "A100") == Node("n", 8, "a100") and Node("n", 8, "A100").row()[2] == "A100"
    assert Node.from_row(Node("n", 8, "A100").row()).type_label == "A100"
    typed = Cluster.parse(str(_file(tmp_path, "x 8 DGX-Ext\ny 8 dgx-ext\n")))
    assert typed.gpu_types == ("dgx-ext",) and typed.describe() == "DGX-Ext:2x8"
    spec = JobSpec("j", 0.0, "cifar10", 8, 64, 64, 64, 16, 64, gpu_type="Dgx-EXT")
    assert spec.gpu_type == "dgx-ext" and typed.types_for(spec) == ("dgx-ext",)
    with pytest.raises(ValueError, match="job j: GPU type 'a100/80' has odd characters"):
        JobSpec("j", 0.0, "cifar10", 8, 64, 64, 64, 16, 64, gpu_type="a100/80")


def test_types_for_is_the_types_a_job_may_use() -> None:
    c = Cluster.parse(MIXED)
    spec = JobSpec("j", 0.0, "cifar10", 4, 64, 64, 64, 16, 64)
    assert c.types_for(spec) == ("k80", "p100", "v100")
    assert c.types_for(dataclasses.replace(spec, gpu_type="p100")) == ("p100",)
    assert c.types_for(dataclasses.replace(spec, gpu_type="a100")) == ()  # not on this cluster
    assert Cluster.parse("4x4").types_for(spec) == ("",)
    assert Cluster.parse("4x4").types_for(dataclasses.replace(spec, gpu_type="v100")) == ()


def test_type_tables_survive_pickling() -> None:
    """Sweeps send the cluster to worker processes: the tables made in __post_init__ travel."""
    import pickle

    c = Cluster.parse(MIXED)
    back = pickle.loads(pickle.dumps(c))
    assert back == c and hash(back) == hash(c) and back.is_mixed
    assert back.gpu_types == c.gpu_types and back.nodes_of_type("p100") == (6, 7, 8)
    assert back.gpus_of_type("v100") == 16 and back.describe() == MIXED
