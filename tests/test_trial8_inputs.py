"""A new user's second day, fresh user trial 8 (issue 21): each test reproduces a mistake that ended in a
traceback, was dropped without a word, or ended in a line that did not say what to do, with files written
here in the pattern of the real ones (the real scripts stay outside the repository)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import one_line_error, run_cli


def _megaplan(args: list[str], **kw) -> subprocess.CompletedProcess:
    """megaplan in its own process, as a shell runs it (its real standard streams)."""
    return subprocess.run(
        [sys.executable, "-m", "planner", *args], text=True, errors="replace", capture_output=True, **kw
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["presets", "models"], ["presets", "show", "llama3-8b", "--json"]])
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(args):
    """`megaplan search ... --json > /dev/full` (a full disk) ended in an OSError traceback, exit 1."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "planner", *args], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["megaplan: error: cannot write the output: No space left on device"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_without_the_tables_characters_prints_not_a_traceback(encoding):
    """PYTHONIOENCODING=ascii (or latin-1) ended in UnicodeEncodeError on the first '×' or '·' of a table."""
    done = _megaplan(
        ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--brief"],
        env={**os.environ, "PYTHONIOENCODING": encoding},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "llama3-8b on 64 GPUs" in done.stdout


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("num_layers: 24", "num_layers: 40000", "num_layers: Input should be less than 32768 (got 40000)"),
        (
            "ffn_hidden_size: 8192",
            "ffn_hidden_size: 100000000000",
            "ffn_hidden_size: Input should be less than 2147483648",
        ),
        ("seq_len: 4096", "seq_len: 100000000000", "training.seq_len: Input should be less than 2147483648"),
    ],
)
def test_a_model_size_too_large_for_the_grid_is_refused_by_its_field(tmp_path, field, value, needle):
    """A model YAML with num_layers 1000000000 (or an FFN or sequence length past 2**31) ended in
    'OverflowError: Python integer ... out of bounds for int16' inside the search."""
    model = (
        "name: mine\nsource: my notes\nnum_layers: 24\nhidden_size: 2048\nnum_attention_heads: 16\n"
        "ffn_hidden_size: 8192\nmax_position_embeddings: 4096\nvocab_size: 50304\ntraining:\n"
        "  global_batch: 256\n  seq_len: 4096\n"
    )
    path = tmp_path / "mine.yaml"
    path.write_text(model.replace(field, value))
    assert needle in one_line_error(run_cli(["search", "--model", str(path), "--gpus", "16"]))


@pytest.mark.parametrize("option", ["--seq-len", "--micro-batch", "--vpp", "--dp"])
def test_a_plan_size_past_32_bits_is_refused_not_wrapped(option):
    """--seq-len 3000000000 ended in an OverflowError traceback; --micro-batch 100000000000 was priced as
    micro-batch 1215752192 (the value wrapped at 2**32) and --vpp 100000000000 as 1215752192 chunks."""
    line = one_line_error(run_cli(["explain", "--model", "llama3-8b", "--gpus", "64", option, "100000000000"]))
    assert line == (
        f"megaplan: error: Invalid value for '{option}': 100000000000 is not in the range 1<=x<=2147483647."
    )
