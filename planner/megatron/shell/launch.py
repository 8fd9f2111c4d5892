"""The package's public types, and reading a launcher's process counts.

:class:`LaunchLine` is what :func:`planner.megatron.shell.extract_launch` returns and
:class:`ShellParseError` what it raises. The option tables map torchrun /
``torch.distributed.run|launch``, Slurm (srun, sbatch, salloc and ``#SBATCH`` lines), mpirun and
deepspeed options to processes per node, nodes and world size.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

from planner.errors import PlannerError
from planner.megatron.shell.fields import Field


class ShellParseError(PlannerError):
    """Text that is not a shell script bashlex can parse, or holds no Megatron-LM launch."""


@dataclass(frozen=True)
class LaunchLine:
    """The Megatron-LM arguments of a launch and the process counts of its launcher."""

    argv: list[str]
    nproc_per_node: int | None = None
    nnodes: int | None = None
    world_size: int | None = None
    unresolved: list[str] = field(default_factory=list)
    entry_point: str | None = None
    argv_unresolved: list[frozenset[str]] = field(default_factory=list)  # per argv word, the names it holds
    files: dict[str, str] = field(default_factory=dict)  # files the script writes (here-documents), by path
    unread: list[str] = field(default_factory=list)  # files the script sources or runs that were not read
    too_deep: list[str] = field(default_factory=list)  # files not read again, nested past MAX_DEPTH levels
    launcher: str = ""  # the words before the entry point
    counts: dict[str, str] = field(default_factory=dict)  # the launcher's process-count options as written
    allocator_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF as the script leaves it at the launch
    attention_env: dict[str, str] = field(default_factory=dict)  # NVTE_FLASH_ATTN, NVTE_FUSED_ATTN at the launch
    defaults: list[str] = field(default_factory=list)  # launcher defaults the world size rests on, said in a note
    notes: list[str] = field(default_factory=list)  # how files were found (a folder above the script's)
    launches: int = 1  # the Megatron-LM launches the whole script runs (this is the first)
    env_unread: list[str] = field(default_factory=list)  # --env names the script never read before the launch
    unevaluated: list[str] = field(default_factory=list)  # what bash would evaluate and megaplan did not
    unfilled: dict[str, str] = field(default_factory=dict)  # arrays an unevaluated mapfile fills: its command
    from_submitter: list[str] = field(default_factory=list)  # sbatch --export=NAME: the submitting shell's value


INT = re.compile(r"-?[0-9]{1,18}")
_TORCH = {"--nproc_per_node": "nproc", "--nproc-per-node": "nproc", "--nnodes": "nnodes"}
_SLURM = {"--ntasks-per-node": "nproc", "--nodes": "nnodes", "-N": "nnodes", "--ntasks": "world", "-n": "world"}
_MPI = {"-np": "world", "-n": "world", "--np": "world", "-npernode": "nproc", "--npernode": "nproc", "-N": "nproc"}
_DEEPSPEED = {
    "--num_gpus": "nproc",
    "--num-gpus": "nproc",
    "--num_nodes": "nnodes",
    "--num-nodes": "nnodes",
    "--hostfile": "hostfile",
    "-H": "hostfile",
}
_ACCELERATE = {  # Hugging Face accelerate launch: --num_processes is the total over every machine (accelerate's
    # launch --help: "The total number of processes to be launched in parallel"), --num_machines the machines
    "--num_processes": "world",
    "--num-processes": "world",
    "--num_machines": "nnodes",
    "--num-machines": "nnodes",
}
_LAUNCHERS = {
    "torchrun": _TORCH,
    "torch.distributed.run": _TORCH,
    "torch.distributed.launch": _TORCH,
    "srun": _SLURM,
    "sbatch": _SLURM,
    "salloc": _SLURM,
    "mpirun": _MPI,
    "mpiexec": _MPI,
    "deepspeed": _DEEPSPEED,
    "accelerate": _ACCELERATE,
}


def launch_options(fields: list[Field], opts: dict[str, Field]) -> bool:
    """Read process-count options of the launchers in ``fields``; return whether torchrun ran."""
    table, torch = None, False
    for k, (text, unres) in enumerate(fields):
        base = posixpath.basename(text)
        if base in _LAUNCHERS or base.startswith("python"):
            table = _LAUNCHERS.get(base)
            torch = torch or table is _TORCH
            continue
        if table is None:
            continue
        key, eq, val = text.partition("=") if text.startswith("--") else (text, "", "")
        if key in table and (eq or k + 1 < len(fields)):
            opts[table[key]] = (val, unres) if eq else fields[k + 1]
        elif text[:2] in table and len(text) > 2 and text[1] != "-":
            opts[table[text[:2]]] = (text[2:], unres)
    return torch


def process_count(value: Field | None, unresolved: dict[str, None]) -> int | None:
    """A process count (``8``, or ``2:2`` for torchrun's min:max nodes); None if unknown."""
    if value is None:
        return None
    text = value[0].strip()
    low, _, high = text.partition(":")
    if INT.fullmatch(low) and (not high or high == low):
        return int(low)
    unresolved.update(dict.fromkeys(sorted(value[1])))
    return None


TORCH_FLAGS = {"nproc": "--nproc-per-node", "nnodes": "--nnodes"}
TORCH_ENV = {"nproc": "PET_NPROC_PER_NODE", "nnodes": "PET_NNODES"}  # torchrun's defaults from the environment:
# its parser's env action reads PET_<DEST> before the default (torch/distributed/argparse_util.py @ torch 2.13)


def torch_count(value: Field | None, key: str, unresolved: dict[str, None], notes: list[str]) -> int | None:
    """torchrun's --nproc-per-node / --nnodes as torchrun reads them (torch/distributed/run.py @ torch 2.13:
    ``determine_local_world_size`` and ``parse_min_max_nnodes`` call Python's int(), so ``2_0`` is 20 and ``+8`` is
    8, said in a note); --nnodes ``MIN:MAX`` is a fixed size only with MIN = MAX. None for what gives no fixed size
    (an elastic range, gpu/auto/cpu, a form torchrun refuses): ``script.world_unknown`` says which."""
    if value is None:
        return None
    text = value[0].strip()
    parts = text.split(":") if key == "nnodes" else [text]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if not numbers or len(numbers) > 2 or len(set(numbers)) > 1 or numbers[0] < 1:
        unresolved.update(dict.fromkeys(sorted(value[1])))
        return None
    if not all(p.isascii() and p.isdigit() for p in parts):
        notes.append(f"torchrun {TORCH_FLAGS[key]} {text}: {numbers[0]}, as torchrun reads it (Python's int())")
    return numbers[0]


def sbatch_directives(text: str) -> list[list[Field]]:
    """``#SBATCH`` lines as option lists of an ``sbatch`` command."""
    out = []
    for m in re.finditer(r"^[ \t]*#SBATCH[ \t]+(.*)$", text, re.MULTILINE):
        try:
            tokens = shlex.split(m.group(1), comments=True)
        except ValueError:  # an unbalanced quote in a fill-in placeholder: the options are plain words
            tokens = m.group(1).split("#")[0].split()
        out.append([(t, frozenset()) for t in ["sbatch", *tokens]])
    return out
