"""The published Megatron-LM runs as plans: every run of the reference table with a complete
configuration, built as published with the Megatron-LM behaviour of its time, in the metric its
source used (``presets/reference/published_runs.csv``)."""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass, field

from planner.models.spec import ModelSpec
from planner.presets import load_hardware, load_model, presets_root

N21, K22, MLM = "Narayanan 2021", "Korthikanti 2022", "Megatron-LM README H100"
PAPER_VOCAB = 51200  # V in both papers' FLOP formulas (GPT-2 BPE padded)
A100_MODELS = {
    "GPT 1.7B": "gpt-1.7b",
    "GPT 3.6B": "gpt-3.6b",
    "GPT 7.5B": "gpt-7.5b",
    "GPT 18.4B": "gpt-18b",
    "GPT 39.1B": "gpt-39b",
    "GPT 76.1B": "gpt-76b",
    "GPT 145.6B": "gpt-145b",
    "GPT 310.1B": "gpt-310b",
    "GPT 529.6B": "gpt-530b",
    "GPT 1008.0B": "gpt-1t",
    "GPT-3 175B": "gpt3-175b",
    "22B": "gpt-22b",
    "175B (GPT-3)": "gpt3-175b",
    "530B (MT-NLG)": "gpt-530b",
    "1T": "gpt-1t",
}


@dataclass(frozen=True)
class RowModel:
    """The model a validation row trains: a preset (``presets/models``, the one definition of the model), with
    what the run's own configuration or table sets differently, each ``(field, value, source)``; ``label`` names
    the variant (the model is ``<preset> (<label>)``) when there is one."""

    preset: str
    overrides: tuple[tuple[str, object, str], ...] = ()
    label: str = ""

    def spec(self) -> ModelSpec:
        model = load_model(self.preset)
        if not self.overrides:
            return model
        update = {name: value for name, value, _ in self.overrides}
        return model.model_copy(update=update | {"name": f"{self.preset} ({self.label})"})


@dataclass(frozen=True)
class Run:
    id: str
    source: str
    metric: str
    published: float
    hardware: str
    request: dict
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    fit: bool = True  # used to fit the calibration; False: validated only (an unpublished setting is assumed)
    # the knobs the source leaves out: validated with the fastest plan that keeps every published setting
    # (``planner.fidelity.validate.plan_request``), in the bar but not fitted (the plan is the model's own choice)
    searched: tuple[str, ...] = ()
    # an out-of-sample source kept for validation: in the bar, never fitted (fit False), e.g. the MoE rows of
    # Megatron-Bridge's model verification cards (``planner.fidelity.moe_runs.card_row``)
    held_out: bool = False
    # the row's model as a preset and its overrides (None: built from the row's columns, a model no preset defines)
    model_def: RowModel | None = None


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def _pct(text: str) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*%", text or "")
    return float(m.group(1)) / 100 if m else None


def reference_rows() -> list[dict]:
    text = (presets_root() / "reference" / "published_runs.csv").read_text()
    return list(csv.DictReader(io.StringIO(text)))


def _n21(row: dict) -> list[Run]:
    t, p, n = _int(row["tensor_parallel"]) or 8, _int(row["pipeline_parallel"]) or 16, int(row["num_gpus"])
    torch_ddp = "DDP impl torch" in row["notes"]
    assumptions = [
        "2021 code: unfused attention, fp16, pipeline scatter/gather, no p2p overlap, no async TP all-reduce",
        "gradient all-reduce overlapped with the last backward (DDP impl torch)"
        if torch_ddp
        else "gradient all-reduce not overlapped (DDP impl local)",
    ]
    b = _int(row["micro_batch_size"])
    if b is None:  # §5.1: the plan NVIDIA gives for the 140 TFLOP/s run
        b = 1
        assumptions.append(
            "TP 8, PP 16, DP 8, micro-batch 1, no interleaving: "
            "Megatron-LM examples/gpt3 and NVIDIA's SuperPOD write-up"
        )
    request = dict(
        model=A100_MODELS[row["model_name"]],
        gpus=n,
        tp=t,
        pp=p,
        vpp=_int(row["virtual_pipeline"]) or 1,
        micro_batch=b,
        global_batch=int(row["global_batch_size"]),
        seq_len=2048,
        precision="fp16",
        recompute="full",
        sequence_parallel=False,
        distributed_optimizer=False,
        options=dict(
            attention_kernel="unfused",
            pp_scatter_gather=True,
            overlap_p2p_comm=False,
            overlap_grad_reduce=torch_ddp,
            async_tp_comm=False,
        ),
    )
    return [
        Run(
            row["run_id"],
            N21,
            "TFLOP/s per GPU (Eq. 3)",
            float(row["tflops_per_gpu"]),
            "dgx-a100-superpod",
            request,
            tuple(assumptions),
            model_def=RowModel(request["model"]),
        )
    ]


def _k22(row: dict) -> list[Run]:
    t, p, n = int(row["tensor_parallel"]), int(row["pipeline_parallel"]), int(row["num_gpus"])
    sp = row["sequence_parallel"].strip() == "y"
    assumptions = [
        "2022 code: unfused attention, pipeline scatter/gather, no p2p overlap",
        "bf16 (the paper says mixed precision; no data parallelism, so it only changes memory)",
    ]
    base = dict(
        gpus=n,
        tp=t,
        pp=p,
        micro_batch=int(row["micro_batch_size"]),
        seq_len=2048,
        precision="bf16",
        recompute=row["recompute"].strip(),
        sequence_parallel=sp,
        distributed_optimizer=False,
        options=dict(attention_kernel="unfused", pp_scatter_gather=True, overlap_p2p_comm=False),
    )
    if row["table_or_figure"].startswith("Table 4"):
        model_def = RowModel("gpt-22b", (("num_layers", 1, "Korthikanti et al. 2022 Table 4: one layer"),), "one layer")
        ms = re.search(r"combined ([\d.]+) ms", row["other_measured"])
        req = dict(base, model=model_def.spec(), global_batch=int(row["micro_batch_size"]))
        return [
            Run(
                row["run_id"],
                K22,
                "layer forward+backward (ms)",
                float(ms.group(1)),
                "dgx-a100-superpod",
                req,
                tuple(assumptions + ["one 22B layer, TP 8, micro-batch 4 (Table 4)"]),
                model_def=model_def,
            )
        ]
    req = dict(
        base,
        model=A100_MODELS[row["model_name"]],
        vpp=_int(row["virtual_pipeline"]) or 1,
        global_batch=int(row["global_batch_size"]),
    )
    runs = [
        Run(
            row["run_id"],
            K22,
            "iteration time (s)",
            float(row["iteration_time_s"]),
            "dgx-a100-superpod",
            req,
            tuple(assumptions),
            model_def=RowModel(req["model"]),
        )
    ]
    for metric, col in (("MFU (Eq. 7)", "mfu"), ("HFU (Eq. 8)", "hfu")):
        if _pct(row[col]) is not None:
            runs.append(
                Run(
                    f"{row['run_id']}:{col}",
                    K22,
                    metric,
                    _pct(row[col]),
                    "dgx-a100-superpod",
                    req,
                    tuple(assumptions),
                    model_def=RowModel(req["model"]),
                )
            )
    return runs


