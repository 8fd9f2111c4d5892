"""What a launch script leaves open: flags whose values it leaves unset (dropped, or an error naming
the variable when they change the estimate), words that expand to nothing, a world size it does not
give, and the files beside it that it sources or submits."""

from __future__ import annotations

import os
import re

from planner.errors import PlannerError
from planner.megatron.low_precision import DESTS as LOW_PRECISION_DESTS
from planner.megatron.option_flags import NOT_MODELLED

MODEL_FIELDS = {  # Megatron dest -> ModelSpec field
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "ffn_hidden_size": "ffn_hidden_size",
    "max_position_embeddings": "max_position_embeddings",
    "vocab_size": "vocab_size",
    "make_vocab_size_divisible_by": "make_vocab_size_divisible_by",
    "kv_channels": "kv_channels",
    "swiglu": "swiglu",
    "normalization": "normalization",
    "position_embedding_type": "position_embedding_type",
    "untie_embeddings_and_output_weights": "untie_embeddings_and_output_weights",
    "add_bias_linear": "add_bias_linear",
    "hidden_dropout": "hidden_dropout",
    "attention_dropout": "attention_dropout",
    "squared_relu": "squared_relu",
    "num_experts": "num_experts",
    "moe_router_topk": "moe_router_topk",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_layer_freq": "moe_layer_freq",
    "quick_geglu": "quick_geglu",
    "glu_linear_offset": "glu_linear_offset",
    "activation_func_clamp_value": "activation_func_clamp_value",
    "qk_layernorm": "qk_layernorm",
    "rotary_base": "rotary_base",
    "rotary_percent": "rotary_percent",
    "softmax_type": "softmax_type",
    "window_size": "window_size",
    "window_attn_skip_freq": "window_attn_skip_freq",
    "multi_latent_attention": "multi_latent_attention",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_head_dim": "qk_head_dim",
    "qk_pos_emb_head_dim": "qk_pos_emb_head_dim",
    "v_head_dim": "v_head_dim",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "mtp_num_layers": "mtp_num_layers",
    "moe_router_score_function": "moe_router_score_function",
    "moe_router_pre_softmax": "moe_router_pre_softmax",
    "moe_router_num_groups": "moe_router_num_groups",
    "moe_router_group_topk": "moe_router_group_topk",
    "moe_router_topk_scaling_factor": "moe_router_topk_scaling_factor",
    "moe_router_enable_expert_bias": "moe_router_enable_expert_bias",
    "moe_router_dtype": "moe_router_dtype",
}

SPEC_FIELDS = {  # Megatron dest -> ModelSpec field: the model's settings that change no estimate
    "layernorm_epsilon": "norm_epsilon",
    "layernorm_zero_centered_gamma": "apply_layernorm_1p",
    "rotary_scaling_factor": "rotary_scaling_factor",
    "mscale": "mscale",
    "mscale_all_dim": "mscale_all_dim",
    "yarn_original_max_position_embeddings": "yarn_original_max_position_embeddings",
    "yarn_correction_range_round_to_int": "yarn_correction_range_round_to_int",
}

KEEP_UNSET_FLAGS = {"--deepspeed_config", "--deepscale_config"}  # a path the script may write itself
KEEP_UNSET = {"vocab_file", "merge_file", "tokenizer_model", "data_path"}  # the tokenizer files say which tokenizer


