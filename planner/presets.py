"""Finding and loading presets (shipped inside the wheel) and users' own YAML files."""

from __future__ import annotations

import functools
import importlib.util
import marshal
import sys
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from planner import marshal_cache
from planner.errors import PresetError, refuse_device, url_hint
from planner.hardware.spec import HardwareSpec
from planner.models.spec import ModelSpec

SpecT = TypeVar("SpecT", bound=BaseModel)
KINDS: dict[str, type[BaseModel]] = {"models": ModelSpec, "hardware": HardwareSpec}
DEFAULT_HARDWARE = "dgx-a100-superpod"
CACHE_FORMAT = 1  # what a parsed preset's cache file holds: (CACHE_FORMAT, the YAML text, its document)
_MISS = object()


@lru_cache(maxsize=1)
def presets_root():
    """The shipped presets: package data of the installed wheel (``planner.presets_data``, a folder found
    by the import system: ``importlib.resources.files`` costs a process about 10 ms on its first call),
    or the ``presets/`` folder beside the package when running from a source checkout."""
    try:
        spec = importlib.util.find_spec("planner.presets_data")
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return Path(__file__).resolve().parent.parent / "presets"
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    from importlib.resources import files  # a package that is not a folder on disk (a zip)

    return files("planner.presets_data")


def _preset_dir(kind: str):
    return presets_root() / kind


def preset_names(kind: str) -> list[str]:
    """Names (file stems) of the presets of one kind, sorted."""
    return sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".yaml"))


def _kind_of(spec_type: type[BaseModel]) -> str:
    return next(k for k, v in KINDS.items() if v is spec_type)


def format_validation_error(err: ValidationError, spec: type[BaseModel] | None = None) -> str:
    """One line: each failing field by its dotted path and pydantic's reason; with ``spec``, a field it does not
    have is named with the field meant (a close spelling or a common synonym), else the fields allowed there."""
    parts, meant = [], {}
    for e in err.errors():
        if e["type"] == "extra_forbidden" and spec is not None and (allowed := _fields_at(spec, e["loc"][:-1])):
            meant[e["loc"]] = _unknown_field(str(e["loc"][-1]), allowed)
    said = {(*loc[:-1], m.split("did you mean ")[-1].rstrip("?")) for loc, m in meant.items()}
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        if e["loc"] in meant:
            msg = meant[e["loc"]]
        elif e["type"] == "missing" and e["loc"] in said:
            continue  # the misspelt field's message names it
        elif isinstance(value, (int, float, str, bool)) and e["type"] != "value_error":
            msg = f"{msg} (got {value!r})"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


SYNONYMS = {  # names users write for a field (Hugging Face config.json, Megatron-LM's flags, GPT-NeoX, papers)
    "num_kv_heads": "num_query_groups",
    "n_kv_heads": "num_query_groups",
    "num_key_value_heads": "num_query_groups",
    "kv_heads": "num_query_groups",
    "group_query_attention": "num_query_groups",
    "num_hidden_layers": "num_layers",
    "n_layers": "num_layers",
    "n_layer": "num_layers",
    "num_heads": "num_attention_heads",
    "n_heads": "num_attention_heads",
    "n_head": "num_attention_heads",
    "d_model": "hidden_size",
    "n_embd": "hidden_size",
    "intermediate_size": "ffn_hidden_size",
    "ffn_dim": "ffn_hidden_size",
    "head_dim": "kv_channels",
    "rope_theta": "rotary_base",
    "rms_norm_eps": "norm_epsilon",
    "layernorm_epsilon": "norm_epsilon",
    "tie_word_embeddings": "untie_embeddings_and_output_weights (its opposite)",
    "num_local_experts": "num_experts",
    "n_routed_experts": "num_experts",
    "num_experts_per_tok": "moe_router_topk",
    "seq_length": "seq_len",
    "sequence_length": "seq_len",
    "global_batch_size": "global_batch",
}


def _fields_at(spec: type[BaseModel], path: tuple) -> list[str]:
    """The field names of the (nested) model at ``path`` of ``spec``; [] where the path leaves the models."""
    import typing

    for key in path:
        field = spec.model_fields.get(str(key))
        if field is None:
            return []
        inner = [a for a in (field.annotation, *typing.get_args(field.annotation)) if isinstance(a, type)]
        spec = next((a for a in inner if issubclass(a, BaseModel)), None)
        if spec is None:
            return []
    return list(spec.model_fields)


