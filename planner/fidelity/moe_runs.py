"""Published mixture-of-experts training throughputs with complete configurations, as plans:
``presets/reference/moe_runs.csv`` (NVIDIA's Megatron-Bridge performance tables, releases 25.09 to
26.08, each row citing its table and the recipe it ran), validated in tokens per second per GPU.

Each row runs as the recipe does: its selective recompute modules and its CUDA graphs (the
implementation and the modules captured) are in the plan. What megaplan does not model is stated per
row as an assumption. Their MoE benchmarks force-balance the tokens across the experts (the tables'
footnote), so the busiest expert's load is the mean (imbalance 1.0).
"""

from __future__ import annotations

import csv
import io

from planner.fidelity.runs import Run
from planner.presets import presets_root

MOE_METRIC = "tokens/s per GPU"
SYSTEM = {"dgx-h100-superpod": "H100", "dgx-b200-superpod": "B200", "gb200-nvl72": "GB200"}


def moe_source(hardware: str) -> str:
    return f"Megatron-Bridge perf. tables, MoE on {SYSTEM[hardware]}"


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


def _run(row: dict) -> Run:
    fp8 = row["fp8"] or None
    modules = () if row["recompute_modules"] in NO_MODULES else tuple(row["recompute_modules"].split(","))
    options = dict(
        attention_kernel="flash",
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,  # the tables' MoE benchmarks force-balance the tokens across experts
        fp8=fp8,
        fp8_recipe=row["fp8_recipe"] or None,
        moe_flex_dispatcher_backend=row["flex_backend"] or None,
        recompute_modules=modules or None,
        **_cuda_graphs(row["cuda_graph"]),
    )
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
    assumptions = [
        "force-balanced routing (imbalance 1.0), distributed optimizer with overlapped grad-reduce and "
        "param-gather, flash attention, SP with TP > 1"
    ]
    if row["recompute_modules"] == "(recipe default)":
        assumptions.append("the recipe's default recomputation: none")
    if row["cuda_graph"] not in ("none", ""):
        assumptions.append("CUDA graphs save the host launch time of what they capture (§4.4), nothing else")
    if row["pipeline_layout"]:
        assumptions.append(
            "DeepSeek-V3 pipeline layouts of Megatron-Bridge's set_deepseek_v3_pipeline_model_parallel_layout "
            "(PP8 × VP4 not in its table: Et|(tt|)*30mL assumed)"
        )
    if row["fp8"]:
        assumptions.append(f"FP8 GEMMs ({row['fp8_recipe']}) at the preset's FP8 efficiency (not fitted)")
    return Run(
        row["run_id"],
        moe_source(row["hardware"]),
        MOE_METRIC,
        float(row["tokens_per_s_per_gpu"]),
        row["hardware"],
        request,
        tuple(assumptions),
    )


def load_moe_runs() -> list[Run]:
    """Every MoE row of the reference table (all have complete parallel configurations)."""
    return [_run(row) for row in moe_reference_rows()]
