"""Megatron-Bridge v0.6.0 performance recipes read by following their code, never running it.

A perf recipe (``perf_recipes/<family>/<gpu>/<model>.py``) starts from a library recipe or from another perf
recipe, assigns ``cfg.<section>.<field>`` values and calls helpers of its family's ``common.py`` and of
``perf_recipes/_common.py`` (``_benchmark_common``, ``_deepseek_v3_common``, ``_with_global_batch_size``, ...)
that assign more. This reader walks those statements in order over a dict of Bridge fields: assignments of
literals, of ``torch.<dtype>`` names, of fields already read; calls of functions found in the file or in the
perf-recipe modules it imports (arguments bound to parameters, defaults kept); ``if`` tests it can decide from
the fields read (a test it cannot decide runs neither branch); ``return``. A call it cannot follow (a library
recipe: the base beneath) assigns nothing. ``set_deepseek_v3_pipeline_model_parallel_layout`` (a library
function) is read as its v0.6.0 source does it: the layout given, or the even split of its layout map.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import PlannerError

UNKNOWN = object()  # a value the reader cannot know without running Bridge
MAX_DEPTH = 12  # calls followed inside one another (a recipe, its base perf recipe, their helpers)
PERF_PACKAGE = "megatron.bridge.perf_recipes"
DTYPE_MODULE = "torch"


@dataclass(frozen=True)
class Cfg:
    """A reference to the ConfigContainer (prefix "") or one of its sections ("model", ...)."""

    prefix: str

    def path(self, attr: str) -> str:
        return f"{self.prefix}.{attr}" if self.prefix else attr


@dataclass
class Module:
    """The functions and module-level constants of a perf recipe file and the perf modules it imports."""

    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    constants: dict[str, object] = field(default_factory=dict)
    imported: dict[str, str] = field(default_factory=dict)  # a name as used -> the name it was imported as
    missing: dict[str, str] = field(default_factory=dict)  # a name imported from a perf module not on disk -> it


def _package_root(path: Path) -> Path | None:
    """The ``perf_recipes`` directory a recipe file sits under."""
    for parent in path.resolve().parents:
        if parent.name == "perf_recipes":
            return parent
    return None


def _import_target(node: ast.ImportFrom, path: Path | None) -> tuple[str, Path | None] | None:
    """(module, its file) of a perf-recipe module a file imports from (absolute ``megatron.bridge.perf_recipes.x``
    or relative); the file is None where it cannot be placed (a recipe file copied out of its package); None for
    a module outside perf_recipes (a library recipe, Megatron-Core)."""
    mod = node.module or ""
    if node.level:
        shown = "." * node.level + mod
        if path is None or len(path.resolve().parents) < node.level:
            return shown, None
        base = path.resolve().parents[node.level - 1]
        return shown, base.joinpath(*mod.split(".")).with_suffix(".py") if mod else base / "__init__.py"
    if not (mod == PERF_PACKAGE or mod.startswith(PERF_PACKAGE + ".")):
        return None
    root, rest = _package_root(path) if path is not None else None, mod[len(PERF_PACKAGE) :].lstrip(".")
    if root is None:
        return mod, None
    return mod, root.joinpath(*rest.split(".")).with_suffix(".py") if rest else root / "__init__.py"


def load_module(text: str, path: Path | None) -> Module:
    """The file's functions and constants, then (not overriding them) those of the perf modules it imports."""
    module, seen = Module(), set()
    todo: list[tuple[str, Path | None]] = [(text, path)]
    while todo:
        source, where = todo.pop(0)
        tree = ast.parse(source, filename=str(where) if where is not None else "<recipe>")
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                module.imported.update({a.asname or a.name: a.name for a in node.names})
                target = _import_target(node, where)
                if target is not None and (target[1] is None or not target[1].is_file()):
                    module.missing.update({a.asname or a.name: target[0] for a in node.names})
                elif target is not None and target[1] not in seen:
                    seen.add(target[1])
                    todo.append((target[1].read_text(encoding="utf-8"), target[1]))
            if isinstance(node, ast.FunctionDef):
                module.functions.setdefault(node.name, node)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(_first_target(node), ast.Name):
                try:
                    module.constants.setdefault(_first_target(node).id, ast.literal_eval(node.value))
                except (ValueError, TypeError, SyntaxError):
                    pass
    for name in set(module.missing) & (set(module.functions) | set(module.constants)):
        del module.missing[name]  # found in another module read
    return module


