"""The Mixtral rows of the NeMo Framework User Guide's performance summary (presets/reference/moe_runs.csv, NEMODOC-*):
the page's FP8 pre-training rows of the NeMo 25.02 (DGX-B200) and 25.04 (DGX-GB200) containers, run as NeMo 2's
performance scripts at the container's release ran them, validated out of sample - in the bar, never fitted. Values
below are read from the stored copy of the page (docs.nvidia.com/nemo-framework/user-guide/latest/performance/
performance_summary.html) and from NVIDIA/NeMo at v2.2.0 (25.02) and v2.3.0 (25.04) (git show <tag>:<path>)."""

import pytest

from planner.fidelity.moe_runs import _nemo2_release, load_moe_runs, moe_reference_rows, nemo2_row, nemodoc_row
from planner.presets import load_model

X7_B200, X22_B200 = "NEMODOC-25.02-B200-MIXTRAL8X7B-64", "NEMODOC-25.02-B200-MIXTRAL8X22B-256"
X7_GB200, X22_GB200 = "NEMODOC-25.04-GB200-MIXTRAL8X7B-64", "NEMODOC-25.04-GB200-MIXTRAL8X22B-256"
IDS = {X7_B200, X22_B200, X7_GB200, X22_GB200}


@pytest.fixture(scope="module")
def runs():
    return {r.id: r for r in load_moe_runs()}


@pytest.fixture(scope="module")
def rows():
    return {r["run_id"]: r for r in moe_reference_rows() if nemodoc_row(r)}


def test_nemodoc_rows_are_held_out_under_their_own_source(rows, runs):
    assert set(rows) == IDS
    for rid, row in rows.items():
        run = runs[rid]
        assert row["source"].startswith("NeMo Framework User Guide performance summary, https://docs.nvidia.com/")
        container = "25.02" if "25.02" in rid else "25.04"
        system = "DGX-B200" if "-B200-" in rid else "DGX-GB200"
        assert f"section 'Container: NeMo {container}', System {system}" in row["source"]
        assert row["source"].endswith(f"(NeMo release {container})") and nemo2_row(row)
        assert _nemo2_release(row) == tuple(int(x) for x in container.split("."))
        assert run.source == f"NeMo perf. summary, MoE on {system[4:]}"
        assert not run.fit  # never fitted; in the bar, but for 25.02's 8x22B on B200: superseded software
        apart = rid == "NEMODOC-25.02-B200-MIXTRAL8X22B-256"
        assert run.held_out is not apart and row["flag"].startswith("superseded software (NeMo 25.02") is apart
        assert bool(row["flag"]) is apart
        assert "held out: a NeMo performance summary measurement, validated and never fitted" in run.assumptions
        assert row["not_modelled"] and any(a.startswith("not modelled, set by the recipe: ") for a in run.assumptions)
    assert not any(nemodoc_row(r) for r in moe_reference_rows() if r["run_id"] not in IDS)


def _plan(run):
    q = run.request
    return (q["gpus"], q["tp"], q["pp"], q["cp"], q["vpp"], q["ep"], q["etp"], q["micro_batch"], q["global_batch"])


