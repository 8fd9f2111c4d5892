"""Published mixture-of-experts training throughputs with complete configurations, as plans:
``presets/reference/moe_runs.csv`` (NVIDIA's Megatron-Bridge performance tables, releases 25.09 to
26.08, each row citing its table and the recipe it ran), validated in tokens per second per GPU.

Each row runs as the recipe does: its selective recompute modules, its CUDA graphs (the
implementation and the modules captured), the fused grouped MLP from 26.06 on and the bf16 gradient
reduction are in the plan. What megaplan does not model is stated per row as an assumption. Rows
whose software the tables themselves show superseded or regressed (the ``flag`` column, with the
evidence) are reported apart from the bar (``in_fit`` False). The tables' MoE benchmarks
force-balance the tokens across the experts (their footnote), so the busiest expert's load is the
mean (imbalance 1.0).

Rows from Megatron-Bridge's model verification cards (``examples/model_verification_cards/<model>/card.yaml``,
``items.pretrain_performance`` and ``items.pretrain_weak_scaling``: NVIDIA's own measurements of the tuned flat
performance recipes at a named ``bridge_commit``) are an out-of-sample source: in the bar, never fitted
(``Run.held_out``). A setting a card's recipe sets that the release rules below do not give is the row's
``options`` column (``key=value;...``, plan options), each cited in the row's ``config``.

Rows from NVIDIA's DGX Cloud benchmarking recipes (``NVIDIA/dgxc-benchmarking``, each README's step time with the
plan of its launch.sh at the tag; tokens/s/GPU = seq · GBS / step / GPUs) are another out-of-sample source: in the
bar, never fitted, like the cards (``dgxc_row``). Those measured with NeMo 2's performance scripts name the NeMo
release of their container in the source, ``(NeMo release 25.04)``, and run by ``_nemo2_options`` (the settings of
``scripts/performance`` at the NEMO_COMMIT the recipe installs); those run with Megatron-Bridge name the Bridge
release, ``(release 25.09)``, and run by the Bridge rules below; the 2024 recipe run with NeMo 1's hydra config names
it and its container, ``(NeMo 1, NeMo 24.09 container, ...)``, and runs by ``_nemo1_options``.

Rows from the NeMo Framework User Guide's performance summary (NVIDIA's docs, the NeMo 25.02 and 25.04 containers'
sections: its Mixtral 8x7B and 8x22B pre-training rows, FP8, with GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP and
tokens/s/GPU) are a third out-of-sample source: in the bar, never fitted (``nemodoc_row``). They ran NeMo 2's
performance scripts at the container's release (NVIDIA/NeMo v2.2.0 for 25.02, v2.3.0 for 25.04), name it in the
source like the DGX Cloud rows, ``(NeMo release 25.04)``, and run by ``_nemo2_options``.
"""

from __future__ import annotations

import csv
import io

from planner.fidelity.runs import Run, release_attention_ratio
from planner.hardware.names import PRESET_BY_GPU
from planner.presets import load_hardware, presets_root

MOE_METRIC = "tokens/s per GPU"
SYSTEM = {PRESET_BY_GPU[gpu]: gpu for gpu in ("H100", "B200", "B300", "GB200", "GB300")}


CARDS = "examples/model_verification_cards/"
# the release whose flat performance recipes a card's bridge_commit runs (see _release)
CARD_CODE_RELEASE = (26, 8)


def card_row(row: dict) -> bool:
    """Whether a row is a measurement of a Megatron-Bridge model verification card (its source cites
    ``examples/model_verification_cards/<model>/card.yaml``): validated out of sample, never fitted."""
    return CARDS in row["source"]


DGXC = "NVIDIA/dgxc-benchmarking"
NEMO2 = "(NeMo release "  # a DGX Cloud row measured with NeMo 2's performance scripts names its container's release
NEMO1 = "(NeMo 1, "  # ... and one run with NeMo 1's megatron_gpt_pretraining and a hydra config says so, its container


def dgxc_row(row: dict) -> bool:
    """Whether a row is a measurement of NVIDIA's DGX Cloud benchmarking recipes (its source cites
    ``NVIDIA/dgxc-benchmarking``): validated out of sample, never fitted."""
    return DGXC in row["source"]


