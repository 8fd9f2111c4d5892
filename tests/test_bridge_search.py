"""search over a Megatron-Bridge recipe: the recipe (with its overrides) fixes the model, batch, sequence, precision
and behaviour options exactly as explain reads them; the parallel layout is searched (pinned where given), and each
plan's export command writes Bridge overrides over the same recipe that read back to the plan."""

import json
import shlex

from planner.bridge.importer import read_bridge_source
from planner.bridge.table import NEWEST
from planner.plan_file import request_from_fields, request_from_plan
from planner.plan_options import OVERLAP_PINS
from tests.conftest import one_line_error, run_cli

RECIPE = "llama3_8b_pretrain_2gpu_h100_bf16_config"
BASE = ["search", "--bridge-recipe", RECIPE, "--gpus", "16", "--hardware", "dgx-h100-superpod"]
SEQ = ("model.seq_length=4096", "dataset.seq_length=4096")
OVERRIDES = ["--bridge-override", "train.global_batch_size=256"] + [x for o in SEQ for x in ("--bridge-override", o)]


def _search(*extra: str) -> tuple[list[dict], str]:
    result = run_cli([*BASE, *OVERRIDES, "--top", "3", "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["plans"], result.stderr


def test_search_keeps_the_recipes_model_batch_precision_and_options():
    plans, stderr = _search()
    read, _ = read_bridge_source(
        {"bridge_recipe": RECIPE, "bridge_override": ("train.global_batch_size=256", *SEQ)}
        | {"gpus": 16, "hardware": "dgx-h100-superpod"}
    )
    recipe = request_from_fields(read.data)  # what explain reads from the recipe and overrides
    for pj in plans:
        got = request_from_plan(pj)
        assert got.ctx.model.name == "llama3-8b" and got.gpus == 16
        assert (got.ctx.training.global_batch, got.ctx.training.seq_len) == (256, 4096)
        assert got.ctx.precision == recipe.ctx.precision
        mine = {k: v for k, v in got.ctx.options.model_dump().items() if k not in OVERLAP_PINS}
        assert mine == {k: v for k, v in recipe.ctx.options.model_dump().items() if k not in OVERLAP_PINS}
    assert "search keeps the Bridge config's model llama3-8b, global batch 256, seq 4096" in stderr
    assert {pj["parallel"]["tp"] for pj in plans} | {pj["parallel"]["pp"] for pj in plans} != {1}


def test_a_knob_given_beside_the_recipe_is_pinned_and_an_option_applies_over_it():
    plans, stderr = _search("--tp", "2", "--global-batch", "512")
    assert {pj["parallel"]["tp"] for pj in plans} == {2}
    assert {pj["training"]["global_batch"] for pj in plans} == {512}
    assert "--global-batch 512 overrides the Bridge config's 256" in stderr


def test_the_export_command_of_a_searched_plan_writes_bridge_overrides_that_read_back_to_it(tmp_path):
    plans, _ = _search()
    best = plans[0]
    command = shlex.split(best["commands"]["export"])
    assert command[:2] == ["megaplan", "export"] and command[-4:] == ["--format", "bridge", "--bridge-recipe", RECIPE]
    out = tmp_path / "overrides.txt"
    result = run_cli([*command[1:], "--output", str(out)])
    assert result.exit_code == 0, result.output
    read, _ = read_bridge_source({"bridge_config": str(out)})
    back = request_from_fields(read.data)
    assert back.plan == request_from_plan(best).plan
    assert back.ctx.training.global_batch == 256 and NEWEST in out.read_text()


def test_search_with_a_bridge_recipe_needs_gpus_and_refuses_min_gpus():
    line = one_line_error(run_cli(["search", "--bridge-recipe", RECIPE, "--min-gpus"]))
    assert "--min-gpus takes no Bridge recipe" in line
    line = one_line_error(run_cli(["search", "--bridge-recipe", "llama9_pretrain_config", "--gpus", "8"]))
    assert "--bridge-recipe llama9_pretrain_config: not a Megatron-Bridge v0.6.0 pretraining recipe" in line


def test_a_recipe_whose_name_states_its_cluster_is_searched_and_explained_on_it():
    """v0.6.0 library recipes are named <model>_pretrain_<N>gpu_<gpu>_<dtype>_config: without --gpus/--hardware
    the plan is read on the N GPUs of that GPU's preset (before: the A100 default and 'world size unknown'), each
    with a note; given options win."""
    result = run_cli(["search", "--bridge-recipe", RECIPE, "--top", "1", "--json"])
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["plans"][0]
    assert (best["gpus"], best["hardware"]) == (2, "dgx-h100-superpod")
    assert f"2 GPUs and hardware dgx-h100-superpod from the recipe's name {RECIPE}" in result.stderr
    explained = run_cli(["explain", "--bridge-recipe", RECIPE, "--json"])
    assert explained.exit_code == 0, explained.output
    plan = json.loads(explained.stdout)
    assert (plan["gpus"], plan["hardware"]) == (2, "dgx-h100-superpod")
    given = run_cli(["explain", "--bridge-recipe", RECIPE, "--gpus", "8", "--hardware", "gb200-nvl72", "--json"])
    assert given.exit_code == 0, given.output
    assert (json.loads(given.stdout)["gpus"], json.loads(given.stdout)["hardware"]) == (8, "gb200-nvl72")
    assert "from the recipe's name" not in given.stderr


def test_a_layout_the_named_gpus_cannot_take_names_where_the_count_came_from():
    result = run_cli(["explain", "--bridge-recipe", RECIPE, "--tp", "4"])
    assert one_line_error(result) == (
        "megaplan: error: the recipe name's 2 GPUs are not divisible by tp·pp·cp = 8 (tp 4 × pp 1 × cp 2); allowed: "
        "a multiple of 8, e.g. 8; give --gpus N, or --tp 1 on 2 GPUs"  # the tp that divides 2 / cp (audit17)
    )
