"""Read a Megatron-LM launch script or command line without running anything.

:func:`extract_launch` parses the text with ``bashlex`` and walks the syntax tree with a small
interpreter that only tracks variables: assignments, ``export``/``declare``, arrays and ``+=``,
``${X:-default}`` and friends, integer ``$((...))``, ``if``/``elif``/``else`` on ``[ ]``,
``[[ ]]`` and ``(( ))`` tests, ``case``, ``for ... in`` loops, functions, ``&&``/``||``,
``sh -c``/``eval`` strings and ``exit``. No command is ever executed.

bashlex cannot parse arrays, ``$((``, ``[[``, ``((`` or ``case`` (and loops on some unclosed
``${``); :class:`_Rewriter` first turns those into marker commands and opaque
``${__mp_<kind><n>}`` parameters, so bashlex only ever sees simple words.

Limits: ``source``/``.`` files are not read; ``$(...)`` and backquotes stay unresolved
placeholders; file tests (``-f``, ``-d`` ...) are taken as true; ``while``/``until`` run one
pass, ``for`` at most 256 items; ``read``, ``shift``, ``set --``, ``IFS`` changes, globbing and
``~`` are ignored; arrays are dense (no sparse or associative arrays); arithmetic has no
assignment, ``++``/``--`` or ``?:``; ``select``, ``coproc`` and ``for ((...))`` do not parse.
The first launch found wins.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

import bashlex

from planner.errors import PlannerError

__all__ = ["LaunchLine", "ShellParseError", "extract_launch"]


class ShellParseError(PlannerError):
    """Text that is not a shell script bashlex can parse, or holds no Megatron-LM launch."""


@dataclass(frozen=True)
class LaunchLine:
    """The Megatron-LM arguments of a launch and the process counts of its launcher."""

    argv: list[str]
    nproc_per_node: int | None = None
    nnodes: int | None = None
    world_size: int | None = None
    unresolved: list[str] = field(default_factory=list)
    entry_point: str | None = None


_ARRAY, _COND, _ARITH, _CASE = "__mp_array__", "__mp_cond__", "__mp_arith__", "__mp_case__"
_OPS = ";&|()<>"
_STARTERS = {"then", "do", "else", "elif", "if", "while", "until", "{", "!", "time"}
_KEYWORDS = {"if", "then", "elif", "else", "fi", "while", "until", "do", "done"}
_ARRAY_RE = re.compile(r"([A-Za-z_]\w*)(\+?)=\(")
_ENTRY = re.compile(r"^[\w.-]*(?:train|finetune)[\w.-]*\.py$")
_NOT_LAUNCH = {"echo", "printf", "cat", "mkdir", "cd", "ls", "rm", "cp", "mv", "tee", "touch"}
_MAX_STEPS, _MAX_DEPTH, _MAX_LOOP = 20000, 8, 256
_IFS = (" ", "\t", "\n")
_INT = re.compile(r"-?[0-9]{1,18}")


_PAIRS = {"(": ")", "{": "}", "[": "]"}


def _close(s: str, i: int) -> int:
    """Index just after the bracket matching ``s[i]`` (one of ``({[``), skipping quotes.

    Raises :class:`ShellParseError` if it is not closed (bashlex would loop on it).
    """
    opener, closer, depth = s[i], _PAIRS[s[i]], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            i += 1
            while i < len(s) and s[i] != c:
                i += 2 if c == '"' and s[i] == "\\" else 1
        elif c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellParseError(f"unterminated {opener} in {s[max(0, i - 30):][:30].strip()!r}")


class _Rewriter:
    """Rewrite shell constructs bashlex cannot parse into marker commands and parameters."""

    def __init__(self, s: str, tables: dict[str, list]) -> None:
        self.s, self.tables = s, tables
        self.heredocs: list[tuple[str, bool]] = []
        self.ifs: list[int] = []  # elifs seen per open if

    def _param(self, kind: str, value: object) -> str:
        """Store ``value`` in table ``kind``; bashlex sees only a plain ``${__mp_<kind><n>}``.

        Kinds: ``a`` arithmetic, ``c`` command substitution, ``p`` ``${...}`` expansion
        (rewritten inner text, original text), ``q`` quoted literal text.
        """
        self.tables[kind].append(value)
        return f"${{__mp_{kind}{len(self.tables[kind]) - 1}}}"

    def dollar(self, i: int) -> tuple[str, int]:
        """Rewrite the expansion starting at ``s[i] == '$'``."""
        s, nxt = self.s, self.s[i + 1:i + 2]
        if nxt in ("(", "["):
            j = _close(s, i + 1)
            if s.startswith("$((", i) and s[j - 2:j] == "))":
                return self._param("a", s[i + 3:j - 2]), j
            if nxt == "[":
                return self._param("a", s[i + 2:j - 1]), j
            return self._param("c", s[i:j]), j
        if nxt == "{":
            j = _close(s, i + 1)
            return self._param("p", (self.inner(i + 2, j - 1), s[i:j])), j
        if nxt == "'":
            j = i + 2
            while j < len(s) and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= len(s):
                raise ShellParseError("unterminated $' quote")
            return '"' + self._param("q", _ansi_c(s[i + 2:j])) + '"', j + 1
        return "$", i + 1

    def inner(self, i: int, end: int) -> str:
        """Copy ``s[i:end]`` (inside double quotes or ``${}``) rewriting nested expansions."""
        out = []
        while i < end:
            c = self.s[i]
            if c == "$" and self.s[i + 1:i + 2] != "'":
                text, i = self.dollar(i)
            elif c == "`":
                text, i = self.backquote(i)
            else:
                j = i + 2 if c == "\\" else i + 1
                text, i = self.s[i:j], j
            out.append(text)
        return "".join(out)

    def backquote(self, i: int) -> tuple[str, int]:
        j = self.s.find("`", i + 1) + 1
        if not j:
            raise ShellParseError("unterminated ` quote")
        return self._param("c", self.s[i:j]), j

    def word(self, i: int) -> tuple[str, int]:
        """Read one shell word from ``i``; return its rewritten text and the index after it."""
        s, out = self.s, []
        while i < len(s) and s[i] not in " \t\n" and s[i] not in _OPS:
            c = s[i]
            if c == "'":
                j = s.find("'", i + 1) + 1
                if not j:
                    raise ShellParseError("unterminated ' quote")
                text = '"' + self._param("q", s[i + 1:j - 1]) + '"'
            elif c == "`":
                text, j = self.backquote(i)
            elif c == '"':
                j = i + 1
                while j < len(s) and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                if j >= len(s):
                    raise ShellParseError('unterminated " quote')
                text, j = '"' + self.inner(i + 1, j) + '"', j + 1
            elif c == "$":
                text, j = self.dollar(i)
            else:
                j = i + 2 if c == "\\" else i + 1
                text = s[i:j]
            out.append(text)
            i = j
        return "".join(out), i

    def heredoc_bodies(self, i: int) -> tuple[str, int]:
        """Skip pending here-document bodies from ``i`` (a line start), keeping their ends."""
        out = []
        for delim, strip in self.heredocs:
            while i < len(self.s):
                end = self.s.find("\n", i) + 1 or len(self.s)
                line, i = self.s[i:end], end
                if (line.lstrip("\t") if strip else line).rstrip("\n") == delim:
                    out.append(delim + "\n")
                    break
            else:
                raise ShellParseError(f"here-document without its end {delim!r}")
        self.heredocs = []
        return "".join(out), i

    def scan(self, i: int, mode: str) -> tuple[str, int]:
        """Rewrite from ``i`` until the end of ``mode``: top, array ``)``, cond ``]]``, case ``;;``."""
        s, out, cmd = self.s, [], True
        while i < len(s):
            c = s[i]
            if c in " \t" or s.startswith("\\\n", i):
                step = 2 if c == "\\" else 1
                out.append(s[i:i + step])
                i += step
            elif c == "\n":
                out.append(" \\\n" if mode in ("array", "cond") else "\n")
                i, cmd = i + 1, True
                if self.heredocs:
                    body, i = self.heredoc_bodies(i)
                    out.append(body)
            elif c == "#":
                i = s.find("\n", i) if s.find("\n", i) >= 0 else len(s)
            elif mode == "array" and c == ")":
                return "".join(out), i + 1
            elif mode == "case" and (s.startswith(";;", i) or s.startswith(";&", i)):
                return "".join(out), i + (3 if s.startswith(";;&", i) else 2)
            elif cmd and s.startswith("((", i):
                j = _close(s, i)
                out.append(f"{_ARITH} " + self._param("a", s[i + 2:j - 2]))
                i, cmd = j, False
            elif c in _OPS:
                i, cmd = self.operator(i, mode, out)
            else:
                done, i, cmd = self.word_unit(i, mode, cmd, out)
                if done:
                    return "".join(out), i
        if mode != "top":
            raise ShellParseError(f"unterminated {'array (' if mode == 'array' else mode} block")
        return "".join(out), i

    def operator(self, i: int, mode: str, out: list[str]) -> tuple[int, bool]:
        s = self.s
        if mode == "cond":
            if s.startswith("&&", i) or s.startswith("||", i):
                out.append(" -a " if s[i] == "&" else " -o ")
                return i + 2, False
            out.append("\\" + s[i])
            return i + 1, False
        if s.startswith("<<", i) and not s.startswith("<<<", i):
            j = i + 2 + (s[i + 2:i + 3] == "-")
            while j < len(s) and s[j] in " \t":
                j += 1
            word, k = self.word(j)
            self.heredocs.append((re.sub(r"[\"'\\]", "", word), s[i + 2:i + 3] == "-"))
            out.append(s[i:k])
            return k, False
        out.append(s[i])
        return i + 1, s[i] in ";&|("

    def word_unit(self, i: int, mode: str, cmd: bool, out: list[str]) -> tuple[bool, int, bool]:
        """Handle a word at ``i``; return (end of block, next index, command position)."""
        m = _ARRAY_RE.match(self.s, i) if mode != "cond" else None
        if m:
            body, j = self.scan(m.end(), "array")
            out.append(f"{_ARRAY} {m.group(1)} {m.group(2)}= {body}")
            return False, j, False
        word, j = self.word(i)
        if mode == "cond" and word == "]]":
            out.append(" ]]")
            return True, j, False
        if cmd and word == "[[":
            body, j = self.scan(j, "cond")
            out.append(_COND + body)
        elif cmd and word == "case":
            text, j = self.case(j)
            out.append(text)
        elif mode == "case" and cmd and word == "esac":
            return True, i, True
        elif cmd and word in ("if", "elif", "fi"):
            out.append(self.if_word(word))
            return False, j, word != "fi"
        else:
            out.append(word)
            return False, j, word in _STARTERS
        return False, j, False

    def if_word(self, word: str) -> str:
        """``elif`` -> ``else if`` (bashlex mislays positions in second and later elifs)."""
        if word == "if":
            self.ifs.append(0)
        elif word == "elif" and self.ifs:
            self.ifs[-1] += 1
            return "else if"
        elif word == "fi" and self.ifs:
            return "fi" + "; fi" * self.ifs.pop()
        return word

    def _blank(self, i: int) -> int:
        """Skip blanks, newlines, ``;``, line continuations and comments."""
        s = self.s
        while i < len(s):
            if s[i] in " \t\n;":
                i += 1
            elif s.startswith("\\\n", i):
                i += 2
            elif s[i] == "#":
                i = s.find("\n", i) if s.find("\n", i) >= 0 else len(s)
            else:
                break
        return i

    def case(self, i: int) -> tuple[str, int]:
        """Turn ``case WORD in pat) ...;; esac`` (after ``case``) into an if/elif chain."""
        subject, i = self.word(self._blank(i))
        keyword, i = self.word(self._blank(i))
        if keyword != "in":
            raise ShellParseError("case without 'in'")
        parts: list[str] = []
        while True:
            i = self._blank(i)
            if i >= len(self.s):
                raise ShellParseError("case without esac")
            word, j = self.word(i)
            if word == "esac":
                return "".join(parts) + "; ".join(["fi"] * len(parts)) if parts else ":", j
            i += self.s[i] == "("
            patterns = []
            while True:
                pattern, i = self.word(self._blank(i))
                patterns.append(pattern or "''")
                i = self._blank(i)
                if self.s[i:i + 1] not in ("|", ")"):
                    raise ShellParseError("bad case pattern")
                i += 1
                if self.s[i - 1] == ")":
                    break
            body, i = self.scan(i, "case")
            keyword = "else if" if parts else "if"
            parts.append(f"{keyword} {_CASE} {subject} {' '.join(patterns)}; then :\n{body}\n")


def _parse(text: str) -> list:
    try:
        return bashlex.parse(text)
    except Exception as err:  # noqa: BLE001  bashlex raises ParsingError, asserts, ...
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise ShellParseError(f"not a shell script bashlex can parse: {first}") from None


class _Fields:
    """Builds the fields of one expanded word, with the unresolved names each one holds."""

    def __init__(self, split: bool) -> None:
        self.split, self.out, self.cur = split, [], []
        self.unres: set[str] = set()
        self.has, self.count, self.mark, self.arrays = False, 0, 0, False

    def lit(self, text: str, unres: frozenset[str] | set[str] = frozenset()) -> None:
        self.cur.append(text)
        self.unres.update(unres)
        self.has, self.count = True, self.count + 1

    def quote(self, opening: bool) -> None:
        if opening:
            self.mark, self.arrays = self.count, False
        elif self.count == self.mark and not self.arrays:
            self.has = True  # "" is an empty field

    def brk(self) -> None:
        if self.has:
            self.out.append(("".join(self.cur), frozenset(self.unres)))
        self.cur, self.unres, self.has = [], set(), False

    def value(self, text: str, quoted: bool, unres: frozenset[str] = frozenset()) -> None:
        """Add an expansion result; unquoted results are split on blanks."""
        if quoted or not self.split:
            self.lit(text, unres)
            return
        keep = [u for u in unres if re.search(r"[ \t\n]", u) and u in text]
        for k, u in enumerate(keep):  # an unresolved placeholder stays one word
            text = text.replace(u, f"\0{k}\0")
        words = re.split(r"[ \t\n]+", text.strip(" \t\n")) if text.strip(" \t\n") else []
        for k, u in enumerate(keep):
            words = [w.replace(f"\0{k}\0", u) for w in words]
        if text[:1] in _IFS:
            self.brk()
        for k, word in enumerate(words):
            if k:
                self.brk()
            self.lit(word, unres)
        if words and text[-1:] in _IFS:
            self.brk()

    def values(self, items: list[str], quoted: bool, unres: frozenset[str]) -> None:
        """Add the elements of ``${X[@]}``: one field each when quoted."""
        self.arrays = True
        for k, item in enumerate(items):
            if k and self.split:
                self.brk()
            elif k:
                self.lit(" ")
            self.value(item, quoted, unres)

    def done(self) -> list[tuple[str, frozenset[str]]]:
        self.brk()
        return self.out


@dataclass
class _Var:
    value: str | list[str]
    unres: frozenset[str] = frozenset()

    def items(self) -> list[str]:
        return list(self.value) if isinstance(self.value, list) else [self.value]


class _Stop(Exception):
    """``exit``, a found launch or the step limit: stop interpreting."""


class _Return(Exception):
    """``return`` from a function."""


_BRACED = re.compile(r"([#!]?)([A-Za-z_]\w*|\d+|[@*#?$!-])(?:\[([^\]]*)\])?(.*)\Z", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_]\w*|\d|[@*#?$!-]")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)(?:\[([^\]]*)\])?(\+?)=(.*)\Z", re.DOTALL)
_PATTERN_OP = re.compile(r"(##?|%%?|//?|\^\^?|,,?)(.*)\Z", re.DOTALL)
_DEFAULT_OP = re.compile(r"(:?[-=+?])(.*)\Z", re.DOTALL)
_WRAP = 2 ** 64


def _wrap(v: int) -> int:
    return (v + _WRAP // 2) % _WRAP - _WRAP // 2


_BIN_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
            ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_CMP_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


def _arith_ast(node: ast.AST) -> int:
    """Evaluate a parsed integer expression: numbers and operators only, nothing is run."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _wrap(node.value)
    if isinstance(node, ast.UnaryOp):
        v = _arith_ast(node.operand)
        return _wrap({ast.USub: -v, ast.UAdd: v, ast.Invert: ~v, ast.Not: int(not v)}[type(node.op)])
    if isinstance(node, ast.BoolOp):
        vals = [_arith_ast(v) for v in node.values]
        return int(all(vals) if isinstance(node.op, ast.And) else any(vals))
    if isinstance(node, ast.Compare):
        vals = [_arith_ast(node.left)] + [_arith_ast(c) for c in node.comparators]
        return int(all(_CMP_OPS[type(op)](x, y) for op, x, y in zip(node.ops, vals, vals[1:])))
    if isinstance(node, ast.BinOp):
        a, b, op = _arith_ast(node.left), _arith_ast(node.right), type(node.op)
        if op in (ast.Div, ast.FloorDiv, ast.Mod):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if op is not ast.Mod else a - b * q
        if op is ast.Pow:
            if b < 0:
                raise ValueError("negative exponent")
            return _wrap(pow(a, b, _WRAP))
        if op in (ast.LShift, ast.RShift) and not 0 <= b < 64:
            raise ValueError("shift out of range")
        return _wrap(_BIN_OPS[op](a, b))
    raise ValueError("not an integer expression")