def nemo1_row(row: dict) -> bool:
    """Whether a row ran NeMo 1's megatron_gpt_pretraining.py with a hydra config (its source names ``(NeMo 1, ...)``:
    DGX Cloud's 2024 Grok-1 recipe, tag v24.11.1)."""
    return NEMO1 in row["source"]


def nemo2_row(row: dict) -> bool:
    """Whether a row ran NeMo 2's performance scripts (its source names ``(NeMo release YY.MM)``), not Bridge's."""
    return NEMO2 in row["source"]


NEMODOC = "NeMo Framework User Guide performance summary"  # the NeMo docs' performance summary page


# A preset no MoE fit reads (moe_fit.FIT_PRESETS; calibrate.FITTED for the dense factors): DGX/HGX B300 carries
# GB200's fit by MAMF and DGX B200's MoE band, so its Megatron-Bridge table rows validate out of sample - in the bar,
# never fitted - as its MLPerf v5.1 rows do (presets/reference/modern_runs.csv, not_fit_because)
HELD_OUT_PRESETS = ("dgx-b300-superpod",)


def held_out_preset_row(row: dict) -> bool:
    """Whether a row ran on a preset no fit reads (``HELD_OUT_PRESETS``): validated out of sample, never fitted."""
    return row["hardware"] in HELD_OUT_PRESETS


def nemodoc_row(row: dict) -> bool:
    """Whether a row is a measurement of the NeMo Framework User Guide's performance summary (its source cites the
    page, its container's section and table row): validated out of sample, never fitted."""
    return NEMODOC in row["source"]


def moe_source(hardware: str, card: bool = False, dgxc: bool = False, nemodoc: bool = False) -> str:
    if nemodoc:
        return f"NeMo perf. summary, MoE on {SYSTEM[hardware]}"
    if dgxc:
        return f"DGX Cloud recipes, MoE on {SYSTEM[hardware]}"
    what = "verification cards" if card else "perf. tables"
    return f"Megatron-Bridge {what}, MoE on {SYSTEM[hardware]}"


def moe_reference_rows() -> list[dict]:
    text = (presets_root() / "reference" / "moe_runs.csv").read_text()
    return list(csv.DictReader(io.StringIO(text)))


NO_MODULES = ("(none)", "(recipe default)", "none", "")


def _cuda_graphs(text: str) -> dict:
    """The row's CUDA graphs as plan options: ``none``, ``full_iteration`` or ``impl:module,module``."""
    if text in ("none", ""):
        return {}
    impl, _, modules = text.partition(":")
    return {"cuda_graph_impl": impl, "cuda_graph_modules": tuple(m for m in modules.split(",") if m)}


def _release(row: dict) -> tuple[int, ...]:
    """The Megatron-Bridge release a row's table names, '(release 26.02.01)' → (26, 2, 1). A card's row: 26.08,
    whose code its bridge_commit runs - the flat recipes of src/megatron/bridge/perf_recipes (v0.6.0's, branched
    from main at 558587ede, 2026-07-27; every card commit used here is on that line, 2026-07-23 to 2026-08-20)
    launched by scripts/training/run_recipe.py, which applies each recipe's env_vars before training
    (recipe_runner.bootstrap_recipe_environment) - so the rules below read as for 26.08: HybridEP's 32 SMs
    (perf_recipes/_common.py _benchmark_common), expandable_segments (every recipe's env_vars), the MXFP8
    output layer (fp8_output_proj=True in the DeepSeek-V3 and GPT-OSS MXFP8 recipes), each checked at the
    card's commit (tests/test_moe_cards.py)."""
    if card_row(row):
        return CARD_CODE_RELEASE
    if nemo2_row(row):
        raise ValueError(f"{row['run_id']}: a NeMo 2 row has no Megatron-Bridge release (its rules: _nemo2_options)")
    text = row["source"].rpartition("(release ")[2].rstrip(")")
    return tuple(int(x) for x in text.split("."))


