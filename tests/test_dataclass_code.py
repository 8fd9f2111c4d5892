"""dataclasses' methods and typing's forward references compiled once per text (``planner.dataclass_code``):
the same classes as without, read back from the kept file by the next process, nothing kept where Python
writes no caches."""

import dataclasses
import marshal
import sys
import typing

import pytest

from planner import dataclass_code
from planner.dataclass_code import CACHE_FORMAT, compiled_once


def _point():
    @dataclasses.dataclass(frozen=True)
    class Point:
        """A frozen dataclass: __init__, __repr__, __eq__, __hash__, __setattr__ and __delattr__ written."""

        x: int
        y: float = 2.5

    return Point


METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


@pytest.fixture
def writable(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_the_methods_are_those_dataclasses_writes(tmp_path, writable):
    plain = _point()
    with compiled_once(tmp_path / "dc.marshal"):
        fresh = _point()
    with compiled_once(tmp_path / "dc.marshal"):
        kept = _point()
    for cls in (fresh, kept):
        for name in METHODS:
            assert getattr(cls, name).__code__ == getattr(plain, name).__code__
        p = cls(1)
        assert repr(p).endswith("Point(x=1, y=2.5)") and p == cls(1, 2.5) and p != cls(2)
        assert hash(p) == hash((1, 2.5))
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.x = 3
    assert "exec" not in vars(dataclasses) and "compile" not in vars(typing)  # the builtins again


def test_the_next_process_compiles_nothing(tmp_path, writable, monkeypatch):
    file = tmp_path / "dc.marshal"
    with compiled_once(file):
        _point()
    fmt, codes = marshal.loads(file.read_bytes())
    assert fmt == CACHE_FORMAT and len(codes) == len(METHODS)  # six methods, one text each

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(dataclass_code.builtins, "compile", no_compile)
    before = file.stat().st_mtime_ns
    with compiled_once(file):
        assert _point()(4).x == 4
    monkeypatch.undo()
    assert file.stat().st_mtime_ns == before  # nothing new: not written again


@pytest.mark.parametrize(
    "blob", [b"", b"not marshal", marshal.dumps((CACHE_FORMAT + 1, {})), marshal.dumps((1, {"a": 1}))]
)
def test_a_file_of_another_format_is_ignored_and_replaced(tmp_path, writable, blob):
    file = tmp_path / "dc.marshal"
    file.write_bytes(blob)
    with compiled_once(file):
        assert repr(_point()(1)).endswith("Point(x=1, y=2.5)")
    fmt, codes = marshal.loads(file.read_bytes())
    assert fmt == CACHE_FORMAT and len(codes) == len(METHODS)


def test_nothing_is_written_without_caches(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with compiled_once(tmp_path / "dc.marshal"):
        assert _point()(1).y == 2.5
    assert not (tmp_path / "dc.marshal").exists()


def test_forward_references_compile_once(tmp_path, writable, monkeypatch):
    file = tmp_path / "dc.marshal"
    with compiled_once(file):
        ref = typing.ForwardRef("list[int] | None")
        with pytest.raises(SyntaxError):  # typing's own message, as without
            typing.ForwardRef("1 +")
    assert ref.__forward_code__ == compile("list[int] | None", "<string>", "eval")
    assert eval(ref.__forward_code__) == (list[int] | None)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(dataclass_code.builtins, "compile", no_compile)
    with compiled_once(file):
        again = typing.ForwardRef("list[int] | None")
    monkeypatch.undo()
    assert again == ref and again.__forward_code__ == ref.__forward_code__
