"""--moe-permute-fusion: Transformer Engine's fused token permutation against Megatron-Core's index_select /
scatter_add_ path (moe_utils.permute, unpermute), priced from the scatter_add_ unpermute's measured rate
(planner/costs/moe.py ``unfused_permute_extra_bytes``); read from a launch script, a Bridge recipe and NeMo 2's
performance scripts, and written by export."""

import pytest

from planner.api import explain, make_request
from planner.bridge.importer import read_bridge_source, request_from_bridge
from planner.costs import moe
from planner.fidelity.moe_runs import load_moe_runs
from planner.megatron.export import megatron_argv
from planner.megatron.importer import import_megatron
from planner.plan_file import request_from_fields
from planner.presets import load_hardware


def test_unfused_permutation_bytes_by_hand():
    """Mixtral 8x7B on B200: T = 2 × 4,096 = 8,192 tokens a micro-batch, k 2, so A = 16,384 routed copies, h 4,096.
    The scatter_add_ moves (A + T)·h·2 = 24,576 × 4,096 × 2 = 201.3 MB at 0.25/4.8 = 5.21 % of HBM; at the law's
    η_mem 0.89 that is ratio = 0.89/0.052083 = 17.088 times as long: 3,440.3 MB at the law, less the 4·A·h =
    268.4 MB the fused unpermute is priced at: 3,171.8 MB a pass, 0.4646 ms at DGX B200's 7.67 TB/s × 0.89."""
    ratio = 0.89 / (0.25 / 4.8)
    assert ratio == pytest.approx(17.088, abs=1e-3)
    extra = float(moe.unfused_permute_extra_bytes(16384, 4096, 2, ratio))
    assert extra == pytest.approx(24576 * 4096 * 2 * 17.088 - 4 * 16384 * 4096, rel=1e-4)
    assert extra / 1e6 == pytest.approx(3171.8, abs=0.5)
    assert extra / (7.67e12 * 0.89) * 1e3 == pytest.approx(0.4646, abs=5e-4)
    assert float(moe.unfused_permute_extra_bytes(0, 4096, 2, ratio)) == 0.0


def _mixtral(**options):
    return make_request(
        model="mixtral-8x7b", hardware=load_hardware("dgx-b200-superpod"), gpus=64, tp=1, pp=1, ep=8,
        micro_batch=2, global_batch=256, seq_len=4096, options={"moe_load_imbalance": 1.0, **options},
    )  # fmt: skip


def test_the_unfused_path_costs_its_extra_bytes_in_each_pass_of_each_moe_layer():
    """Balanced routing (A = 16,384 copies a micro-batch): 0.4646 ms a layer and micro-batch forward and as much
    backward (the index_add_); 32 MoE layers, m = 256/(64·2) = 2 micro-batches: 32 × 2 × 0.4646 = 29.74 ms more in
    each pass, on a DP-only plan where nothing hides it."""
    fused = explain(_mixtral(), suggest=False)["estimate"]
    unfused = explain(_mixtral(moe_permute_fusion=False), suggest=False)["estimate"]
    assert fused["num_microbatches"] == 2
    per_pass = float(moe.unfused_permute_extra_bytes(16384, 4096, 2, 0.89 / (0.25 / 4.8))) / (7.67e12 * 0.89)
    for phase in ("forward", "backward"):
        added = unfused["time"][phase] - fused["time"][phase]
        assert added == pytest.approx(32 * 2 * per_pass, rel=1e-6)
        assert added == pytest.approx(29.74e-3, abs=0.01e-3)


def test_a_launch_script_without_the_flag_runs_the_unfused_path_and_export_writes_it():
    base = (
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--ffn-hidden-size 14336 --num-experts 8 --moe-router-topk 2 --swiglu --seq-length 4096 "
        "--max-position-embeddings 32768 --micro-batch-size 2 --global-batch-size 256 --bf16 "
        "--expert-model-parallel-size 8 --moe-grouped-gemm --moe-token-dispatcher-type alltoall "
        "--tokenizer-type NullTokenizer --vocab-size 32000"
    )
    assert import_megatron(base, gpus=64).request.ctx.options.moe_permute_fusion is False  # Megatron-LM's default
    read = import_megatron(base + " --moe-permute-fusion", gpus=64).request.ctx.options
    assert read.moe_permute_fusion is True
    assert "--moe-permute-fusion" in megatron_argv(_mixtral())
    assert "--moe-permute-fusion" not in megatron_argv(_mixtral(moe_permute_fusion=False))
    # a dense model has no permutation: the plan keeps its default and export writes nothing
    dense = import_megatron(
        base.replace("--num-experts 8 --moe-router-topk 2 ", "").replace(
            "--expert-model-parallel-size 8 --moe-grouped-gemm --moe-token-dispatcher-type alltoall ", ""
        ),
        gpus=64,
    )
    assert dense.request.ctx.options.moe_permute_fusion is True