def _hybridep_sms(row: dict) -> int | None:
    """HybridEP's SMs: 32 in every performance run from release 26.02 on (Megatron-Bridge
    scripts/performance/utils/overrides.py at v0.3.0-v0.5.0, perf_recipes/_common.py at v0.6.0:
    moe_hybridep_num_sms = 32 whenever the backend is hybridep); before, the backend's default."""
    return 32 if row["flex_backend"] == "hybridep" and _release(row) >= (26, 2) else None


def _hybridep_scan_sms(row: dict) -> int:
    """HybridEP's metadata scan blocks (moe_hybridep_num_sms_preprocessing): 32 where the recipe runs the fused
    grouped MLP with the A2A overlap from release 26.06 on - Megatron-Bridge v0.5.0 and v0.5.1
    scripts/performance/utils/overrides.py:238-243 (``if settings.cutedsl_fused_grouped_mlp`` ... ``if
    settings.moe_a2a_overlap``); v0.6.0 perf_recipes/deepseek/common.py:64 (_enable_deepseek_full_iteration_mxfp8),
    gpt_oss/common.py:33 (_apply_gpt_oss_120b_full_iter_fp8mx_configs), qwen/common.py:53
    (_enable_hybridep_full_iteration_mxfp8), the functions every GB200/GB300 MXFP8 recipe of the rows calls (the
    same lines at each card's bridge_commit); else Megatron-Core's default 108 (transformer_config.py @ d98e8a64)."""
    fused = row["te_op_fuser"] == "True" and row["a2a_overlap"] == "True"
    return 32 if row["flex_backend"] == "hybridep" and fused and _release(row) >= (26, 6) else 108


