"""The MoE rows of NVIDIA's DGX Cloud benchmarking recipes (presets/reference/moe_runs.csv, DGXC-*): each README's step
time with the plan its launch.sh and the framework's performance scripts ran, validated out of sample - in the bar,
never fitted - unless set apart as superseded software. Values below are read from NVIDIA/dgxc-benchmarking at each
tag (git show <tag>:<path>), NVIDIA/NeMo scripts/performance at the NEMO_COMMIT the recipe installs, Megatron-Bridge at
the recipe's commit and NVIDIA/TransformerEngine at the container's commit."""

import pytest

from planner.fidelity.moe_runs import (
    _nemo2_release,
    _release,
    dgxc_row,
    load_moe_runs,
    moe_reference_rows,
    nemo1_row,
    nemo2_row,
    nemodoc_row,
    unfused_mla_attention,
)
from planner.fidelity.validate import predict

DSV3_IDS = {
    "DGXC-v25.05.04-H100-DSV3-512",
    "DGXC-v25.05.04-H100-DSV3-1024",
    "DGXC-v25.05.04-GB200-DSV3-128",
    "DGXC-v25.05.04-GB200-DSV3-256",
    "DGXC-v25.05.04-GB200-DSV3-512",
    "DGXC-v25.08-H100-DSV3-1024",
    "DGXC-v25.10-GB200-DSV3-256",
}
GROK_IDS = {
    f"DGXC-v25.05.05-{gpu}-GROK1-{prec}-{n}"
    for prec in ("BF16", "FP8")
    for gpu, n in [("GB200", 128), ("GB200", 256), ("GB200", 512), ("H100", 512)]
}
# DGX Cloud's first Grok-1 recipe (tag v24.11.1, NeMo 1 on NeMo 24.09: TP4 PP8 VP8 CP2 EP8, ETP = TP, the full
# 64 layers from 512 GPUs; tests/test_dgxc_2024.py)
GROK_IDS |= {f"DGXC-v24.11.1-H100-GROK1-{prec}-{n}" for prec in ("BF16", "FP8") for n in (512, 1024, 2048)}
APART = {"DGXC-v25.05.04-GB200-DSV3-256", "DGXC-v25.05.04-H100-DSV3-1024"}
# the 256-GPU row's weak-scaling points: the same recipe, software and work per GPU, apart with it
SIBLINGS = {"DGXC-v25.05.04-GB200-DSV3-128": 34.168, "DGXC-v25.05.04-GB200-DSV3-512": 34.274}
APART |= set(SIBLINGS)


@pytest.fixture(scope="module")
def runs():
    return {r.id: r for r in load_moe_runs()}


@pytest.fixture(scope="module")
def rows():
    return {r["run_id"]: r for r in moe_reference_rows() if dgxc_row(r)}


def test_dgxc_rows_are_held_out_under_their_own_source(rows, runs):
    assert set(rows) == DSV3_IDS | GROK_IDS
    for rid, row in rows.items():
        run = runs[rid]
        assert "NVIDIA/dgxc-benchmarking" in row["source"] and "@ tag v" in row["source"]
        assert run.source == f"DGX Cloud recipes, MoE on {'H100' if 'H100' in rid else 'GB200'}"
        assert not run.fit  # never fitted
        assert run.held_out == (rid not in APART)  # in the bar, unless set apart as superseded software
        assert bool(row["flag"]) == (rid in APART)
    # no other row is a DGX Cloud row, nor a NeMo 2 row but the NeMo docs' (tests/test_nemodoc_moe.py)
    others = [r for r in moe_reference_rows() if r["run_id"] not in rows]
    assert not any(dgxc_row(r) or (nemo2_row(r) and not nemodoc_row(r)) for r in others)


def test_nemo2_rows_have_no_bridge_release(rows):
    """moe_runs._release reads a Megatron-Bridge release; a NeMo 2 row names its container's NeMo release instead, and
    the 2024 Grok-1 rows NeMo 1 and their container (``nemo1_row``)."""
    nemo2 = {rid for rid, r in rows.items() if nemo2_row(r)}
    nemo1 = {rid for rid, r in rows.items() if nemo1_row(r)}
    assert nemo1 == {rid for rid in GROK_IDS if "v24.11.1" in rid} and len(nemo1) == 6 and not nemo1 & nemo2
    assert (DSV3_IDS | GROK_IDS) - nemo2 - nemo1 == {"DGXC-v25.10-GB200-DSV3-256"}
    for rid in nemo2:
        with pytest.raises(ValueError, match="NeMo 2 row"):
            _release(rows[rid])
    assert _nemo2_release(rows["DGXC-v25.05.04-H100-DSV3-512"]) == (25, 4)
    assert _nemo2_release(rows["DGXC-v25.08-H100-DSV3-1024"]) == (25, 7)
    assert _release(rows["DGXC-v25.10-GB200-DSV3-256"]) == (25, 9)  # run with Megatron-Bridge's 25.09 scripts


