"""Flags of older Megatron-LM releases, and flags today's ``validate_args`` rejects or deprecates,
and how today's Megatron-LM spells what each meant (``docs/megatron-flags.md`` prints the table).

``planner.megatron.flags`` reads them into today's destinations, each use adding a warning;
explicit modern flags always win over values an alias implies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ArgSpec:
    """One argparse argument: its spellings, destination, and how it takes a value."""

    flags: tuple[str, ...]
    dest: str
    takes_value: bool
    nargs: int | str | None = None
    type: str | None = None
    choices: tuple[str, ...] | None = None
    default: object = None

    def const(self, flag: str) -> bool:
        """The bool a value-less flag stores: store_true, store_false or BooleanOptionalAction."""
        if flag.startswith("--no-") and "--" + flag[5:] in self.flags:
            return False
        if any(f.startswith("--no-") and f[5:] == flag[2:] for f in self.flags):
            return True
        return self.default is not True


VALUE = object()
"""Placeholder in :attr:`Alias.sets`: replaced by the old flag's parsed value."""


@dataclass(frozen=True)
class Alias:
    """An old or deprecated flag and how today's Megatron-LM spells what it meant.

    ``sets`` are applied over other aliases' values; ``weak`` only fill destinations nothing
    else set (e.g. the old default ``--checkpoint-num-layers 1``). ``modern`` is the spelling
    to use today; ``note`` says when the flag existed and what today's code does with it.
    """

    spec: ArgSpec
    modern: str
    note: str
    sets: Mapping[str, object] = field(default_factory=dict)
    weak: Mapping[str, object] = field(default_factory=dict)

    @property
    def flag(self) -> str:
        return self.spec.flags[0]


def _alias(
    flag: str,
    modern: str,
    note: str,
    sets: Mapping[str, object] | None = None,
    weak: Mapping[str, object] | None = None,
    type: str | None = None,
    choices: tuple[str, ...] | None = None,
    nargs: int | str | None = None,
) -> Alias:
    dest = flag.lstrip("-").replace("-", "_")
    spec = ArgSpec((flag,), dest, type is not None or choices is not None, nargs, type, choices)
    return Alias(spec, modern, note, dict(sets or {}), dict(weak or {}))