def _expandable_segments(row: dict) -> bool:
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as the release's launcher sets it: every run from
    26.06 on (Megatron-Bridge v0.5.0 scripts/performance/utils/executors.py PERF_ENV_VARS, which every
    Slurm run inherits; v0.6.0 perf_recipes/*/*.py env_vars, in every MoE recipe); before, DeepSeek-V3
    only - on H100 in 26.02 (v0.3.0 scripts/performance/perf_plugins.py
    _set_model_specific_environment_variables), on H100 and GB200 in 26.04 (v0.4.0, the same function), and on
    B200 too in 26.04.01 (v0.4.2:278); none in 25.09 (v0.2.0: only Llama 3.1 405B on GB200 in FP8). Never on
    B300 before 26.06: the function's DeepSeek-V3 branch names ``gpu in ["h100"]`` at v0.3.0:274 and v0.3.1:274,
    ``["h100", "gb200"]`` at v0.4.0:275, ``["h100", "gb200", "b200"]`` at v0.4.2:278, and no other branch matches
    a B300 MoE run."""
    release, model, gpu = _release(row), row["model"], row["hardware"]
    if release >= (26, 6):
        return True
    if model != "deepseek-v3" or release < (26, 2):
        return False
    b200 = release >= (26, 4, 1) and gpu == "dgx-b200-superpod"  # v0.4.2 perf_plugins.py:278 adds "b200"
    return gpu == "dgx-h100-superpod" or (release >= (26, 4) and gpu == "gb200-nvl72") or b200


def fp8_attention(row: dict) -> bool:
    """Whether the row's recipe runs attention in FP8 (``fp8_dot_product_attention``): the GPT-OSS and
    Qwen3 MXFP8 recipes from 26.06 on (Megatron-Bridge v0.5.0 scripts/performance/configs
    gpt_oss_workload_base_configs.py:209-219 and qwen3_workload_base_configs.py:236, 397; v0.6.0
    perf_recipes/gpt_oss/common.py:44, perf_recipes/qwen/common.py:55); DeepSeek-V3 on GB300 only (v0.5.0
    deepseek_workload_base_configs.py:74 and v0.5.1 the same line, DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    which _V2 extends; v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py:144 passes
    fp8_dot_product_attention=True), never on GB200 (v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    leaves it False, v0.6.0 perf_recipes/deepseek/gb200/deepseek_v3.py:160 does not pass it). With the
    MXFP8 recipe Transformer Engine runs that attention in MXFP8 (TE v2.16 dot_product_attention.py:164,
    no NVTE_DPA_FP8_RECIPE set by Bridge). On B300 (26.06, v0.5.0) only Qwen3-30B's MXFP8 recipe sets it, with the
    fused grouped MLP (qwen3_workload_base_configs.py:432-439, QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1);
    GPT-OSS's (gpt_oss_workload_base_configs.py:222 = B300_BF16_V2 :181-186) and DeepSeek-V3's
    (deepseek_workload_base_configs.py:222-235, B300_V2) set neither, which the te_op_fuser gate gives."""
    return row["te_op_fuser"] == "True" and (row["model"] != "deepseek-v3" or row["hardware"] == "gb300-nvl72")


def fp8_output_layer(row: dict) -> bool:
    """Whether the row's recipe runs the output layer in MXFP8 (``fp8_output_proj``): the DeepSeek-V3 and GPT-OSS-120B
    MXFP8 recipes on GB200 and GB300 from 26.06 on (Megatron-Bridge v0.5.0 scripts/performance/configs/deepseek/
    deepseek_llm_pretrain.py:82, 122 in deepseek_v3_pretrain_config_gb300/_gb200 and gpt_oss/gpt_oss_llm_pretrain.py:
    426, 458 in gpt_oss_120b_pretrain_config_gb300/_gb200, each ``if cfg.mixed_precision.fp8_recipe == "mxfp8"``;
    v0.5.1 the same; v0.6.0 perf_recipes/deepseek/{gb200,gb300}/deepseek_v3.py:160, 157 and perf_recipes/gpt_oss/
    common.py:28). Qwen3's recipes never set it; before v0.5.0 no recipe did; nor do the B300 functions (v0.5.0
    deepseek_llm_pretrain.py:181-212 deepseek_v3_pretrain_config_b300, gpt_oss_llm_pretrain.py:489-513
    gpt_oss_120b_pretrain_config_b300)."""
    return (
        row["model"] in ("deepseek-v3", "gpt-oss-120b")
        and row["hardware"] in ("gb200-nvl72", "gb300-nvl72")
        and row["fp8_recipe"] == "mxfp8"
        and _release(row) >= (26, 6)
    )


def _optimizer(row: dict) -> dict:
    """The optimizer's state dtypes as the row's recipe ran them. DeepSeek-V3's recipe keeps Adam's
    moments and the main gradients in bf16 under Transformer Engine's precision-aware FusedAdam
    (Megatron-Bridge recipes/deepseek/deepseek_v3.py: v0.2.0 deepseek_v3.py:272-276, v0.4.0 :161-165,
    v0.6.0 h100/deepseek_v3.py:206-210, which every DeepSeek-V3 performance recipe starts from);
    the performance scripts turn the precision-aware optimizer on for every bf16 run with Adam, keeping
    the recipe's fp32 states (v0.2.0 scripts/performance/utils/helpers.py:254-255; utils/overrides.py
    set_post_overrides at v0.3.0:421, v0.4.0:462, v0.5.0:517, v0.6.0:667)."""
    if row["model"] == "deepseek-v3":
        return dict(
            use_precision_aware_optimizer=True, main_grads_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"
        )
    return {"use_precision_aware_optimizer": True} if not row["fp8"] else {}


def _literal(text: str) -> bool | int | float | str:
    """A plan option's value as the ``options`` column writes it: True/False, a number, or a word."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def row_options(row: dict) -> dict:
    """The row's ``options`` column (``key=value;key=value``): plan options its recipe sets that the rules of
    ``_options`` do not give (e.g. a card's recipe with the A2A overlap but no delayed wgrad), cited in ``config``."""
    pairs = [p.partition("=") for p in (row.get("options") or "").split(";") if p.strip()]
    return {k.strip(): _literal(v.strip()) for k, _, v in pairs}


def _options(row: dict, fp8: str | None, modules: tuple[str, ...]) -> dict:
    """The plan options a row's recipe runs (each from the release's scripts, cited beside it)."""
    return dict(
        attention_kernel="flash",
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,  # the tables' MoE benchmarks force-balance the tokens across experts
        # token drop (25.09): capacity factor 1 with each expert padded to it (Megatron-Bridge v0.2.0
        # training/utils/moe_token_drop.py apply_moe_token_drop), the same work as balanced routing
        moe_capacity_factor=1.0 if row["routing"] == "tokendrop" else None,
        # every MoE performance recipe reduces gradients in bf16 (ddp.grad_reduce_in_fp32 = False in
        # scripts/performance/configs/*/..._llm_pretrain.py at v0.2.0-v0.5.1, perf_recipes/_common.py at v0.6.0)
        grad_reduce_in_bf16=True,
        # 26.06 on: the experts as TE's fused grouped MLP (cutedsl_fused_grouped_mlp, v0.5.0
        # scripts/performance/configs/*_workload_base_configs.py; perf_recipes/*/common.py at v0.6.0)
        use_transformer_engine_op_fuser=row["te_op_fuser"] == "True",
        fp8_dot_product_attention=fp8_attention(row),
        fp8_output_proj=fp8_output_layer(row),
        # the A2A overlap always with delayed expert wgrad (Megatron-Bridge v0.2.0 scripts/performance/utils/
        # helpers.py set_moe_a2a_overlap_overrides; v0.4.0 utils/overrides.py _set_moe_a2a_overlap_overrides)
        delay_wgrad_compute=row["a2a_overlap"] == "True",
        fp8=fp8,
        fp8_recipe=row["fp8_recipe"] or None,
        # both FP8 recipes the tables ran keep the weights in FP8 only (Megatron-Bridge
        # training/mixed_precision.py bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed:
        # fp8_param_gather = True at v0.2.0:251,289 through v0.6.0:264; MXFP8 gathering through the
        # gradient buffer, reuse_grad_buf_for_mxfp8_param_ag)
        fp8_param_gather=True if fp8 else None,
        moe_flex_dispatcher_backend=row["flex_backend"] or None,
        moe_flex_dispatcher_num_sms=_hybridep_sms(row),
        moe_hybridep_num_sms_preprocessing=_hybridep_scan_sms(row),
        recompute_modules=modules or None,
        expandable_segments=_expandable_segments(row),
        **_cuda_graphs(row["cuda_graph"]),
        **_optimizer(row),
    ) | row_options(row)