COST_DESTS = set(MODEL_FIELDS) | {  # flags whose values change the estimate; every other one is read and ignored
    "group_query_attention",
    "num_query_groups",
    "seq_length",
    "tokenizer_type",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "microbatch_group_size_per_vp_stage",
    "micro_batch_size",
    "global_batch_size",
    "sequence_parallel",
    "recompute_granularity",
    "recompute_activations",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "num_distributed_optimizer_instances",
    "fp16",
    "bf16",
    "attention_backend",
    "transformer_impl",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "grad_reduce_in_bf16",
    "use_sharp",
    "ddp_bucket_size",
    "tp_comm_overlap",
    "tp_comm_overlap_cfg",
    "overlap_p2p_comm",
    "fp8",
    "fp8_param_gather",
    "fp8_recipe",
    "moe_token_dispatcher_type",
    "moe_expert_capacity_factor",
    "moe_enable_deepep",
    "moe_flex_dispatcher_backend",
    "moe_shared_expert_overlap",
    "delay_wgrad_compute",
    "moe_flex_dispatcher_num_sms",
    "moe_hybridep_num_sms",
    "moe_deepep_num_sms",
    "moe_hybridep_num_sms_preprocessing",
    "use_transformer_engine_op_fuser",
    "moe_permute_fusion",
    "overlap_moe_expert_parallel_comm",
    "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "distribute_saved_activations",
    "recompute_method",
    "recompute_num_layers",
    "recompute_modules",
    "moe_layer_recompute",
    "cpu_offloading_num_layers",
    "use_precision_aware_optimizer",
    "main_params_dtype",
    "main_grads_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "cuda_graph_impl",
    "cuda_graph_modules",
    "data_parallel_sharding_strategy",
    "outer_dp_sharding_strategy",
    *NOT_MODELLED,
    *LOW_PRECISION_DESTS,
}


def _pattern(name: str) -> re.Pattern:
    """The texts an unresolved name can stand as in a word: ``$X``, ``${X}`` and an array's ``${X[@]}``,
    ``${X[*]}`` or ``${X[i]}``; or the name itself (a command substitution, a fill-in placeholder)."""
    if name.startswith("$") and not name.startswith("$("):
        var = re.escape(name[1:].strip("{}"))
        return re.compile(rf"\$\{{{var}(?:\[[^\]]*\])?\}}|\${var}(?![A-Za-z0-9_])")
    return re.compile(re.escape(name))


def _present(token: str, names: frozenset[str]) -> frozenset[str]:
    """The unresolved names whose text is in the word (an array's words share the names of all of them)."""
    return frozenset(n for n in names if _pattern(n).search(token))


def _lone(token: str, names: frozenset[str]) -> bool:
    """Whether a word is nothing but unset expansions (``$@``, ``${OPT}``, an unset array's ``${ARGS[@]}``,
    ``<fill in>``): bash expands it to nothing and drops it."""
    rest = token
    for name in sorted(names, key=len, reverse=True):
        rest = _pattern(name).sub("", rest)
    return not rest.strip()


def _takes_value(flag: str) -> tuple[bool, str | None]:
    """(whether a flag takes a value, its destination) in today's table, the aliases or the fork table."""
    from planner.megatron.aliases import ALIASES
    from planner.megatron.dialects import fork_flag
    from planner.megatron.flags import flag_table

    spec = ALIASES[flag].spec if flag in ALIASES else flag_table().get(flag)
    if spec is None and "_" in flag:
        spec = flag_table().get("--" + flag[2:].replace("_", "-"))
    if spec is not None:
        return spec.takes_value, spec.dest
    fork = fork_flag(flag)
    return (fork.takes_value if fork else True), None


def flag_dests(words: list[str]) -> frozenset[str]:
    """The Megatron-LM dests the flags among ``words`` set (any spelling, ``--flag=value`` too)."""
    return frozenset(d for w in words if w.startswith("--") and (d := _takes_value(w.split("=")[0])[1]))


def _env_name(names: frozenset[str]) -> str:
    name = sorted(names)[0]
    return name[1:].strip("{}") if name.startswith("$") and not name.startswith("$(") else "NAME"


def _fragment(token: str, names: frozenset[str]) -> frozenset[str]:
    """The names of a word cut out of an unset value by word splitting (``$((``, ``/``, ``))``): a word built
    from unresolved names that still holds shell syntax, which no expanded word does."""
    return names if names and any(c in token for c in "$`") else frozenset()