_BINARY = {"=", "==", "!=", "<", ">", "=~", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
_UNARY = {"-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-p", "-S", "-b", "-c", "-g",
          "-u", "-k", "-O", "-G", "-N", "-a", "-n", "-z", "-v", "-t"}


class _TestError(Exception):
    """A malformed test expression: the test is false."""


class _Test:
    """Evaluate ``[ ... ]`` / ``[[ ... ]]`` arguments (files are assumed to exist)."""

    def __init__(self, args: list[str], double: bool, variables: Mapping[str, _Var]) -> None:
        self.a, self.double, self.vars = args, double, variables

    def run(self) -> bool:
        try:
            value, i = self.any_of(0)
        except (_TestError, ValueError, RecursionError, re.error):
            return False
        return value and i == len(self.a)

    def any_of(self, i: int) -> tuple[bool, int]:
        value, i = self.all_of(i)
        while i < len(self.a) and self.a[i] == "-o":
            other, i = self.all_of(i + 1)
            value = value or other
        return value, i

    def all_of(self, i: int) -> tuple[bool, int]:
        value, i = self.negation(i)
        while i < len(self.a) and self.a[i] == "-a":
            other, i = self.negation(i + 1)
            value = value and other
        return value, i

    def negation(self, i: int) -> tuple[bool, int]:
        if i + 1 < len(self.a) and self.a[i] == "!":
            value, i = self.negation(i + 1)
            return not value, i
        return self.primary(i)

    def primary(self, i: int) -> tuple[bool, int]:
        a = self.a
        if i >= len(a):
            raise _TestError
        if a[i] == "(" and i + 1 < len(a):
            value, i = self.any_of(i + 1)
            if i >= len(a) or a[i] != ")":
                raise _TestError
            return value, i + 1
        if i + 2 < len(a) and a[i + 1] in _BINARY:
            return self.binary(a[i], a[i + 1], a[i + 2]), i + 3
        if a[i] in _UNARY and i + 1 < len(a):
            op, arg = a[i], a[i + 1]
            known = {"-n": arg != "", "-z": arg == "", "-v": arg in self.vars, "-t": False}
            return known.get(op, True), i + 2
        return a[i] != "", i + 1

    def binary(self, left: str, op: str, right: str) -> bool:
        if op in ("=", "==", "!="):
            glob = self.double and any(ch in right for ch in "*?[")
            same = fnmatch.fnmatchcase(left, right) if glob else left == right
            return same != (op == "!=")
        if op == "=~":
            return bool(re.search(right, left))
        if op in ("<", ">"):
            return left < right if op == "<" else left > right
        x, y = int(left), int(right)
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y,
                "-ge": x >= y}[op]