def _nemo2_release(row: dict) -> tuple[int, ...]:
    """The NeMo release of a NeMo 2 row's container, '(NeMo release 25.04)' → (25, 4)."""
    text = row["source"].rpartition(NEMO2)[2].partition(")")[0]
    return tuple(int(x) for x in text.split("."))


SM100 = 10  # compute capability of Blackwell's data-centre GPUs: the sm_arch_ >= 100 of fused_attn.cpp:221


def unfused_mla_attention(row: dict) -> bool:
    """Whether Transformer Engine runs the row's attention unfused: DeepSeek-V3's multi-latent attention (q/k head
    dim 128 + 64 = 192, v 128) on Blackwell in the NeMo 25.04 container, whose Transformer Engine is 2.2.0.dev0
    (NVIDIA/NeMo v2.3.0 requirements/manifest.json: transformer_engine ref bee4649c, build_tools/VERSION.txt
    2.2.0.dev0). There TE's backend choice leaves only the unfused one: transformer_engine/pytorch/
    dot_product_attention/utils.py:466-471 (v2.2; bee4649c :466-470) disables FlashAttention for MLA
    (head_dim_qk != head_dim_v), and common/fused_attn/fused_attn.cpp:221 refuses cuDNN's arbitrary-seqlen backend
    on sm100 for head dims > 128 (``!(sm_arch_ >= 100 && (head_dim_qk > 128 || head_dim_v > 128))``; the same line
    at v2.3 and v2.4, gone at v2.5), the max-512 backend being for d = 64 on sm80/90 only (fused_attn.cpp:198-200).
    NeMo's executor sets NVTE_FUSED_ATTN=1 and NVTE_FLASH_ATTN=1 (scripts/performance/utils.py slurm_executor @
    7a8f1cc7), which enables them, not forces them. On H100 cuDNN takes d <= 256 (fused_attn.cpp:232-236): fused."""
    return (
        nemo2_row(row)
        and row["model"] == "deepseek-v3"
        and load_hardware(row["hardware"]).gpu.compute_capability >= SM100
        and _nemo2_release(row) <= (25, 4)
    )


