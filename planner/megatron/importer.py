"""An existing Megatron-LM command line or launch script, read into a plan.

The shell reader (planner.megatron.shell) finds the pretrain_gpt.py arguments without running anything;
the flag table (planner.megatron.flags) types them and maps old spellings; this module turns the
flags that change cost into a model spec and a plan. Flags that do not change cost (learning
rate, data paths, logging) are accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner import api
from planner.errors import PlannerError
from planner.megatron.flags import MegatronArgs, parse_megatron_argv
from planner.megatron.shell import extract_launch
from planner.models.spec import ModelSpec
from planner.plan import StageSplit
from planner.presets import load_model
from planner.space.grid import stage_layers

TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}  # vocabulary of tokenizers whose size is fixed
UNMODELLED = {  # dest -> (value that means "off", what to say)
    "use_torch_fsdp2": (
        False,
        "PyTorch FSDP2 (--use-torch-fsdp2) is not modelled; Megatron FSDP (--use-megatron-fsdp) is",
    ),
    "hybrid_layer_pattern": (None, "hybrid (Mamba) layer patterns are not modelled"),
    "multi_latent_attention": (False, "multi-latent attention is not modelled"),
}
MODEL_FIELDS = {  # Megatron dest -> ModelSpec field
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "ffn_hidden_size": "ffn_hidden_size",
    "max_position_embeddings": "max_position_embeddings",
    "vocab_size": "vocab_size",
    "make_vocab_size_divisible_by": "make_vocab_size_divisible_by",
    "kv_channels": "kv_channels",
    "swiglu": "swiglu",
    "normalization": "normalization",
    "position_embedding_type": "position_embedding_type",
    "untie_embeddings_and_output_weights": "untie_embeddings_and_output_weights",
    "add_bias_linear": "add_bias_linear",
    "hidden_dropout": "hidden_dropout",
    "attention_dropout": "attention_dropout",
    "squared_relu": "squared_relu",
    "num_experts": "num_experts",
    "moe_router_topk": "moe_router_topk",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_layer_freq": "moe_layer_freq",
}


@dataclass(frozen=True)
class Imported:
    request: api.PlanRequest
    warnings: tuple[str, ...]
    argv: list[str]
    script_gpus: int | None = None  # the world size the script's launcher gives, if it gives one


def _model(v: dict, base: ModelSpec | None) -> ModelSpec:
    fields = {MODEL_FIELDS[k]: val for k, val in v.items() if k in MODEL_FIELDS}
    if v.get("group_query_attention") and v.get("num_query_groups"):
        fields["num_query_groups"] = v["num_query_groups"]
    if "vocab_size" not in fields and base is None:
        tok = v.get("tokenizer_type")
        if tok in TOKENIZER_VOCAB:
            fields["vocab_size"] = TOKENIZER_VOCAB[tok]
        elif v.get("vocab_file"):
            fields["vocab_size"] = TOKENIZER_VOCAB["GPT2BPETokenizer"]  # --vocab-file + --merge-file: GPT-2 BPE
    if base is not None:
        merged = {**base.model_dump(exclude={"training"}), **fields}
        merged.setdefault("max_position_embeddings", v.get("seq_length", base.max_position_embeddings))
        return ModelSpec.model_validate({**merged, "name": base.name, "training": base.training})
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
        if MODEL_FIELDS[k] not in fields
    ]
    if missing:
        raise PlannerError(
            f"the command line does not define the model: {', '.join(missing)} missing "
            "(give them, a --tokenizer-type of known size, or --model PRESET)"
        )
    fields.setdefault("max_position_embeddings", v.get("seq_length", 2048))
    return ModelSpec.model_validate({"name": "imported", "source": "Megatron-LM command line", **fields})


def _stage_split(v: dict) -> StageSplit:
    return StageSplit.from_flags(
        v.get("account_for_embedding_in_pipeline_split"), v.get("account_for_loss_in_pipeline_split")
    )


def _vpp(v: dict, L: int, p: int) -> int:
    """Chunks per stage from --num-layers-per-virtual-pipeline-stage: the (middle) stage's layers over the
    layers per chunk (Megatron-LM arguments.py:927-980)."""
    if v.get("num_virtual_stages_per_pipeline_rank"):
        return int(v["num_virtual_stages_per_pipeline_rank"])
    per_chunk = v.get("num_layers_per_virtual_pipeline_stage")
    if not per_chunk:
        return 1
    first, last = v.get("decoder_first_pipeline_num_layers") or 0, v.get("decoder_last_pipeline_num_layers") or 0
    layers = stage_layers(L, np.array([p]), np.array([_stage_split(v).code]), np.array([first]), np.array([last]))
    per_stage = int(layers.middle[0])
    if per_stage % per_chunk:
        raise PlannerError(
            f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide the {per_stage} layers per stage"
        )
    return per_stage // per_chunk


def _recompute(v: dict) -> str:
    if v.get("recompute_activations"):
        return "selective"
    gran = v.get("recompute_granularity")
    return gran if gran in ("full", "selective") else "none"


def _attention(v: dict) -> str:
    backend = v.get("attention_backend")
    if backend in ("unfused", "local") or (v.get("transformer_impl") == "local" and backend not in ("flash", "fused")):
        return "unfused"
    return "flash"


def request_from_megatron(
    args: MegatronArgs, *, gpus: int | None, model: str | None = None, hardware: str | None = None
) -> api.PlanRequest:
    """The plan a parsed Megatron-LM argv describes."""
    v = args.values
    for dest, (off, message) in UNMODELLED.items():
        if dest in v and v[dest] not in (off, None, False):
            raise PlannerError(message)
    if isinstance(v.get("moe_layer_freq"), str):
        raise PlannerError("--moe-layer-freq as a pattern is not modelled; give an integer k (every k-th layer is MoE)")
    spec = _model(v, load_model(model) if model else None)
    tp, pp = int(v.get("tensor_model_parallel_size", 1)), int(v.get("pipeline_model_parallel_size", 1))
    if gpus is None:
        raise PlannerError(
            "the world size is unknown: the command line has no torchrun/srun process counts; pass --gpus N"
        )
    b = int(v.get("micro_batch_size", 1))
    cp = int(v.get("context_parallel_size") or 1)
    B = v.get("global_batch_size") or b * (gpus // (tp * pp * cp) if gpus % (tp * pp * cp) == 0 else 1)
    precision = "fp16" if v.get("fp16") else "bf16" if v.get("bf16") else "fp32"
    split = _stage_split(v)
    options = {
        "attention_kernel": _attention(v),
        "overlap_grad_reduce": bool(v.get("overlap_grad_reduce") or v.get("ddp_impl") == "torch"),
        "overlap_param_gather": bool(v.get("overlap_param_gather")),
        "grad_reduce_in_bf16": bool(v.get("grad_reduce_in_bf16")),
        "tp_comm_overlap": bool(v.get("tp_comm_overlap")),
        "overlap_p2p_comm": bool(v.get("overlap_p2p_comm", True)),
        "pp_scatter_gather": bool(v.get("scatter_gather_tensors_in_pipeline")),
        "distribute_saved_activations": bool(v.get("distribute_saved_activations")),
        "async_tp_comm": v.get("async_tensor_model_parallel_allreduce") is not False,
        "fp8": v.get("fp8"),  # --fp8-format stores into args.fp8
        "fp8_param_gather": bool(v.get("fp8_param_gather")),
        "moe_token_dispatcher": v.get("moe_token_dispatcher_type") or "allgather",
        "moe_capacity_factor": v.get("moe_expert_capacity_factor"),
    }
    return api.make_request(
        model=spec,
        hardware=hardware,
        gpus=gpus,
        global_batch=int(B),
        seq_len=v.get("seq_length"),
        precision=precision,
        tp=tp,
        pp=pp,
        vpp=_vpp(v, spec.num_layers, pp),
        micro_batch=b,
        cp=int(v.get("context_parallel_size") or 1),
        ep=int(v.get("expert_model_parallel_size") or 1),
        etp=v.get("expert_tensor_parallel_size"),
        fsdp=bool(v.get("use_megatron_fsdp")),
        sequence_parallel=bool(v.get("sequence_parallel")),
        recompute=_recompute(v),
        distributed_optimizer=bool(v.get("use_distributed_optimizer") or v.get("use_megatron_fsdp")),
        stage_split=split,
        first_stage_layers=v.get("decoder_first_pipeline_num_layers"),
        last_stage_layers=v.get("decoder_last_pipeline_num_layers"),
        options=options,
    )


COST_DESTS = set(MODEL_FIELDS) | {  # flags whose values change the estimate; every other one is read and ignored
    "group_query_attention",
    "num_query_groups",
    "seq_length",
    "tokenizer_type",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "micro_batch_size",
    "global_batch_size",
    "sequence_parallel",
    "recompute_granularity",
    "recompute_activations",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "fp16",
    "bf16",
    "attention_backend",
    "transformer_impl",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "grad_reduce_in_bf16",
    "tp_comm_overlap",
    "overlap_p2p_comm",
    "fp8",
    "fp8_param_gather",
    "moe_token_dispatcher_type",
    "moe_expert_capacity_factor",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "distribute_saved_activations",
}


def _drop_unset(argv: list[str], unresolved: list[str]) -> tuple[list[str], list[str]]:
    """Flags whose value is a variable the script leaves unset: dropped (with a note) when they do
    not change the estimate, an error naming the variable when they do."""
    import re

    from planner.megatron.flags import flag_table

    table, out, notes, i = flag_table(), [], [], 0
    names = {u.strip("${}") for u in unresolved}
    pattern = re.compile(r"\$\{?(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b") if names else None
    while i < len(argv):
        token = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        hit = pattern.search(value) if pattern and value is not None and token.startswith("--") else None
        if hit:
            spec = table.get(token.split("=")[0])
            if spec is not None and spec.dest in COST_DESTS:
                name = hit.group(1)
                raise PlannerError(
                    f"{token} is {value}, which the script leaves unset; pass --env {name}=VALUE "
                    "(or give the flag a value)"
                )
            notes.append(f"{token} {value}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out, notes


def import_megatron(
    text: str,
    *,
    gpus: int | None = None,
    model: str | None = None,
    hardware: str | None = None,
    env: dict[str, str] | None = None,
    base_dir: str | None = None,
) -> Imported:
    """Read a command line or launch script and build its plan (nothing in it is executed)."""
    launch = extract_launch(text, env)
    argv, dropped = _drop_unset(launch.argv, launch.unresolved)
    args = parse_megatron_argv(argv)
    world = gpus or launch.world_size
    warnings = list(args.warnings)
    for dest, flag in (
        ("rampup_batch_size", "--rampup-batch-size"),
        ("step_batch_size_schedule", "--step-batch-size-schedule"),
    ):
        if args.values.get(dest):
            warnings.append(f"{flag} ignored: the estimate is for the full global batch of the steady state")
    if dropped:
        warnings.append(
            f"ignored flags set from unset variables (they do not change the estimate): {'; '.join(dropped)}"
        )
    return Imported(
        request_from_megatron(args, gpus=world, model=model, hardware=hardware),
        tuple(warnings),
        launch.argv,
        launch.world_size,
    )
