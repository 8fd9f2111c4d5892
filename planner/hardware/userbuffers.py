"""Transformer Engine userbuffers (--tp-comm-overlap): how each tensor-parallel GEMM overlaps its
collective, as data.

A config gives, per overlapped GEMM of a transformer layer (TE's names: ``qkv_fprop``,
``proj_fprop``, ``fc1_fprop``, ``fc2_fprop``, ``proj_dgrad``, ``fc2_dgrad``, ``qkv_dgrad``,
``qkv_wgrad``, ``fc1_dgrad``, ``fc1_wgrad``), its ``method`` (``ring_exchange``: the GEMM in t chunks
while the pieces travel peer to peer on the copy engines; ``pipeline``: the GEMM in ``num_splits``
chunks, each reduce-scattered by a kernel on ``num_sm`` SMs as the next computes; ``bulk``: the
whole collective on ``num_sm`` SMs beside a GEMM that does not need it), ``num_sm`` and
``set_sm_margin`` (the GEMM kept off those SMs for its whole run).

Which config a plan runs: the user's (``--tp-comm-overlap-cfg FILE``, TE's ub_cfgs YAML, each GEMM's
entry laid over TE's default as TE does); with ``--tp-comm-overlap-cfg bridge`` the Megatron-Bridge
preset for the GPU and shape (presets/userbuffers/bridge.yaml), what NVIDIA's recipes run; else
Transformer Engine's defaults, what Megatron-LM runs without a file:
NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py @ v2.9, initialize_ub,
get_default_config: ring exchange 1 SM without margin in t chunks, pipeline and bulk 16 SMs with the
margin, pipeline in 4 chunks (TE ≤ 1.13 set no margin anywhere; 2.0 added it).
"""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

# the GEMM each overlap rides on, and the methods Transformer Engine runs it with (base.py, add_ub)
AG_RING_OPS = ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")  # all-gathers consumed chunk by chunk
RS_OPS = ("proj_fprop", "fc2_fprop")  # the row-parallel output's reduce-scatter
BULK_OPS = ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")  # the column-parallel backward
OPS = AG_RING_OPS + RS_OPS + BULK_OPS
ALLOWED = {**dict.fromkeys(AG_RING_OPS, ("ring_exchange",)), **dict.fromkeys(RS_OPS, ("ring_exchange", "pipeline"))}
ALLOWED |= dict.fromkeys(BULK_OPS, ("bulk",))
TE_EXTERNAL_OPS = ("proj_wgrad", "fc2_wgrad")  # TE ≥ 2.9 'external': the wgrad beside its dgrad's ring, no SMs
TE_DEFAULT_SMS = 16  # pipeline and bulk: num_sm 16 (base.py get_default_config)
TE_DEFAULT_SPLITS = 4  # pipeline: num_splits 4
TE_DEFAULT_METHOD = {**dict.fromkeys(AG_RING_OPS, "ring_exchange"), **dict.fromkeys(RS_OPS, "pipeline")}
TE_DEFAULT_METHOD |= dict.fromkeys(BULK_OPS, "bulk")
TE_DEFAULT = "Transformer Engine's defaults (initialize_ub)"