# NeMo 2's performance scripts turn --moe-permute-fusion on for DeepSeek-V3 (and Llama 4) alone: pretrain_deepseek_v3.py
# ``recipe.model.config.moe_permute_fusion = True`` (scripts/performance/llm @ v2.3.0:64, 7a8f1cc7:66, 6f2c6fda:63,
# 9244b1ec:94). Mixtral's (v2.2.0, v2.3.0) and Grok-1's (6f2c6fda) set nothing, and neither do their model configs
# (nemo/collections/llm/gpt/model/mixtral.py, grok.py), so they run Megatron-Core's default, the unfused path
# (TransformerConfig.moe_permute_fusion = False).
NEMO2_PERMUTE_FUSION = ("deepseek-v3",)


def _nemo2_options(row: dict, fp8: str | None, modules: tuple[str, ...]) -> dict:
    """The plan options of a row measured with NeMo 2's performance scripts (``scripts/performance`` at the
    NEMO_COMMIT its DGX Cloud recipe installs: 7a8f1cc7 for the 25.04 container's DeepSeek-V3, 6f2c6fda for its
    Grok-1, 9244b1ec for the 25.07 container; at the release's tag for the NeMo docs' performance summary: v2.2.0
    scripts/llm/performance for 25.02, v2.3.0 scripts/performance for 25.04), by the NeMo release of its container;
    what one model's script sets beyond these is the row's ``options`` column, cited in its ``config``.

    - gradients reduced in bf16: 25.04 only with FP8 (utils.py set_primary_perf_configs @ 7a8f1cc7:
      ``recipe.trainer.plugins.grad_reduce_in_fp32 = False`` inside ``if compute_dtype ... == "fp8"``; the BF16 plugin,
      recipes/precision/mixed_precision.py bf16_mixed, keeps grad_reduce_in_fp32=True), from 25.07 always
      (helpers.py set_precision_configs @ 9244b1ec:229, after the dtype branches);
    - the precision-aware optimizer with BF16 (``use_precision_aware_optimizer = True`` in the same functions),
      Adam's states in fp32 (recipes/optim/adam.py distributed_fused_adam_with_cosine_annealing sets no dtypes);
    - the distributed optimizer with overlapped grad-reduce and param-gather (each recipe's trainer ddp config);
    - expandable_segments from 25.07 except on B200 (executors.py @ 9244b1ec:82-85; none at 7a8f1cc7 or 6f2c6fda);
    - FP8: hybrid E4M3/E5M2 with fp8_param_gather True, in the row's scaling recipe: delayed (bf16_with_fp8_mixed,
      recipes/precision/mixed_precision.py; the scripts' default, and the only FP8 plugin of v2.2.0's) or per-tensor
      current scaling (``--fp8_recipe cs``: bf16_with_fp8_current_scaling_mixed, fp8_recipe "tensorwise", with
      first_last_layers_bf16 = False: utils.py set_primary_perf_configs @ v2.3.0:340-351);
    - attention: ``unfused_mla_attention``; the flash kernels at the container's release
      (``runs.release_attention_ratio``: cuDNN 9.7.0's on Blackwell for 25.02 and 25.04);
    - the token permutation fused for DeepSeek-V3 only (``NEMO2_PERMUTE_FUSION``), Megatron-Core's unfused path for
      the others."""
    release = _nemo2_release(row)
    return dict(
        attention_kernel="unfused" if unfused_mla_attention(row) else "flash",
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,  # token drop pads each expert to its capacity; DeepEP runs force-balance (the row's)
        moe_capacity_factor=1.0 if row["routing"] == "tokendrop" else None,
        grad_reduce_in_bf16=bool(fp8) or release >= (25, 7),
        use_precision_aware_optimizer=not fp8,
        fp8=fp8,
        fp8_recipe=row["fp8_recipe"] or None,
        fp8_param_gather=True if fp8 else None,
        moe_flex_dispatcher_backend=row["flex_backend"] or None,
        recompute_modules=modules or None,
        expandable_segments=release >= (25, 7) and row["hardware"] != "dgx-b200-superpod",
        attention_time_ratio=release_attention_ratio(f"NeMo {release[0]}.{release[1]:02d}", row["hardware"]),
        moe_permute_fusion=row["model"] in NEMO2_PERMUTE_FUSION,
        **_cuda_graphs(row["cuda_graph"]),
    ) | row_options(row)