@pytest.mark.parametrize("tag", ["v0.2.1", "v0.6.0"])
def test_every_bridge_moe_recipe_runs_the_fused_permutation(tag):
    """Bridge's MoE recipes set it through their providers or recipes at both tags (bridge.importer
    RECIPE_PERMUTE_FUSION): importing one prices the fused path, and its flags say so."""
    recipe = "qwen3_30b_a3b_pretrain_config" if tag == "v0.2.1" else "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config"
    read = request_from_bridge({}, recipe=recipe, tag=tag, gpus=8, hardware="dgx-h100-superpod")
    assert read.request.ctx.options.moe_permute_fusion is True and "--moe-permute-fusion" in read.argv


def test_nemo2_scripts_fuse_it_for_deepseek_v3_alone():
    """NeMo 2's pretrain_deepseek_v3.py turns it on; Mixtral's and Grok-1's scripts leave Megatron-Core's default."""
    rows = {r.id: r.request["options"]["moe_permute_fusion"] for r in load_moe_runs() if "moe_permute_fusion"
            in r.request.get("options", {})}  # fmt: skip
    mixtral_grok = {k: v for k, v in rows.items() if "MIXTRAL" in k or "GROK" in k}
    dsv3_nemo = {k: v for k, v in rows.items() if k.startswith("DGXC-v25.0") and "DSV3" in k}
    assert len(mixtral_grok) == 12 and not any(mixtral_grok.values())
    assert len(dsv3_nemo) >= 5 and all(dsv3_nemo.values())


def test_explain_says_when_a_moe_plan_permutes_unfused():
    from tests.conftest import run_cli

    args = ["explain", "--model", "mixtral-8x7b", "--hardware", "dgx-b200-superpod", "--gpus", "64"]
    args += ["--tp", "1", "--pp", "2", "--ep", "8", "--brief"]
    assert "token permutation unfused" in run_cli([*args, "--no-moe-permute-fusion"]).output
    assert "token permutation unfused" not in run_cli(args).output


def test_nemo2_export_always_writes_it_and_import_takes_the_model_configs_default(tmp_path):
    """NeMo 2's model configs differ (qwen3.py:65 and deepseek.py:127 on, llama.py:408 and Mixtral's off @ v2.4.0), so
    the NeMo 2 export writes the field whatever its value, and a NeMo 2 line without it reads as its config sets."""
    from tests.conftest import run_cli

    args = ["export", "--hardware", "dgx-h100-superpod", "--tp", "1", "--distributed-optimizer", "--format", "nemo2"]
    qwen = [*args, "--model", "qwen3-30b-a3b", "--gpus", "16", "--pp", "1", "--ep", "16"]
    assert "model.config.moe_permute_fusion=true" in run_cli(qwen).output
    assert "model.config.moe_permute_fusion=false" in run_cli([*qwen, "--no-moe-permute-fusion"]).output
    for model, gpus, pp, ep, fused in (("qwen3-30b-a3b", 16, 1, 16, True), ("mixtral-8x7b", 64, 2, 8, False)):
        path = tmp_path / f"{model}.sh"
        out = run_cli([*args, "--model", model, "--gpus", str(gpus), "--pp", str(pp), "--ep", str(ep)]).stdout
        path.write_text("".join(line + "\n" for line in out.splitlines() if "moe_permute_fusion" not in line))
        read, _ = read_bridge_source({"bridge_config": str(path), "gpus": gpus, "hardware": "dgx-h100-superpod"})
        assert request_from_fields(read.data).ctx.options.moe_permute_fusion is fused