def test_plans_are_the_page_s_rows_and_the_recipes(runs):
    """The page's rows (GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, GA): Mixtral-8x7B 64, 256, 2, 4096, 1, 1, 1, 1, 8,
    GA 2 in both sections; Mixtral-8x22B 256 GPUs, its GBS and MBS cells printed 1 and 64, 65536, 2, 4, 8, 14, 8, GA 16.
    GA = GBS / (MBS · DP), DP = GPUs / (TP · PP · CP): 256 / (2 · 64) = 2 and, for 8x22B, 64 / (1 · 4) = 16 with MBS 1
    and GBS 64 (a GBS of 1 under an MBS of 64 is impossible; NeMo v2.2.0 scripts/llm/performance/recommended_model_
    configs/model_configs_b200.csv:19 mbs 1, gbs 64). ETP: 1 for 8x7B (TP 1); 8x22B on B200 the csv's etp_size 1
    (:19); on GB200 model_configs_gb200.csv @ v2.3.0 has no 8x22b row, so utils.py get_user_configs (:196-197) passes
    None and Megatron-Core takes ETP = TP = 2."""
    expected = {
        X7_B200: ((64, 1, 1, 1, 1, 8, 1, 2, 256), 4096, 2),
        X7_GB200: ((64, 1, 1, 1, 1, 8, 1, 2, 256), 4096, 2),
        X22_B200: ((256, 2, 4, 8, 14, 8, 1, 1, 64), 65536, 16),
        X22_GB200: ((256, 2, 4, 8, 14, 8, 2, 1, 64), 65536, 16),
    }
    for rid, (plan, seq, ga) in expected.items():
        run = runs[rid]
        q = run.request
        assert _plan(run) == plan and q["seq_len"] == seq, rid
        gpus, tp, pp, cp, _, _, _, mbs, gbs = plan
        assert gbs // (mbs * (gpus // (tp * pp * cp))) == ga
        assert q["sequence_parallel"] == (tp > 1)  # utils.py set_primary_perf_configs: SP = TP > 1
        assert q["model"] == ("mixtral-8x7b" if "8X7B" in rid else "mixtral-8x22b")
        assert q["stage_split"] == "even" and q["pipeline_layout"] is None
    # 56 layers over PP 4 × VP 14: one decoder layer a model chunk
    assert runs[X22_B200].request["pp"] * runs[X22_B200].request["vpp"] == load_model("mixtral-8x22b").num_layers


def test_settings_are_the_nemo2_scripts_at_the_container_s_release(runs):
    """NeMo v2.2.0 (25.02) scripts/llm/performance/pretrain_mixtral_8x7b.py: bf16_with_fp8_mixed (delayed, hybrid,
    fp8_params) and grad_reduce_in_fp32 False (:66-68), enable_cuda_graph = gpu in ['b200'] (:70-72);
    pretrain_mixtral_8x22b.py: the same FP8 lines (:65-67), no graphs. v2.3.0 (25.04) scripts/performance: the page's
    per-tensor current scaling is --fp8_recipe cs -> bf16_with_fp8_current_scaling_mixed (tensorwise, hybrid,
    fp8_param_gather) with grad_reduce_in_fp32 False (utils.py:340-351); model_configs_gb200.csv:17 cuda_graphs 1
    for 8x7B (-> enable_cuda_graph, Megatron-Core's local per-layer graphs); no 8x22b row, so no graphs. Both
    releases' recipes (recipes/mixtral_8x7b.py, mixtral_8x22b.py, mixtral_8x22b_64k.py, performance_mode=True): the
    MegatronTokenDropCallback (capacity factor 1, pad to capacity), the MegatronCommOverlapCallback with
    tp_comm_overlap left None (off), no recompute; MixtralConfig's alltoall dispatcher."""
    for rid in IDS:
        run = runs[rid]
        q, o = run.request, run.request["options"]
        assert q["precision"] == "bf16" and o["fp8"] == "hybrid" and o["fp8_param_gather"] is True
        assert o["fp8_recipe"] == ("delayed" if "25.02" in rid else "tensorwise")
        assert q["moe_token_dispatcher"] == "alltoall" and not q["overlap_moe_expert_parallel_comm"]
        assert o["moe_capacity_factor"] == 1.0 and o["moe_load_imbalance"] == 1.0
        assert q["recompute"] == "none" and "recompute_modules" not in o
        assert "tp_comm_overlap" not in o  # megaplan's default: off
        assert o["grad_reduce_in_bf16"] is True and o["use_precision_aware_optimizer"] is False
        assert o["expandable_segments"] is False and o["attention_kernel"] == "flash"
        assert o["overlap_grad_reduce"] and o["overlap_param_gather"]
        graphs = "8X7B" in rid  # B200 in 25.02 (gpu in ['b200']), GB200 in 25.04 (csv cuda_graphs 1)
        assert ("cuda_graph_impl" in o) == graphs
        if graphs:
            assert o["cuda_graph_impl"] == "local" and o["cuda_graph_modules"] == ()