def _plan(run):
    q = run.request
    return (q["gpus"], q["tp"], q["pp"], q["cp"], q["vpp"], q["ep"], q["etp"], q["micro_batch"], q["global_batch"])


def test_deepseek_v3_25_05_rows_are_the_nemo2_recipe(runs):
    """dgxc-benchmarking deepseek_v3/pretraining @ v25.05.04: launch.sh FW_VERSION 25.04.01, GBS = 8 x GPUs, MBS 1,
    CP 1, ETP 1; H100 TP2, PP 8 at 512 GPUs else 16, EP64, VP1, RM='mla_up_proj'; GB200 TP2 PP4, EP 32 at 128 GPUs
    else 64, VP1, RM='core_attn'; no --cuda_graphs (recommended_model_configs cuda_graphs 0). setup.sh NEMO_COMMIT
    7a8f1cc7: pretrain_deepseek_v3.py USE_TOKEN_DROP, first/last stage 64/PP - 1 and 64/PP - 2 layers, MTP on the last
    stage; DeepSeekConfig alltoall, moe_shared_expert_overlap True; BF16 plugin bf16_mixed grad_reduce_in_fp32=True
    (set_primary_perf_configs sets it False for FP8 only); use_precision_aware_optimizer for BF16."""
    expected = {
        "DGXC-v25.05.04-H100-DSV3-512": ((512, 2, 8, 1, 1, 64, 1, 1, 4096), "Et*7|(t*8|)*6t*6mL", ("mla_up_proj",)),
        "DGXC-v25.05.04-H100-DSV3-1024": ((1024, 2, 16, 1, 1, 64, 1, 1, 8192), "Et*3|(t*4|)*14t*2mL", ("mla_up_proj",)),
        "DGXC-v25.05.04-GB200-DSV3-128": ((128, 2, 4, 1, 1, 32, 1, 1, 1024), "Et*15|(t*16|)*2t*14mL", ("core_attn",)),
        "DGXC-v25.05.04-GB200-DSV3-256": ((256, 2, 4, 1, 1, 64, 1, 1, 2048), "Et*15|(t*16|)*2t*14mL", ("core_attn",)),
        "DGXC-v25.05.04-GB200-DSV3-512": ((512, 2, 4, 1, 1, 64, 1, 1, 4096), "Et*15|(t*16|)*2t*14mL", ("core_attn",)),
    }
    for rid, (plan, layout, modules) in expected.items():
        run = runs[rid]
        q, o = run.request, run.request["options"]
        assert _plan(run) == plan, rid
        assert q["pipeline_layout"] == layout and q["seq_len"] == 4096 and q["sequence_parallel"]
        # 64/PP - 1 layers first, 64/PP - 2 last, 61 in all
        pp = q["pp"]
        assert (64 // pp - 1) + (pp - 2) * (64 // pp) + (64 // pp - 2) == 61
        assert q["recompute"] == "selective" and o["recompute_modules"] == modules
        assert q["moe_token_dispatcher"] == "alltoall" and not q["overlap_moe_expert_parallel_comm"]
        assert o["moe_capacity_factor"] == 1.0 and o["moe_shared_expert_overlap"] is True
        assert q["precision"] == "bf16" and "fp8" not in o
        assert o["grad_reduce_in_bf16"] is False and o["use_precision_aware_optimizer"] is True
        assert "exp_avg_dtype" not in o and "cuda_graph_impl" not in o and o["expandable_segments"] is False
        assert o["overlap_grad_reduce"] and o["overlap_param_gather"]
        assert o["attention_kernel"] == ("unfused" if "GB200" in rid else "flash")
    # tokens/s/GPU = 4096 · GBS / step / GPUs, the README's step times (lines 82 and 95)
    for rid, step in [("H100-DSV3-512", 48.948), ("H100-DSV3-1024", 52.04), ("GB200-DSV3-128", 34.168),
                      ("GB200-DSV3-256", 34.194), ("GB200-DSV3-512", 34.274)]:  # fmt: skip
        run = runs[f"DGXC-v25.05.04-{rid}"]
        assert run.published == pytest.approx(4096 * run.request["global_batch"] / step / run.request["gpus"], rel=1e-6)
    assert runs["DGXC-v25.05.04-GB200-DSV3-256"].published == pytest.approx(958.297, abs=1e-3)  # 4096·2048/34.194/256


def test_deepseek_v3_25_08_h100_row_is_the_nemo_25_07_recipe(runs):
    """dgxc-benchmarking deepseek_v3/pretrain @ v25.08: launch.sh H100 TP1 EP64 PP8 VP2, RM='mla_up_proj mlp moe',
    GBS 8 x GPUs, CG=false; metadata.yaml nemo:25.07.01, NeMo 9244b1ec. pretrain_deepseek_v3.py @ 9244b1ec on H100:
    flex + DeepEP, moe_shared_expert_overlap False, force load balancing, no token drop; layout (8, 2). helpers.py
    set_precision_configs: grad_reduce_in_fp32 False for every dtype; executors.py: expandable_segments except B200.
    README line 75: 36.189 s -> 4096 · 8192 / 36.189 / 1024 = 905.47 tokens/s/GPU."""
    run = runs["DGXC-v25.08-H100-DSV3-1024"]
    q, o = run.request, run.request["options"]
    assert _plan(run) == (1024, 1, 8, 1, 2, 64, 1, 1, 8192) and not q["sequence_parallel"]
    assert q["pipeline_layout"] == "Et*4|(t*4|)*14tmL"
    assert q["moe_token_dispatcher"] == "flex" and o["moe_flex_dispatcher_backend"] == "deepep"
    assert "moe_capacity_factor" not in o and o["moe_load_imbalance"] == 1.0
    assert "moe_shared_expert_overlap" not in o  # megaplan's default, False
    assert o["recompute_modules"] == ("mla_up_proj", "mlp", "moe")
    assert o["grad_reduce_in_bf16"] is True and o["expandable_segments"] is True
    assert o["attention_kernel"] == "flash"
    assert run.published == pytest.approx(905.469, abs=1e-3)


def test_deepseek_v3_25_10_gb200_row_is_the_bridge_25_09_plan_in_bf16(runs):
    """dgxc-benchmarking deepseek_v3/pretrain @ v25.10: metadata.yaml nemo:25.09.00, Megatron-Bridge 7c0ae3fd;
    deepseek_v3_llm_pretrain.yaml perf_matrix.gb200.num_gpus_256: TP1 PP4 VP4 EP64 ETP1 MBS1 GBS2048, cuda_graphs
    false; run_script.py on GB200: token drop over alltoall, no A2A overlap, moe_shared_expert_overlap True,
    recompute mla_up_proj. The same plan as MB-25.09-GB200-DSV3-256, in BF16. README line 86: 11,071.480 ms ->
    4096 · 2048 / 11.07148 / 256 = 2,959.68 tokens/s/GPU."""
    run, twin = runs["DGXC-v25.10-GB200-DSV3-256"], runs["MB-25.09-GB200-DSV3-256"]
    q, o = run.request, run.request["options"]
    assert _plan(run) == _plan(twin) == (256, 1, 4, 1, 4, 64, 1, 1, 2048)
    assert q["pipeline_layout"] == twin.request["pipeline_layout"] and q["moe_token_dispatcher"] == "alltoall"
    assert "fp8" not in o and twin.request["options"]["fp8"] == "e4m3"
    assert o["moe_shared_expert_overlap"] is True and o["attention_kernel"] == "flash"
    same = (
        "recompute_modules",
        "moe_capacity_factor",
        "grad_reduce_in_bf16",
        "main_grads_dtype",
        "expandable_segments",
    )
    assert all(o[k] == twin.request["options"][k] for k in same)
    assert run.published == pytest.approx(2959.677, abs=1e-3)


def test_unfused_attention_only_where_te_2_2_has_no_mla_kernel_on_blackwell(rows, runs):
    """TE 2.2.0.dev0 (bee4649c, NeMo v2.3.0's manifest): fused_attn.cpp:221 refuses head dims > 128 on sm >= 100 and
    dot_product_attention/utils.py:466 disables FlashAttention when head_dim_qk != head_dim_v. DeepSeek-V3's MLA:
    q/k 128 + 64 = 192, v 128 - so on GB200 in the 25.04 container only the unfused backend is left; on H100 cuDNN
    takes d <= 256 (fused)."""
    qk, v = 128 + 64, 128
    assert qk != v and qk > 128  # both of TE 2.2's refusals on sm100
    unfused = {rid for rid, r in rows.items() if unfused_mla_attention(r)}
    assert unfused == {
        "DGXC-v25.05.04-GB200-DSV3-128",
        "DGXC-v25.05.04-GB200-DSV3-256",
        "DGXC-v25.05.04-GB200-DSV3-512",
    }
    assert all(r.request["options"]["attention_kernel"] == "flash" for rid, r in runs.items() if rid not in unfused)
    assert all(
        any(a.startswith("unfused attention: Transformer Engine 2.2") for a in runs[i].assumptions) for i in unfused
    )


def test_rows_apart_ran_faster_later_than_the_model_explains(runs):
    """The project's rule for superseded software (tests/test_moe_validation.py, the 25.09 rows): the same model on
    the same GPUs at the same batch, sequence and precision measured again in a later release ran faster, by more
    than 9 %, than megaplan gives the settings that changed. 256 GB200, GBS 2048, BF16: 2,959.677 / 958.297 = 3.088
    published (25.05.04 -> 25.10). 1,024 H100, GBS 8192, BF16: 905.469 / 629.669 = 1.438 published (25.05.04 ->
    25.08). The 512 H100 and the 128 and 512 GB200 rows of 25.05.04 have no later measurement: in the bar."""
    pairs = {
        "DGXC-v25.05.04-GB200-DSV3-256": ("DGXC-v25.10-GB200-DSV3-256", 3.0885),
        "DGXC-v25.05.04-H100-DSV3-1024": ("DGXC-v25.08-H100-DSV3-1024", 1.4380),
    }
    for old, (new, published) in pairs.items():
        assert runs[new].published / runs[old].published == pytest.approx(published, abs=1e-4)
        model = predict(runs[new]) / predict(runs[old])
        assert published / model > 1.09, (old, model)
        assert any(a.startswith("reported apart - superseded software") for a in runs[old].assumptions)


def test_weak_scaling_points_of_a_superseded_row_are_apart_with_it(rows, runs):
    """dgxc-benchmarking deepseek_v3 @ v25.05.04 launch.sh:107-120: GB200 TP2 PP4 VP1, MBS 1, GBS = 8 x GPUs at 128, 256
    and 512 GPUs (EP32 at 128, else 64): 8 sequences of 4,096 a GPU a step at each size. README line 95: 34.168, 34.194
    and 34.274 s. The 256 row ran 3.09x faster in 25.10 (above); the other two are the same run at other sizes."""
    base = runs["DGXC-v25.05.04-GB200-DSV3-256"]
    for rid, step_s in SIBLINGS.items():
        run, n = runs[rid], int(rid.rsplit("-", 1)[1])
        # s · GBS / step / GPUs: 959.0 and 956.1 tokens/s/GPU
        assert run.published == pytest.approx(4096 * 8 * n / step_s / n, rel=1e-4)
        req = run.request
        assert (req["tp"], req["pp"], req["vpp"], req["micro_batch"]) == (2, 4, 1, 1)
        assert req["global_batch"] == 8 * n == 8 * req["gpus"]
        assert abs(step_s / 34.194 - 1) < 0.003  # the 256 row's step within 0.3 %
        assert (req["tp"], req["pp"], req["vpp"], req["micro_batch"]) == tuple(
            base.request[k] for k in ("tp", "pp", "vpp", "micro_batch")
        )
        assert not run.held_out and not run.fit
        flag = rows[rid]["flag"]
        assert flag.startswith("superseded software") and "DGXC-v25.05.04-GB200-DSV3-256" in flag


def test_grok1_rows_are_the_nemo2_recipe(runs):
    """dgxc-benchmarking grok1 @ v25.05.05: launch.sh FW_VERSION 25.04.00, GBS = 2 x GPUs, MBS 1; GB200 TP4 PP1 CP1 EP8
    ET4 VP1 CUDA_GRAPH=true; H100 TP4 PP8 CP2 EP8 ET1 VP8 CUDA_GRAPH=false; setup.sh NEMO_COMMIT 6f2c6fda.
    pretrain_grok1_314b.py @ 6f2c6fda: performance_mode - MegatronTokenDropCallback, tp_comm_overlap=True with
    userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 (every GPU, every dtype), grad_reduce_in_fp32 False; FP8 is
    bf16_with_fp8_mixed (delayed, hybrid, fp8_param_gather); --cuda_graphs true -> enable_cuda_graph (Megatron-Core's
    local whole-layer graphs); MixtralConfig8x7B's alltoall dispatcher; no recompute. README lines 84, 91, 100, 107:
    BF16 7.325 / 7.39 / 7.324 s and FP8 5.298 / 5.224 / 5.193 s on 128 / 256 / 512 GB200; 15.933 and 13.433 s on 512
    H100. tokens/s/GPU = 8192 · GBS / step / GPUs, e.g. 8192 · 256 / 7.325 / 128 = 2,236.72."""
    steps = {
        ("GB200", "BF16", 128): 7.325, ("GB200", "BF16", 256): 7.39, ("GB200", "BF16", 512): 7.324,
        ("GB200", "FP8", 128): 5.298, ("GB200", "FP8", 256): 5.224, ("GB200", "FP8", 512): 5.193,
        ("H100", "BF16", 512): 15.933, ("H100", "FP8", 512): 13.433,
    }  # fmt: skip
    for (gpu, prec, n), step in steps.items():
        run = runs[f"DGXC-v25.05.05-{gpu}-GROK1-{prec}-{n}"]
        q, o = run.request, run.request["options"]
        assert q["model"] == "grok1-314b" and q["seq_len"] == 8192 and q["precision"] == "bf16"
        if gpu == "GB200":
            assert _plan(run) == (n, 4, 1, 1, 1, 8, 4, 1, 2 * n)
            assert o["cuda_graph_impl"] == "local" and o["cuda_graph_modules"] == ()
        else:
            assert _plan(run) == (512, 4, 8, 2, 8, 8, 1, 1, 1024) and "cuda_graph_impl" not in o
        assert q["sequence_parallel"] and q["recompute"] == "none" and "recompute_modules" not in o
        assert q["moe_token_dispatcher"] == "alltoall" and o["moe_capacity_factor"] == 1.0
        assert o["tp_comm_overlap"] is True and o["grad_reduce_in_bf16"] is True
        assert o["tp_comm_overlap_cfg"] == "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
        assert o["attention_kernel"] == "flash" and o["expandable_segments"] is False
        if prec == "FP8":
            assert (o["fp8"], o["fp8_recipe"], o["fp8_param_gather"]) == ("hybrid", "delayed", True)
            assert o["use_precision_aware_optimizer"] is False
        else:
            assert "fp8" not in o and o["use_precision_aware_optimizer"] is True
        assert run.published == pytest.approx(8192 * q["global_batch"] / step / n, rel=1e-6)
        assert run.held_out and not run.fit
    assert runs["DGXC-v25.05.05-GB200-GROK1-BF16-128"].published == pytest.approx(2236.724, abs=1e-3)


def test_grok1_userbuffers_are_nemo_s_preset_of_that_name(runs):
    """NeMo tp_overlap_configs/userbuffers.py @ 6f2c6fda:176-187 userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192:
    qkv_dgrad bulk 8 SMs, qkv_wgrad bulk 32, fc1_dgrad bulk 2, fc1_wgrad bulk 8 (no SM margin); qkv_fprop, proj_dgrad,
    fc1_fprop, fc2_dgrad ring exchanges (RingExchangeOverlapCfg defaults: 1 SM, no margin); proj_fprop and fc2_fprop
    ring exchanges with 1 SM and the margin - the values of Megatron-Bridge's preset of the same name
    (presets/userbuffers/bridge.yaml), which the rows name."""
    from planner.fidelity.validate import prepare

    cfg = prepare(runs["DGXC-v25.05.05-H100-GROK1-BF16-512"]).ctx.options.tp_comm_overlap_cfg
    assert cfg.name == "Megatron-Bridge userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
    ops = dict(cfg.ops)
    bulk = {k: ops[k].num_sm for k in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}
    assert bulk == {"qkv_dgrad": 8, "qkv_wgrad": 32, "fc1_dgrad": 2, "fc1_wgrad": 8}
    assert all(ops[k].method == "bulk" and not ops[k].set_sm_margin for k in bulk)
    rings = ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad", "proj_fprop", "fc2_fprop")
    assert all(ops[k].method == "ring_exchange" and ops[k].num_sm == 1 for k in rings)
    assert {k for k in rings if ops[k].set_sm_margin} == {"proj_fprop", "fc2_fprop"}