_TORCH = {"--nproc_per_node": "nproc", "--nproc-per-node": "nproc", "--nnodes": "nnodes"}
_SLURM = {"--ntasks-per-node": "nproc", "--nodes": "nnodes", "-N": "nnodes", "--ntasks": "world",
          "-n": "world"}
_MPI = {"-np": "world", "-n": "world", "--np": "world", "-npernode": "nproc",
        "--npernode": "nproc", "-N": "nproc"}
_DEEPSPEED = {"--num_gpus": "nproc", "--num-gpus": "nproc", "--num_nodes": "nnodes",
              "--num-nodes": "nnodes"}
_LAUNCHERS = {"torchrun": _TORCH, "torch.distributed.run": _TORCH,
              "torch.distributed.launch": _TORCH, "srun": _SLURM, "sbatch": _SLURM,
              "salloc": _SLURM, "mpirun": _MPI, "mpiexec": _MPI, "deepspeed": _DEEPSPEED}
_Field = tuple[str, frozenset[str]]


def _launch_options(fields: list[_Field], opts: dict[str, _Field]) -> bool:
    """Read process-count options of the launchers in ``fields``; return whether torchrun ran."""
    table, torch = None, False
    for k, (text, unres) in enumerate(fields):
        base = posixpath.basename(text)
        if base in _LAUNCHERS or base.startswith("python"):
            table = _LAUNCHERS.get(base)
            torch = torch or table is _TORCH
            continue
        if table is None:
            continue
        key, eq, val = text.partition("=") if text.startswith("--") else (text, "", "")
        if key in table and (eq or k + 1 < len(fields)):
            opts[table[key]] = (val, unres) if eq else fields[k + 1]
        elif text[:2] in table and len(text) > 2 and text[1] != "-":
            opts[table[text[:2]]] = (text[2:], unres)
    return torch