def drop_unset(
    argv: list[str], unresolved: list[frozenset[str]], overridden: frozenset[str] = frozenset()
) -> tuple[list[str], list[str], list[str], dict[str, str]]:
    """(argv, flags dropped, lone words dropped, unset values an option beside the script gives by dest). A flag
    whose value the script leaves unset is dropped with a note when it does not change the estimate, dropped
    for the option when one beside the script gives it (``overridden``: Megatron-LM dests), and is an error
    naming the variable otherwise; a word that is only unset expansions (``$@``, an unset option string)
    expands to nothing, as in bash."""
    raw = unresolved or [frozenset()] * len(argv)
    unresolved = [_present(t, n) or _fragment(t, n) for t, n in zip(argv, raw, strict=True)]
    out, dropped, lone, missing, i, beside = [], [], [], [], 0, {}
    while i < len(argv):
        token, names = argv[i], unresolved[i]
        if names and _lone(token, names):
            lone.append(token)
            i += 1
            continue
        flag = token.split("=")[0]
        takes, dest = _takes_value(flag) if token.startswith("--") else (False, None)
        value_names = unresolved[i + 1] if i + 1 < len(argv) and "=" not in token else names if "=" in token else None
        value = token.partition("=")[2] if "=" in token else argv[i + 1] if i + 1 < len(argv) else None
        if takes and value_names and dest not in KEEP_UNSET and flag not in KEEP_UNSET_FLAGS:
            end = i + (1 if "=" in token else 2)
            cut = raw[end - 1] if "=" not in token and _fragment(argv[end - 1], raw[end - 1]) else None
            while cut and end < len(argv) and raw[end] == cut and not argv[end].startswith("--"):
                end += 1  # the rest of an unset value that word splitting cut into pieces
            value = " ".join([value or "", *argv[i + 2 : end]] if "=" not in token else [value or ""])
            if dest in overridden:
                beside[dest] = value or ""
            else:
                (missing if dest in COST_DESTS else dropped).append((flag, value, value_names))
            i = end
            continue
        step = 2 if takes and "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--") else 1
        out += argv[i : i + step]
        i += step
    if missing:
        raise PlannerError(_unset_message(missing))
    return out, [f"{flag} {value}" for flag, value, _ in dropped], lone, beside


def _unset_message(missing: list[tuple[str, str, frozenset[str]]]) -> str:
    """One line naming every flag the estimate needs whose value the script leaves unset, and the --env to give."""
    names = [_env_name(value_names) for _, _, value_names in missing]
    given = [f"--env {n}=VALUE" for n in dict.fromkeys(names)]
    read = dict.fromkeys(v for _, value, _ in missing for v in re.findall(r"\$\{?([A-Za-z_]\w*)", value))
    if "NAME" in names and read:  # computed from a variable set by a command (fresh user trial 9: name it)
        given[list(dict.fromkeys(names)).index("NAME")] = (
            f"--env NAME=VALUE (NAME: the one of {', '.join(read)} set by a command)"
        )
    arithmetic = [(flag, value) for flag, value, n in missing if n and all(x.startswith("$((") for x in n)]
    if arithmetic:  # no variable unknown: bash syntax megaplan does not evaluate (or one bash refuses too)
        flag, value = arithmetic[0]
        return (
            f"{flag} is {value}: arithmetic megaplan could not evaluate (it reads numbers, variables, + - * / % ** "
            f"<< >> & | ^ ~ ! comparisons && || ?: and assignments; bash may refuse this one too); give the value "
            f"with --megatron-args '{flag} N' or edit the script"
        )
    if len(missing) == 1:
        flag, value, _ = missing[0]
        what = f"the script's argument ${names[0]}" if names[0].isdigit() else "it"
        return (
            f"{flag} is {value}, which the script leaves unset (or computes with a command megaplan does not run); "
            f"pass {what} with {given[0]}"
        )
    flags = ", ".join(f"{flag} is {value}" for flag, value, _ in missing)
    return (
        f"{flags}: values the script leaves unset (or computes with a command megaplan does not run); pass them "
        f"with {' '.join(given)}"
    )


