"""Tests of planner.megatron.flags: Megatron-LM's argument table and the argv parser."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.megatron.dialects import fork_flags
from planner.megatron.flags import (
    ALIASES,
    ARGUMENT_TABLE_COMMIT,
    ARGUMENT_TABLE_SHA256,
    DROPPED_DESTS,
    MegatronArgError,
    UnknownMegatronFlag,
    argument_specs,
    argument_table_bytes,
    flag_table,
    megatron_source,
    parse_megatron_argv,
    validate_flag_set,
)

TABLE = json.loads(argument_table_bytes())
REAL_FLAGS = {f for arg in TABLE["arguments"] for f in arg["flags"]}


def test_table_is_the_unedited_dump_of_the_recorded_commit():
    # the shipped file is byte for byte the dump of Megatron-LM's parser at ARGUMENT_TABLE_COMMIT
    assert hashlib.sha256(argument_table_bytes()).hexdigest() == ARGUMENT_TABLE_SHA256
    assert ARGUMENT_TABLE_COMMIT in megatron_source() and "add_megatron_arguments" in megatron_source()
    assert TABLE["count"] == len(TABLE["arguments"]) == len(argument_specs()) == 838
    assert set(flag_table()) == REAL_FLAGS
    spec = flag_table()["--tensor-model-parallel-size"]
    assert (spec.dest, spec.type, spec.default) == ("tensor_model_parallel_size", "int", 1)


def test_typed_values():
    argv = [
        "--num-layers",
        "96",
        "--hidden-size=12288",
        "--lr",
        "6.0e-5",
        "--lr-warmup-fraction",
        ".001",
        "--split",
        "949,50,1",
        "--attention-backend",
        "flash",
        "--data-path",
        "a",
        "b",
        "c",
        "--fp16",
        "--rampup-batch-size",
        "16",
        "16",
        "5859375",
        "--window-size",
        "4,8",
        "--moe-layer-freq",
        "2",
    ]
    parsed = parse_megatron_argv(argv)
    assert parsed.values == {
        "num_layers": 96,
        "hidden_size": 12288,
        "lr": 6.0e-5,
        "lr_warmup_fraction": 0.001,
        "split": "949,50,1",
        "attention_backend": "flash",
        "data_path": ["a", "b", "c"],
        "fp16": True,
        "rampup_batch_size": [16, 16, 5859375],
        "window_size": (4, 8),
        "moe_layer_freq": 2,
    }
    assert parsed.given[:3] == ("--num-layers", "--hidden-size", "--lr")
    assert parsed.warnings == ()


def test_boolean_flags():
    values = parse_megatron_argv(
        [
            "--sequence-parallel",  # store_true
            "--no-gradient-accumulation-fusion",  # store_false of gradient_accumulation_fusion
            "--disable-tp-comm-overlap-ag",  # second spelling of a store_false
            "--no-rl-skip-bos-token",  # BooleanOptionalAction, negative
            "--rl-use-sequence-packing",  # BooleanOptionalAction, positive
            "--no-yarn-correction-range-round-to-int",  # store_false sharing a dest
        ]
    ).values
    assert values == {
        "sequence_parallel": True,
        "gradient_accumulation_fusion": False,
        "tp_comm_overlap_ag": False,
        "rl_skip_bos_token": False,
        "rl_use_sequence_packing": True,
        "yarn_correction_range_round_to_int": False,
    }


def test_star_nargs_and_negative_numbers():
    assert parse_megatron_argv(["--data-path", "--fp16"]).values["data_path"] == []
    assert parse_megatron_argv(["--seed", "-3"]).values["seed"] == -3
    assert parse_megatron_argv(["--data-path=x"]).values["data_path"] == ["x"]


def test_unknown_flag_suggests_closest():
    with pytest.raises(UnknownMegatronFlag) as info:
        parse_megatron_argv(["--tensor-parallel-size", "8"])
    assert str(info.value).startswith(
        "unknown Megatron-LM flag: --tensor-parallel-size (did you mean --tensor-model-parallel-size?)"
    )


def test_every_unknown_flag_is_reported_together():
    with pytest.raises(UnknownMegatronFlag) as info:
        parse_megatron_argv(["--tensor-parallel-size", "8", "--num-layers", "4", "--no-such-flag", "x", "--also-no"])
    assert "3 unknown Megatron-LM flags: --tensor-parallel-size (did you mean" in str(info.value)
    assert "--no-such-flag, --also-no" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnknownMegatronFlag, match=r"^unknown Megatron-LM flag: --zzzzzzzz \(not in today's"):
        parse_megatron_argv(["--zzzzzzzz"])
    with pytest.raises(UnknownMegatronFlag, match="did you mean --num-layers"):
        parse_megatron_argv(["--num-layer=4"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--attention-backend", "fast"],
            "--attention-backend got 'fast'; allowed: flash, fused, unfused, local, auto",
        ),
        (["--flash-attention-version", "5"], "--flash-attention-version got '5'; allowed: 2, 3, 4"),
        (["--num-layers", "x"], "--num-layers expects an integer, got 'x'"),
        (["--lr", "fast"], "--lr expects a number, got 'fast'"),
        (["--seq-length"], "--seq-length is missing its value: expects an integer"),
        (["--seq-length", "--fp16"], "--seq-length is missing its value: expects an integer"),
        (["--rampup-batch-size", "1", "2"], "--rampup-batch-size expects 3 values, each an integer, got 2"),
        (["--fp16=1"], "--fp16 takes no value, got --fp16=1"),
        (["--fp16", "yes", "no"], "stray positional argument(s) not after a flag: 'yes' 'no'"),
        (["--DDP-impl", "ddp"], "--DDP-impl got 'ddp'; allowed: local, torch"),
    ],
)
def test_one_line_errors(argv, message):
    with pytest.raises(MegatronArgError) as info:
        parse_megatron_argv(argv)
    assert str(info.value) == message
    assert not isinstance(info.value, UnknownMegatronFlag)


def test_checkpoint_activations_alias():
    parsed = parse_megatron_argv(["--checkpoint-activations", "--num-layers", "4"])
    assert parsed.values == {
        "recompute_granularity": "full",
        "recompute_method": "uniform",
        "recompute_num_layers": 1,
        "num_layers": 4,
    }
    assert parsed.given == ("--checkpoint-activations", "--num-layers")
    (warning,) = parsed.warnings
    assert "--checkpoint-activations" in warning
    assert "--recompute-granularity full --recompute-method uniform" in warning


def test_activation_checkpoint_aliases_and_explicit_flags_win():
    parsed = parse_megatron_argv(
        [
            "--activations-checkpoint-method",
            "block",
            "--activations-checkpoint-num-layers",
            "3",
            "--distribute-checkpointed-activations",
            "--checkpoint-activations",
        ]
    )
    assert parsed.values == {
        "recompute_granularity": "full",
        "recompute_method": "block",
        "recompute_num_layers": 3,
        "distribute_saved_activations": True,
    }
    assert len(parsed.warnings) == 4
    explicit = parse_megatron_argv(
        ["--recompute-method", "block", "--checkpoint-activations", "--recompute-num-layers", "2"]
    ).values
    assert explicit["recompute_method"] == "block"
    assert explicit["recompute_num_layers"] == 2


@pytest.mark.parametrize(
    "argv, values",
    [
        (["--DDP-impl", "torch"], {"ddp_impl": "torch"}),
        (["--DDP-impl=local"], {"ddp_impl": "local"}),
        (["--scatter-gather-tensors-in-pipeline"], {"scatter_gather_tensors_in_pipeline": True}),
        (["--no-scatter-gather-tensors-in-pipeline"], {"scatter_gather_tensors_in_pipeline": False}),
        (["--model-parallel-size", "4"], {"tensor_model_parallel_size": 4}),
        (["--batch-size", "8"], {"micro_batch_size": 8}),
        (["--warmup", "0.01"], {"lr_warmup_fraction": 0.01}),
        (["--use-flash-attn"], {"attention_backend": "flash"}),
        (["--fp8-hybrid"], {"fp8": "hybrid"}),
        (["--enable-cuda-graph"], {"cuda_graph_impl": "local"}),
        (["--no-position-embedding"], {"add_position_embedding": False, "position_embedding_type": "none"}),
        (
            ["--no-position-embedding", "--use-rotary-position-embeddings"],
            {"add_position_embedding": False, "position_embedding_type": "rope"},
        ),
        (["--use-mcore-models"], {}),
    ],
)
def test_alias_values(argv, values):
    parsed = parse_megatron_argv(argv)
    assert parsed.values == values
    old = argv[0].partition("=")[0]
    assert len(parsed.warnings) == len([a for a in argv if a.startswith("--")])
    assert parsed.warnings[0].startswith(f"{old} is an old Megatron-LM flag")
    assert ALIASES[old].modern in parsed.warnings[0]


def test_alias_table_is_consistent_with_todays_parser():
    dests = {spec.dest for spec in argument_specs()}
    for flag, alias in ALIASES.items():
        assert alias.flag == flag and alias.modern and alias.note
        for dest in [*alias.sets, *alias.weak]:
            assert dest in dests or dest in DROPPED_DESTS, (flag, dest)
        for word in (w.strip("();,") for w in alias.modern.split()):
            if word.startswith("--"):
                assert word in REAL_FLAGS and word not in ALIASES, (flag, word)
    # flags today's parser still accepts but validate_args rejects or deprecates
    assert {f for f in ALIASES if f in REAL_FLAGS} == {
        "--checkpoint-activations",
        "--batch-size",
        "--warmup",
        "--model-parallel-size",
        "--use-flash-attn",
        "--enable-cuda-graph",
        "--external-cuda-graph",
        "--cuda-graph-scope",
        "--hybrid-override-pattern",
        "--mtp-hybrid-override-pattern",
        "--no-weight-decay-cond-type",
        "--use-rotary-position-embeddings",
        "--no-position-embedding",
        "--use-mcore-models",
        "--use-dist-ckpt",
        "--dist-ckpt-format",
        "--ckpt-fully-parallel-save",
        "--disable-msc",
    }
    assert "--num-layers-per-virtual-pipeline-stage" not in ALIASES  # still valid today


def test_validate_flag_set():
    clean = [
        "--num-layers",
        "96",
        "--tensor-model-parallel-size",
        "8",
        "--bf16",
        "--recompute-granularity",
        "full",
        "--data-path",
        "a",
        "b",
    ]
    assert validate_flag_set(clean) == []
    problems = validate_flag_set(
        [
            "--num-layers",
            "2",
            "--num-layers",
            "3",
            "--bogus-flag",
            "1",
            "--attention-backend",
            "fast",
            "--DDP-impl",
            "local",
            "x",
        ]
    )
    assert problems == [
        "--num-layers sets num_layers, already set by --num-layers",
        "unknown Megatron-LM flag --bogus-flag",
        "--attention-backend got 'fast'; allowed: flash, fused, unfused, local, auto",
        "stray positional argument(s) not after a flag: 'x'",
        (
            "--DDP-impl is an old Megatron-LM flag (2020-2023 flag; 'torch' overlapped the gradient "
            "all-reduce with the backward pass, 'local' did not; value kept as ddp_impl); today: "
            "(dropped; --overlap-grad-reduce overlaps the gradient reduction)"
        ),
    ]
    assert validate_flag_set(["--DDP-impl", "local"], allow_aliases=True) == []


_SOME_FLAGS = sorted(REAL_FLAGS)[::7] + list(ALIASES)[:8] + sorted(fork_flags())[::5]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(_SOME_FLAGS + ["--", "-", "-1", "1e3", "=", "torch"]), st.text(max_size=10)),
        max_size=12,
    )
)
def test_random_argv_raises_only_documented_errors(argv):
    try:
        parsed = parse_megatron_argv(argv)
    except (UnknownMegatronFlag, MegatronArgError):
        pass
    else:
        # a given flag is today's, an old alias, or a fork's (Megatron-DeepSpeed etc.: dialects.fork_flags)
        assert set(parsed.given) <= REAL_FLAGS | set(ALIASES) | set(fork_flags())
    assert isinstance(validate_flag_set(argv), list)


def test_a_flag_given_twice_with_different_values_keeps_the_last_and_says_so():
    # argparse keeps the last value; the first is not dropped without a word (the trial: --num-layers 32 ... 48)
    args = parse_megatron_argv(["--num-layers", "32", "--hidden-size", "64", "--num-layers", "48"])
    assert args.values["num_layers"] == 48
    assert "--num-layers given twice (32, then 48): Megatron-LM keeps the last, 48" in args.warnings
    same = parse_megatron_argv(["--num-layers", "32", "--num-layers", "32"])
    assert not any("twice" in w for w in same.warnings)
