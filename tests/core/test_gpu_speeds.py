"""A GPU type described by its speed relative to another (issue 44 item 4): `--gpu-speed` and a
cluster file's fourth column; bad input is one line naming what and where."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.core.cluster import Cluster
from corral.core.errors import InputError
from corral.core.gpu_speeds import GpuSpeed, parse_gpu_speeds, resolved


def test_parsing() -> None:
    got = parse_gpu_speeds("a100=v100*2.2, H100 = A100 * 3")
    assert got == (GpuSpeed("a100", "v100", 2.2), GpuSpeed("h100", "a100", 3.0))
    assert str(got[0]) == "a100=v100*2.2" and got[0].where == "--gpu-speed 'a100=v100*2.2, H100 = A100 * 3'"
    assert parse_gpu_speeds("l4=a100*0.385")[0].factor == 0.385


@pytest.mark.parametrize("text, words", [
    ("a100", "part 'a100' is not TYPE=BASE*FACTOR"),
    ("a100=v100", "a100='v100' is not TYPE=BASE*FACTOR"),
    ("a100=v100*0", "a100=v100*0: the factor must be a number > 0"),
    ("a100=v100*-2", "the factor must be a number > 0"),
    ("a100=v100*fast", "a100=v100*fast: the factor must be a number > 0"),
    ("a100=v100*nan", "the factor must be a number > 0"),
    ("a100=v100*inf", "the factor must be a number > 0"),
    ("a100=A100*2", "a100 is described by itself"),
    ("a100=v1 00*2", "is not TYPE=BASE*FACTOR"),
    ("a/100=v100*2", "GPU type 'a/100' has odd characters"),
    ("a100=*2", "the GPU type name is empty"),
])
def test_bad_speeds_are_one_line(text: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        parse_gpu_speeds(text)
    message = str(err.value)
    assert message.startswith(f"--gpu-speed {text!r}: ") and words in message
    assert "\n" not in message


def test_a_later_description_wins_and_circles_are_refused() -> None:
    table = resolved(parse_gpu_speeds("a100=v100*2,h100=a100*3,a100=v100*2.5"))
    assert table["a100"].factor == 2.5 and table["h100"].base == "a100"
    with pytest.raises(InputError, match=r"go round in a circle \(a100=h100\*2 -> h100=a100\*3\)"):
        resolved(parse_gpu_speeds("a100=h100*2,h100=a100*3"))


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.txt"
    path.write_text(text)
    return str(path)


def test_a_cluster_files_speed_column(tmp_path: Path) -> None:
    c = Cluster.parse(_file(tmp_path, "name gpus type speed\nv-0 8 v100\na-0 8 A100 v100*2.2\n"
                                      "a-1 8 a100 v100*2.2\n"))
    assert c.gpu_types == ("v100", "a100") and c.speeds == (GpuSpeed("a100", "v100", 2.2),)
    assert c.speeds[0].where.endswith("cluster.txt:3")
    assert Cluster.parse("v100:1x8").speeds == ()


@pytest.mark.parametrize("text, line, words", [
    ("a-0 8 a100 v100*2\na-1 8 a100 v100*3\n", 2, "a100=v100*3 but"),
    ("a-0 8 a100 v100*0\n", 1, "the factor must be a number > 0"),
    ("a-0 8 a100 v100\n", 1, "is not TYPE=BASE*FACTOR"),
    ("a-0 8 a100 v100*2 extra\n", 1, "'name gpus type speed'"),
])
def test_a_bad_speed_column_names_the_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(InputError) as err:
        Cluster.parse(path)
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)