_RECOMPUTE_NOTE = "renamed to --recompute-* in 2022"
_ALIAS_LIST: tuple[Alias, ...] = (
    _alias(
        "--checkpoint-activations",
        "--recompute-granularity full --recompute-method uniform",
        "2020-2022 flag; today's validate_args prints 'no longer valid' and exits",
        {"recompute_granularity": "full"},
        {"recompute_method": "uniform", "recompute_num_layers": 1},
    ),
    _alias(
        "--activations-checkpoint-method",
        "--recompute-granularity full --recompute-method X",
        f"2021 flag, {_RECOMPUTE_NOTE}",
        {"recompute_granularity": "full", "recompute_method": VALUE},
        {"recompute_num_layers": 1},
        choices=("uniform", "block"),
    ),
    _alias(
        "--activations-checkpoint-num-layers",
        "--recompute-num-layers N",
        f"2021 flag, {_RECOMPUTE_NOTE}",
        {"recompute_num_layers": VALUE},
        type="int",
    ),
    _alias(
        "--checkpoint-granularity",
        "--recompute-granularity X",
        f"2022 flag, {_RECOMPUTE_NOTE}",
        {"recompute_granularity": VALUE},
        choices=("full", "selective"),
    ),
    _alias(
        "--checkpoint-method",
        "--recompute-method X",
        f"2022 flag, {_RECOMPUTE_NOTE}",
        {"recompute_method": VALUE},
        {"recompute_num_layers": 1},
        choices=("uniform", "block"),
    ),
    _alias(
        "--checkpoint-num-layers",
        "--recompute-num-layers N",
        f"2020-2022 flag, {_RECOMPUTE_NOTE}",
        {"recompute_num_layers": VALUE},
        type="int",
    ),
    _alias(
        "--distribute-checkpointed-activations",
        "--distribute-saved-activations",
        "2020-2022 flag, renamed with the --recompute-* flags in 2022",
        {"distribute_saved_activations": True},
    ),
    _alias(
        "--batch-size",
        "--micro-batch-size N",
        "2020 flag; today's validate_args asserts it is unset",
        {"micro_batch_size": VALUE},
        type="int",
    ),
    _alias(
        "--warmup",
        "--lr-warmup-fraction F",
        "2020 flag (a fraction of iterations); today's validate_args asserts it is unset",
        {"lr_warmup_fraction": VALUE},
        type="float",
    ),
    _alias(
        "--model-parallel-size",
        "--tensor-model-parallel-size N",
        "2020 flag; today's validate_args asserts it is unset",
        {"tensor_model_parallel_size": VALUE},
        type="int",
    ),
    _alias(
        "--use-flash-attn",
        "--attention-backend flash",
        "2022-2026 flag of the legacy model; still parsed but ignored since May 2026",
        {"attention_backend": "flash"},
    ),
    _alias("--fp8-hybrid", "--fp8-format hybrid", "2022-2023 flag", {"fp8": "hybrid"}),
    _alias("--fp8-e4m3", "--fp8-format e4m3", "2022-2023 flag", {"fp8": "e4m3"}),
    _alias(
        "--enable-cuda-graph",
        "--cuda-graph-impl local",
        "deprecated by today's validate_args",
        {"cuda_graph_impl": "local"},
    ),
    _alias(
        "--external-cuda-graph",
        "--cuda-graph-impl transformer_engine",
        "deprecated by today's validate_args",
        {"cuda_graph_impl": "transformer_engine"},
    ),
    _alias(
        "--cuda-graph-scope",
        "--cuda-graph-modules X [X ...]",
        "deprecated by today's validate_args",
        {"cuda_graph_modules": VALUE},
        type="str",
        nargs="+",
    ),
    _alias(
        "--hybrid-override-pattern",
        "--hybrid-layer-pattern P",
        "deprecated by today's validate_args",
        {"hybrid_layer_pattern": VALUE},
        type="str",
    ),
    _alias(
        "--mtp-hybrid-override-pattern",
        "--hybrid-layer-pattern P (unified, with MTP part)",
        "deprecated by today's validate_args; value kept",
        {"mtp_hybrid_override_pattern": VALUE},
        type="str",
    ),
    _alias(
        "--no-weight-decay-cond-type",
        "--apply-wd-to-qk-layernorm",
        "deprecated by today's validate_args",
        {"apply_wd_to_qk_layernorm": True},
        choices=("apply_wd_to_qk_layernorm",),
    ),
    _alias(
        "--use-rotary-position-embeddings",
        "--position-embedding-type rope",
        "legacy RoPE flag, translated by today's validate_args",
        {"position_embedding_type": "rope"},
    ),
    _alias(
        "--no-position-embedding",
        "--position-embedding-type none (or rope)",
        "today's validate_args rejects it unless the position embedding is rope",
        {"add_position_embedding": False},
        {"position_embedding_type": "none"},
    ),
    _alias(
        "--no-query-key-layer-scaling",
        "(default; --apply-query-key-layer-scaling enables)",
        "2021-2023 flag; scaling was on by default until Nov 2023",
        {"apply_query_key_layer_scaling": False},
    ),
    _alias(
        "--DDP-impl",
        "(dropped; --overlap-grad-reduce overlaps the gradient reduction)",
        "2020-2023 flag; 'torch' overlapped the gradient all-reduce with the backward pass, "
        "'local' did not; value kept as ddp_impl",
        {"ddp_impl": VALUE},
        choices=("local", "torch"),
    ),
    _alias(
        "--scatter-gather-tensors-in-pipeline",
        "(dropped)",
        "Jan 2021 flag; value kept as scatter_gather_tensors_in_pipeline",
        {"scatter_gather_tensors_in_pipeline": True},
    ),
    _alias(
        "--no-scatter-gather-tensors-in-pipeline",
        "(dropped)",
        "2021-2026 flag; value kept as scatter_gather_tensors_in_pipeline",
        {"scatter_gather_tensors_in_pipeline": False},
    ),
    _alias(
        "--use-contiguous-buffers-in-ddp",
        "(dropped; always contiguous)",
        "2021 flag; value kept as use_contiguous_buffers_in_local_ddp",
        {"use_contiguous_buffers_in_local_ddp": True},
    ),
    _alias(
        "--no-contiguous-buffers-in-local-ddp",
        "(dropped; always contiguous)",
        "2021-2023 flag; value kept as use_contiguous_buffers_in_local_ddp",
        {"use_contiguous_buffers_in_local_ddp": False},
    ),
    _alias(
        "--async-tensor-model-parallel-allreduce",
        "(dropped; always asynchronous)",
        "2021 flag; value kept",
        {"async_tensor_model_parallel_allreduce": True},
    ),
    _alias(
        "--no-async-tensor-model-parallel-allreduce",
        "(dropped; always asynchronous)",
        "2021-2026 flag; value kept",
        {"async_tensor_model_parallel_allreduce": False},
    ),
    _alias(
        "--data-impl",
        "(dropped; indexed datasets are always mmap)",
        "2020-2023 flag; value kept as data_impl",
        {"data_impl": VALUE},
        choices=("lazy", "cached", "mmap", "infer"),
    ),
    _alias(
        "--use-legacy-models",
        "(dropped; Megatron Core models only)",
        "2024-2026 flag; value kept",
        {"use_legacy_models": True},
    ),
    _alias("--use-mcore-models", "(default)", "deprecated no-op"),
    _alias("--use-dist-ckpt", "--ckpt-format torch_dist", "deprecated no-op"),
    _alias("--dist-ckpt-format", "--ckpt-format X", "deprecated no-op", type="str"),
    _alias("--ckpt-fully-parallel-save", "(default)", "deprecated no-op"),
    _alias("--disable-msc", "(default)", "deprecated no-op"),
)
ALIASES: Mapping[str, Alias] = {a.flag: a for a in _ALIAS_LIST}
"""Old or deprecated flag -> :class:`Alias` (what today's Megatron-LM calls it)."""

DROPPED_DESTS = frozenset(
    {
        "ddp_impl",
        "scatter_gather_tensors_in_pipeline",
        "use_contiguous_buffers_in_local_ddp",
        "async_tensor_model_parallel_allreduce",
        "data_impl",
        "use_legacy_models",
    }
)
"""Destinations only old flags set: today's parser has no argument for them."""


def alias_table_markdown() -> str:
    """The alias table as a Markdown table (old flag, today's spelling, note) for docs."""
    rows = ["| old flag | today | note |", "|---|---|---|"]
    rows += [f"| `{a.flag}` | {a.modern} | {a.note} |" for a in ALIASES.values()]
    return "\n".join(rows)