def _unknown_field(name: str, allowed: list[str]) -> str:
    """What a field name that is not among ``allowed`` means: the one meant, else the list allowed."""
    import difflib

    key = name.replace("-", "_").lstrip("_").lower()
    meant = SYNONYMS.get(key)
    meant = meant if meant is not None and meant.split()[0] in allowed else None
    meant = meant or (key if key in allowed and key != name else None)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.75)
    meant = meant or (close[0] if close else None)
    if meant is not None:
        return f"not a field here; did you mean {meant}?"
    return f"not a field here; allowed: {', '.join(allowed)}"


def safe_load(text: str):
    """``yaml.safe_load``, by libyaml's C parser where PyYAML has it (the same documents, about ten
    times faster: every search reads the reference runs' presets). A malformed text is parsed again
    by the pure-Python parser, whose error names the problem the way users read it."""
    import yaml  # only where a text is parsed: a search whose presets are cached never imports it

    fast, slow = _loaders()
    if fast is None:
        return yaml.load(text, Loader=slow)
    try:
        return yaml.load(text, Loader=fast)  # CSafeLoader: the safe loader, in C
    except yaml.YAMLError:
        return yaml.load(text, Loader=slow)


# a float with an exponent and no dot or no exponent sign (1e-5, 1.0e5): a number in YAML 1.2, JSON, Python and
# OmegaConf, a string in YAML 1.1 (PyYAML), which refused a user's `norm_epsilon: 1e-5` (audit17)
EXPONENT_FLOAT = r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"


@functools.cache
def _loaders() -> tuple[type | None, type]:
    """(libyaml's safe loader or None where PyYAML has no C parser, the pure-Python one), each resolving a float
    written with an exponent as YAML 1.2 does."""
    import re

    import yaml

    made = []
    for base in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader):
        if base is None:
            made.append(None)
            continue
        loader = type(f"Megaplan{base.__name__}", (base,), {})
        loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(EXPONENT_FLOAT), list("-+0123456789."))
        made.append(loader)
    return made[0], made[1]


def cache_file(path) -> Path | None:
    """Where the parsed document of a shipped preset file is kept: beside it, in ``__pycache__`` as
    Python keeps a module's bytecode, one file per interpreter (marshal's format is the interpreter's).
    None for a preset that is not a file on disk (a zipped package)."""
    if not isinstance(path, Path):
        return None
    return path.parent / "__pycache__" / f"{path.name}.{sys.implementation.cache_tag}.marshal"


def _cached(cache: Path | None, text: str):
    """The document kept in ``cache`` if it was parsed from exactly ``text`` (the content is compared
    whole, so an edited preset is never answered from its old parse), else ``_MISS``."""
    if cache is None:
        return _MISS
    try:
        fmt, source, data = marshal.loads(cache.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):  # absent, unreadable or not a cache of this format
        return _MISS
    return data if fmt == CACHE_FORMAT and source == text else _MISS


def _keep(cache: Path | None, text: str, data) -> None:
    """Keeps ``data`` (parsed from ``text``) in ``cache`` unless Python writes no caches (``-B``,
    PYTHONDONTWRITEBYTECODE); a folder that cannot be written, or a document marshal cannot hold
    (a YAML date), is parsed again next time. Written whole under another name, then renamed."""
    if cache is not None:
        marshal_cache.keep(cache, (CACHE_FORMAT, text, data))


def shipped_yaml(path):
    """The YAML document of a shipped preset file, parsed once per content: PyYAML's import and parse
    cost a search more than the rest of its presets (about 5 % of `megaplan search`'s instructions).
    A user's own files are never cached (nothing is written beside them)."""
    text = path.read_text()
    return _read_yaml(text, str(path), cache_file(path))


def _read_yaml(text: str, where: str, cache: Path | None = None) -> dict:
    data = _cached(cache, text)
    if data is _MISS:
        data = _parse(text, where)
        _keep(cache, text, data)
    if data is None:
        raise PresetError(
            f"{where}: the file is empty; expected a YAML mapping of fields (see `megaplan presets show`)"
        )
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a single string", int: "a number", float: "a number", bool: "true/false"}
        got = kind.get(type(data), type(data).__name__)
        raise PresetError(f"{where}: expected a YAML mapping of fields (name: value lines), got {got}")
    return data


def repeated_key_check(text: str, where: str) -> None:
    """A user's YAML that gives one key twice in a mapping: YAML keeps the last value without a word, so a
    field edited in one place and left in another would be priced silently (fresh user trial 8). Refused,
    naming the key and both lines. A malformed text is left to the parser's own message."""
    import yaml

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return
    todo = [root] if root is not None else []
    while todo:
        node = todo.pop()
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and name in seen:
                    first, again = seen[name] + 1, key.start_mark.line + 1
                    raise PresetError(
                        f"{where}: {name!r} is given twice (lines {first} and {again}); YAML would keep only the "
                        "last: remove one"
                    )
                if name is not None:
                    seen[name] = key.start_mark.line
                todo.append(value)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)


