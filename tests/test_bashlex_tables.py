"""bashlex's parser tables kept between runs (planner/megatron/bashlex_tables.py): a kept file is used only
when it holds the tables of this grammar and yacc, and the parser is then the one bashlex builds itself."""

from __future__ import annotations

import marshal
import sys

import pytest

from planner.megatron import bashlex_tables as tables
from planner.megatron.shell.rewrite import bashlex as built_here  # imported once for the session

SCRIPTS = [
    "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 --num-layers 32\n",
    'GPUS=${GPUS:-8}\nif [ "$GPUS" -gt 4 ]; then TP=4; else TP=2; fi\nfor x in a b; do echo $x; done\n',
    'f() { python pretrain_gpt.py "$@" | tee log.txt; }\nf --seq-length 4096 && exit 0 || exit 1\n',
    "cat > args.txt <<EOF\n--num-layers 2\nEOF\nX=$(cat args.txt) ; srun python train.py $X 2>&1 &\n",
]
TREES = [[t.dump() for t in built_here.parse(text)] for text in SCRIPTS]  # parsed while it is the one imported
ACTION, GOTO = dict(built_here.parser.yaccparser.action), dict(built_here.parser.yaccparser.goto)


def _bashlex_modules() -> list[str]:
    return [k for k in sys.modules if k == "bashlex" or k.startswith("bashlex.")]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Imports bashlex anew (tables kept in tmp_path), then puts the session's bashlex back."""
    saved = {k: sys.modules[k] for k in _bashlex_modules()}
    monkeypatch.setattr(tables, "folder", tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # whatever the environment says

    def load():
        for k in _bashlex_modules():
            del sys.modules[k]
        return tables.import_bashlex()

    yield load
    for k in _bashlex_modules():
        del sys.modules[k]
    sys.modules.update(saved)


def _file(tmp_path):
    (file,) = tmp_path.glob("bashlex-lalr-tables.*.marshal")
    return file


def _same_parser(module) -> None:
    """The parser ``module`` built equals the one bashlex built here for the session, table for table (after
    bashlex's own fixes to the action table), and both parse each script to the same tree."""
    assert module is not built_here
    assert dict(module.parser.yaccparser.action) == ACTION
    assert dict(module.parser.yaccparser.goto) == GOTO
    assert [[t.dump() for t in module.parse(text)] for text in SCRIPTS] == TREES


def test_built_then_kept_then_read(fresh, tmp_path):
    _same_parser(fresh())
    fmt, key, action, goto = marshal.loads(_file(tmp_path).read_bytes())
    assert fmt == tables.TABLES_FORMAT and len(key) == 64 and 0 in action and "simple_list" in goto[0]
    goto[0]["kept-marker"] = 12345  # a file with the same key is read, not rebuilt: its marker reaches the parser
    _file(tmp_path).write_bytes(marshal.dumps((fmt, key, action, goto)))
    assert fresh().parser.yaccparser.goto[0]["kept-marker"] == 12345


def test_another_grammar_or_yacc_is_built_again(fresh, tmp_path):
    fresh()
    fmt, key, action, goto = marshal.loads(_file(tmp_path).read_bytes())
    goto[0]["kept-marker"] = 12345
    _file(tmp_path).write_bytes(marshal.dumps((fmt, "0" * 64, action, goto)))  # another grammar's key
    module = fresh()
    assert "kept-marker" not in module.parser.yaccparser.goto[0]
    _same_parser(module)
    assert marshal.loads(_file(tmp_path).read_bytes())[1] == key  # rewritten with this grammar's tables


@pytest.mark.parametrize("blob", [b"", b"not marshal", marshal.dumps((99, "k", {}, {})), marshal.dumps([1, 2])])
def test_damaged_or_foreign_file_is_built_again(fresh, tmp_path, blob):
    fresh()
    _file(tmp_path).write_bytes(blob)
    _same_parser(fresh())
    assert marshal.loads(_file(tmp_path).read_bytes())[0] == tables.TABLES_FORMAT


def test_nothing_written_without_bytecode(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # python -B, PYTHONDONTWRITEBYTECODE
    _same_parser(fresh())
    assert list(tmp_path.iterdir()) == []


def test_unwritable_folder_is_skipped(fresh, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(tables, "folder", blocked / "tables")  # mkdir fails: no file, no error
    _same_parser(fresh())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_default_folder_is_bashlex_bytecode_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "folder", None)
    file = tables.tables_file(tmp_path / "bashlex" / "yacc.py")
    assert file == tmp_path / "bashlex" / "__pycache__" / f"bashlex-lalr-tables.{sys.implementation.cache_tag}.marshal"


def test_imported_once():
    assert tables.import_bashlex() is built_here is sys.modules["bashlex"]