class UbOp(BaseModel):
    """One GEMM's entry of TE's ub_cfgs. ``atomic_gemm`` (0/1): the overlap runs the GEMM as one cuBLAS
    atomic GEMM that signals each chunk to the communication kernels through counters
    (comm_gemm_overlap.cpp atomic_gemm_overlap_rs / atomic_gemm_overlap_ag) instead of one GEMM per chunk.
    ``aggregate`` (0/1, a ring-exchanged all-gather): two chunks per GEMM after one exposed exchange with the
    neighbour (CommOverlapP2PBase::split_overlap_ag, ``_aggregate``). Keys TE reads but the time model does
    not (cga_size, use_ce, fp8_buf, priorities, ...) are accepted and ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    method: Literal["ring_exchange", "pipeline", "bulk", "external"] | None = None
    num_sm: PositiveInt | None = None
    set_sm_margin: bool | None = None
    num_splits: PositiveInt | None = None
    cga_size: Any = None
    aggregate: Any = None
    atomic_gemm: Any = None
    use_ce: Any = None
    fp8_buf: Any = None
    is_reduce_scatter: Any = None
    comm_priority: Any = None
    gemm_priority: Any = None
    pipeline_rs_overlap_first_gemm: Any = None


class UbConfig(BaseModel):
    """A userbuffer config: its name (a file, a preset) and the GEMMs it sets (the rest: TE's default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(description="where the config came from: a file path or a preset's name")
    ops: tuple[tuple[str, UbOp], ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _from_mapping(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("ops"), dict):
            data = {**data, "ops": tuple(data["ops"].items())}
        return data

    @model_validator(mode="after")
    def _known_ops(self) -> Self:
        for name, op in self.ops:
            if name in TE_EXTERNAL_OPS:
                continue
            if name not in OPS:
                raise ValueError(f"{name!r} is not a userbuffers GEMM; allowed: {', '.join(OPS + TE_EXTERNAL_OPS)}")
            if op.method is not None and op.method not in ALLOWED[name]:
                raise ValueError(f"{name}: method {op.method!r} is not modelled; allowed: {', '.join(ALLOWED[name])}")
        return self

    def op(self, name: str) -> UbOp | None:
        return dict(self.ops).get(name)


BRIDGE = "bridge"  # --tp-comm-overlap-cfg bridge: Megatron-Bridge's preset for the GPU and shape


BRIDGE_PREFIX = "Megatron-Bridge "  # a preset's UbConfig name: "Megatron-Bridge userbuffers_bf16_h100_..."


def load_config_file(path: str) -> UbConfig:
    """A --tp-comm-overlap-cfg file (TE's ub_cfgs: GEMM name -> its settings) as a UbConfig named by its absolute
    path; ``bridge`` (the recipes' choice: Megatron-Bridge's preset for the GPU and shape, ``plan_configs``); or
    one of Bridge's presets by its name (``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``: what a Bridge recipe
    that names it runs, at any shape); a missing or malformed file raises ValueError naming it."""
    if path == BRIDGE:
        return UbConfig(name=BRIDGE)
    preset = bridge_preset_named(path.removeprefix(BRIDGE_PREFIX))
    if preset is not None:
        return preset.config()
    file = Path(path).expanduser()
    if file.exists() and not file.is_file():  # /dev/zero was said to be "not found"
        raise ValueError(
            f"--tp-comm-overlap-cfg {path!r} is not a regular file (a device, socket or pipe): give a YAML file"
        )
    if not file.is_file():
        from planner.errors import url_hint

        hint = url_hint(path) or (
            "; allowed: a YAML file, 'bridge', or a Megatron-Bridge preset name (userbuffers_<bf16|fp8>_<h100|b200>_"
            "h<hidden>_tp<t>_mbs<b>_seqlen<s>, presets/userbuffers/bridge.yaml)"
        )
        raise ValueError(f"--tp-comm-overlap-cfg file {path!r} not found{hint}")
    import yaml

    from planner.presets import safe_load

    try:
        data = safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"--tp-comm-overlap-cfg file {path!r} is not YAML: {str(err).splitlines()[0]}") from err
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"--tp-comm-overlap-cfg file {path!r}: expected GEMM names mapping to their settings")
    # named by its absolute path: the exported --tp-comm-overlap-cfg and a plan file's reader, elsewhere, find it
    return UbConfig(name=str(file.resolve()), ops=tuple(data.items()))