def _first_target(node: ast.Assign | ast.AnnAssign) -> ast.AST:
    return node.targets[0] if isinstance(node, ast.Assign) else node.target


class Reader:
    """Follows one perf recipe's statements over ``fields`` (Bridge dotted paths -> values)."""

    def __init__(self, module: Module, name: str):
        self.module, self.name, self.fields, self.env = module, name, {}, {}
        self.base: str | None = None  # the library recipe the fields are set over
        self.special = {"set_deepseek_v3_pipeline_model_parallel_layout": self._deepseek_layout}

    def run(self, func: str, args: list, kwargs: dict, depth: int = 0):
        """Call ``func`` (a FunctionDef of the module) with evaluated arguments; its return value."""
        if depth > MAX_DEPTH:
            raise PlannerError(f"workload {self.name}: calls nest deeper than {MAX_DEPTH}; megaplan cannot follow")
        node = self.module.functions[func]
        scope = self._bind(node.args, args, kwargs)
        try:
            self._block(node.body, scope, depth)
        except _Return as ret:
            return ret.value
        return None

    def _bind(self, spec: ast.arguments, args: list, kwargs: dict) -> dict:
        params = [a.arg for a in spec.posonlyargs + spec.args]
        scope = dict.fromkeys(params + [a.arg for a in spec.kwonlyargs], UNKNOWN)
        for p, d in zip(params[len(params) - len(spec.defaults) :], spec.defaults, strict=True):
            scope[p] = self._eval(d, {}, 0)
        for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if d is not None:
                scope[a.arg] = self._eval(d, {}, 0)
        scope.update(zip(params, args, strict=False))
        scope.update({k: v for k, v in kwargs.items() if k in scope})
        return scope

    def _block(self, body: list[ast.stmt], scope: dict, depth: int) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Return):
                raise _Return(self._eval(stmt.value, scope, depth) if stmt.value is not None else None)
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and getattr(stmt, "value", None) is not None:
                value = self._eval(stmt.value, scope, depth)
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    self._store(target, value, stmt.value, scope)
            elif isinstance(stmt, ast.Expr):
                self._eval(stmt.value, scope, depth)
            elif isinstance(stmt, ast.If):
                test = self._eval(stmt.test, scope, depth)
                if test is not UNKNOWN:
                    self._block(stmt.body if test else stmt.orelse, scope, depth)

    def _store(self, target: ast.AST, value, node: ast.AST, scope: dict) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
            return
        if not isinstance(target, ast.Attribute):
            return
        owner = self._eval(target.value, scope, 0)
        if not isinstance(owner, Cfg):
            return
        path = owner.path(target.attr)
        if path == "env_vars" and isinstance(value, dict):
            self.env.update(value)
        elif isinstance(value, Cfg | _Section):
            self.fields.update(value.fields(path) if isinstance(value, _Section) else {})
        elif value is not UNKNOWN:
            self.fields[path] = value

    def _eval(self, node: ast.AST, scope: dict, depth: int):
        """A value: a literal, a Cfg reference, a field read, a call's result, or UNKNOWN."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            return self.module.constants.get(node.id, self._userbuffer_preset(node.id))
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, depth)
        if isinstance(node, ast.Call):
            return self._call(node, scope, depth)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self._eval(e, scope, depth) for e in node.elts]
            return UNKNOWN if UNKNOWN in items else list(items)
        if isinstance(node, ast.Dict):
            return self._dict(node, scope, depth)
        return _operators(self, node, scope, depth)

    def _userbuffer_preset(self, name: str):
        """An imported userbuffer preset of Bridge's comm_overlap.py (``userbuffers_fp8_h100_...``) by its name, which
        --tp-comm-overlap-cfg takes; UNKNOWN for any other name."""
        from planner.hardware.userbuffers import bridge_preset_named

        original = self.module.imported.get(name)
        return original if original is not None and bridge_preset_named(original) is not None else UNKNOWN

    def _attribute(self, node: ast.Attribute, scope: dict, depth: int):
        if isinstance(node.value, ast.Name) and node.value.id == DTYPE_MODULE and node.value.id not in scope:
            return f"{DTYPE_MODULE}.{node.attr}"  # torch.bfloat16, as a ConfigContainer YAML writes a dtype
        owner = self._eval(node.value, scope, depth)
        if not isinstance(owner, Cfg):
            return UNKNOWN
        path = owner.path(node.attr)
        if "." not in path:
            return Cfg(path)  # a section (model, train, mixed_precision, ...)
        return self.fields.get(path, UNKNOWN)

    def _dict(self, node: ast.Dict, scope: dict, depth: int):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            v = self._eval(value, scope, depth)
            if key is None and isinstance(v, dict):  # **OTHER
                out.update(v)
            elif key is None and isinstance(value, ast.Name) and value.id in self.module.missing:
                raise self._missing(value.id)
            elif key is not None and v is not UNKNOWN:
                out[self._eval(key, scope, depth)] = v
        return out

    def _call(self, node: ast.Call, scope: dict, depth: int):
        func = node.func.id if isinstance(node.func, ast.Name) else None
        args = [self._eval(a, scope, depth) for a in node.args]
        kwargs = {k.arg: self._eval(k.value, scope, depth) for k in node.keywords if k.arg}
        if func in self.special:
            return self.special[func](args, kwargs)
        if func in ("getattr", "hasattr") and len(args) >= 2:
            return _getattr(self, func, node, args, scope, depth)
        if func == "_perf_precision" or func == "CommOverlapConfig":
            return _Section(func, args, kwargs, self.name)
        if func in self.module.functions:
            return self.run(func, args, kwargs, depth + 1)
        if func is not None and func.endswith("_config") and not args:
            self.base = self.base or self.module.imported.get(func, func)
            return Cfg("")  # a library recipe: the base recipe beneath the fields read
        if func in self.module.missing:
            raise self._missing(func)
        return UNKNOWN

    def _missing(self, used: str) -> PlannerError:
        """A helper or shared value imported from a perf-recipe module that is not beside the file: what it
        sets would be left out, so the workload is refused, naming where the module should be."""
        return PlannerError(
            f"workload {self.name}: uses {used} from {self.module.missing[used]}, a perf-recipe module not found "
            "beside the file; read the recipe inside Bridge's src/megatron/bridge/perf_recipes folder (e.g. "
            "`git archive v0.6.0 src/megatron/bridge/perf_recipes | tar x`), not a copy of the one file"
        )

    def _deepseek_layout(self, args: list, kwargs: dict):
        """v0.6.0 recipes/deepseek/h100/deepseek_v3.py: the layout given, else its layout map's split."""
        model = args[0] if args else kwargs.get("model_cfg")
        layout = args[1] if len(args) > 1 else kwargs.get("layout")
        if not isinstance(model, Cfg) or layout is UNKNOWN or kwargs.get("mtp_standalone"):
            return None
        if layout is None:
            pp = self.fields.get("model.pipeline_model_parallel_size") or 1
            vp = self.fields.get("model.virtual_pipeline_model_parallel_size") or 1
            layout = deepseek_v3_layout(pp * vp) if (pp, vp) in DEEPSEEK_LAYOUT_KEYS else UNKNOWN
        if layout is not UNKNOWN:
            self.fields[model.path("pipeline_model_parallel_layout")] = layout
        return None


