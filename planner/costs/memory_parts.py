"""The parts of a stage's memory terms explain shows beside them: what its attention blocks (MLA or
GQA) and its experts take of the model states and of the activations."""

from __future__ import annotations

import numpy as np

from planner.costs import Formula, memory
from planner.costs.layer_memory import kept_parts
from planner.costs.letters import Letters
from planner.costs.mla import mla_formula
from planner.costs.pipeline import in_flight_microbatches
from planner.costs.stage_memory import FSDP_GRAD_BYTES, K22, state_bytes_per_param
from planner.models.params import attention_params, moe_layer_params
from planner.plan import Context


def _fsdp_sharded(states: dict, lt: Letters, shards: np.ndarray, w: int) -> dict:
    """Model states with Megatron FSDP's sharding: the weights (optim_grads_params) and the gradients
    (optim_grads too, in 16 bits) over one replica's ``shards`` ranks, as ``stage_memory`` holds them (the
    layers being gathered aside); ``w`` the bytes of a weight."""
    grads = np.where(lt.fsdp_grads, FSDP_GRAD_BYTES * states["weights"] / (w * shards), states["gradients"])
    weights = np.where(lt.fsdp_params, states["weights"] / shards, states["weights"])
    return {**states, "weights": weights, "gradients": grads}


def memory_parts(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Parts of stage i's memory terms, bytes: the weights, gradients and optimizer states of its
    attention blocks (MLA or GQA) and of its routed experts; the activations its attention blocks
    (with the norms' inputs), routed experts and shared experts keep for all micro-batches in flight."""
    mo = ctx.model
    st = lt.stage(i)
    layers = st["layers"] + st["mtp"]
    moe_layers = st["moe"] + (st["mtp"] if mo.is_moe and mo.mtp_is_moe else 0.0)
    grad_b, opt_b = state_bytes_per_param(ctx)
    w, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    states = dict(
        precision=ctx.precision, distributed_optimizer=lt.dopt | lt.fsdp, gradient_bytes=grad_b, optimizer_bytes=opt_b
    )
    attention = _fsdp_sharded(
        memory.param_state_bytes(layers * attention_params(mo, lt.t), lt.opt_group, **states), lt, lt.N, w
    )
    _, expert = moe_layer_params(mo, lt.t, lt.ep, lt.etp) if mo.is_moe else (0.0, 0.0 * lt.t)
    experts = _fsdp_sharded(memory.param_state_bytes(moe_layers * expert, lt.opt_group_e, **states), lt, lt.edp_in, w)
    acts = kept_parts(lt, ctx)
    in_flight = in_flight_microbatches(lt.p, lt.m, lt.vpp, i, a2a_overlap=lt.a2a_overlap, layers=layers, G=lt.G)
    return {
        "states: attention": sum(attention.values()),
        "states: experts": sum(experts.values()),
        "activations: attention": in_flight * layers * acts["attention"],
        "activations: routed experts": in_flight * moe_layers * acts["routed"],
        "activations: shared experts": in_flight * moe_layers * acts["shared"],
    }


def layers_text(mo) -> str:
    """How formula texts name the layers a part counts: the MTP block's layer only where there is one."""
    return "(layers + MTP)" if mo.mtp_layers else "layers"


def memory_part_formulas(ctx: Context) -> dict[str, Formula]:
    """Formula and source of each part ``memory_parts`` computes."""
    mo = ctx.model
    attention = (
        mla_formula(mo, "parameters")
        if mo.multi_latent_attention
        else Formula("h·(a+2g)·d + a·d·h per layer split over t", "Narayanan et al. 2021 Eq. 2 generalised")
    )
    kept = mla_formula(mo, "keeps").text if mo.multi_latent_attention else "Korthikanti et al. 2022's tensors"
    w, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    g, o = state_bytes_per_param(ctx)
    per_param = f"({w} + {g} + {o}/D) bytes per parameter (D the optimizer's shards)"
    out = {
        "states: attention": Formula(
            f"{layers_text(mo)} × attention parameters / GPU × {per_param}; {attention.text}", attention.source
        ),
        "activations: attention": Formula(
            f"in-flight micro-batches × {layers_text(mo)} × the attention block's kept tensors and norms' inputs: "
            f"{kept}",
            attention.source if mo.multi_latent_attention else K22,
        ),
    }
    if mo.is_moe:
        out["states: experts"] = Formula(
            f"MoE layers × (E/ep) experts × MLP(f_e)/etp parameters × {per_param}, D = expert data-parallel size "
            "N/(etp·ep·p)",
            "Megatron-LM theoretical_memory_usage.py:215-303 (experts over etp·ep, optimizer over expert DP)",
        )
        out["activations: routed experts"] = Formula(
            "in-flight × MoE layers × (2·A·h routed copies + 2·(2 or 3)·A·f_e expert internals + 2·T·h router and "
            "combine), A = T·k·λ; none with --recompute-modules moe, less the activation output 2·A·f_e with moe_act",
            "Korthikanti et al. 2022 §4.1 tensors for the experts' MLP; Megatron-Core moe/experts.py; "
            "transformer_config.py:560-583 (recompute modules)",
        )
        if mo.shared_ffn:
            out["activations: shared experts"] = Formula(
                "in-flight × MoE layers × the shared experts' MLP tensors 2·(2 or 3)·f_s/h·sbh/t",
                "Korthikanti et al. 2022 §4.1; Megatron-Core moe/shared_experts.py",
            )
    return out