def world_unknown(launch) -> str:
    """Why the launch does not say how many GPUs it runs on, naming what would."""
    import re

    counts = {k: v for k, v in launch.counts.items() if k != "hostfile"}
    if "deepspeed" in launch.launcher and "hostfile" in launch.counts:
        return "the world size is unknown: deepspeed runs on every GPU of the hosts in its hostfile; pass --gpus N"
    per_node = counts.get("nproc", "").strip()
    if per_node in ("gpu", "auto"):  # torchrun: one process per GPU of the node (auto: per GPU when it has GPUs)
        return (
            f"the world size is unknown: torchrun --nproc-per-node {per_node} starts one process per GPU of each "
            "node, which the script does not say; pass --gpus N (nodes × GPUs per node)"
        )
    torch = (
        torch_world_unknown(counts)
        if re.search(r"torchrun|torch\.distributed\.(run|launch)", launch.launcher)
        else None
    )
    if torch:
        return torch
    if counts:
        shown = ", ".join(
            v.replace("=", " = ", 1) if v.startswith("WORLD_SIZE=") else f"{k} = {v}" for k, v in counts.items()
        )
        arithmetic = [
            w
            for v in counts.values()
            for x in re.findall(r"\$\(\((.*?)\)\)", v)
            for w in re.findall(r"[A-Za-z_]\w*", x)
        ]
        names = sorted({m for v in counts.values() for m in re.findall(r"\$\{?([A-Za-z_]\w*)", v)} | set(arithmetic))
        hint = f" or --env {names[0]}=VALUE" if names else ""
        return (
            f"the world size is unknown: the launcher's process counts ({shown}) come from values the script leaves "
            f"unset or computes with a command megaplan does not run; pass --gpus N{hint}"
        )
    return "the world size is unknown: no torchrun/srun/mpirun/deepspeed process counts or WORLD_SIZE; pass --gpus N"


def torch_world_unknown(counts: dict[str, str]) -> str | None:
    """Why torchrun's process counts give no world size, as torch 2.13 reads them (torch/distributed/run.py:
    ``parse_min_max_nnodes``, ``determine_local_world_size``; elastic/rendezvous/api.py: 1 ≤ MIN ≤ MAX): an elastic
    --nnodes range, a --standalone rendezvous over several nodes, a CPU run, or a form torchrun refuses; None for a
    count built from variables (the caller names them)."""
    nodes, per_node = counts.get("nnodes", ""), counts.get("nproc", "").strip()
    if nodes.endswith(" with --standalone"):
        n = nodes.removesuffix(" with --standalone")
        return (
            f"the world size is unknown: torchrun --standalone --nnodes {n}: a standalone rendezvous is this node's "
            f"(localhost), so the other nodes never join and torchrun waits; allowed: --standalone on one node, or "
            f"--rdzv-endpoint HOST:PORT for {n} nodes; pass --gpus N"
        )
    if nodes and "$" not in nodes:
        try:
            ends = [int(x) for x in nodes.split(":")]
        except ValueError:
            ends = []
        if len(ends) == 2 and 1 <= ends[0] < ends[1]:
            low, high = ends
            each = f" of {per_node} processes" if per_node.isdigit() else ""
            gpus = f" ({low * int(per_node)} to {high * int(per_node)} GPUs)" if per_node.isdigit() else ""
            return (
                f"the world size is unknown: torchrun --nnodes {nodes} is an elastic range: {low} to {high} nodes"
                f"{each}{gpus} may join, so the run has no one size; pass --gpus N (the size to price), or give "
                "--nnodes one number"
            )
        if not ends or len(ends) > 2 or min(ends) < 1 or ends[0] > ends[-1]:
            return (
                f"torchrun --nnodes '{nodes}': torchrun refuses it; allowed: N or MIN:MAX, whole numbers with "
                "1 ≤ MIN ≤ MAX (an elastic range, whose size megaplan cannot know: pass --gpus N)"
            )
    if per_node == "cpu":
        return (
            "torchrun --nproc-per-node cpu starts one process per CPU core, a CPU run megaplan does not price; "
            "allowed: a whole number of processes per node, gpu or auto (with --gpus N)"
        )
    if per_node and "$" not in per_node and not _whole(per_node):
        return (
            f"torchrun --nproc-per-node {per_node}: allowed: a whole number ≥ 1, gpu or auto (torchrun also takes "
            "cpu and xpu); pass --gpus N"
        )
    return None