def _whole_keys(value):
    """JSON's keys are strings: the ones written in the digits 0-9 become the integers they were (a hardware
    preset's NCCL tables are keyed by GPU count, and --json writes 2 as "2")."""
    if isinstance(value, dict):
        return {int(k) if k.isascii() and k.isdigit() else k: _whole_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_keys(v) for v in value]
    return value


def _parse(text: str, where: str):
    """A preset file's document. A JSON text (``megaplan presets show NAME --json``, which the README says to copy) is
    read as JSON: PyYAML reads YAML 1.1, whose floats need a dot, so JSON's ``1e-05`` came back the string '1e-05'."""
    import json

    import yaml

    if text.lstrip().startswith("{"):
        try:
            return _whole_keys(json.loads(text))
        except ValueError:
            pass  # a YAML flow mapping, or broken JSON: YAML's parser names the problem
    try:
        return safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise PresetError(f"{where}: malformed YAML{at}: {problem}") from err


def load_spec(spec_type: type[SpecT], ref: str) -> SpecT:
    """A spec from a preset name (presets/<kind>/<ref>.yaml) or a path to a YAML file."""
    path = Path(ref).expanduser()
    if path.is_file():  # a user's file may change between calls: never cached
        return _load_spec(spec_type, ref)
    return _load_preset_cached(spec_type, ref)


@lru_cache(maxsize=64)
def _load_preset_cached(spec_type: type[SpecT], ref: str) -> SpecT:
    return _load_spec(spec_type, ref)


def _load_spec(spec_type: type[SpecT], ref: str) -> SpecT:
    kind = _kind_of(spec_type)
    if not ref.strip():
        what = kind.removesuffix("s")
        raise PresetError(f"{what} name is empty; give a preset name (`megaplan presets`) or a YAML path")
    if hint := url_hint(ref):
        raise PresetError(f"{kind} file {ref!r} not found{hint}")
    path = Path(ref).expanduser()
    if is_file_ref(ref):
        text, where, cache = read_yaml_file(path, kind), str(path), None  # a user's file: nothing beside it
        repeated_key_check(text, where)
    else:
        name = preset_name(kind, ref)
        path = _preset_dir(kind) / f"{name}.yaml"
        text, where, cache = path.read_text(), f"{kind} preset {name}", cache_file(path)
    data = _read_yaml(text, where, cache)
    try:
        return spec_type.model_validate(data)
    except ValidationError as err:
        hint = _hf_config_hint(data) or _other_kind_hint(data, kind)
        hint = hint or _older_layout_hint(err, kind)
        raise PresetError(f"{where}: {hint or format_validation_error(err, spec_type)}") from err


def is_file_ref(ref: str) -> bool:
    """Whether a --model/--hardware value names a YAML file rather than a shipped preset: it ends in .yaml/.yml,
    has a folder, or exists (the rule ``load_spec`` reads it by)."""
    path = Path(ref).expanduser()
    return ref.endswith((".yaml", ".yml")) or path.parent != Path(".") or path.exists()


def command_ref(ref: str | None) -> str | None:
    """A --model/--hardware value as a generated command line writes it: a preset by its name, a file by its
    absolute path (``./my.yaml`` in a search's explain/export commands ran only from the folder searched in)."""
    if ref is None or not ref.strip() or not is_file_ref(ref):
        return ref
    return str(Path(ref).expanduser().resolve())


def _older_layout_hint(err: ValidationError, kind: str) -> str:
    """A copy of a preset taken from an earlier megaplan (fields it has since added and dropped): said, with where
    today's layout is, rather than only a list of fields (fresh user trial 10: a dgx-h100-superpod.yaml copied two
    days before listed eight fields, "gpu.sm_count: Field required; attention: Field required; ...")."""
    types = [e["type"] for e in err.errors()]
    if types.count("missing") < 2 or "extra_forbidden" not in types:
        return ""
    what = kind.removesuffix("s")
    return (
        f"the layout of an earlier megaplan's {what} presets: copy the preset again (megaplan presets show NAME "
        f"--json, or presets/{kind}/NAME.yaml of the checkout) and redo your edits there "
        f"({format_validation_error(err)})"
    )