def _nemo1_options(row: dict, fp8: str | None, modules: tuple[str, ...]) -> dict:
    """The plan options of a row run with NeMo 1's megatron_gpt_pretraining.py and a hydra config (DGX Cloud's Grok-1
    recipe at tag v24.11.1, NeMo 24.09: grok1/grok1_314b.yaml and configure.sh @ 35a9aecc):

    - Megatron-Core's distributed optimizer (``optim.name: mcore_distributed_optim``) with overlapped grad-reduce and
      param-gather, gradients reduced in bf16 (``optim.grad_sync_dtype: bf16``), Adam's states in fp32 (no
      precision-aware optimizer in Megatron-Core 0.9);
    - token drop: capacity factor 1 with each expert padded to it (``moe_expert_capacity_factor: 1.0``,
      ``moe_pad_expert_input_to_capacity: true``), the same work as balanced routing;
    - the TP overlap (configure.sh ``model.ub_tp_comm_overlap=true``) with no userbuffer config
      (``ub_tp_comm_overlap_cfg: null``): NeMo 1 passes None to Transformer Engine's initialize_ub, TE 1.x's defaults
      (presets/userbuffers/te1_defaults.yaml);
    - FP8: hybrid delayed scaling with FP8 parameters (configure.sh ``model.fp8_hybrid=true model.fp8_params``);
    - attention: the release text's launch variables (``runs.release_attention_ratio``: configure.sh's
      NVTE_FUSED_ATTN=0, flash-attn on Hopper)."""
    from planner.hardware.userbuffers import load_config_file

    overlap = row_options(row).get("tp_comm_overlap") is True and int(row["tp"]) > 1
    te1 = str(presets_root() / "userbuffers" / "te1_defaults.yaml")
    return dict(
        attention_kernel="flash",
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,
        moe_capacity_factor=1.0 if row["routing"] == "tokendrop" else None,
        grad_reduce_in_bf16=True,
        fp8=fp8,
        fp8_recipe=row["fp8_recipe"] or None,
        fp8_param_gather=True if fp8 else None,
        recompute_modules=modules or None,
        tp_comm_overlap_cfg=load_config_file(te1).model_copy(
            update={"name": "Transformer Engine 1.x's defaults (presets/userbuffers/te1_defaults.yaml)"}
        )
        if overlap
        else None,
        attention_time_ratio=release_attention_ratio(row["source"].rpartition(NEMO1)[2], row["hardware"]),
        **_cuda_graphs(row["cuda_graph"]),
    ) | row_options(row)


