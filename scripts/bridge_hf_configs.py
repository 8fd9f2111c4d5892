"""Hugging Face config.json files for the models Megatron-Bridge's base recipes read from the Hub
(``AutoBridge.from_hf_pretrained``), written from megaplan's model presets (whose values are the model
cards') plus the few fields the presets do not carry, each from the model card's config.json. Used
only to run Bridge's code on CPU (scripts/dump_bridge_fields.py, tests/test_bridge_check.py)."""

from __future__ import annotations

from planner.presets import load_model

HF_REPOS = {  # megaplan preset -> the Hub repository the Bridge recipes read
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "gpt-oss-120b": "openai/gpt-oss-120b",
}
HF_REVISIONS = {  # commits a recipe pins (v0.6.0 recipes/qwen/h100/qwen3_moe.py _QWEN3_30B_A3B_MODEL_REVISION)
    "qwen3-30b-a3b": ("ad44e777bcd18fa416d9da3bd8f70d33ebb85d39",)
}
LLAMA31_ROPE = {  # meta-llama/Meta-Llama-3.1-405B config.json
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
DSV3_ROPE = {  # deepseek-ai/DeepSeek-V3 config.json
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}
GPT_OSS_ROPE = {  # openai/gpt-oss-120b config.json
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": False,
}


def _common(m) -> dict:
    return {
        "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "num_hidden_layers": m.num_layers,
        "num_key_value_heads": m.num_query_groups or m.num_attention_heads,
        "vocab_size": m.vocab_size,
        "max_position_embeddings": m.max_position_embeddings,
        "tie_word_embeddings": not m.untie_embeddings_and_output_weights,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    }


def hf_config(preset: str) -> dict:
    m = load_model(preset)
    c = _common(m)
    if preset.startswith("llama"):
        theta = 10000.0 if preset.startswith("llama2") else 500000.0  # the model cards' rope_theta
        c |= {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "intermediate_size": m.ffn}
        c |= {"rope_theta": theta, "rms_norm_eps": 1e-5 if theta > 10000 else 1e-6, "attention_bias": False}
        c["rope_scaling"] = LLAMA31_ROPE if preset == "llama3.1-405b" else None
        return c
    if preset.startswith("qwen3"):
        c |= {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "intermediate_size": m.ffn}
        c |= {"moe_intermediate_size": m.expert_ffn, "num_experts": m.num_experts, "head_dim": m.kv_channels}
        c |= {"num_experts_per_tok": m.moe_router_topk, "rope_theta": m.rotary_base, "rms_norm_eps": 1e-6}
        return c | {"decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "attention_bias": False}
    if preset == "deepseek-v3":
        c |= {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "intermediate_size": m.ffn}
        c |= {"moe_intermediate_size": m.expert_ffn, "n_routed_experts": m.num_experts, "n_shared_experts": 1}
        c |= {"num_experts_per_tok": m.moe_router_topk, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3}
        c |= {"q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank, "qk_nope_head_dim": m.qk_head_dim}
        c |= {"qk_rope_head_dim": m.qk_pos_emb_head_dim, "v_head_dim": m.v_head_dim, "rope_theta": 10000}
        c |= {"routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1}
        c |= {"norm_topk_prob": True, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-6}
        return c | {"rope_scaling": DSV3_ROPE}
    if preset.startswith("gpt-oss"):
        layers = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(m.num_layers)]
        c |= {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "intermediate_size": m.expert_ffn}
        c |= {"num_local_experts": m.num_experts, "num_experts_per_tok": m.moe_router_topk, "head_dim": m.kv_channels}
        c |= {"experts_per_token": m.moe_router_topk, "sliding_window": 128, "layer_types": layers}
        c |= {"rope_theta": m.rotary_base, "rope_scaling": GPT_OSS_ROPE, "rms_norm_eps": 1e-5}
        return c | {"swiglu_limit": 7.0}
    raise KeyError(preset)


def hf_entries(preset: str) -> dict:
    """The ``hf`` entries of a bridge_check_batch case: the config.json under its repository, and again under
    every commit a recipe pins (``repo@commit``)."""
    if preset not in HF_REPOS:
        return {}
    config, repo = hf_config(preset), HF_REPOS[preset]
    return {repo: config} | {f"{repo}@{c}": config for c in HF_REVISIONS.get(preset, ())}