class BridgePreset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    used_by: str
    gpus: Literal["hopper", "blackwell"]
    fp8: bool
    hidden_size: PositiveInt
    tp: PositiveInt
    micro_batch: PositiveInt
    seq_len: PositiveInt
    ops: dict[str, UbOp]

    def applies(self, compute_capability: float, h: int) -> bool:
        """Bridge's preset for this GPU generation and hidden size (t, precision, b, s: ``score``)."""
        hopper = 9.0 <= compute_capability < 10.0
        arch = hopper if self.gpus == "hopper" else compute_capability >= 10.0
        return arch and self.hidden_size == h

    def config(self) -> UbConfig:
        return UbConfig(name=f"Megatron-Bridge {self.name}", ops=tuple(self.ops.items()))


@lru_cache(maxsize=1)
def bridge_presets() -> tuple[BridgePreset, ...]:
    """Megatron-Bridge's userbuffer presets (presets/userbuffers/bridge.yaml)."""
    from planner.presets import presets_root, shipped_yaml

    data = shipped_yaml(presets_root() / "userbuffers" / "bridge.yaml")
    return tuple(BridgePreset.model_validate(p) for p in data["presets"])


def bridge_preset_named(name: str) -> BridgePreset | None:
    """Megatron-Bridge's preset of that name (comm_overlap.py's constant), if there is one."""
    return next((p for p in bridge_presets() if p.name == name), None)


def option_value(cfg: UbConfig | None) -> str | None:
    """What --tp-comm-overlap-cfg takes to rebuild ``cfg``: 'bridge', a Bridge preset's name or a file's path."""
    return None if cfg is None else cfg.name.removeprefix(BRIDGE_PREFIX)


def _priced_ops(cfg: UbConfig) -> tuple:
    """What the time model reads of each GEMM's overlap (``resolved_op`` at t = 2), for comparing configs."""
    t = np.array([2])
    return tuple((name, tuple((k, v.item()) for k, v in resolved_op(cfg, name, t).items())) for name in OPS)


def preset_like(cfg: UbConfig) -> BridgePreset | None:
    """The Bridge preset whose every overlap the time model prices as ``cfg``'s (a recipe's config read back as
    its values, e.g. from a dumped ConfigContainer), if one is."""
    priced = _priced_ops(cfg)
    return next((p for p in bridge_presets() if _priced_ops(p.config()) == priced), None)


