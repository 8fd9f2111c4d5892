"""Megatron-LM's own training log, read for calibration: the iteration lines that
megatron/training/training.py ``training_log`` prints,

     [2026-01-01 00:00:00.000000] iteration       20/     100 | consumed samples:        20480 |
     elapsed time per iteration (ms): 5123.4 | throughput per GPU (TFLOP/s/GPU): 480.2 | ...
     global batch size:  1024 | lm loss: 7.1E+00 | ...

and when present the world size (arguments.py: 'using world size: N, data-parallel size: ...') and
the memory report ('[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ...',
training/utils/common_utils.py report_memory).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from planner.errors import PlannerError

ITERATION = re.compile(r"iteration\s+([0-9]+)\s*/\s*[0-9]+\s*\|")  # no \b: it made every search twice as slow
ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([^\s|]+)\s*\|")  # always followed by " |"
THROUGHPUT = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([0-9.]+)")
# whole numbers only: '1e308' was read as 1 ("--gpus 1 is not divisible by ...", "changes within the log (1, 64)")
BATCH = re.compile(r"global batch size:\s*([0-9]+)(?![\w.])")
WORLD = re.compile(r"using world size:\s*([0-9]+)(?![\w.])")
MAX_ALLOCATED = re.compile(r"memory \(MB\).*?\|\s*max allocated:\s*([0-9.]+)")
MAX_RESERVED = re.compile(r"memory \(MB\).*?\|\s*max reserved:\s*([0-9.]+)")
# the tokenizer's vocabulary, rank 0 (training/vocab_utils.py @ d98e8a64, core/tokenizers/utils/build_tokenizer.py):
# " > padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)"
PADDED_VOCAB = re.compile(r"> padded vocab \(size:\s*([0-9]+)\) with")


class LogError(PlannerError):
    """A log that cannot be used for calibration."""


@dataclass(frozen=True)
class TrainingLog:
    name: str
    iterations: tuple[int, ...]
    elapsed_ms: tuple[float, ...]
    tflops_per_gpu: tuple[float, ...]
    global_batch: int | None
    world_size: int | None
    max_allocated_mb: float | None
    max_reserved_mb: float | None
    cut_line: int | None = None  # an iteration line cut before its elapsed time's closing '|', left out
    vocab_size: int | None = None  # the tokenizer's vocabulary before padding, from the padded vocab line

    @property
    def steady_iteration_s(self) -> float:
        """The median iteration time of the logged intervals after the first (which carries start-up)."""
        return statistics.median(self.elapsed_ms[1:]) / 1e3

    @property
    def steady_tflops_per_gpu(self) -> float | None:
        return statistics.median(self.tflops_per_gpu[1:]) if len(self.tflops_per_gpu) > 1 else None


def read_training_log(text: str, name: str) -> TrainingLog:
    """The iteration lines of one Megatron-LM run's log; ``name`` is how errors refer to it."""
    iterations, elapsed, tflops, batches = [], [], [], set()
    world = allocated = reserved = cut = vocab = None
    for number, line in enumerate(text.splitlines(), 1):
        if vocab is None and "padded vocab" in line and (pv := PADDED_VOCAB.search(line)):
            vocab = int(pv.group(1))
        # each pattern only on lines with its words: 200,000 lines (39 MB) took 1.04-1.10 s of CPU, now 0.71-0.74
        if world is None and "using world size" in line and (w := WORLD.search(line)):
            world = int(w.group(1))
        if "memory (MB)" in line:
            if m := MAX_ALLOCATED.search(line):
                allocated = max(allocated or 0.0, float(m.group(1)))
            if m := MAX_RESERVED.search(line):
                reserved = max(reserved or 0.0, float(m.group(1)))
        if "elapsed time per iteration (ms):" not in line:
            continue
        it, el = ITERATION.search(line), ELAPSED.search(line)
        if it and not el:
            cut = number  # a log still being written: "... (ms): 40" of 4080.0 (fresh user trial 10: it was read)
        if not (it and el):
            continue
        iterations.append(int(it.group(1)))
        elapsed.append(_elapsed_ms(el.group(1), name, number))
        if tp := THROUGHPUT.search(line):
            tflops.append(float(tp.group(1)))
        if b := BATCH.search(line):
            batches.add(int(b.group(1)))
    if not iterations:
        raise LogError(
            f"{name}: no Megatron-LM iteration lines (' iteration N/M | ... | elapsed time per iteration (ms): ...')"
        )
    if len(iterations) < 2:
        raise LogError(
            f"{name}: only one iteration line; the first logged interval includes start-up, so at least two "
            "are needed (lower --log-interval or run longer)"
        )
    if len(batches) > 1:
        raise LogError(
            f"{name}: the global batch size changes within the log ({', '.join(map(str, sorted(batches)))}): "
            "calibrate on a run without batch-size ramp-up"
        )
    batch = next(iter(batches), None)
    return TrainingLog(
        name, tuple(iterations), tuple(elapsed), tuple(tflops), batch, world, allocated, reserved, cut, vocab
    )


def _elapsed_ms(text: str, name: str, number: int) -> float:
    """An iteration line's elapsed time in ms: a positive number (a zero, negative or nan time is a
    broken log line, not a run to fit)."""
    try:
        ms = float(text)
    except ValueError:
        ms = float("nan")
    if not 0 < ms < float("inf"):
        raise LogError(
            f"{name}, line {number}: elapsed time per iteration (ms) is {text!r}; allowed: a positive number "
            "(a time as Megatron-LM's training loop logs it)"
        )
    return ms


def iteration_line(iteration: int, total: int, elapsed_s: float, tflops: float, global_batch: int) -> str:
    """One iteration line as Megatron-LM prints it (for synthetic logs and tests)."""
    return (
        f" [2026-01-01 00:00:00.000000] iteration {iteration:8d}/{total:8d} | consumed samples: "
        f"{iteration * global_batch:12d} | elapsed time per iteration (ms): {elapsed_s * 1e3:.1f} | "
        f"throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | learning rate: 1.000000E-04 | global batch size: "
        f"{global_batch:5d} | lm loss: 7.000000E+00 | loss scale: 1.0 | grad norm: 1.000 | number of skipped "
        "iterations:   0 | number of nan iterations:   0 |"
    )