def _assumptions(row: dict) -> list[str]:
    """What a row's prediction assumes beyond what the table publishes, and why a flagged row is apart."""
    assumptions = [
        "force-balanced routing (imbalance 1.0), distributed optimizer with overlapped grad-reduce and "
        "param-gather, flash attention, SP with TP > 1"
    ]
    if nemo1_row(row):
        assumptions.append(
            "NeMo 1's hydra config (Megatron-Core 0.9): experts tensor-parallel over TP, the TP overlap on Transformer "
            "Engine 1.x's defaults, flash-attn (NVTE_FUSED_ATTN=0) at FlashAttention-2's time over the Hopper law"
        )
    if row["routing"] == "tokendrop" and nemo1_row(row):
        assumptions.append("token drop: capacity factor 1, each expert padded to it (the hydra config's MoE settings)")
    elif row["routing"] == "tokendrop" and nemo2_row(row):
        assumptions.append("token drop: capacity factor 1, each expert padded to it (NeMo's MegatronTokenDropCallback)")
    elif row["routing"] == "tokendrop":
        assumptions.append("token drop: capacity factor 1, each expert padded to it (the release's --use_tokendrop)")
    if row["recompute_modules"] == "(recipe default)":
        assumptions.append("the recipe's default recomputation: none")
    if row["cuda_graph"] not in ("none", ""):
        assumptions.append("CUDA graphs save the host launch time of what they capture (§4.4), nothing else")
    if unfused_mla_attention(row):
        assumptions.append(
            "unfused attention: Transformer Engine 2.2 (the NeMo 25.04 container) has no fused or flash kernel for "
            "DeepSeek-V3's 192/128 head dims on Blackwell (fused_attn.cpp:221, dot_product_attention/utils.py:466)"
        )
    if row["pipeline_layout"] and (card_row(row) or dgxc_row(row)):
        assumptions.append(f"the recipe's DeepSeek-V3 pipeline layout {row['pipeline_layout']} (its config)")
    elif row["pipeline_layout"]:
        assumptions.append(
            "DeepSeek-V3 pipeline layouts of Megatron-Bridge's set_deepseek_v3_pipeline_model_parallel_layout "
            "(PP8 × VP4 not in its table: Et|(tt|)*30mL assumed)"
        )
    if row["fp8"]:
        assumptions.append(f"FP8 GEMMs ({row['fp8_recipe']}) at the preset's FP8 efficiency (not fitted)")
    if fp8_attention(row):
        assumptions.append(
            "the recipe's MXFP8 attention (fp8_dot_product_attention) at cuDNN's MXFP8/BF16 time ratios (the GPU's own "
            "tables), its backward over the whole causal square even in sliding-window layers"
        )
    for key, value in row_options(row).items():
        assumptions.append(f"the recipe's {key} = {value} (its config, cited in the row)")
    if row.get("not_modelled"):
        assumptions.append(f"not modelled, set by the recipe: {row['not_modelled']}")
    if card_row(row):
        assumptions.append("held out: a verification card's measurement, validated and never fitted")
    if dgxc_row(row):
        assumptions.append("held out: a DGX Cloud benchmarking recipe's measurement, validated and never fitted")
    if nemodoc_row(row):
        assumptions.append("held out: a NeMo performance summary measurement, validated and never fitted")
    if held_out_preset_row(row):
        assumptions.append(f"held out: {row['hardware']} is in no fit (HELD_OUT_PRESETS), validated and never fitted")
    if row["flag"]:
        assumptions.append(f"reported apart - {row['flag']}")
    return assumptions


def _run(row: dict) -> Run:
    fp8 = row["fp8"] or None
    modules = () if row["recompute_modules"] in NO_MODULES else tuple(row["recompute_modules"].split(","))
    build = _nemo2_options if nemo2_row(row) else _nemo1_options if nemo1_row(row) else _options
    options = build(row, fp8, modules)
    tp = int(row["tp"])
    request = dict(
        model=row["model"],
        gpus=int(row["gpus"]),
        tp=tp,
        pp=int(row["pp"]),
        cp=int(row["cp"]),
        vpp=int(row["vpp"]),
        ep=int(row["ep"]),
        etp=int(row["etp"]),
        micro_batch=int(row["micro_batch"]),
        global_batch=int(row["global_batch"]),
        seq_len=int(row["seq_len"]),
        precision="bf16",
        recompute="selective" if modules else "none",
        sequence_parallel=tp > 1,
        distributed_optimizer=True,
        stage_split=row["stage_split"],
        pipeline_layout=row["pipeline_layout"] or None,
        moe_token_dispatcher=row["dispatcher"],
        overlap_moe_expert_parallel_comm=row["a2a_overlap"] == "True",
        options={k: v for k, v in options.items() if v is not None},
    )
    assumptions = _assumptions(row)
    card, dgxc, nemodoc = card_row(row), dgxc_row(row), nemodoc_row(row)
    # an out-of-sample source (a card's, a DGX Cloud recipe's or the NeMo docs' row) or preset (HELD_OUT_PRESETS)
    held = card or dgxc or nemodoc or held_out_preset_row(row)
    return Run(
        row["run_id"],
        moe_source(row["hardware"], card, dgxc, nemodoc),
        MOE_METRIC,
        float(row["tokens_per_s_per_gpu"]),
        row["hardware"],
        request,
        tuple(assumptions),
        fit=not row["flag"] and not held,  # flagged rows (superseded or regressed software): apart
        held_out=held and not row["flag"],  # an out-of-sample row: in the bar, never fitted
    )


def load_moe_runs() -> list[Run]:
    """Every MoE row of the reference table (all have complete parallel configurations)."""
    return [_run(row) for row in moe_reference_rows()]