# Not in the README's table or text (f2e5db402c, unchanged since; NVIDIA/Megatron-LM issue 1571, asking for
# them, has no answer). Searched: each row is predicted with the fastest plan its published settings allow,
# because the evidence is that the team tuned them per row: the same README's previous weak-scaling table,
# by the same first author (Narayanan et al., SC21, Table 1), ships its launch settings at this commit
# (examples/academic_paper_scripts/sc21/run_table_1.sh) and they are tuned per model - the micro-batch from
# the whole of a data-parallel rank's batch (m = 1, 1.7B-7.5B) down to 1, interleaving from none to
# 3 virtual stages. The H100 table's batch is 4·PP·DP in every row (4·PP sequences per data-parallel rank), which
# leaves b and v free. examples/gpt3/train_gpt3_175b_distributed.sh's --micro-batch-size 1 is a
# 2,048-sequence FP16 A100-era example without the table's overlaps, not these runs.
MLM_SEARCHED = ("micro_batch", "vpp", "recompute")

# The README's strong-scaling series (images/strong_scaling.png @ f2e5db402c; the text: "from 96 H100 GPUs to 4608
# GPUs, using the same batch size of 1152 sequences throughout", MFU 47 % -> 42 %): (GPUs, aggregate PFLOP/s),
# read off the figure's dots with its log axes calibrated on the gridlines (100, 500, 1,000, 5,000 GPUs; 50, 100,
# 500, 1,000 PFLOP/s), about ±1 % in value. The endpoints give 46.7 % and 41.8 % MFU (the text's 47 % and 42 %).
# Every count is a multiple of the 177B row's TP 8 · PP 6 = 48 GPUs (DP 2 to 96), and its 2,304-GPU point (1,002
# PFLOP/s) is that row (997.2).
MLM_STRONG_177B = (
    (96, 44.4),
    (144, 66.5),
    (288, 132.2),
    (576, 262.7),
    (1152, 516.6),
    (2304, 1002.3),
    (3072, 1305.8),
    (4608, 1907.4),
)
# What the series fixes of that row: micro-batch 1. At 96 GPUs (DP 2, the distributed optimizer sharded over 2) only
# b 1 fits without recomputation (b 2: 88-92 GiB at v 1-8), and the series is smooth (44.0 -> 43.0 -> 41.9 % MFU at
# 2,304, 3,072, 4,608 GPUs) where a micro-batch that changed along it would break it: at 3,072 GPUs a rank holds 18
# sequences, so b 2 leaves m = 9, which r0.8.0 cannot interleave at p = 6 (schedules.py: m a multiple of p), while
# b 2 interleaves at 2,304 and 4,608. b 1 is the only micro-batch r0.8.0 can interleave at all eight points (the
# README overlaps PP communication, which r0.8.0 does only when interleaving: arguments.py sets overlap_p2p_comm
# False otherwise). The row keeps the series' b 1; VPP and recomputation stay searched.
MLM_SERIES_PINS = {"MLM-README-H100-177B": {"micro_batch": 1}}
MLM_SERIES_NOTE = (
    "implied by the README's strong-scaling series (images/strong_scaling.png: this model and batch from 96 to "
    "4,608 GPUs, every count a multiple of TP 8 · PP 6, this row its 2,304-GPU point): micro-batch 1, the only "
    "one that fits at 96 GPUs (DP 2) without recomputation and the only one r0.8.0 can interleave (the README's "
    "PP overlap) at all eight points (m = 1,152/(DP·b) a multiple of p = 6: b 2 gives m 9 at 3,072 GPUs)"
)


def _te1_userbuffers():
    """Transformer Engine 1.x's userbuffer defaults (presets/userbuffers/te1_defaults.yaml): the README rows
    ran Megatron-Core r0.8.0 (July 2024), before TE 2.0 (February 2025) turned the SM margin on."""
    from planner.hardware.userbuffers import load_config_file

    cfg = load_config_file(str(presets_root() / "userbuffers" / "te1_defaults.yaml"))
    return cfg.model_copy(update={"name": "Transformer Engine 1.x's defaults (presets/userbuffers/te1_defaults.yaml)"})


MLM_ASSUMPTIONS = (  # what each README row publishes, implies and assumes (_mlm)
    "published: layers, hidden, heads, TP, PP, DP, GPUs, global batch (table); vocabulary 131,072, "
    "sequence 4,096, --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap (text)",
    "implied by r0.8.0's checks: SP with TP > 1 (--tp-comm-overlap), distributed optimizer "
    "(--overlap-param-gather), CP 1 (TP·PP·DP = GPUs)",
    "implied by the published model sizes: untied embedding and output weights (each size is the untied "
    "count, 1.75-461.5 B; tied counts fall 0.5-1.6 % short of it: 1.49 B for '1.7B', 175.6 B for '177B')",
    "unstated, assumed: bf16 (the MFU/TFLOP/s ratio is the BF16 dense peak), an even pipeline split, "
    "GPT-3 architecture (4h GeLU MLP, learned positions, r0.8.0's default dropout 0.1), "
    "Megatron-Core r0.8.0's flash attention (Transformer Engine)",
    "implied by the date (July 2024, r0.8.0): Transformer Engine 1.x, whose userbuffers default to no SM "
    "margin (initialize_ub @ v1.8; TE 2.0, February 2025, turned it on for the pipelined and bulk overlaps)",
)


