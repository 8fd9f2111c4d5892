"""--recompute-modules given to search: the modules of every selective row it builds, not search's own."""

import json

from planner import api
from planner.plan_options import search_pins
from planner.space.candidates import Pins
from planner.space.warnings import refused_modules_note

from conftest import run_cli

QWEN = ["search", "--model", "qwen3-30b-a3b", "--gpus", "32", "--hardware", "dgx-h100-superpod", "--top", "3"]


def test_search_builds_its_selective_rows_with_the_modules_given(tmp_path):
    # search read --recompute-modules into the context but built its selective rows with SEARCHED_MODULES (mlp):
    # on qwen3-30b-a3b, whose layers are all MoE, `--recompute selective --recompute-modules moe_act,layernorm`
    # ranked plans labelled rc-mlp that recompute nothing
    found = json.loads(
        run_cli([*QWEN, "--recompute", "selective", "--recompute-modules", "moe_act,layernorm", "--json"]).stdout
    )["plans"]
    assert len(found) >= 3 and all(pj["options"]["recompute_modules"] == ["moe_act", "layernorm"] for pj in found)
    assert {pj["parallel"]["recompute"] for pj in found} == {"selective"}
    # the rank-1 plan without recomputation keeps more activations and takes less time: the modules are priced
    plan = tmp_path / "plans.json"
    plan.write_text(json.dumps({"plans": found}))
    plain = json.loads(run_cli(["explain", "--plan", str(plan), "--recompute", "none", "--json"]).stdout)
    assert plain["parallel"]["recompute"] == "none"
    assert plain["estimate"]["memory"]["activations"] > found[0]["estimate"]["memory"]["activations"]
    assert plain["estimate"]["iteration_s"] < found[0]["estimate"]["iteration_s"]


def test_search_pins_read_the_modules_as_given():
    values = dict.fromkeys(Pins.__dataclass_fields__)  # every knob unpinned
    values |= {"decoder_first_pipeline_num_layers": None, "decoder_last_pipeline_num_layers": None}
    values |= {"account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False}
    values |= {"recompute_modules": "mla_up_proj, moe_act"}
    assert [m.value for m in search_pins(values).recompute_modules] == ["mla_up_proj", "moe_act"]
    assert search_pins({**values, "recompute_modules": None}).recompute_modules is None  # search picks them


def test_modules_megatron_refuses_on_the_model_are_said_once():
    # mla_up_proj on a model without multi-latent attention: Megatron-LM refuses it (transformer_config.py:1969-1973),
    # so every selective row falls to the rule; search says so instead of ranking the other rows silently
    got = run_cli(
        [
            "search",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--hardware",
            "dgx-h100-superpod",
            "--top",
            "1",
            "--recompute-modules",
            "mla_up_proj",
        ]
    )
    assert got.exit_code == 0
    said = [line for line in got.stderr.splitlines() if "selective" in line]
    assert said == [
        "megaplan: warning: search builds no selective recomputation on llama3-8b: --recompute-modules mla_up_proj "
        "needs --multi-latent-attention (transformer_config.py:1969-1973)"
    ]
    ctx = api.make_request(model="llama3-8b", options={"recompute_modules": ("mla_up_proj",)}).ctx
    assert refused_modules_note(ctx, Pins(recompute_modules=("mla_up_proj",), recompute=None)) is not None
    # pinned --recompute selective as well: no plan is legal, and the error names the rule (no warning twice)
    from planner.plan import Recompute

    assert refused_modules_note(ctx, Pins(recompute_modules=("mla_up_proj",), recompute=Recompute.SELECTIVE)) is None
    ds = api.make_request(model="deepseek-v3", options={"recompute_modules": ("mla_up_proj",)}).ctx
    assert refused_modules_note(ds, Pins(recompute_modules=("mla_up_proj",))) is None


def test_search_recomputes_mlas_up_projections_on_an_mla_model():
    # DeepSeek-V3 (multi-latent attention) under flash attention: search's selective rows recompute MLA's
    # up-projections, what NVIDIA's DeepSeek-V3 recipes name (mlp reaches only its 3 dense layers); a dense model
    # keeps mlp, and the unfused kernel core_attn (Korthikanti et al. 2022)
    from planner.plan import RecomputeModule
    from planner.space.candidates import searched_modules

    mla = api.make_request(model="deepseek-v3", hardware="dgx-h100-superpod", gpus=1024).ctx
    dense = api.make_request(model="llama3-70b", hardware="dgx-h100-superpod", gpus=64).ctx
    unfused = api.make_request(
        model="deepseek-v3", hardware="dgx-h100-superpod", gpus=1024, options={"attention_kernel": "unfused"}
    ).ctx
    assert searched_modules(mla) == (RecomputeModule.MLA_UP_PROJ,)
    assert searched_modules(dense) == (RecomputeModule.MLP,)
    assert searched_modules(unfused) == (RecomputeModule.CORE_ATTN,)
    found = json.loads(
        run_cli(
            [
                "search",
                "--model",
                "deepseek-v3",
                "--gpus",
                "1024",
                "--hardware",
                "dgx-h100-superpod",
                "--recompute",
                "selective",
                "--top",
                "2",
                "--json",
            ]
        ).stdout  # fmt: skip
    )["plans"]
    assert found and all(pj["options"]["recompute_modules"] == ["mla_up_proj"] for pj in found)
