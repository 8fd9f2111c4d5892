"""Word and parameter expansion, and integer arithmetic.

:class:`Expander` expands one word into fields: quotes, ``$X``, ``${X[i]}``, ``${X[@]}``,
``${#X}``, ``${!X}``, ``${X:-w}`` and the other default forms, ``#``/``%`` trims, ``/``
replacement, ``^^``/``,,`` case and ``:offset:length`` substrings, and the rewriter's
``${__mp_...}`` parameters. ``$((...))`` is evaluated by :func:`_arith_ast` on a Python ``ast``
of numbers and operators only. Command substitutions are never run: a few whose output follows from
their words alone are computed (``subst``), the others stay placeholders.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
from collections.abc import Mapping

from planner.megatron.shell.fields import Field, Fields, Var, Variables
from planner.megatron.shell.launch import ShellParseError
from planner.megatron.shell.rewrite import close_bracket

MAX_DEPTH = 8
_BRACED = re.compile(r"([#!]?)([A-Za-z_]\w*|\d+|[@*#?$!-])(?:\[([^\]]*)\])?(.*)\Z", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_]\w*|\d|[@*#?$!-]")
_PATTERN_OP = re.compile(r"(##?|%%?|//?|\^\^?|,,?)(.*)\Z", re.DOTALL)
_DEFAULT_OP = re.compile(r"(:?[-=+?])(.*)\Z", re.DOTALL)
_WRAP = 2**64


def _wrap(v: int) -> int:
    return (v + _WRAP // 2) % _WRAP - _WRAP // 2


_BIN_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
}
_CMP_OPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _arith_ast(node: ast.AST) -> int:
    """Evaluate a parsed integer expression: numbers and operators only, nothing is run."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _wrap(node.value)
    if isinstance(node, ast.UnaryOp):
        v = _arith_ast(node.operand)
        return _wrap({ast.USub: -v, ast.UAdd: v, ast.Invert: ~v, ast.Not: int(not v)}[type(node.op)])
    if isinstance(node, ast.IfExp):
        return _arith_ast(node.body) if _arith_ast(node.test) else _arith_ast(node.orelse)
    if isinstance(node, ast.BoolOp):
        vals = [_arith_ast(v) for v in node.values]
        return int(all(vals) if isinstance(node.op, ast.And) else any(vals))
    if isinstance(node, ast.Compare):
        vals = [_arith_ast(node.left)] + [_arith_ast(c) for c in node.comparators]
        return int(all(_CMP_OPS[type(op)](x, y) for op, x, y in zip(node.ops, vals, vals[1:], strict=False)))
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


_ARITH_ASSIGN = re.compile(r"\s*([A-Za-z_]\w*)\s*(<<=|>>=|[-+*/%&|^]?=)(?!=)(.*)\Z", re.DOTALL)
_INC_DEC = re.compile(r"(\+\+|--)\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(\+\+|--)")
_ARITH_ERRORS = (
    SyntaxError,
    ValueError,
    KeyError,
    ZeroDivisionError,
    RecursionError,
    MemoryError,
    OverflowError,
    TypeError,
)


def _outside_expansions(expr: str) -> str:
    """An arithmetic expression as written, its ``$(...)``, ``${...}`` and backquoted parts each made ``0``: what
    it assigns, never an option inside a command (``$(nvidia-smi --query-gpu=name)`` is no ``--query``)."""
    out, i = [], 0
    while i < len(expr):
        if expr[i] == "$" and expr[i + 1 : i + 2] in ("(", "{"):
            try:
                i = close_bracket(expr, i + 1)
            except ShellParseError:
                return ""
            out.append("0")
        elif expr[i] == "`":
            end = expr.find("`", i + 1)
            i = len(expr) if end < 0 else end + 1
            out.append("0")
        else:
            out.append(expr[i])
            i += 1
    return "".join(out)