def _count(value: _Field | None, unresolved: dict[str, None]) -> int | None:
    """A process count (``8``, or ``2:2`` for torchrun's min:max nodes); None if unknown."""
    if value is None:
        return None
    text = value[0].strip()
    low, _, high = text.partition(":")
    if _INT.fullmatch(low) and (not high or high == low):
        return int(low)
    unresolved.update(dict.fromkeys(sorted(value[1])))
    return None


def _directives(text: str) -> list[list[_Field]]:
    """``#SBATCH`` lines as option lists of an ``sbatch`` command."""
    out = []
    for m in re.finditer(r"^[ \t]*#SBATCH[ \t]+(.*)$", text, re.MULTILINE):
        try:
            tokens = shlex.split(m.group(1), comments=True)
        except ValueError:
            continue
        out.append([(t, frozenset()) for t in ["sbatch", *tokens]])
    return out


def _glob_re(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def _ansi_c(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


class _Interp:
    """Walk bashlex trees tracking variables only; record the first Megatron-LM launch."""

    def __init__(self, env: Mapping[str, str], directives: list[list[_Field]]) -> None:
        self.vars = {str(k): _Var(str(v)) for k, v in env.items()}
        self.pinned = set(self.vars)
        self.directives, self.job = directives, []
        self.funcs: dict[str, object] = {}
        self.tables: dict[str, list] = {"a": [], "c": [], "p": [], "q": []}
        self.src, self.prefix, self.flags = "", [], []
        self.launch: LaunchLine | None = None
        self.steps = self.depth = 0
        self.exited = False

    # -- walking the tree ---------------------------------------------------------------
    def run_text(self, text: str) -> None:
        rewritten, _ = _Rewriter(text, self.tables).scan(0, "top")
        trees = _parse(rewritten) if rewritten.strip() else []
        saved, self.src = self.src, rewritten
        try:
            for tree in trees:
                self.run(tree)
        finally:
            self.src = saved

    def nested(self, text: str, prefix: list[_Field]) -> None:
        """Interpret a ``sh -c`` or ``eval`` string, its launcher words prefixed."""
        if self.depth >= _MAX_DEPTH:
            return
        saved, self.prefix = self.prefix, self.prefix + prefix
        self.depth += 1
        try:
            self.run_text(text)
        except ShellParseError:
            pass
        except _Stop:
            if self.launch is not None:
                raise
        finally:
            self.prefix, self.depth = saved, self.depth - 1

    def raw(self, node) -> str:
        return self.src[node.pos[0]:node.pos[1]]

    def run(self, node) -> bool:
        """Interpret one node; return its exit status as a bool."""
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _Stop
        kind = node.kind
        if kind == "command":
            return self.command(node)
        if kind in ("list", "compound", "pipeline"):
            return self.sequence(node.list if kind == "compound" else node.parts)
        if kind in ("if", "while", "until"):
            return self.branch(node.parts)
        if kind == "for":
            return self.run_for(node.parts)
        if kind == "function":
            self.funcs[node.name.word] = node.body
        return True

    def run_nodes(self, nodes: list) -> bool:
        status = True
        for node in nodes:
            status = self.run(node)
        return status

    def sequence(self, parts: list) -> bool:
        status, skip, negate = True, False, False
        for p in parts:
            if p.kind == "operator":
                skip = (p.op == "&&" and not status) or (p.op == "||" and status)
            elif p.kind == "reservedword":
                negate = negate != (p.word == "!")
            elif p.kind != "pipe" and not skip:
                status = self.run(p)
        return status != negate

    def branch(self, parts: list) -> bool:
        """``if``/``elif``/``else``, or one pass of a ``while``/``until`` loop."""
        segments: list[tuple[str, list]] = []
        for p in parts:
            if p.kind == "reservedword" and p.word in _KEYWORDS:
                segments.append((p.word, []))
            elif segments:
                segments[-1][1].append(p)
        for k, (word, nodes) in enumerate(segments):
            body = segments[k + 1][1] if k + 1 < len(segments) else []
            if word in ("if", "elif", "while", "until"):
                if self.run_nodes(nodes) != (word == "until"):
                    return self.run_nodes(body)
                if word in ("while", "until"):
                    return True
            elif word == "else":
                return self.run_nodes(nodes)
        return True

    def run_for(self, parts: list) -> bool:
        items, body, mode = None, [], ""
        for p in parts[2:]:
            if p.kind == "reservedword" and p.word in ("in", "do", "done", ";", "{", "}"):
                mode, items = p.word, [] if p.word == "in" else items
            elif mode == "in" and p.kind == "word":
                items.extend(self.expand(self.raw(p)))
            elif mode in ("do", "{"):
                body.append(p)
        for text, unres in (items or [])[:_MAX_LOOP]:
            self.set_var(parts[1].word, text, unres)
            self.run_nodes(body)
        return True

    # -- simple commands ----------------------------------------------------------------
    def command(self, node) -> bool:
        words = [self.raw(p) for p in node.parts if p.kind == "word"]
        assigns = [self.raw(p) for p in node.parts if p.kind == "assignment"]
        while words and re.match(r"[A-Za-z_]\w*\[[^\]]*\]\+?=", words[0]):
            assigns.append(words.pop(0))  # bashlex reads X[i]=v as a word
        marker = self.marker(words) if words else None
        if marker is not None:
            return marker
        fields = [f for w in words for f in self.expand(w)]
        if not fields:
            for raw in assigns:
                self.assign(raw)
            return True
        return self.builtin(words, fields)

    def marker(self, words: list[str]) -> bool | None:
        """Run a rewritten array assignment, ``[[``, ``case`` or ``((`` command."""
        head = words[0]
        if _ARRAY in words:
            self.assign_array(words[words.index(_ARRAY) + 1:])
            return True
        if head == _COND:
            args = [self.string(w, blank=True) for w in words[1:]]
            return _Test(args[:-1] if args[-1:] == ["]]"] else args, True, self.vars).run()
        if head == _CASE and len(words) > 1:
            subject = self.string(words[1], blank=True)
            patterns = [self.string(p, blank=True) for p in words[2:]]
            return any(fnmatch.fnmatchcase(subject, p) for p in patterns)
        if head == _ARITH:
            value = self.string(words[1]) if len(words) > 1 else ""
            return bool(_INT.fullmatch(value)) and int(value) != 0
        return None

    def builtin(self, words: list[str], fields: list[_Field]) -> bool:
        name = fields[0][0]
        if name in ("export", "declare", "typeset", "local", "readonly"):
            for raw in words[1:]:
                if _ASSIGN.match(raw):
                    self.assign(raw)
        elif name in ("[", "test") and words[0] == name:
            args = [t for w in words[1:] for t, _ in self.expand(w, blank=True)]
            if name == "[" and args[-1:] != ["]"]:
                return False
            return _Test(args[:-1] if name == "[" else args, False, self.vars).run()
        elif name in ("false", "exit", "return"):
            self.exited = self.exited or name == "exit"
            if name != "false":
                raise _Stop if name == "exit" else _Return
            return False
        elif name == "unset":
            for text, _ in fields[1:]:
                if text not in self.pinned:
                    self.vars.pop(text, None)
        elif name == "eval":
            self.nested(" ".join(t for t, _ in fields[1:]), [])
        elif name in self.funcs:
            self.call(name, fields)
        else:
            if posixpath.basename(name) in ("sbatch", "salloc"):
                self.job.append(fields)
            self.detect(fields)
        return True

    def call(self, name: str, fields: list[_Field]) -> None:
        """Run a shell function with its positional parameters set."""
        if self.depth >= _MAX_DEPTH:
            return
        positional = [k for k in self.vars if k.isdigit() or k in ("@", "#", "*")]
        saved = {k: self.vars.pop(k) for k in positional}
        args = fields[1:]
        self.vars.update({str(k): _Var(t, u) for k, (t, u) in enumerate(args, 1)})
        self.vars["#"] = _Var(str(len(args)))
        self.vars["@"] = _Var([t for t, _ in args], frozenset().union(*(u for _, u in args)))
        self.depth += 1
        try:
            self.run(self.funcs[name])
        except _Return:
            pass
        finally:
            self.depth -= 1
            for k in [k for k in self.vars if k.isdigit() or k in ("@", "#", "*")]:
                del self.vars[k]
            self.vars.update(saved)

    def detect(self, fields: list[_Field]) -> None:
        """Record a Megatron-LM launch (or a line of bare flags) in an expanded command."""
        texts = [t for t, _ in fields]
        if posixpath.basename(texts[0]) in _NOT_LAUNCH:
            return
        for k, text in enumerate(texts):
            shell = k > 0 and posixpath.basename(texts[k - 1]) in ("sh", "bash", "dash", "zsh")
            if shell and text == "-c" and k + 1 < len(texts):
                self.nested(texts[k + 1], fields[:k - 1])
                return
            if _ENTRY.match(posixpath.basename(text)):
                self.launch = self.make_launch(self.prefix + fields[:k], fields[k + 1:], text)
                raise _Stop
        if texts[0].startswith("-"):
            self.flags.extend(fields)

    def make_launch(self, launcher: list[_Field], argv: list[_Field], entry: str | None
                    ) -> LaunchLine:
        unresolved = dict.fromkeys(u for _, us in argv for u in sorted(us))
        opts: dict[str, _Field] = {}
        torch = False
        for fields in [*self.directives, *self.job, launcher]:
            torch = _launch_options(fields, opts) or torch
        nproc, nnodes, world = (_count(opts.get(k), unresolved) for k in ("nproc", "nnodes", "world"))
        if nnodes is None and torch and nproc is not None and "nnodes" not in opts:
            nnodes = 1  # torchrun's default
        if nproc is not None and nnodes is not None:
            world = nproc * nnodes
        elif world is None and isinstance(self.vars.get("WORLD_SIZE", _Var([])).value, str):
            var = self.vars["WORLD_SIZE"]
            world = _count((var.value, var.unres), unresolved)
        if nnodes is None and world and nproc and world % nproc == 0:
            nnodes = world // nproc
        if nproc is None and world and nnodes and world % nnodes == 0:
            nproc = world // nnodes
        return LaunchLine([t for t, _ in argv], nproc, nnodes, world, list(unresolved), entry)

    # -- variables ----------------------------------------------------------------------
    def assign(self, raw: str) -> None:
        m = _ASSIGN.match(raw)
        if m:
            name, index, plus, value = m.groups()
            fields = self.expand(value, split=False)
            unres = frozenset().union(*(u for _, u in fields))
            self.set_var(name, "".join(t for t, _ in fields), unres, bool(plus), index)

    def assign_array(self, words: list[str]) -> None:
        if len(words) >= 2:
            fields = [f for w in words[2:] for f in self.expand(w)]
            unres = frozenset().union(*(u for _, u in fields))
            self.set_var(words[0], [t for t, _ in fields], unres, words[1] == "+=")

    def set_var(self, name: str, value: str | list[str], unres: frozenset[str],
                append: bool = False, index: str | None = None) -> None:
        """Assign (or append to) a variable, unless the caller's ``env`` pinned it."""
        if name in self.pinned:
            return
        old = self.vars.get(name)
        if index is not None:
            k, _ = self.arith(index)
            if k is None or not 0 <= k <= 4096 or isinstance(value, list):
                return
            items = old.items() if old else []
            items += [""] * (k + 1 - len(items))
            items[k] = items[k] + value if append else value
            value = items
        elif append and old is not None:
            if isinstance(value, list):
                value = old.items() + value
            elif isinstance(old.value, list):
                value = [(old.value[0] if old.value else "") + value] + old.value[1:]
            else:
                value = old.value + value
        if append and old is not None:
            unres = unres | old.unres
        self.vars[name] = _Var(value, frozenset(unres))

    def element(self, var: _Var, index: str | None) -> str | None:
        items = var.items()
        if index is None:
            return items[0] if items else ""
        k, _ = self.arith(index)
        if k is None:
            return None
        return items[k] if -len(items) <= k < len(items) else ""

    def arith(self, expr: str, depth: int = 0) -> tuple[int | None, set[str]]:
        """Evaluate bash integer arithmetic; return (value or None, unresolved names)."""
        fields = self.expand(expr, split=False)
        names = set().union(*(u for _, u in fields))
        if names or depth > _MAX_DEPTH:
            return None, names
        missing: set[str] = set()

        def value(m: re.Match) -> str:
            var = self.vars.get(m.group())
            sub = self.arith(self.element(var, None) or "0", depth + 1) if var else (None, set())
            if sub[0] is None:
                missing.update(sub[1] or {"$" + m.group()})
            return str(sub[0] or 0)

        text = re.sub(r"(?<!\w)[A-Za-z_]\w*", value, "".join(t for t, _ in fields))
        if missing:
            return None, missing
        text = re.sub(r"!(?!=)", " not ", text.replace("&&", " and ").replace("||", " or "))
        try:
            return _arith_ast(ast.parse(text.strip() or "0", mode="eval").body), set()
        except (SyntaxError, ValueError, KeyError, ZeroDivisionError, RecursionError,
                MemoryError, OverflowError, TypeError):
            return None, set()

    # -- word expansion -----------------------------------------------------------------
    def string(self, raw: str, blank: bool = False) -> str:
        return "".join(t for t, _ in self.expand(raw, split=False, blank=blank))

    def expand(self, raw: str, split: bool = True, blank: bool = False) -> list[_Field]:
        """Expand one word: quotes, parameters, arithmetic; split unquoted results if ``split``.

        Unknown variables and command substitutions stay as placeholder text and are named in
        each field's unresolved set; with ``blank`` (tests) they expand to nothing instead.
        """
        b, i, dq = _Fields(split), 0, False
        while i < len(raw):
            c = raw[i]
            if c == '"':
                dq = not dq
                b.quote(dq)
                i += 1
            elif c == "'" and not dq:
                j = raw.find("'", i + 1) if raw.find("'", i + 1) >= 0 else len(raw)
                b.lit(raw[i + 1:j])
                i = j + 1
            elif c == "\\":
                nxt = raw[i + 1:i + 2]
                if dq and nxt not in ('$', '`', '"', '\\', '\n'):
                    b.lit(c)
                    i += 1
                    continue
                if nxt != "\n":
                    b.lit(nxt)
                i += 2
            elif raw.startswith('$"', i) and not dq:
                i += 1
            elif c == "$":
                i = self.dollar(raw, i, b, dq, blank)
            else:
                b.lit(c)
                i += 1
        return b.done()

    def unresolved(self, placeholder: str, b: _Fields, blank: bool,
                   names: set[str] | frozenset[str] | None = None) -> None:
        if not blank:
            b.lit(placeholder, names or {placeholder})

    def dollar(self, raw: str, i: int, b: _Fields, dq: bool, blank: bool) -> int:
        """Expand the ``$`` expansion at ``raw[i]``; return the index after it."""
        nxt = raw[i + 1:i + 2]
        if nxt in ("{", "(", "["):
            j = _close(raw, i + 1)
            if nxt == "{":
                self.braced(raw[i + 2:j - 1], raw[i:j], b, dq, blank)
            else:
                self.unresolved(raw[i:j], b, blank)  # command substitution: never run
            return j
        m = _NAME.match(raw, i + 1)
        if not m:
            b.lit("$")
            return i + 1
        self.put(self.vars.get(m.group()), m.group(), None, "$" + m.group(), b, dq, blank)
        return m.end()

    def put(self, var: _Var | None, name: str, index: str | None, placeholder: str,
            b: _Fields, dq: bool, blank: bool) -> None:
        """Add a variable's value (or a placeholder if it has none)."""
        if var is None:
            self.unresolved(placeholder, b, blank, {"$" + name})
            return
        index = name if name in ("@", "*") and index is None else index
        if index == "*" and dq:
            b.value(" ".join(var.items()), True, var.unres)
        elif index in ("@", "*"):
            b.values(var.items(), dq, var.unres)
        else:
            text = self.element(var, index)
            if text is None:
                self.unresolved(placeholder, b, blank, {"$" + name})
            else:
                b.value(text, dq, var.unres)

    def braced(self, inner: str, rawtext: str, b: _Fields, dq: bool, blank: bool) -> None:
        """Expand ``${...}``: plain, ``#`` length, ``!`` indirection, defaults, patterns."""
        m = _BRACED.match(inner)
        if not m:
            self.unresolved(rawtext, b, blank)
            return
        pre, name, index, rest = m.groups()
        if re.fullmatch(r"__mp_[acpq]\d+", name):
            self.rewritten(name, b, dq, blank)
            return
        var = self.vars.get(name)
        if pre == "!" and var is not None:
            var = self.vars.get(self.element(var, index) or "")
            index = None
        if pre == "#":
            count = None if var is None or rest else (
                len(var.items()) if index in ("@", "*") else len(self.element(var, index) or ""))
            self.put(None if count is None else _Var(str(count)), name, None, rawtext, b, dq, blank)
            return
        op, pat = _DEFAULT_OP.match(rest), _PATTERN_OP.match(rest)
        sub = re.fullmatch(r":\s*(-?\d+)(?::\s*(-?\d+))?", rest)
        if op:
            self.default(var, name, index, op.group(1), op.group(2), rawtext, b, dq, blank)
            return
        whole = index in ("@", "*") or name in ("@", "*")
        if var is not None and sub:
            start, length = int(sub.group(1)), sub.group(2)
            start -= 1 if name in ("@", "*") and start > 0 else 0  # $@ counts from $1
            items = var.items() if whole else [self.element(var, index) or ""]
            target = items if whole else items[0]
            cut = target[start:][:None if length is None else int(length)]
            var, index = _Var(cut, var.unres), index if whole else None
        elif var is not None and pat:
            items = [self.transform(x, pat.group(1), pat.group(2)) for x in var.items()]
            var = _Var(items if isinstance(var.value, list) else items[0], var.unres)
        elif rest:
            var = None
        self.put(var, name, index, rawtext, b, dq, blank)

    def rewritten(self, name: str, b: _Fields, dq: bool, blank: bool) -> None:
        """Expand a rewriter parameter: arithmetic (evaluated), command substitution (never
        run), a ``${...}`` expansion or quoted literal text."""
        kind, entry = name[5], self.tables[name[5]][int(name[6:])]
        if kind == "q":
            b.lit(entry)
        elif kind == "p":
            self.braced(entry[0], entry[1], b, dq, blank)
        elif kind == "c":
            self.unresolved(entry, b, blank)
        else:
            value, names = self.arith(entry)
            if value is None:
                self.unresolved(f"$(({entry}))", b, blank, names or None)
            else:
                b.value(str(value), dq)

    def default(self, var: _Var | None, name: str, index: str | None, op: str, word: str,
                rawtext: str, b: _Fields, dq: bool, blank: bool) -> None:
        """``${X-w}``, ``${X:-w}``, ``${X:=w}``, ``${X:+w}``, ``${X:?w}`` and their colon-less forms."""
        empty = var is None or (not any(var.items()) if index in ("@", "*")
                                else not self.element(var, index))
        isset = var is not None and not (op.startswith(":") and empty)
        if op[-1] == "+":
            if isset:
                self.put_word(word, b, dq, blank)
        elif isset:
            self.put(var, name, index, rawtext, b, dq, blank)
        elif op[-1] == "?":
            self.unresolved(rawtext, b, blank, {"$" + name})
        else:
            if op[-1] == "=":
                fields = self.expand(word, split=False)
                unres = frozenset().union(*(u for _, u in fields))
                self.set_var(name, "".join(t for t, _ in fields), unres)
            self.put_word(word, b, dq, blank)

    def put_word(self, word: str, b: _Fields, dq: bool, blank: bool) -> None:
        quoted = dq or "'" in word or '"' in word
        for text, unres in self.expand(word, split=False, blank=blank):
            b.value(text, quoted, unres)

    def transform(self, text: str, op: str, raw_pattern: str) -> str:
        """``#``/``##``/``%``/``%%`` trims, ``/``/``//`` replacement, ``^^``/``,,`` case."""
        if op[0] in "^,":
            change = str.upper if op[0] == "^" else str.lower
            return change(text) if len(op) == 2 else change(text[:1]) + text[1:]
        if op[0] == "/":
            find, _, repl = raw_pattern.partition("/")
            find, repl = self.string(find), self.string(repl)
            return re.sub(_glob_re(find), lambda _: repl, text, count=0 if op == "//" else 1
                          ) if find else text
        pattern, n = self.string(raw_pattern), len(text)
        shortest = len(op) == 1
        if op[0] == "#":
            for k in (range(n + 1) if shortest else range(n, -1, -1)):
                if fnmatch.fnmatchcase(text[:k], pattern):
                    return text[k:]
        else:
            for k in (range(n, -1, -1) if shortest else range(n + 1)):
                if fnmatch.fnmatchcase(text[k:], pattern):
                    return text[:k]
        return text


def extract_launch(text: str, env: Mapping[str, str] | None = None) -> LaunchLine:
    """Find the Megatron-LM launch in a shell script or command line, without running it.

    ``argv`` holds the arguments after the entry point (``pretrain_gpt.py``, any
    ``pretrain_*.py``/``train*.py``), or every word if the text is only flags. Process counts
    come from torchrun / ``python -m torch.distributed.run|launch``, srun/sbatch options and
    ``#SBATCH`` lines, mpirun or deepspeed, else a ``WORLD_SIZE`` variable. Variables in ``env``
    are pinned: they win over the script's own assignments and defaults. Variables with no
    value (``$1``) stay as placeholders in ``argv`` and are listed in ``unresolved``.

    Raises :class:`ShellParseError` if bashlex cannot parse the text or it holds neither an
    entry point nor flags.
    """
    interp = _Interp(env or {}, _directives(text))
    try:
        interp.run_text(text)
    except (_Stop, _Return):
        pass
    if interp.launch is not None:
        return interp.launch
    if interp.flags:
        return interp.make_launch([], interp.flags, None)
    where = " before the script's exit" if interp.exited else ""
    raise ShellParseError(
        f"no Megatron-LM entry point (pretrain_*.py, train*.py) or flags found{where}")