def test_presets_are_nemo_s_mixtral_configs_and_tokenizers():
    """MixtralConfig (nemo/collections/llm/gpt/model/mixtral.py @ v2.3.0:36-78, the same at v2.2.0): RMSNorm, RoPE
    (base 1e6), SwiGLU, no bias, untied embeddings, no dropout, 8 experts top-2; MixtralConfig8x7B (:97-107) 32 layers,
    hidden 4096, 32 heads, 8 query groups, FFN 14336; MixtralConfig8x22B (:111-122) 56 layers, hidden 6144, 48 heads,
    FFN 16384. The scripts' tokenizers: hf_tokenizer('mistralai/Mixtral-8x7B-v0.1'), 32,000 tokens, and
    'mistralai/Mixtral-8x22B-v0.1', 32,768 - the presets' vocabularies, so no row overrides them. (MixtralConfig's
    moe_router_pre_softmax True costs nothing: ModelSpec's field is 'no cost'.)"""
    for name, (layers, hidden, heads, ffn, vocab) in {
        "mixtral-8x7b": (32, 4096, 32, 14336, 32000),
        "mixtral-8x22b": (56, 6144, 48, 16384, 32768),
    }.items():
        m = load_model(name)
        assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == (layers, hidden, heads, ffn)
        assert (m.num_query_groups, m.num_experts, m.moe_router_topk, m.vocab_size) == (8, 8, 2, vocab)
        assert m.swiglu and not m.add_bias_linear and m.untie_embeddings_and_output_weights
        assert m.rotary_base == 1_000_000 and m.hidden_dropout == m.attention_dropout == 0.0


def _nemo_mixtral_flops_per_token(layers, hidden, groups, heads, topk, ffn, seq, vocab=32000, attention=12):
    """NeMo's FLOPsMeasurementCallback formula for Mixtral (nemo/utils/flops_formulas.py @ v2.3.0:128-145, its vocab
    LLM_VOCAB_SIZE_MAP['mixtral'] = 32000): L·h²·(12 + 12g/a + 18k·f/h + 12s/h + 6V/(L·h)) per token; ``attention``
    the s/h term's factor (12: full square; 6: causal)."""
    per_h2 = 12 + 12 * groups / heads + 18 * topk * ffn / hidden + attention * seq / hidden
    per_h2 += 6 * vocab / (layers * hidden)
    return layers * hidden * hidden * per_h2


def test_tokens_per_second_and_tflops_cells_agree_by_hand(runs, rows):
    """The page's two throughput cells are one measurement: tokens/s/GPU × model FLOPs per token = model TFLOP/s/GPU.
    8x7B (NeMo's formula): 32·4096²·(12 + 3 + 126 + 12 + 0.2441) = 82.93 GFLOP a token; 15,457 × 82.93 G = 1,281.8
    TFLOP/s (cell 1282, B200 25.02) and 19,275 × 82.93 G = 1,598.4 (cell 1598, GB200 25.04). 8x22B at 65,536: the
    cell matches the formula with a causal attention term (6s/h, not 12s/h): 56·6144²·(12 + 2 + 96 + 64 + 0.5580) =
    369.0 GFLOP; 2,232 × 369.0 G = 823.6 (cell 824); GB200's cell is cut off in the stored copy after '10', and
    2,731 × 369.0 G = 1,007.7. The published tokens/s is the row's value, as printed."""
    x7 = _nemo_mixtral_flops_per_token(32, 4096, 8, 32, 2, 14336, 4096)
    x22 = _nemo_mixtral_flops_per_token(56, 6144, 8, 48, 2, 16384, 65536, attention=6)
    assert x7 / 1e9 == pytest.approx(82.93, abs=0.005) and x22 / 1e9 == pytest.approx(369.0, abs=0.05)
    for rid, tokens, per_token, tflops in [
        (X7_B200, 15457, x7, 1282),
        (X7_GB200, 19275, x7, 1598),
        (X22_B200, 2232, x22, 824),
    ]:
        assert runs[rid].published == tokens and float(rows[rid]["model_tflops_per_gpu"]) == tflops
        assert tokens * per_token / 1e12 == pytest.approx(tflops, abs=0.5)
    assert runs[X22_GB200].published == 2731 and rows[X22_GB200]["model_tflops_per_gpu"] == ""
    assert str(round(2731 * x22 / 1e12)).startswith("10")