def _top_level(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(text):
        depth += (c in "({") - (c in ")}")
        if c == sep and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return [*parts, text[start:]]


def _conditional(text: str) -> str:
    """bash's ``c ? x : y`` as Python's ``(x) if (c) else (y)``, nested to any depth as bash reads it: the lowest
    precedence but assignment and comma, right-associative (``a ? b : c ? d : e`` is ``a ? b : (c ? d : e)``),
    its middle a whole expression (``a ? b ? c : d : e``), and inside parentheses (ux9 read one level only)."""
    out, i = [], 0
    while i < len(text):  # each parenthesised group first, on its own
        if text[i] == "(":
            j = close_bracket(text, i)
            out.append("(" + _conditional(text[i + 1 : j - 1]) + ")")
            i = j
        else:
            out.append(text[i])
            i += 1
    flat = "".join(out)
    ask = _top_level(flat, "?")
    if len(ask) == 1:
        return flat
    condition, rest, depth = ask[0], "?".join(ask[1:]), 0
    for k, c in enumerate(rest):  # the ':' of this '?': nested '?'s in the middle take theirs first
        depth += (c == "?") - (c == ":")
        if depth < 0:
            return f"(({_conditional(rest[:k])}) if ({condition}) else ({_conditional(rest[k + 1 :])}))"
    raise ValueError("'?' without its ':'")


def _evaluate(text: str) -> int | None:
    """An integer expression of numbers and bash's operators (``&&``, ``||``, ``!``, ``?:`` nested to any depth),
    or None when it is not one."""
    text = re.sub(r"!(?!=)", " not ", text.replace("&&", " and ").replace("||", " or "))
    try:
        return _arith_ast(ast.parse(_conditional(text).strip() or "0", mode="eval").body)
    except (*_ARITH_ERRORS, ShellParseError):
        return None


def _glob_re(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


class Expander:
    """Variables and word expansion: quotes, ``$X``, ``${...}`` forms and ``$((...))``.

    Subclassed by the interpreter; holds the variables, the names ``env`` pinned and the
    rewriter's side tables.
    """

    def __init__(self, env: Mapping[str, str]) -> None:
        self.vars = Variables({str(k): Var(str(v)) for k, v in env.items()})
        self.pinned = set(self.vars)
        self.exported = set(self.vars)  # names a child process (bash FILE, sbatch FILE) sees: the environment's
        self.allexport = False  # set -a
        self.tables: dict[str, list] = {"a": [], "c": [], "p": [], "q": [], "h": []}
        self.assoc: set[str] = set()  # names declared associative (declare -A)
        self.unevaluated: list[str] = []  # what bash would evaluate and megaplan did not (said in a note)
        self.unfilled: dict[str, str] = {}  # arrays an unevaluated mapfile/readarray would fill, and that command

    # -- variables ----------------------------------------------------------------------
    def set_var(
        self, name: str, value: str | list[str], unres: frozenset[str], append: bool = False, index: str | None = None
    ) -> None:
        """Assign (or append to) a variable, unless the caller's ``env`` pinned it."""
        if name in self.pinned:
            return
        old = self.vars.get(name)
        if index is not None and (name in self.assoc or (old is not None and isinstance(old.value, dict))):
            table = dict(old.value) if old is not None and isinstance(old.value, dict) else {}
            key = self.string(index)
            if isinstance(value, str):
                table[key] = table.get(key, "") + value if append else value
            self.vars[name] = Var(table, frozenset(unres | (old.unres if old else frozenset())))
            return
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
        self.vars[name] = Var(value, frozenset(unres))
        if self.allexport:
            self.exported.add(name)

    def element(self, var: Var, index: str | None) -> str | None:
        if isinstance(var.value, dict):
            return var.value.get("0" if index is None else self.string(index), "")
        items = var.items()
        if index is None:
            return items[0] if items else ""
        k, _ = self.arith(index)
        if k is None:
            return None
        return items[k] if -len(items) <= k < len(items) else ""

    def arith(self, expr: str, depth: int = 0) -> tuple[int | None, set[str]]:
        """Evaluate bash integer arithmetic, assignments included (``x = y * 8``, ``x += 2``, ``x++``, ``--x``,
        ``a = 1, b = 2``); return (value or None, unresolved names). A variable assigned from what cannot be
        evaluated (a command's output, an unset name) holds the expression, unresolved, as bash would hold a
        value megaplan does not know."""
        fields = self.expand(expr, split=False)
        names = set().union(*(u for _, u in fields))
        text = "".join(t for t, _ in fields)
        if names or depth > MAX_DEPTH:
            self._unknown_assignments(expr, names or {f"$(({expr.strip()}))"})
            return None, names
        value, missing = None, set()
        for part in _top_level(text, ","):  # the comma operator: each in turn, the last one's value
            value, missing = self._arith_part(part, depth)
        return value, missing

    def _arith_part(self, text: str, depth: int) -> tuple[int | None, set[str]]:
        """One arithmetic expression without a top-level comma: an assignment (right to left), else its value
        with ``++``/``--`` applied to the variables they name."""
        m = _ARITH_ASSIGN.match(text)
        if m:
            name, op, rhs = m.groups()
            value, missing = self._arith_part(rhs, depth)
            if value is not None and op != "=":
                old, old_missing = self._arith_name(name, depth)
                value, missing = (None, old_missing) if old is None else self._combine(old, op[:-1], value)
            if value is None:
                self._unknown_assignments(text, missing or {f"$(({text.strip()}))"})
                return None, missing
            self.set_var(name, str(value), frozenset())
            return value, set()
        missing: set[str] = set()

        def step(m: re.Match) -> str:
            name, op = (m.group(2), m.group(1)) if m.group(1) else (m.group(3), m.group(4))
            old, lost = self._arith_name(name, depth)
            if old is None:
                missing.update(lost)
                return "0"
            new = _wrap(old + (1 if op == "++" else -1))
            self.set_var(name, str(new), frozenset())
            return str(new if m.group(1) else old)

        text = _INC_DEC.sub(step, text)
        if missing:
            return None, missing

        def value(m: re.Match) -> str:
            sub = self._arith_name(m.group(), depth)
            missing.update(sub[1])
            return str(sub[0] or 0)

        text = re.sub(r"(?<!\w)[A-Za-z_]\w*", value, text)
        if missing:
            return None, missing
        return _evaluate(text), set()

    def _arith_name(self, name: str, depth: int) -> tuple[int | None, set[str]]:
        """A variable's value in arithmetic (its text evaluated in turn, as bash does); None if unknown."""
        var = self.vars.get(name)
        if var is None:
            return None, {"$" + name}
        sub = self.arith(self.element(var, None) or "0", depth + 1)
        return (sub[0], set()) if sub[0] is not None else (None, sub[1] or {"$" + name})

    @staticmethod
    def _combine(old: int, op: str, value: int) -> tuple[int | None, set[str]]:
        """``x OP= v``: the old value and ``v`` under OP, as bash computes it."""
        result = _evaluate(f"({old}) {op} ({value})")
        return result, set()

    def _unknown_assignments(self, text: str, names: set[str]) -> None:
        """Variables an arithmetic expression assigns from what megaplan cannot evaluate: each holds the
        expression, unresolved (not a stale value, nor nothing), and the expression is said in a note."""
        for part in _top_level(text, ","):
            bare = _outside_expansions(part)
            m = _ARITH_ASSIGN.match(bare) or _INC_DEC.search(bare)
            if m is None:
                continue
            name = m.group(1) if m.re is _ARITH_ASSIGN else (m.group(2) or m.group(3))
            shown = "".join(part.split())  # one word, as a value: "$((N=$(nproc)*2))"
            self.set_var(name, f"$(({shown}))", frozenset(names))
            self.unevaluated.append(f"(( {' '.join(part.split())} ))")

    # -- word expansion -----------------------------------------------------------------
    def string(self, raw: str, blank: bool = False) -> str:
        return "".join(t for t, _ in self.expand(raw, split=False, blank=blank))

    def expand(self, raw: str, split: bool = True, blank: bool = False) -> list[Field]:
        """Expand one word: quotes, parameters, arithmetic; split unquoted results if ``split``.

        Unknown variables and command substitutions stay as placeholder text and are named in
        each field's unresolved set; with ``blank`` (tests) they expand to nothing instead.
        """
        b, i, dq = Fields(split), 0, False
        while i < len(raw):
            c = raw[i]
            if c == '"':
                dq = not dq
                b.quote(dq)
                i += 1
            elif c == "'" and not dq:
                j = raw.find("'", i + 1) if raw.find("'", i + 1) >= 0 else len(raw)
                b.lit(raw[i + 1 : j])
                i = j + 1
            elif c == "\\":
                nxt = raw[i + 1 : i + 2]
                if dq and nxt not in ("$", "`", '"', "\\", "\n"):
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

    def unresolved(
        self, placeholder: str, b: Fields, blank: bool, names: set[str] | frozenset[str] | None = None
    ) -> None:
        if not blank:
            b.lit(placeholder, names or {placeholder})

    def substitute(self, raw: str) -> str | None:
        """A command substitution's output, when it follows from its words alone (the interpreter's)."""
        return None

    def command_output(self, raw: str, b: Fields, dq: bool, blank: bool) -> None:
        """``$(cmd)``/`` `cmd` ``: its output when known without running anything, else a placeholder."""
        out = self.substitute(raw) if raw.startswith(("$(", "`")) else None
        if out is None:
            self.unresolved(raw, b, blank)
        else:
            b.value(out, dq)

    def dollar(self, raw: str, i: int, b: Fields, dq: bool, blank: bool) -> int:
        """Expand the ``$`` expansion at ``raw[i]``; return the index after it."""
        nxt = raw[i + 1 : i + 2]
        if nxt in ("{", "(", "["):
            j = close_bracket(raw, i + 1)
            if nxt == "{":
                self.braced(raw[i + 2 : j - 1], raw[i:j], b, dq, blank)
            else:
                self.command_output(raw[i:j], b, dq, blank)
            return j
        m = _NAME.match(raw, i + 1)
        if not m:
            b.lit("$")
            return i + 1
        self.put(self.vars.get(m.group()), m.group(), None, "$" + m.group(), b, dq, blank)
        return m.end()

    def put(
        self, var: Var | None, name: str, index: str | None, placeholder: str, b: Fields, dq: bool, blank: bool
    ) -> None:
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

    def braced(self, inner: str, rawtext: str, b: Fields, dq: bool, blank: bool) -> None:
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
            count = (
                None
                if var is None or rest
                else (len(var.items()) if index in ("@", "*") else len(self.element(var, index) or ""))
            )
            self.put(None if count is None else Var(str(count)), name, None, rawtext, b, dq, blank)
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
            cut = target[start:][: None if length is None else int(length)]
            var, index = Var(cut, var.unres), index if whole else None
        elif var is not None and pat:
            items = [self.transform(x, pat.group(1), pat.group(2)) for x in var.items()]
            var = Var(items if isinstance(var.value, list) else items[0], var.unres)
        elif rest:
            var = None
        self.put(var, name, index, rawtext, b, dq, blank)

    def rewritten(self, name: str, b: Fields, dq: bool, blank: bool) -> None:
        """Expand a rewriter parameter: arithmetic (evaluated), command substitution (never
        run), a ``${...}`` expansion or quoted literal text."""
        kind, entry = name[5], self.tables[name[5]][int(name[6:])]
        if kind == "q":
            b.lit(entry)
        elif kind == "p":
            self.braced(entry[0], entry[1], b, dq, blank)
        elif kind == "c":
            self.command_output(entry, b, dq, blank)
        else:
            value, names = self.arith(entry)
            if value is None:
                self.unresolved(f"$(({entry}))", b, blank, names or None)
            else:
                b.value(str(value), dq)

    def default(
        self,
        var: Var | None,
        name: str,
        index: str | None,
        op: str,
        word: str,
        rawtext: str,
        b: Fields,
        dq: bool,
        blank: bool,
    ) -> None:
        """``${X-w}``, ``${X:-w}``, ``${X:=w}``, ``${X:+w}``, ``${X:?w}`` and their colon-less forms."""
        empty = var is None or (not any(var.items()) if index in ("@", "*") else not self.element(var, index))
        isset = var is not None and not (op.startswith(":") and empty)
        if op[-1] == "+":
            if isset:
                self.put_word(word, b, dq, blank)
        elif isset:
            self.put(var, name, index, rawtext, b, dq, blank)
        elif op[-1] == "?":  # bash stops the script here; shown as ${X:?} (a message's spaces would split it)
            self.unresolved("${" + name + op + "}", b, blank, {"$" + name})
        else:
            if op[-1] == "=":
                fields = self.expand(word, split=False)
                unres = frozenset().union(*(u for _, u in fields))
                self.set_var(name, "".join(t for t, _ in fields), unres)
            self.put_word(word, b, dq, blank)

    def put_word(self, word: str, b: Fields, dq: bool, blank: bool) -> None:
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
            return re.sub(_glob_re(find), lambda _: repl, text, count=0 if op == "//" else 1) if find else text
        pattern, n = self.string(raw_pattern), len(text)
        shortest = len(op) == 1
        if op[0] == "#":
            for k in range(n + 1) if shortest else range(n, -1, -1):
                if fnmatch.fnmatchcase(text[:k], pattern):
                    return text[k:]
        else:
            for k in range(n, -1, -1) if shortest else range(n + 1):
                if fnmatch.fnmatchcase(text[k:], pattern):
                    return text[:k]
        return text
