"""The parsed shipped presets kept beside them (``presets.cache_file``): used only for exactly the text they
were parsed from, written only where Python writes its own caches, never beside a user's file."""

from __future__ import annotations

import marshal
import shutil
import subprocess
import sys

import pytest
import yaml

from planner import marshal_cache, presets
from planner.errors import PresetError
from planner.models.spec import ModelSpec

from conftest import PRESETS


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A presets folder of one model preset, gpt3-175b, as the shipped ones; caches written (as they are
    by a process without -B or PYTHONDONTWRITEBYTECODE)."""
    (tmp_path / "models").mkdir()
    shutil.copy(PRESETS / "models" / "gpt3-175b.yaml", tmp_path / "models")
    monkeypatch.setattr(presets, "presets_root", lambda: tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    presets._load_preset_cached.cache_clear()
    yield tmp_path
    presets._load_preset_cached.cache_clear()


def _load(name: str = "gpt3-175b") -> ModelSpec:
    presets._load_preset_cached.cache_clear()  # a new process: nothing validated yet
    return presets.load_spec(ModelSpec, name)


def _cache(root) -> object:
    return root / "models" / "__pycache__" / f"gpt3-175b.yaml.{sys.implementation.cache_tag}.marshal"


def _no_parsing(monkeypatch) -> None:
    def refuse(text):
        raise AssertionError("parsed the YAML again")

    monkeypatch.setattr(presets, "safe_load", refuse)


def test_a_preset_is_parsed_once_then_read_from_its_cache(root, monkeypatch):
    first = _load()
    fmt, text, data = marshal.loads(_cache(root).read_bytes())
    assert (fmt, text) == (presets.CACHE_FORMAT, (root / "models" / "gpt3-175b.yaml").read_text())
    assert data == yaml.safe_load(text)
    _no_parsing(monkeypatch)
    assert _load() == first  # from the cache: no parse
    assert first.num_layers == 96


def test_an_edited_preset_is_parsed_again_never_answered_from_the_old_parse(root, monkeypatch):
    assert _load().num_layers == 96
    path = root / "models" / "gpt3-175b.yaml"
    text = path.read_text()
    assert "num_layers: 96\n" in text
    path.write_text(text.replace("num_layers: 96\n", "num_layers: 48\n"))
    assert _load().num_layers == 48
    _no_parsing(monkeypatch)
    assert _load().num_layers == 48  # the cache now holds the edited text's parse


def test_no_cache_where_python_writes_none(root, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert _load().num_layers == 96
    assert not (root / "models" / "__pycache__").exists()


@pytest.mark.parametrize(
    "blob",
    [b"", b"not marshal", marshal.dumps([1, 2]), marshal.dumps((0, "x", {}))],
    ids=["empty", "garbage", "not a triple", "other format"],
)
def test_a_broken_or_foreign_cache_is_parsed_over(root, blob):
    _cache(root).parent.mkdir()
    _cache(root).write_bytes(blob)
    assert _load().num_layers == 96
    assert marshal.loads(_cache(root).read_bytes())[0] == presets.CACHE_FORMAT  # rewritten


def test_a_folder_that_cannot_be_written_only_costs_the_parse(root, monkeypatch):
    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(marshal_cache.os, "replace", refuse)
    assert _load().num_layers == 96
    assert list((root / "models" / "__pycache__").iterdir()) == []  # no partial file left behind


def test_a_cache_folder_that_is_a_file_only_costs_the_parse(root):
    # valspeed8: the old cleanup (part.unlink in the except) raised NotADirectoryError out of its own handler
    (root / "models" / "__pycache__").write_text("not a folder")
    assert _load().num_layers == 96 and _load().num_layers == 96
    assert (root / "models" / "__pycache__").read_text() == "not a folder"


def test_a_users_file_is_never_cached(root, tmp_path_factory):
    mine = tmp_path_factory.mktemp("mine") / "my-model.yaml"
    shutil.copy(root / "models" / "gpt3-175b.yaml", mine)
    assert presets.load_spec(ModelSpec, str(mine)).num_layers == 96
    assert [p.name for p in mine.parent.iterdir()] == ["my-model.yaml"]


def test_a_document_marshal_cannot_hold_is_parsed_each_time(root):
    path = root / "models" / "dated.yaml"
    path.write_text("released: 2020-05-28\n")  # YAML reads a date: marshal keeps no datetime
    assert str(presets.shipped_yaml(path)["released"]) == "2020-05-28"
    assert not presets.cache_file(path).exists()


def test_a_malformed_preset_is_told_and_nothing_cached(root):
    (root / "models" / "broken.yaml").write_text("name: [a, b\n")
    with pytest.raises(PresetError, match=r"models preset broken: malformed YAML"):
        _load("broken")
    assert not presets.cache_file(root / "models" / "broken.yaml").exists()


SEARCH = """
import sys
from pathlib import Path
import planner.presets
planner.presets.presets_root = lambda: Path(sys.argv[1])
from planner.cli import cli
try:
    cli.main(["search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "1", "--json"])
except SystemExit:
    pass
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_a_search_with_its_presets_cached_imports_no_yaml(tmp_path):
    import os

    shutil.copytree(PRESETS, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = [subprocess.run([sys.executable, "-c", SEARCH, str(tmp_path)], capture_output=True, text=True, env=env)]
    runs.append(subprocess.run([sys.executable, "-c", SEARCH, str(tmp_path)], capture_output=True, text=True, env=env))
    assert runs[0].stdout == runs[1].stdout and '"plans"' in runs[0].stdout
    assert "yaml" in runs[0].stderr.split()  # the first parses its presets
    assert "yaml" not in runs[1].stderr.split()  # the second reads their parse