def _other_kind_hint(data, kind: str) -> str:
    """A model YAML given as --hardware, or a hardware YAML as --model: which it is and the option that reads it
    (fresh user trial 8: `--hardware model.yaml` listed 15 pydantic errors in 658 characters)."""
    if not isinstance(data, dict):
        return ""
    for other, spec in KINDS.items():
        fields = set(spec.model_fields) - {"name", "source"}
        ours = set(KINDS[kind].model_fields) - {"name", "source"}
        if other != kind and len(fields & set(data)) > max(1, len(ours & set(data))):
            shown = ", ".join([k for k in data if k in fields][:3])  # as the file writes them
            option = "--model" if other == "models" else "--hardware"
            what, ours = other.removesuffix("s"), kind.removesuffix("s")
            return f"a {what} YAML ({shown} ...), not a {ours} one: give it with {option}"
    return ""


HF_NAMES = {  # a Hugging Face config.json's names -> megaplan's (Megatron-LM's)
    "num_hidden_layers": "num_layers",
    "intermediate_size": "ffn_hidden_size",
    "num_key_value_heads": "num_query_groups",
}


def _hf_config_hint(data: dict) -> str:
    """A Hugging Face config.json given as --model (fresh user trial 8: a list of pydantic errors, 'Extra
    inputs are not permitted' for every field): what it is and the names to write instead."""
    if "num_hidden_layers" not in data:
        return ""
    renames = ", ".join(f"{hf} -> {ours}" for hf, ours in HF_NAMES.items() if hf in data)
    return (
        f"a Hugging Face config.json, not a megaplan model YAML: write a YAML with Megatron-LM's names ({renames}; "
        "hidden_size, num_attention_heads, vocab_size and max_position_embeddings as they are; plus name and "
        "source); `megaplan presets show llama3-8b` shows one"
    )


def read_yaml_file(path: Path, kind: str) -> str:
    """A user's YAML file's text; a missing file, a directory or an unreadable file is said exactly ("model file",
    not the folder's plural "models file", qa21)."""
    kinds = KINDS if kind == "preset" else (kind,)  # `presets show x.yaml`: either kind's names
    kind = kind.removesuffix("s")
    if path.is_dir():
        raise PresetError(f"{kind} file {str(path)!r} is a directory; give a YAML file or a preset name")
    if not path.exists():
        preset = path.name.removesuffix(".yaml").removesuffix(".yml")
        known = path.parent == Path(".") and any(preset in preset_names(k) for k in kinds)
        hint = f"; the preset is named {preset}, without .yaml" if known else ""
        other = path.with_suffix({".yaml": ".yml", ".yml": ".yaml"}.get(path.suffix, ".yaml"))
        hint = hint or (f"; {str(other)!r} is here (the other suffix)" if other.is_file() else "")
        raise PresetError(f"{kind} file {str(path)!r} not found{hint}")
    refuse_device(path, f"{kind} file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PresetError(f"{kind} file {str(path)!r} is not a text (YAML) file") from err
    except OSError as err:
        raise PresetError(f"{kind} file {str(path)!r} cannot be read: {err.strerror}") from err


def preset_name(kind: str, ref: str) -> str:
    """The shipped preset a name refers to, case-insensitively; an unknown name suggests the closest."""
    names = preset_names(kind)
    by_lower = {n.lower(): n for n in names}
    if ref.lower() in by_lower:
        return by_lower[ref.lower()]
    import difflib

    # a part of a name (h100, gb200, llama3: fresh user pass ux13) names the presets holding it, up to four
    within = [n for n in names if len(ref) >= 3 and ref.lower() in n.lower()]
    close = [by_lower[c] for c in difflib.get_close_matches(ref.lower(), list(by_lower), n=1, cutoff=0.6)]
    close = within if 0 < len(within) <= 4 else close
    hint = f"did you mean {'one of ' * (len(close) > 1)}{', '.join(close)}? " if close else ""
    here = next((f for f in (f"{ref}.yaml", f"{ref}.yml") if Path(f).expanduser().is_file()), None)
    hint = f"{here} is a file here: give {here} (a preset name has no suffix, a file needs it); " if here else hint
    what = kind.removesuffix("s")  # "model preset" (the folder is models/; it read "unknown models preset")
    raise PresetError(f"unknown {what} preset {ref!r}; {hint}known: {', '.join(names)} (or a path to a YAML file)")


def load_model(ref: str) -> ModelSpec:
    return load_spec(ModelSpec, ref)


def load_hardware(ref: str = DEFAULT_HARDWARE) -> HardwareSpec:
    return load_spec(HardwareSpec, ref)


def preset_text(kind: str, name: str) -> str:
    return (_preset_dir(kind) / f"{name}.yaml").read_text()
