"""A Bridge config's train.train_iters / train.train_samples give the run's tokens, as Megatron-LM's --train-iters /
--train-samples do for a launch script (err16); --tokens beside it overrides them; the export writes train.train_iters.

Bridge's TrainingConfig (training/config.py @ v0.2.1 and v0.6.0) holds train_iters and train_samples, and its
finalize() asserts exactly one is set (v0.6.0: or num_epochs); the base recipes set train_iters (dumped from
Bridge's own recipe code: planner/bridge/data/recipe_defaults.json; Llama 3 70B: 1,168,251 at both tags)."""

import json

import pytest

from planner.bridge.importer import read_bridge_source
from tests.conftest import one_line_error, run_cli

RECIPE = ["--bridge-recipe", "llama3_70b_pretrain_32gpu_h100_bf16_config"]  # global batch 512, seq 8192


def _estimate(*args: str):
    result = run_cli(["explain", *RECIPE, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["estimate"], result.stderr


def test_the_recipes_train_iters_give_the_run_and_an_override_another():
    # the base recipe's 1,168,251 iterations × 512 × 8192 = 4,899,999,842,304 tokens (before: the 300B default)
    est, err = _estimate()
    assert est["train_tokens"] == 1_168_251 * 512 * 8192 == 4_899_999_842_304
    assert "the run's length: train.train_iters (the base recipe's) 1,168,251 × global batch 512 × seq 8,192" in err
    # an override's 1000 iterations: 1000 × 512 × 8192 = 4,194,304,000 tokens, and the days scale with them
    est2, err2 = _estimate("--bridge-override", "train.train_iters=1000")
    assert est2["train_tokens"] == 4_194_304_000
    assert est2["train_days"] == pytest.approx(est["train_days"] * 4_194_304_000 / 4_899_999_842_304)
    assert "train.train_iters 1,000 × global batch 512 × seq 8,192 = 4.19B tokens" in err2


def test_train_samples_give_samples_times_seq_and_tokens_override_both():
    # 1,000,000 samples × 8192 = 8,192,000,000 tokens, with the recipe's train_iters nulled as Bridge requires
    est, err = _estimate(
        "--bridge-override", "train.train_samples=1000000", "--bridge-override", "train.train_iters=null"
    )
    assert est["train_tokens"] == 8_192_000_000 and "train.train_samples 1,000,000 × seq 8,192" in err
    est2, err2 = _estimate("--tokens", "15e12")
    assert est2["train_tokens"] == 15e12 and "--tokens 15T overrides the Bridge config's 4.90T" in err2


def test_two_run_lengths_or_a_zero_is_one_line_naming_the_fields():
    both = run_cli(["explain", *RECIPE, "--bridge-override", "train.train_samples=1000000"])
    line = one_line_error(both)
    assert "train.train_iters=1168251 (the base recipe's) and train.train_samples=1000000 are both set" in line
    assert "--bridge-override train.train_iters=null" in line
    zero = run_cli(["explain", *RECIPE, "--bridge-override", "train.train_iters=0"])
    assert "train.train_iters=0: allowed: a whole number ≥ 1, or null" in one_line_error(zero)


def test_a_yaml_config_with_train_iters_reads_them(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text("train:\n  train_iters: 250\n  global_batch_size: 256\n")
    read, _ = read_bridge_source({"bridge_config": str(path), "bridge_recipe": RECIPE[1]})
    assert read.data["training"]["train_tokens"] == 250 * 256 * 8192


def test_num_epochs_is_said_and_the_days_are_for_tokens():
    est, err = _estimate("--bridge-override", "train.num_epochs=2", "--bridge-override", "train.train_iters=null")
    assert est["train_tokens"] == 300e9 and "train.num_epochs=2: the run's length needs the dataset's size" in err
