"""bashlex with its parser tables kept between runs.

bashlex builds its parser at import with its own copy of PLY's yacc, and that copy neither reads nor writes
table files (its ``parsetab.py`` is never looked at): every import rebuilt the LALR tables from the grammar,
94 % of bashlex's import and about 0.1 s of CPU that each ``megaplan validate`` and every launch-script import
paid. :func:`import_bashlex` imports bashlex with yacc's table builder (``LRTable``) replaced by one that keeps
the action and goto tables it builds beside bashlex's bytecode (``__pycache__``, one file per interpreter, as
``presets.cache_file`` keeps a preset's document) and, on the next import, takes them from there when the
grammar (every production with its precedence, the start symbol) and the text of yacc.py itself are the same
as when they were built. Anything else (no file, another interpreter's, a damaged one, another grammar or
yacc) builds them as before, so the parser is the one bashlex would build. Written only where Python writes
bytecode (not under -B / PYTHONDONTWRITEBYTECODE), whole under another name and then renamed; a folder that
cannot be written is skipped silently.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import marshal
import sys
from pathlib import Path

from planner import marshal_cache

YACC = "bashlex.yacc"
TABLES_FORMAT = 1  # what a tables file holds: (TABLES_FORMAT, key, action table, goto table)
folder: Path | None = None  # where the tables file goes; None: bashlex's own __pycache__ (tests set a tmp folder)


def import_bashlex():
    """``import bashlex``, its parser tables taken from the kept file when they are the ones it would build."""
    if "bashlex" in sys.modules:
        return sys.modules["bashlex"]
    finder = _YaccFinder()
    sys.meta_path.insert(0, finder)
    try:
        import bashlex
    finally:
        sys.meta_path.remove(finder)
    return bashlex


class _YaccFinder:
    """A meta path finder (importlib.abc's protocol, without importing importlib.abc): finds bashlex's yacc
    module as Python would, with a loader that swaps in ``kept_tables`` after the module runs."""

    def find_spec(self, name, path, target=None):
        if name != YACC:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _YaccLoader(spec.loader.name, spec.loader.path)
        return spec


class _YaccLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module) -> None:
        super().exec_module(module)
        try:
            source = self.get_data(self.path)
        except OSError:
            return
        module.LRTable = kept_tables(module.LRTable, hashlib.sha256(source).hexdigest(), Path(self.path))


def kept_tables(builder: type, yacc_digest: str, yacc_path: Path) -> type:
    """A subclass of yacc's ``LRTable`` (``builder``) whose tables come from the kept file when its key
    (``table_key``) matches, and are otherwise built by ``builder`` and kept."""

    class KeptLRTable(builder):
        def __init__(self, grammar, log=None):
            file = tables_file(yacc_path)
            key = table_key(grammar, yacc_digest)
            tables = _read(file, key)
            if tables is None:
                super().__init__(grammar, log)
                _keep(file, key, self.lr_action, self.lr_goto)  # before bashlex's own fixes edit the action table
                return
            self.grammar, self.log = grammar, log
            self.lr_action, self.lr_goto = tables
            self.lr_productions = grammar.Productions
            self.sr_conflicts, self.rr_conflicts = [], []  # yacc reads them only to report with debug on

    return KeptLRTable


def table_key(grammar, yacc_digest: str) -> str:
    """What the tables depend on: yacc.py's text (its digest) and the grammar, every production in order
    with its precedence, the terminals' precedence and the start symbol."""
    productions = [(p.name, p.prod, p.prec) for p in grammar.Productions[1:]]
    text = repr((yacc_digest, productions, sorted(grammar.Precedence.items()), grammar.Start))
    return hashlib.sha256(text.encode()).hexdigest()


def tables_file(yacc_path: Path) -> Path:
    """bashlex's tables file: in ``folder``, else beside its bytecode, one file per interpreter."""
    where = folder if folder is not None else yacc_path.parent / "__pycache__"
    return where / f"bashlex-lalr-tables.{sys.implementation.cache_tag}.marshal"


def _read(file: Path, key: str) -> tuple[dict, dict] | None:
    try:
        fmt, kept_key, action, goto = marshal.loads(file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):  # absent, unreadable or not a tables file of this format
        return None
    if fmt != TABLES_FORMAT or kept_key != key or not isinstance(action, dict) or not isinstance(goto, dict):
        return None
    return action, goto


def _keep(file: Path, key: str, action: dict, goto: dict) -> None:
    marshal_cache.keep(file, (TABLES_FORMAT, key, action, goto))