def ops_from_bridge_repr(text: str) -> dict[str, dict]:
    """The GEMM overlaps of a printed Bridge ``TransformerLayerTPOverlapCfg(qkv_dgrad=BulkOverlapCfg(num_sm=4,
    ...), ...)`` (the dataclass's repr, as a dumped recipe holds it), each as its keyword values; ``None`` entries
    left out, as Bridge's CommOverlapConfig.setup drops them before TE sees the dict (comm_overlap.py @ v0.6.0).
    ValueError when the text is not that call."""
    import ast

    try:
        call = ast.parse(text.strip(), mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            raise ValueError
        ops = {}
        for kw in call.keywords:
            if isinstance(kw.value, ast.Constant) and kw.value.value is None:
                continue
            if not isinstance(kw.value, ast.Call) or kw.arg is None:
                raise ValueError
            ops[kw.arg] = {k.arg: ast.literal_eval(k.value) for k in kw.value.keywords}
        return ops
    except (SyntaxError, ValueError) as err:
        raise ValueError(f"not a TransformerLayerTPOverlapCfg(...): {text[:60]!r}") from err


NO_OVERRIDES = UbOp()  # a GEMM its config leaves to TE's defaults (frozen: one serves every call)


def resolved_op(cfg: UbConfig | None, name: str, t: np.ndarray) -> dict[str, np.ndarray]:
    """One GEMM's overlap after TE's defaults are laid under ``cfg``: ``pipeline`` (else a ring
    exchange, or bulk for the column-parallel backward), ``num_sm``, ``margin``, ``splits``, ``atomic``
    (one atomic GEMM, not a GEMM per chunk; TE's default: off) and ``aggregate`` (a ring-exchanged
    all-gather's chunks two per GEMM, at even t; TE's default: off)."""
    op = (cfg.op(name) if cfg is not None else None) or NO_OVERRIDES
    method = op.method or TE_DEFAULT_METHOD[name]
    ring = method == "ring_exchange"
    num_sm = op.num_sm or (1 if ring else TE_DEFAULT_SMS)
    margin = op.set_sm_margin if op.set_sm_margin is not None else not ring
    splits = op.num_splits or (None if ring else TE_DEFAULT_SPLITS)
    t = np.asarray(t)
    return {
        "pipeline": np.full(t.shape, method == "pipeline"),
        "num_sm": np.full(t.shape, float(num_sm)),
        "margin": np.full(t.shape, bool(margin)),
        "splits": np.asarray(t, dtype=float) if splits is None else np.full(t.shape, float(splits)),
        "atomic": np.full(t.shape, bool(op.atomic_gemm) and method != "bulk"),
        "aggregate": (np.asarray(t) % 2 == 0) & bool(op.aggregate) & ring & (name in AG_RING_OPS),
    }


def plan_configs(
    user: UbConfig | None, compute_capability: float, fp8: bool, h: int, s: int, t: np.ndarray, b: np.ndarray
) -> tuple[list[UbConfig | None], np.ndarray]:
    """The configs a grid's plans run and, per plan, the index of its own: the user's file for every
    plan; with ``bridge``, Megatron-Bridge's preset for the GPU generation, hidden size and the plan's
    t (of those, the one whose precision, then micro-batch, then sequence length match: Bridge's
    GPT-3 175B recipe runs its mbs1 preset at micro-batch 2, recipes/gpt/h100/gpt3_175b.py @ v0.6.0)
    where there is one; else TE's defaults (None, the last), what Megatron-LM runs without a file
    (megatron/training/initialize.py: ub_cfgs {})."""
    t, b = np.asarray(t), np.asarray(b)
    if user is None:
        return [None], np.zeros(t.shape, dtype=int)
    if user.name != BRIDGE:
        return [user], np.zeros(t.shape, dtype=int)
    candidates = [p for p in bridge_presets() if p.applies(compute_capability, h)]
    if not candidates:
        return [None], np.zeros(t.shape, dtype=int)
    score = np.stack(
        [np.where(t == p.tp, 4 * (p.fp8 == fp8) + 2 * (b == p.micro_batch) + (p.seq_len == s), -1) for p in candidates]
    )
    best = np.argmax(score, axis=0)
    index = np.where(np.max(score, axis=0) >= 0, best, len(candidates))
    return [p.config() for p in candidates] + [None], index


def plan_ops(configs: list[UbConfig | None], index: np.ndarray, t: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Per overlapped GEMM, its ``resolved_op`` fields for every plan (each from the plan's config; where every
    plan runs the same config, that config's alone: what choosing among the configs would give)."""
    if index.size and np.all(index == index.flat[0]):  # not np.unique: its plain call imports numpy.ma (~50 ms)
        return {name: resolved_op(configs[int(index.flat[0])], name, t) for name in OPS}
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in OPS:
        per = [resolved_op(cfg, name, t) for cfg in configs]
        out[name] = {k: np.choose(index, [p[k] for p in per]) for k in per[0]}
    return out


def describe(cfg: UbConfig | None, t: int) -> str:
    """One line: the config's name and its non-ring overlaps, e.g. 'proj_fprop pipeline 24 SMs (margin)'."""
    name = TE_DEFAULT if cfg is None else cfg.name
    parts = []
    for op in RS_OPS + BULK_OPS:
        r = {k: v.item() for k, v in resolved_op(cfg, op, np.asarray(t)).items()}
        if r["pipeline"]:
            how = f"pipeline ×{r['splits']:g}"
        elif op in RS_OPS:
            how = "ring"
        else:
            how = "bulk"
        margin = " margin" if r["margin"] else ""
        atomic = " atomic GEMM" if r["atomic"] else ""
        parts.append(f"{op} {how}{atomic} {r['num_sm']:g} SM{'s' if r['num_sm'] > 1 else ''}{margin}")
    return f"{name}: " + ", ".join(parts)