# The README's models a preset defines (its layers, hidden size and heads, GPT-3's architecture): the 177B row is GPT-3
# 175B ("slightly more than 175B due to larger vocabulary": the README's strong-scaling text, the same model), the 314B
# row Narayanan et al. 2021's 310.1B (Table 1: 96 layers, hidden 16,384, 128 heads). They price the preset with the
# README's vocabulary and sequence and untied embeddings (``_mlm_model``); the other sizes no preset defines.
MLM_PRESETS = {"GPT 177B": "gpt3-175b", "GPT 314B": "gpt-310b"}


def _mlm_model(row: dict) -> tuple[ModelSpec, RowModel | None]:
    """The model of a README row: its preset (``MLM_PRESETS``) with the README's vocabulary, sequence and untied
    embeddings, else built from the table's columns (GPT-3 architecture, Megatron-LM's default dropout 0.1)."""
    L, h, a, s = (int(row[k]) for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"))
    untied = "the README's published sizes are the untied count (177.2 B, 313.6 B; tied 175.6 B, 311.5 B)"
    if row["model_name"] in MLM_PRESETS:
        definition = RowModel(
            MLM_PRESETS[row["model_name"]],
            (
                ("vocab_size", int(row["vocab_size"]), "the README's text: vocabulary 131,072"),
                ("max_position_embeddings", s, "the README's text: sequence 4,096"),
                ("untie_embeddings_and_output_weights", True, untied),
            ),
            "Megatron-LM README: vocabulary 131,072, sequence 4,096, untied",
        )
        return definition.spec(), definition
    model = ModelSpec(
        name=row["model_name"],
        source=row["source"],
        num_layers=L,
        hidden_size=h,
        num_attention_heads=a,
        max_position_embeddings=s,
        vocab_size=int(row["vocab_size"]),
        # the published sizes are the untied count (1.75, 7.13, 16.1, 31.5, 69.8, 118.5, 177.2, 313.6, 461.5 B;
        # tied: 1.49, 6.60, 15.3, 30.6, 68.8, 117.2, 175.6, 311.5, 459.1 B - tests/test_readme_searched.py)
        untie_embeddings_and_output_weights=True,
    )
    return model, None


def _mlm(row: dict) -> list[Run]:
    """A row of the README's weak-scaling table (images/model_table.png, commit f2e5db402c). Published:
    layers, hidden size, heads, TP, PP, DP, GPUs, global batch (the table); vocabulary 131,072, sequence
    4,096, H100, --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap and the default PP overlap
    (the text). Implied by Megatron-Core r0.8.0's own checks (megatron/training/arguments.py):
    --tp-comm-overlap needs SP, --overlap-param-gather the distributed optimizer; CP 1 (TP·PP·DP = GPUs).
    Left out: micro-batch, VPP and recomputation - searched (``MLM_SEARCHED``), but the micro-batch the
    README's strong-scaling series fixes for the 177B row (``MLM_SERIES_PINS``)."""
    s, t, p = int(row["seq_length"]), int(row["tensor_parallel"]), int(row["pipeline_parallel"])
    model, definition = _mlm_model(row)
    req = dict(
        model=model,
        gpus=int(row["num_gpus"]),
        tp=t,
        pp=p,
        cp=1,
        global_batch=int(row["global_batch_size"]),
        seq_len=s,
        precision="bf16",
        sequence_parallel=t > 1,
        distributed_optimizer=True,
        stage_split="even",
        options=dict(
            attention_kernel="flash",
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            tp_comm_overlap=t > 1,
            tp_comm_overlap_cfg=_te1_userbuffers() if t > 1 else None,
        ),
    )
    # the TFLOP/s column only: the table's MFU column is it over 989 TFLOP/s rounded to a whole percent (the nine
    # rows allow a denominator of 988.4-989.0 only), the same measurement again, not a second one
    published = ((row["run_id"], "TFLOP/s per GPU (r0.8.0)", float(row["tflops_per_gpu"])),)
    # micro-batch, VPP and recomputation are not published: searched (but what the strong-scaling series fixes),
    # not fitted
    series = MLM_SERIES_PINS.get(row["run_id"], {})
    req.update(series)
    searched = tuple(k for k in MLM_SEARCHED if k not in series)
    notes = MLM_ASSUMPTIONS + ((MLM_SERIES_NOTE,) if series else ())
    return [
        Run(
            rid, MLM, metric, value, "dgx-h100-superpod", req, notes, fit=False, searched=searched, model_def=definition
        )
        for rid, metric, value in published
    ]


NEMO_SQUARED_RELU = (
    "squared ReLU op by op: NeMo 2's squared_relu is not scripted "
    "(NVIDIA/NeMo nemo/collections/llm/fn/activation.py, v2.2.0 to v2.5.0)"
)


TE_GRAPH_RS_FIX = (26, 6)  # TE v2.16 (tagged 2026-05-29, PR #2056): the first container that can hold it is 26.06
GRAPH_RS_REORDERED = (
    "Transformer Engine before v2.16: under CUDA graphs the ring-exchanged reduce-scatter's GEMM chunks lose "
    "their order and its pieces wait for them (TE PR #2056)"
)


def te_reorders_graphed_rs(release: str) -> bool:
    """Whether a run's software predates Transformer Engine v2.16, which keeps a CUDA graph from
    reordering the ring-exchanged reduce-scatter's GEMM chunks (TE PR #2056, commit f2ed86bbf): its
    container tag (NeMo YY.MM, ngcYY.MM, PyTorch Release YY.MM) before 26.06, or an MLPerf Training
    v4 or v5 round (2024-2025) that names none."""
    tag = re.search(r"(\d{2})\.(\d{2})", release)
    if tag:
        return (int(tag[1]), int(tag[2])) < TE_GRAPH_RS_FIX
    return bool(re.search(r"MLPerf Training v[45]\.", release))


def reduces_amax_over_tp_only(release: str, model_name: str = "") -> bool:
    """Whether a run's recipe reduces delayed-scaling FP8 amaxes over the TP×CP group only (Megatron-Core
    ``tp_only_amax_red``): NVIDIA's MLPerf Training v4.1 and v5 NeMo configs (conf/custom.yaml
    ``tp_only_amax_red: ${oc.env:TP_ONLY_AMAX_RED,True}``: gpt3 eos_n32/n64_ngc24.09 and b200_n8_preview,
    llama31_405b eos-dfw_n*_ngc25.01), and NeMo 2's GPT-3 175B performance script in the NeMo 25.02, 25.04 and
    25.07 containers (``recipe.model.config.tp_only_amax_red = True``: NVIDIA/NeMo v2.2.0
    scripts/llm/performance/pretrain_gpt3_175b.py, v2.3.0 and v2.4.0 scripts/performance/llm/pretrain_gpt3_175b.py;
    gone at v2.5.0): the NeMo performance pages' GPT-3 rows. MLPerf v4.0's GPT-3 config, the NeMo-1 hydra config
    of the DGX Cloud GPT-3 runs (nemo_megatron/cfg/gpt3_175b_hydra.yaml @ v25.04) and NeMo 2's other performance
    scripts do not set it: the TP×DP×CP group, Megatron-Core's default. MLPerf v3.1's GPT-3 reduces over TP alone by
    Transformer Engine's own switch (``MLPERF_V31_TP_AMAX``)."""
    if re.search(r"NeMo 25\.0[247]\b", release) and model_name.startswith("GPT3-175B"):
        return True
    if MLPERF_V31_FA2.search(release):  # Transformer Engine's own switch, not Megatron-Core's (MLPERF_V31_TP_AMAX)
        return True
    return bool(re.search(r"MLPerf Training v(4\.1|5\.)", release))


def modern_rows() -> list[dict]:
    text = (presets_root() / "reference" / "modern_runs.csv").read_text()
    return list(csv.DictReader(io.StringIO(text)))


def _yes(text: str) -> bool:
    return text.strip().lower().startswith("y")


# The model each `_modern` row trains (its ``model_name``, or ``(model_name, source_family)`` where the families ran
# different configurations of it): a preset, the one definition of the model (its no-cost fields included, which the
# columns cannot carry: Nemotron-4's rotary_percent 0.5 and zero-centred LayerNorm, Llama 3's rope θ 500000, Llama
# 3.1's rope scaling), with what the run's own configuration sets differently, each from the file that sets it. The
# row's architecture columns stay as its source printed them; tests/test_row_models.py checks that they agree.
NEMO2_GPT3 = "NVIDIA/NeMo nemo/collections/llm/gpt/model/base.py GPTConfig175B (v2.2.0, v2.3.0, v2.4.0)"
MLPERF_GPT3 = (
    "NVIDIA's MLPerf Training gpt3 NeMo config conf/custom.yaml (training_results_v4.0 @ 6fe95437 "
    "NVIDIA/benchmarks/gpt3/implementations/nemo; v4.1 @ b87b9e39 eos_n32/n64_ngc24.09_nemo, b200_n8_preview_nemo)"
)
LONG_CONTEXT = "NeMo long-context performance (docs)"  # modern_runs.csv source_family of NeMo's long-context table
# ... and of DGX Cloud's first published recipes (NVIDIA/dgxc-benchmarking tag v24.11.1: GPT-3 175B on NeMo 24.05, Llama
# 3.1 and Nemotron-4 on NeMo 24.09, H100), held out: mid-2024 software, the era of the Megatron-LM README's rows
DGXC_2024 = "DGX Cloud benchmarking recipes, 2024 (v24.11.1)"
MODERN_MODELS: dict[str | tuple[str, str], RowModel] = {
    "Nemotron4-15B": RowModel("nemotron-4-15b"),
    "Nemotron4-340B": RowModel("nemotron-4-340b"),
    # NeMo's long-context table: the position limit follows the run's sequence (NeMo 1's llama configs
    # max_position_embeddings: ${.encoder_seq_length}; NeMo 2's GPTModel max_sequence_length = config.seq_length),
    # 1M its longest; RoPE, so no parameters depend on it
    ("Llama2-7B", LONG_CONTEXT): RowModel(
        "llama2-7b",
        (("max_position_embeddings", 1 << 20, "NeMo sets the position limit to the run's sequence (up to 1M)"),),
        "up to 1M positions",
    ),
    ("Llama3-8B", LONG_CONTEXT): RowModel(
        "llama3-8b",
        (("max_position_embeddings", 1 << 20, "NeMo sets the position limit to the run's sequence (up to 1M)"),),
        "up to 1M positions",
    ),
    "Llama3-8B": RowModel("llama3-8b"),
    "Llama3-70B": RowModel("llama3-70b"),
    "Llama3.1-405B": RowModel("llama3.1-405b"),
    # NeMo 1's hydra config of the DGX Cloud runs: hidden_dropout 0.1, attention_dropout 0.1, GPT2BPETokenizer,
    # LayerNorm, learned positions, tied embeddings (NVIDIA/dgxc-benchmarking nemo_megatron/cfg/gpt3_175b_hydra.yaml
    # @ v25.04 741c8860): the preset as it is
    ("GPT3-175B", "DGX Cloud benchmarking recipes"): RowModel("gpt3-175b"),
    # ... and at tag v24.11.1 (gpt3_175b_hydra.yaml @ 35a9aecc: the same model section, VP 12)
    ("GPT3-175B", DGXC_2024): RowModel("gpt3-175b"),
    # NeMo 2's performance scripts (pretrain_gpt3_175b.py, v2.2.0-v2.4.0: GPTConfig175B, the GPT-2 tokenizer
    # nvidia/megatron-gpt2-345m)
    ("GPT3-175B", "NeMo performance summary (docs)"): RowModel(
        "gpt3-175b",
        (
            ("hidden_dropout", 0.0, NEMO2_GPT3 + ": hidden_dropout 0.0"),
            ("attention_dropout", 0.0, NEMO2_GPT3 + ": attention_dropout 0.0"),
            ("apply_layernorm_1p", True, NEMO2_GPT3 + ": layernorm_zero_centered_gamma True"),
        ),
        "NeMo 2 GPTConfig175B: dropout 0, zero-centred LayerNorm",
    ),
    "GPT3-175B (MLPerf gpt3)": RowModel(
        "gpt3-175b",
        (
            ("hidden_dropout", 0.0, MLPERF_GPT3 + ": hidden_dropout 0.0"),
            ("attention_dropout", 0.0, MLPERF_GPT3 + ": attention_dropout 0.0"),
            ("apply_layernorm_1p", True, MLPERF_GPT3 + ": normalization 'layernorm1p'"),
        ),
        "MLPerf gpt3: dropout 0, LayerNorm-1p",
    ),
    "Llama3.1-405B (MLPerf llama31_405b)": RowModel(
        "llama3.1-405b",
        (
            (
                "vocab_size",
                32768,
                "the benchmark replaces the paper's tokenizer with Mixtral 8x22B's (NVIDIA/benchmarks/llama31_405b/"
                "implementations/*/README.md, training_results_v5.0 @ 0fdc28f0; University-of-Florida's, v5.1 @ "
                "441d65f4; 32,768: "
                "presets/models/mixtral-8x22b.yaml)",
            ),
        ),
        "MLPerf llama31_405b: Mixtral 8x22B's vocabulary",
    ),
    # Llama 3.1 8B: Llama 3 8B's architecture with Llama 3.1's rope scaling (NeMo Llama31Config8B, which the
    # submission's pretrain.py builds at seq_length 8192; its tokenizer llama-3-1-8b, 128,256)
    "Llama3.1-8B (MLPerf llama31_8b)": RowModel(
        "llama3-8b",
        (
            (
                "rope_scaling_factor",
                8.0,
                "NVIDIA/NeMo nemo/collections/llm/gpt/model/llama.py Llama31Config scale_factor 8.0 (v2.4.0), "
                "Llama31Config8B in University-of-Florida/benchmarks/llama31_405b/implementations/b200_nemo/"
                "pretrain.py (training_results_v5.1 @ 441d65f4)",
            ),
        ),
        "Llama 3.1 8B",
    ),
}


def modern_definition(row: dict) -> RowModel:
    """The definition of a `_modern` row's model (``MODERN_MODELS``); a row of a model without one is an error."""
    for key in ((row["model_name"], row["source_family"]), row["model_name"]):
        if key in MODERN_MODELS:
            return MODERN_MODELS[key]
    raise KeyError(f"modern_runs.csv {row['run_id']}: no model definition for {row['model_name']!r} (MODERN_MODELS)")


def _row_userbuffers(row: dict, dp_sync: dict[str, dict], t: int, assumptions: list[str]) -> tuple:
    """(Bridge's presets?, the userbuffer config read) of a row, its assumption appended. NeMo's and
    Megatron-Bridge's recipes (DGX Cloud, Bridge's and NeMo's performance tables) run Bridge's userbuffer presets,
    unless the run's launch config is read (dp_sync_runs.csv ``userbuffers``: NeMo 1's hydra config; MLPerf's H100
    GPT-3 files with their launch variables resolved); other MLPerf runs: TE's defaults."""
    ub_cfg = _userbuffers(dp_sync.get(row["run_id"]), _yes(row["tp_comm_overlap"]) and t > 1)
    bridge_ub = _yes(row["tp_comm_overlap"]) and row["source_family"] != "MLPerf Training" and ub_cfg is None
    if bridge_ub and t > 1:
        assumptions.append(
            "userbuffers: Megatron-Bridge's preset for the GPU and shape (comm_overlap.py; the recipes' own "
            "userbuffer file not read), else Transformer Engine's defaults"
        )
    elif ub_cfg is not None:
        assumptions.append(f"userbuffers: {ub_cfg.name}")
    return bridge_ub, ub_cfg


def _modern_options(row: dict, dp_sync: dict[str, dict], ub: tuple, graph_rs: bool, eager: bool) -> dict:
    """The plan options of a `_modern` run: flash attention, its own overlaps, TP-overlap config and FP8 recipe (or
    NVFP4: precision ``fp4``, recipe ``nvfp4``, its parameter gather in the ``fp8_param_gather`` column)."""
    bridge_ub, ub_cfg = ub
    fp8, fp4 = row["precision"] == "fp8", row["precision"] == "fp4"
    return dict(
        attention_kernel="flash",
        overlap_grad_reduce=_yes(row["overlap_grad_reduce"]),
        overlap_param_gather=_yes(row["overlap_param_gather"]),
        tp_comm_overlap=_yes(row["tp_comm_overlap"]),
        tp_comm_overlap_cfg="bridge" if bridge_ub else ub_cfg,
        fp8="hybrid" if fp8 else None,
        fp8_recipe=row["fp8_recipe"] if fp8 and row["fp8_recipe"] else "delayed",
        fp8_param_gather=fp8 and _yes(row["fp8_param_gather"]),
        # the attention core in FP8 (Megatron-Core fp8_dot_product_attention: MLPerf's config_common_fp8attn.sh
        # FP8_DPA=True; under NVFP4 with config_common_fp4.sh's NVTE_DPA_FP8_RECIPE=Float8CurrentScaling), priced at
        # the GPU preset's FP8/BF16 kernel ratios (blocks.fp8_attention_ratios)
        fp8_dot_product_attention=(fp8 or fp4) and _yes(row["fp8_attention"]),
        fp4="e2m1" if fp4 else None,
        fp4_param_gather=fp4 and _yes(row["fp8_param_gather"]),
        grad_reduce_in_bf16=row["grad_reduce_dtype"] == "bf16",
        cuda_graph_impl=row["cuda_graph_impl"],
        ub_graph_reorders_rs=graph_rs,
        tp_only_amax_red=reduces_amax_over_tp_only(row["release"], row["model_name"]),
        activation_fusion=not eager,
        attention_time_ratio=release_attention_ratio(
            row["release"], row["hardware"], int(row["seq_length"]), (fp8 or fp4) and _yes(row["fp8_attention"])
        ),
        **_dp_sync_options(dp_sync.get(row["run_id"])),
    )


# NeMo 1's launcher (NVIDIA/NeMo-Framework-Launcher 24.01-24.07) turns cuDNN's attention off,
# launcher_scripts/conf/config.yaml @ 24.03.01:68 "NVTE_FUSED_ATTN: 0  # Disable cudnn FA until we've tested it
# more" (added 562dcb45, 2024-02-13; removed 04b8d098, 2024-08-29), so Transformer Engine 1.4 runs flash-attn
# (attention.py:2427-2430, 2834-2839 @ v1.4; setup.py:288 pins flash-attn <= 2.4.2): FlashAttention-2's measured
# time over the Hopper law (kernels.release_time_ratio, the FA3 paper's FA2 rows)
NEMO1_LAUNCHER_FA2 = re.compile(r"^NeMo 24\.0[1-7](\.\d+)? container \(NeMo 1")  # not MLPerf's own launch scripts
# MLPerf Training v3.1's GPT-3 (NVIDIA's and Azure's runs of NVIDIA's implementation, ngc23.09): its Dockerfile installs
# flash-attn 2.0.8 (mlcommons/training_results_v3.1 @d06288b2 NVIDIA/benchmarks/gpt3/implementations/pytorch/
# Dockerfile:95-96) beside Transformer Engine 09ba8427 (Azure's 4ee8e8ec, 15 commits on), whose DotProductAttention
# calls flash-attn before cuDNN's fused kernel whenever both are allowed (transformer_engine/pytorch/attention.py
# @09ba8427:1747-1790; NVTE_FLASH_ATTN defaults to 1): FlashAttention-2's time, as NeMo 1's launcher's
MLPERF_V31_FA2 = re.compile(r"^MLPerf Training v3\.1,")
# MLPerf Training v3.0's GPT-3 (NVIDIA's and CoreWeave's runs of NVIDIA's implementation, pytorch:23.04): its
# requirements.txt pins flash_attn==1.0.5 and Transformer Engine release_v0.8 calls it (transformer_engine/pytorch/
# transformer.py @v0.8: flash_attn_unpadded_func, NVTE_FLASH_ATTN defaults to 1): FlashAttention (v1)'s time
# (kernels.hopper_flash_attn_1_ratio)
MLPERF_V30_FA1 = re.compile(r"^MLPerf Training v3\.0,")
# ... and its config_common.sh exports NVTE_DP_AMAX_REDUCE_INTERVAL=0 ("AMAX AR overlap and disable DP"), which
# Transformer Engine 0.x-1.5 reads as "amaxes reduced only in the TP domain" (transformer_engine/pytorch/fp8.py
# @09ba8427:329-347, @4ee8e8ec, Azure's, the same; the variable is gone from PyTorch's fp8.py at v1.6, so MLPerf
# v4.0's identical export, on v1.6rc1, does nothing): the TP group's all-reduce, as Megatron-Core's tp_only_amax_red
MLPERF_V31_TP_AMAX = MLPERF_V31_FA2
# A launch script that exports NVTE_FUSED_ATTN=0 itself (DGX Cloud's v24.11.1 recipes: GPT-3 175B's launch.sh,
# Nemotron-4 340B's configure.sh) leaves Transformer Engine flash-attn whatever the container: its release text names
# the variable
FUSED_ATTN_OFF = "NVTE_FUSED_ATTN=0"
# NeMo 25.02 and 25.04 on Blackwell ran cuDNN 9.7.0: NVIDIA/NeMo v2.2.0 @7192a2c944c4 and v2.3.0 @2b03b748bb7d (the
# 25.02 and 25.04 containers; v2.3.0rc2 @9ff7e755 the 25.04.rc2; v2.2.1, v2.3.1 and v2.3.2 the same) build on
# nvcr.io/nvidia/pytorch:25.01-py3 (requirements/manifest.json:2), whose libraries v2.3.0's reinstall.sh:44-49 pins for
# TRT-LLM, --CUDNN_VER="9.7.0.66-1" - the first cuDNN for Blackwell (cudnn-frontend v1.10.0, 2025-01-28: "preferred ...
# for cudnn backend 9.7.0 and later as it adds to the Blackwell specific features"). Transformer Engine runs sm100
# attention as cuDNN's fused kernel with or without context parallelism (TE v2.0 attention.py:600-630, 936-947; v2.2
# dot_product_attention/utils.py:573-603, 901-907). No kernel table measures 9.7 on sm100 (cudnn-frontend's training
# tables start at 9.10.2, docs/cost-model.md §13.7, where B200 runs 1.01-1.26x the law at 4k-16k and 9.13.1 1.00-1.21x):
# its time over the Blackwell law is the median over NeMo's long-context table on B200 (NeMo 25.04.rc2, Llama 3 8B FP8,
# 8K-1M, CP 1-16; NVIDIA/NeMo docs/source/performance/performance_long_sequence.md @ v2.4.0) of the ratio that gives
# each row its published step, the rest of the step as modelled (fidelity.long_context;
# scripts/long_context_attention.py prints them; tests/test_long_context.py checks it is their fixed point under the
# calibration it moves). Those rows set this one ratio (they stay out of the calibration); the other rows of these
# containers judge it (NeMo's Mixtral 8x7B and 8x22B on B200 and GB200, held out: +13..+45 % -> +10..+28 %).
# MLPerf v5.1's B200 rows ran cuDNN 9.13.1 (mlcommons/training_results_v5.1 @441d65f4 University-of-Florida/
# benchmarks/llama31_405b/implementations/b200_nemo/Dockerfile:21, 43-44: pytorch:25.09-py3 with libcudnn9-cuda-13
# 9.13.1.26 installed, ENV CUDNN_VERSION=9.13.1.26; NCCL v2.28.3-1, :133), the release of B200's kernel table in
# presets/reference/attention_kernels.csv (NVIDIA/cudnn-frontend @0b1577c8c834): priced at that table's time over the
# law at the row's sequence, causal, forward + backward (kernels.release_time_ratio: 1.081 at 8k).
# Not priced: MLPerf v5.0's ngc25.04_nemo image (mlcommons/training_results_v5.0 NVIDIA/benchmarks/llama31_405b/
# implementations/tyche_ngpu512_ngc25.04_nemo/Dockerfile:21, pytorch:25.04-py3: cuDNN 9.9.0, per NVIDIA/cudnn-frontend
# @06ddf804b33c benchmark/Llama-3.2-1B-Training/README.md:11-17) and Megatron-Bridge 25.09 (cuDNN 9.11.0.98, its
# docs/releases/software-versions.md), which no table measures.
MLPERF_V51_CUDNN_9131 = re.compile(r"^MLPerf Training v5\.1,")
# NVIDIA's own v5.1 images (NVIDIA/benchmarks/llama31_405b/implementations/*_ngc25.09_nemo/Dockerfile:43-44) install the
# same cuDNN 9.13.1.26: on GB200 (sm100, B200's kernels) priced at B200's table; GB300 (sm103) at its own, measured by
# the same benchmark (artifacts/sdpa_fp8_benchmark_results_NVIDIA_GB300.csv @0b1577c8c834: 1.145x the law at 8k).
# The table per preset: (gpu, kernel) of attention_kernels.csv's cuDNN 9.13.1 rows.
CUDNN_9131_TABLE = {
    "dgx-b200-superpod": ("B200", "cuDNN fused attention (cuDNN frontend)"),
    "gb200-nvl72": ("B200", "cuDNN fused attention (cuDNN frontend)"),
    "gb300-nvl72": ("GB300", "cuDNN 9.13.1 fused attention (cuDNN frontend)"),
    "dgx-b300-superpod": ("GB300", "cuDNN 9.13.1 fused attention (cuDNN frontend)"),  # GB300's: the same sm103 kernels
}
# cuDNN 9.13.1's per-tensor FP8 attention time over its BF16 time, causal, b 1, 128/8 heads, d_h 128, (forward,
# backward) by sequence length: NVIDIA/cudnn-frontend @0b1577c8c834 benchmark/sdpa_benchmark_training/artifacts/
# sdpa_fp8_benchmark_results_NVIDIA_{B200,GB300}.csv, fp8 over bf16 forward_time and backward_time (B200 at 8k: 1.464 /
# 1.589 and 4.382 / 5.526 ms; GB300: 1.060 / 1.281 and 3.632 / 4.778 ms). The attention MLPerf v5.1's NVFP4 configs ran
# (config_common_fp8attn.sh); the presets' tables are cuDNN 9.22's. B200's carried to GB200 (the same sm100 kernels).
CUDNN_9131_FP8_OVER_BF16 = {
    "B200": (
        {2048: 0.934, 4096: 0.927, 8192: 0.921, 16384: 0.872, 32768: 0.850},
        {2048: 0.981, 4096: 0.857, 8192: 0.793, 16384: 0.784, 32768: 0.746},
    ),
    "GB300": (
        {2048: 0.971, 4096: 0.863, 8192: 0.827, 16384: 0.810, 32768: 0.801},
        {2048: 0.949, 4096: 0.815, 8192: 0.760, 16384: 0.739, 32768: 0.718},
    ),
}
# Megatron-Bridge 25.09 (the NeMo 25.09 container) ships cuDNN 9.11.0.98 (NVIDIA-NeMo/Megatron-Bridge
# docs/releases/software-versions.md). No table measures 9.11 on sm100; the two B200 tables around it, 9.10.2
# (NVIDIA/cudnn-frontend @cb560b928823) and 9.13.1 (@0b1577c8c834, presets/reference/attention_kernels.csv), put the
# causal 8k call at 1.11x and 1.08x the law (docs/cost-model.md §13.7): 9.11 is priced at the newer table's time, the
# smaller of its two bounds (a later release ran no slower at these shapes: 9.10.2 -> 9.13.1 sped every BF16 length
# up, 1.01-1.15x), as MLPerf v5.1's rows are. GB300 (sm103) at its own 9.13.1 table.
BRIDGE_2509_CUDNN_911 = re.compile(r"^NeMo 25\.09 container \(Megatron-Bridge\)")
CUDNN_970_BLACKWELL_ATTENTION_RATIO = 1.25
CUDNN_970_CONTAINER = re.compile(r"^NeMo 25\.0[24]\b")


@functools.lru_cache(maxsize=16)
def release_attention_ratio(release: str, hardware: str, seq_len: int = 8192, fp8_attention: bool = False) -> float:
    """The attention kernels' time over the preset law of a row's container (``release``: its release text) on its
    hardware: NeMo 1's launcher's FlashAttention-2 on Hopper (or a launch script's own NVTE_FUSED_ATTN=0, or MLPerf
    v3.1's flash-attn 2.0.8 that its Transformer Engine calls first), NeMo 25.02/25.04's cuDNN 9.7.0 on Blackwell,
    MLPerf v5.1's cuDNN 9.13.1 on B200, GB200 (B200's table) and GB300 (its own) at ``seq_len`` keys, else 1 (today's
    kernels: the law). ``fp8_attention``: the row's attention runs in per-tensor FP8, priced at cuDNN 9.13.1's own
    FP8/BF16 ratios where the release is 9.13.1 (``kernels.release_fp8_time_ratio``; elsewhere the BF16 ratio)."""
    from planner.fidelity.kernels import (
        hopper_flash_attn_1_ratio,
        hopper_flash_attn_2_ratio,
        release_fp8_time_ratio,
        release_time_ratio,
    )

    hw = load_hardware(hardware)
    cc = hw.gpu.compute_capability
    if cc >= 10 and CUDNN_970_CONTAINER.search(release):
        return CUDNN_970_BLACKWELL_ATTENTION_RATIO
    cudnn_9131 = MLPERF_V51_CUDNN_9131.search(release) or BRIDGE_2509_CUDNN_911.search(release)
    if hardware in CUDNN_9131_TABLE and cudnn_9131:
        (gpu, kernel), params = CUDNN_9131_TABLE[hardware], hw.attention.model_dump()
        if fp8_attention:
            priced = (hw.attention.fp8_fwd_time_ratio_by_seq, hw.attention.fp8_bwd_time_ratio_by_seq)
            return release_fp8_time_ratio(gpu, kernel, params, seq_len, CUDNN_9131_FP8_OVER_BF16[gpu], priced)
        return release_time_ratio(gpu, kernel, params, seq_len, causal=True, max_s=seq_len)
    if 9 <= cc < 10 and MLPERF_V30_FA1.search(release):
        return hopper_flash_attn_1_ratio(hw.attention.model_dump(), seq_len)
    flash_first = NEMO1_LAUNCHER_FA2.search(release) or FUSED_ATTN_OFF in release or MLPERF_V31_FA2.search(release)
    if 9 <= cc < 10 and flash_first:
        return hopper_flash_attn_2_ratio(hw.attention.model_dump())
    return 1.0


SEARCHED = "searched"  # a modern_runs.csv cell of a knob its source leaves out
MODERN_SEARCHABLE = {"vpp": "vpp", "micro_batch": "micro_batch", "recompute": "recompute"}  # request key: column
NVFP4_VALIDATION = "NVFP4,"  # how modern_runs.csv's not_fit_because opens for NVFP4's validation rows
HELD_OUT = "held out,"  # ... and for the rows of an out-of-sample source (Megatron-LM's own FP8 table)


def _modern(row: dict, dp_sync: dict[str, dict]) -> Run:
    """A published run of today's Megatron-Core (through NeMo or Megatron-Bridge): flash attention,
    the distributed optimizer with --overlap-grad-reduce --overlap-param-gather, SP with TP and the
    row's own TP overlap and FP8 recipe, in the metric it was published in."""
    L, t, p = (int(row[k]) for k in ("num_layers", "tp", "pp"))
    v = 1 if row["vpp"] == SEARCHED else int(row["vpp"])
    assumptions = [a for a in row["assumptions"].split("; ") if a]
    split = "even"
    if p > 1 and L % (p * v) and (L + 2) % (p * v) == 0:
        split = "embedding+loss"
        assumptions.append("embedding and loss counted as pipeline layers (the only even split of the layers)")
    bridge_ub, ub_cfg = _row_userbuffers(row, dp_sync, t, assumptions)
    eager = row["mlp"] == "squared_relu"  # every squared-ReLU run of the table is NeMo 2's (Nemotron-4)
    if eager:
        assumptions.append(NEMO_SQUARED_RELU)
    graph_rs = te_reorders_graphed_rs(row["release"])
    if graph_rs and _yes(row["tp_comm_overlap"]) and row["cuda_graph_impl"] != "none":
        assumptions.append(GRAPH_RS_REORDERED)
    # a knob the source leaves out is "searched": the fastest plan consistent with the published ones (MLM_SEARCHED)
    searched = tuple(k for k, col in MODERN_SEARCHABLE.items() if row[col] == SEARCHED)
    knobs = {k: row[c] if k == "recompute" else int(row[c]) for k, c in MODERN_SEARCHABLE.items() if k not in searched}
    request = dict(
        model=modern_definition(row).spec(),
        gpus=int(row["num_gpus"]),
        tp=t,
        pp=p,
        cp=int(row["cp"]),
        **knobs,
        global_batch=int(row["global_batch"]),
        seq_len=int(row["seq_length"]),
        precision="bf16",
        sequence_parallel=_yes(row["sequence_parallel"]),
        distributed_optimizer=_yes(row["distributed_optimizer"]),
        stage_split=split,
        options=_modern_options(row, dp_sync, (bridge_ub, ub_cfg), graph_rs, eager),
    )
    if row["not_fit_because"]:
        assumptions.append("validated only, not fitted: " + row["not_fit_because"])
    return Run(
        row["run_id"],
        row["source_family"],
        row["metric"],
        float(row["value"]),
        row["hardware"],
        request,
        tuple(assumptions),
        fit=_yes(row["fit"]),
        # NVFP4's own validation rows are in the bar, not set apart: out of the dense fit by design, GB300's judging its
        # measured NVFP4 GEMM ratio out of sample, GB200's fitting its ratio (megaplan calibrate --nvfp4); an
        # out-of-sample source's rows likewise (HELD_OUT)
        held_out=not _yes(row["fit"]) and row["not_fit_because"].startswith((NVFP4_VALIDATION, HELD_OUT)),
        searched=searched,
        model_def=modern_definition(row),
    )


def dp_sync_rows() -> dict[str, dict]:
    """What the runs' launch configurations set for data-parallel synchronisation beyond Megatron-LM's
    flags (NeMo 1's Apex DistributedFusedAdam buckets, SHARP, the DP communicator's max_ctas, Megatron-Core's
    DDP bucket size), by
    run id, each with the file it was read from (``presets/reference/dp_sync_runs.csv``)."""
    text = (presets_root() / "reference" / "dp_sync_runs.csv").read_text()
    return {row["run_id"]: row for row in csv.DictReader(io.StringIO(text))}


def _userbuffers(row: dict | None, overlap: bool):
    """The userbuffer config a run's launch config sets (``presets/userbuffers/<file>``, named after the
    file and the source that gives it), or None."""
    if row is None or not row.get("userbuffers") or not overlap:
        return None
    from planner.hardware.userbuffers import load_config_file

    cfg = load_config_file(str(presets_root() / "userbuffers" / row["userbuffers"]))
    return cfg.model_copy(update={"name": f"the run's own config (presets/userbuffers/{row['userbuffers']})"})


def _dp_sync_options(row: dict | None) -> dict:
    """PlanOptions of a run's data-parallel synchronisation row (none: Megatron-LM's defaults)."""
    if row is None:
        return {}
    return {
        "dfa_bucket_mb": float(row["dfa_bucket_mb"]) if row["dfa_bucket_mb"] else None,
        "use_sharp": _yes(row["use_sharp"]),
        "dp_max_ctas": int(row["dp_max_ctas"]) if row["dp_max_ctas"] else None,
        "ddp_bucket_size": int(row["ddp_bucket_size"]) if row["ddp_bucket_size"] else None,
    }


def load_runs() -> list[Run]:
    """Every reference run with a complete configuration (or a stated default for what is missing); read
    once per process (validate, its memory verdicts and the evidence settings each read them: 0.03 s each)."""
    return list(_runs())


@functools.lru_cache(maxsize=1)
def _runs() -> tuple[Run, ...]:
    dp_sync = dp_sync_rows()
    runs: list[Run] = [_modern(row, dp_sync) for row in modern_rows()]
    for row in reference_rows():
        rid = row["run_id"]
        if rid.startswith("N21-T1") or rid == "N21-S51-GPT3-175B-1024":
            runs += _n21(row)
        elif rid.startswith("K22-"):
            runs += _k22(row)
        elif rid.startswith("MLM-README-H100-") and "strong" not in rid:
            runs += _mlm(row)
    return tuple(runs)
