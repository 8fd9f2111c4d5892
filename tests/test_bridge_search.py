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