DEEPSEEK_LAYOUT_KEYS = {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)}  # v0.6.0 layout_map keys


def deepseek_v3_layout(stages: int, num_layers: int = 61, mtp_layers: int = 1) -> str | None:
    """The layout map of v0.6.0 set_deepseek_v3_pipeline_model_parallel_layout as Megatron's layout string:
    ceil(61 / S) decoder layers per virtual stage, the embedding on the first, the rest, the MTP layers and the
    loss on the last (S = 4: 16,16,16,13; S = 8: 8 x 7, 5; S = 16: 4 x 15, 1); one stage has no layout."""
    if stages == 1:
        return None
    per = -(-num_layers // stages)
    last = num_layers - per * (stages - 1)
    parts = ["E" + "t" * per] + ["t" * per] * (stages - 2) + ["t" * last + "m" * mtp_layers + "L"]
    return "|".join(parts)


class _Return(Exception):
    def __init__(self, value):
        self.value = value


@dataclass(frozen=True)
class _Section:
    """A ``_perf_precision(dtype)`` or ``CommOverlapConfig(...)`` value, assigned whole to a section."""

    func: str
    args: list
    kwargs: dict
    name: str

    def fields(self, path: str) -> dict:
        from planner.bridge.workloads import perf_precision

        if self.func == "_perf_precision" and path == "mixed_precision":
            return perf_precision(self.args[0] if self.args else UNKNOWN, self.name)
        if self.func == "CommOverlapConfig" and path == "comm_overlap":
            given = {k: v for k, v in self.kwargs.items() if v is not UNKNOWN}  # tp_comm_overlap_cfg: a preset's name
            return {"comm_overlap._target_": "CommOverlapConfig"} | {f"comm_overlap.{k}": v for k, v in given.items()}
        return {}


def _getattr(reader: Reader, func: str, node: ast.Call, args: list, scope: dict, depth: int):
    """``getattr(cfg.x, "name", default)`` / ``hasattr(cfg.x, "name")`` over the fields read."""
    owner, attr = args[0], args[1]
    if not isinstance(owner, Cfg) or not isinstance(attr, str):
        return UNKNOWN
    path = owner.path(attr)
    if func == "hasattr":
        return True if path in reader.fields else UNKNOWN
    return reader.fields.get(path, UNKNOWN)


_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _operators(reader: Reader, node: ast.AST, scope: dict, depth: int):
    """``not``, ``and``/``or``, comparisons and ``*`` of known values (UNKNOWN if any operand is)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = reader._eval(node.operand, scope, depth)
        return UNKNOWN if v is UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        values = [reader._eval(v, scope, depth) for v in node.values]
        decisive = not isinstance(node.op, ast.And)  # a known False decides an and, a known True an or
        if any(v is not UNKNOWN and bool(v) is decisive for v in values):
            return decisive
        return UNKNOWN if any(v is UNKNOWN for v in values) else not decisive
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left, right = reader._eval(node.left, scope, depth), reader._eval(node.comparators[0], scope, depth)
        if UNKNOWN in (left, right) or isinstance(left, Cfg) or isinstance(right, Cfg):
            return UNKNOWN
        try:
            return _COMPARE[type(node.ops[0])](left, right)
        except TypeError:
            return UNKNOWN
    return UNKNOWN


def read_perf_recipe(text: str, name: str, path: Path | None = None) -> tuple[dict, dict, str | None]:
    """(Bridge fields, environment variables, the library recipe beneath) of the perf recipe ``name``."""
    module = load_module(text, path)
    if name not in module.functions:
        raise PlannerError(f"workload {name}: not in the file")
    reader = Reader(module, name)
    reader.run(name, [], {})
    return reader.fields, {k: v for k, v in reader.env.items() if isinstance(k, str)}, reader.base