def _whole(text: str) -> bool:
    """A count torchrun reads as a number ≥ 1 (Python's int())."""
    try:
        return int(text) >= 1
    except ValueError:
        return False


UP_LEVELS = 4  # how many folders above the script a relative path is looked for (where the script runs from)


class ScriptFiles:
    """Reads the files a script sources or runs (nothing else is read), as bash finds them from the folder
    the script runs in: a relative path from the script's own folder, else from a folder above it (the
    script expects to run there: Megatron-LM's moe-modelzoo ``best_practice/qwen3/run_30b.sh`` runs
    ``./sbatch_benchmarking.sh`` from ``examples/moe-modelzoo``); an absolute path where it is; else a file
    of the same name beside the script. ``__call__`` gives the text, the file's absolute path and the folder a
    relative path was found from; ``nul=True`` keeps NUL bytes (sbatch --export-file's separators), where a
    script's NUL means a binary."""

    def __init__(self, base_dir: str | None, script: str | None = None) -> None:
        self.base_dir, self.script = base_dir, script  # script: the file's own path, the script's $0

    def __call__(self, path: str, cwd: str | None = None, nul: bool = False) -> tuple[str, str, str | None] | None:
        from pathlib import Path

        if not self.base_dir or not path.strip("/"):
            return None
        p, base = Path(path), Path(cwd or self.base_dir)
        tries = [(p, None)] if p.is_absolute() else [(base / p, None)]
        tries.append((Path(self.base_dir) / p.name, None))
        if not p.is_absolute():
            tries += [(d / p, d) for d in list(base.parents)[:UP_LEVELS]]
        for full, run_dir in tries:
            if full.is_file():
                try:
                    text = decode_text(full.read_bytes(), nul)
                except OSError:
                    return None
                return (text, str(full.resolve()), str(run_dir) if run_dir else None) if text is not None else None
        return None


def decode_text(data: bytes, nul: bool = False) -> str | None:
    """A script's or config's bytes as text: UTF-8, else Latin-1 byte for byte (bash reads bytes: a comment
    in Latin-1, `# entraînement`, runs; fresh user trial 5 refused it as "not a text file"); None for a
    binary (a NUL byte: /bin/true), unless ``nul`` (a file of NUL-separated entries)."""
    if b"\0" in data and not nul:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


PYTHON_LINE = re.compile(r"^(import \w|from [\w.]+ import |def \w+\(|class \w+[(:])", re.M)


def launch_text(text: str, path: str) -> tuple[str, list[str]]:
    """A launch script's text as bash would read it, and warnings (fresh user trial 8): Windows line endings
    (CRLF) are read as if converted, with a warning (bash stops at the first '\\r'; the error blamed "a
    backslash followed by a space"); a Python file (pretrain_gpt.py itself) is refused with what to give
    instead (bashlex's error named an internal placeholder)."""
    lines = [ln for ln in text.lstrip("\ufeff").splitlines() if ln.strip() and not ln.startswith("#")]
    shebang = text.lstrip("\ufeff").split("\n", 1)[0]
    python = path.endswith(".py") or shebang.startswith("#!") and "python" in shebang
    if (python and PYTHON_LINE.search(text)) or (lines and PYTHON_LINE.match(lines[0])):
        raise PlannerError(
            f"{path!r} is a Python file, not a launch script: give the shell script that runs it "
            "(--megatron-args-file run.sh) or the command line's flags (--megatron-args '--num-layers ...')"
        )
    if "\r\n" not in text:
        return text, []
    warning = (
        f"{os.path.basename(path)} has Windows line endings (CRLF); read as if converted, but bash stops at the "
        f"first \\r ($'\\r': command not found): convert it with dos2unix {os.path.basename(path)}"
    )
    return text.replace("\r\n", "\n"), [warning]


def read_beside(base_dir: str | None, script: str | None = None) -> ScriptFiles:
    return ScriptFiles(base_dir, script)
