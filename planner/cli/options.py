"""One table of the options that describe a plan, shared by explain, export, compare, search and sweep,
and turning them into a plan request (or search pins).

A row of ``PLAN_OPTIONS`` is one option. Commands on one plan (explain, export, compare) give it
its plan default; search and sweep give the rows marked ``searched`` no default, so an option left
out is searched and one given pins that knob.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from planner import api
from planner.errors import PlannerError
from planner.plan import PlanOptions, Recompute, StageSplit
from planner.plan_file import read_plan_file, request_from_plan


class TokenCount(click.ParamType):
    """A positive number of tokens: 300e9, 3e11, 300000000000, or with a suffix 300B, 1.4T, 500M."""

    name = "TOKENS"
    SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            text = str(value).strip().replace("_", "")
            scale = self.SUFFIX.get(text[-1:].lower(), 1.0)
            try:
                number = float(text[:-1] if scale != 1.0 else text) * scale
            except ValueError:
                number = float("nan")
        if not number > 0 or number == float("inf"):
            self.fail(f"{value!r} is not a positive token count; write e.g. 300e9, 3e11 or 300B", param, ctx)
        return number


POSITIVE = click.IntRange(min=1)


@dataclass(frozen=True)
class Option:
    """One option: click declarations, its plan default and help, and whether search searches it."""

    decls: tuple[str, ...]
    help: str
    default: object = None
    type: object = None
    searched: bool = False  # search: no default; given, it pins the knob
    flag: bool = False  # a boolean --x/--no-x (or --x alone when ``solo``)
    solo: bool = False
    plan_only: bool = False  # explain/export/compare only (where the plan comes from)
    extra: dict = field(default_factory=dict)

    def decorator(self, *, search: bool):
        kw = dict(help=self.help, **self.extra)
        decls = self.decls
        if self.flag:
            if search and self.searched:
                decls = (f"{decls[0]}/--no-{decls[0][2:]}",)
                kw.update(default=None, help=self.help + " (default: search both)")
            elif self.solo:
                kw.update(is_flag=True)
            else:
                decls = (f"{decls[0]}/--no-{decls[0][2:]}",)
                kw.update(default=self.default, show_default=True)
        else:
            kw["type"] = self.type
            if search and self.searched:
                kw["help"] = self.help + " (default: searched)"
            elif self.default is not None:
                kw.update(default=self.default, show_default=True)
        return click.option(*decls, **kw)


PLAN_OPTIONS: tuple[Option, ...] = (
    Option(("--model",), "Model preset name or YAML path (megaplan presets models)."),
    Option(("--hardware",), "Hardware preset name or YAML path [default: dgx-a100-superpod, or the plan's]."),
    Option(
        ("--plan", "plan_file"),
        "A plan saved by explain/search --json (FILE or FILE#RANK).",
        type=click.Path(dir_okay=False),
        plan_only=True,
    ),
    Option(("--rank",), "Which plan of a search --json file (default 1).", type=POSITIVE, plan_only=True),
    Option(
        ("--megatron-args",),
        "An existing Megatron-LM command line (quote it); with --megatron-args-file, flags added to the script's.",
        plan_only=True,
    ),
    Option(
        ("--megatron-args-file",),
        "A Megatron-LM launch script to read (never run).",
        type=click.Path(dir_okay=False),
        plan_only=True,
    ),
    Option(
        ("--env", "env_pairs"),
        "Set a variable of the launch script (e.g. --env MODEL_SIZE=76B); repeatable.",
        plan_only=True,
        extra={"multiple": True, "metavar": "VAR=VALUE"},
    ),
    Option(("--gpus",), "N = tp·cp·pp·dp (default: tp·pp·dp).", type=POSITIVE, plan_only=True),
    Option(("--global-batch",), "Global batch B (default: the model preset's).", type=POSITIVE),
    Option(("--seq-len",), "Sequence length s (default: the model preset's).", type=POSITIVE),
    Option(("--precision",), "Training precision.", "bf16", click.Choice(["bf16", "fp16", "fp32"])),
    Option(
        ("--tokens",),
        "Tokens to train on, for days, GPU-hours, cost and energy (e.g. 300e9, 1.4T) [default: 300e9].",
        type=TokenCount(),
    ),
    Option(
        ("--gpu-hour-price",),
        "Price of one GPU-hour (any currency) for estimate.cost.",
        type=click.FloatRange(min=0, min_open=True),
    ),
    # the parallel plan: searched by search and sweep
    Option(("--tp",), "Tensor-parallel size t.", 1, POSITIVE, searched=True),
    Option(("--pp",), "Pipeline-parallel size p.", 1, POSITIVE, searched=True),
    Option(("--dp",), "Data-parallel size d (derived from --gpus if omitted).", None, POSITIVE, searched=True),
    Option(("--vpp",), "Interleaved chunks per stage (1: plain 1F1B).", 1, POSITIVE, searched=True),
    Option(("--cp",), "Context-parallel size c (search: while s/c ≥ 4096).", 1, POSITIVE, searched=True),
    Option(("--ep",), "Expert-parallel size (MoE).", 1, POSITIVE, searched=True),
    Option(("--etp",), "Expert tensor-parallel size (MoE; default: --tp).", None, POSITIVE, searched=True),
    Option(
        ("--fsdp",),
        "Megatron FSDP: shard weights, gradients and optimizer states.",
        False,
        flag=True,
        solo=True,
        searched=True,
    ),
    Option(("--micro-batch",), "Micro-batch size b.", 1, POSITIVE, searched=True),
    Option(("--sequence-parallel",), "Sequence parallelism (with tp > 1).", False, flag=True, searched=True),
    Option(
        ("--recompute",), "Activation recomputation.", "none", click.Choice([r.value for r in Recompute]), searched=True
    ),
    Option(
        ("--distributed-optimizer",), "Shard optimizer states over data parallelism.", False, flag=True, searched=True
    ),
    Option(
        ("--account-for-embedding-in-pipeline-split",),
        "Count the embedding as a layer (Megatron).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--account-for-loss-in-pipeline-split",), "Count the loss as a layer (Megatron).", False, flag=True, solo=True
    ),
    Option(("--decoder-first-pipeline-num-layers",), "Layers on the first stage.", None, POSITIVE),
    Option(("--decoder-last-pipeline-num-layers",), "Layers on the last stage.", None, POSITIVE),
    # Megatron-LM behaviour: PlanOptions
    Option(
        ("--attention-kernel",),
        "Attention core: flash (Transformer Engine) or unfused (2021-22 papers).",
        "flash",
        click.Choice(["flash", "unfused"]),
    ),
    Option(("--overlap-grad-reduce",), "Overlap the gradient reduction with the backward.", False, flag=True),
    Option(("--overlap-param-gather",), "Overlap the distributed optimizer's parameter all-gather.", False, flag=True),
    Option(("--grad-reduce-in-bf16",), "Reduce gradients in bf16 instead of fp32.", False, flag=True, solo=True),
    Option(
        ("--pp-scatter-gather",), "Model the 2021 pipeline scatter/gather optimisation.", False, flag=True, solo=True
    ),
    Option(("--overlap-p2p-comm",), "Interleaved schedule overlaps p2p (Megatron default).", True, flag=True),
    Option(
        ("--async-tp-comm",),
        "Backward TP collectives overlap the weight-gradient GEMMs (off in the 2021 code).",
        True,
        flag=True,
    ),
    Option(
        ("--tp-comm-overlap",),
        "--tp-comm-overlap: TP collectives overlapped with GEMMs (needs SP).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--fp8",),
        "--fp8-format: linear GEMMs in FP8 (MFU still against the BF16 peak).",
        None,
        click.Choice(["e4m3", "hybrid"]),
    ),
    Option(
        ("--fp8-param-gather",), "Keep and all-gather FP8 weights (no 16-bit weight copy).", False, flag=True, solo=True
    ),
    Option(("--moe-token-dispatcher",), "MoE token dispatcher.", "allgather", click.Choice(["allgather", "alltoall"])),
    Option(
        ("--moe-capacity-factor",),
        "Expert capacity factor (default: dropless).",
        None,
        click.FloatRange(min=0, min_open=True),
    ),
    Option(
        ("--moe-load-imbalance",),
        "Busiest expert's load over the mean, for dropless routing.",
        1.1,
        click.FloatRange(min=1.0),
    ),
    Option(("--memory-headroom",), "Fraction of HBM kept free.", 0.0, click.FloatRange(0, 0.9)),
)
BEHAVIOUR = tuple(name for name in PlanOptions.model_fields if name not in ("distribute_saved_activations",))


def _apply(f, options):
    for opt in reversed(options):
        f = opt(f)
    return f


def plan_options(f):
    """The options that describe one configuration (explain, export, compare)."""
    return _apply(f, [o.decorator(search=False) for o in PLAN_OPTIONS])


def search_options(f):
    """The same options for search and sweep: a searched knob given is pinned, left out is searched."""
    return _apply(f, [o.decorator(search=True) for o in PLAN_OPTIONS if not o.plan_only])


def behaviour(kw: dict) -> dict:
    """The PlanOptions the command's options set."""
    return {name: kw[name] for name in BEHAVIOUR if name in kw}


def _stage_split(kw: dict) -> StageSplit:
    return StageSplit.from_flags(
        kw["account_for_embedding_in_pipeline_split"], kw["account_for_loss_in_pipeline_split"]
    )


def _training(kw: dict) -> dict:
    return {
        "global_batch": kw["global_batch"],
        "seq_len": kw["seq_len"],
        "precision": kw["precision"],
        "train_tokens": kw["tokens"],
        "gpu_hour_price": kw["gpu_hour_price"],
    }


MEGATRON_SPELLINGS = {  # a Megatron-LM flag typed to a planner command -> the planner's option
    "--tensor-model-parallel-size": "--tp",
    "--pipeline-model-parallel-size": "--pp",
    "--context-parallel-size": "--cp",
    "--expert-model-parallel-size": "--ep",
    "--expert-tensor-parallel-size": "--etp",
    "--num-virtual-stages-per-pipeline-rank": "--vpp",
    "--num-layers-per-virtual-pipeline-stage": "--vpp (chunks per stage, not layers per chunk)",
    "--micro-batch-size": "--micro-batch",
    "--global-batch-size": "--global-batch",
    "--seq-length": "--seq-len",
    "--recompute-granularity": "--recompute",
    "--recompute-activations": "--recompute selective",
    "--use-distributed-optimizer": "--distributed-optimizer",
    "--use-megatron-fsdp": "--fsdp",
    "--bf16": "--precision bf16",
    "--fp16": "--precision fp16",
    "--fp8-format": "--fp8",
    "--attention-backend": "--attention-kernel",
    "--moe-token-dispatcher-type": "--moe-token-dispatcher",
    "--moe-expert-capacity-factor": "--moe-capacity-factor",
    "--overlap-p2p-communication": "--overlap-p2p-comm",
    "--no-overlap-p2p-communication": "--no-overlap-p2p-comm",
    "--train-tokens": "--tokens",
}


def megatron_spelling_hint(flag: str) -> str | None:
    """What to type instead of a Megatron-LM flag given to a planner command, or None if it is not one."""
    from planner.megatron.flags import ALIASES, flag_table

    name = flag.split("=")[0]
    if name in MEGATRON_SPELLINGS:
        return f"{name} is Megatron-LM's spelling; megaplan's option is {MEGATRON_SPELLINGS[name]}"
    if name in flag_table() or name in ALIASES:
        return (
            f"{name} is a Megatron-LM flag, not a megaplan option; describe the model with --model (a preset or "
            "YAML), or read a whole command line with --megatron-args '...' or --megatron-args-file FILE"
        )
    return None


SOURCES = ("plan_file", "megatron_args", "megatron_args_file")
NOT_PLAN = {"plan_file", "rank", "megatron_args", "megatron_args_file", "env_pairs", "memory_headroom"}
IMPORTER_TAKES = {"model", "hardware", "gpus"}  # the importer reads these itself (preset base, world size)


@dataclass(frozen=True)
class Resolved:
    """The plan the options describe, and the notes the CLI says on stderr about how it was built."""

    request: api.PlanRequest
    notes: tuple[str, ...] = ()
    searched: str | None = None  # set when the plan is search's best for the options given


def given_options() -> set[str]:
    """The parameters of the running command given on its command line (not defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {k for k in ctx.params if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE,)}


def _flag(name: str) -> str:
    return "--" + {"env_pairs": "env", "plan_file": "plan"}.get(name, name).replace("_", "-")


def _refuse_strays(kw: dict, given: set[str]) -> None:
    """Options that would be silently ignored are refused (exit 2), naming what they need."""
    sources = [n for n in SOURCES if n in given or kw.get(n)]
    if set(sources) == {"megatron_args", "megatron_args_file"}:
        sources = ["megatron_args_file"]  # --megatron-args then adds flags to the script's launch line
    if len(sources) > 1:
        raise PlannerError(
            f"give one of --plan, --megatron-args, --megatron-args-file, not {' and '.join(map(_flag, sources))}"
        )
    if "rank" in given and not kw.get("plan_file"):
        raise PlannerError("--rank picks a plan of a search --json file: give it with --plan FILE")
    if "env_pairs" in given and not (kw.get("megatron_args") is not None or kw.get("megatron_args_file")):
        raise PlannerError(
            "--env sets variables of a launch script: give it with --megatron-args-file or --megatron-args"
        )


def resolve(kw: dict, *, search_best: bool = False) -> Resolved:
    """The plan the options describe: a saved plan or an imported Megatron-LM command line with the
    options given beside it applied over the file's values (each with a note), or the plan flags.
    With ``search_best`` and neither --tp nor --pp given, search's best plan for the options given."""
    given = given_options() & {_dest(o) for o in PLAN_OPTIONS}
    _refuse_strays(kw, given)
    if kw.get("plan_file"):
        base = request_from_plan(read_plan_file(kw["plan_file"], kw.get("rank")))
        return _with_overrides(base, kw, given - NOT_PLAN, "the plan file")
    if kw.get("megatron_args") is not None or kw.get("megatron_args_file"):
        return _imported(kw, given)
    if not kw.get("model"):
        raise click.UsageError(
            "Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path)."
        )
    if search_best and not ({"tp", "pp"} & given):
        return _search_best(kw, given)
    knobs = _knobs(kw)
    knobs["distributed_optimizer"] = knobs["distributed_optimizer"] or kw["fsdp"]
    req = api.make_request(
        model=kw["model"],
        hardware=kw["hardware"] or "dgx-a100-superpod",
        gpus=kw["gpus"],
        **_training(kw),
        **knobs,
        stage_split=_stage_split(kw),
        options=behaviour(kw),
    )
    return Resolved(req)


def request_from_options(kw: dict) -> api.PlanRequest:
    return resolve(kw).request


def _imported(kw: dict, given: set[str]) -> Resolved:
    from planner.megatron.importer import import_megatron

    path = kw.get("megatron_args_file")
    text = read_text(path) if path else kw["megatron_args"]
    extra = kw.get("megatron_args") if path else None
    env = dict(_env_pair(p) for p in kw.get("env_pairs") or ())
    imported = import_megatron(
        text, gpus=kw["gpus"], model=kw["model"], hardware=kw["hardware"], env=env, base_dir=_base_dir(kw), extra=extra
    )
    notes = [f"warning: {w}" for w in imported.warnings] + [f"note: {n}" for n in imported.notes]
    script_gpus = imported.script_gpus
    if kw["gpus"] is not None and script_gpus is not None and script_gpus != kw["gpus"]:
        notes.append(f"note: --gpus {kw['gpus']} overrides the script's {script_gpus} GPUs")
    if kw.get("model"):
        notes.append(f"note: --model {kw['model']}: the script's architecture flags apply over the preset")
    resolved = _with_overrides(imported.request, kw, given - NOT_PLAN - IMPORTER_TAKES, "the script")
    return Resolved(resolved.request, tuple(notes) + resolved.notes)


def _base_dir(kw: dict) -> str | None:
    import os

    path = kw.get("megatron_args_file")
    return os.path.dirname(os.path.abspath(path)) if path else None


def _current(data: dict, name: str):
    if name in ("gpus", "model", "hardware"):
        return data.get(name)
    name = {"tokens": "train_tokens"}.get(name, name)
    for section in ("parallel", "options", "training"):
        if name in data[section]:
            return data[section][name]
    return None


def _with_overrides(base: api.PlanRequest, kw: dict, names: set[str], where: str) -> Resolved:
    """``base`` with every plan option given on the command line applied over it, each with a note."""
    from planner.plan_file import override_request, request_to_json

    if not names:
        return Resolved(base)
    data = {**request_to_json(base), "hardware": base.ctx.hardware.name}
    overrides = {n: kw[n] for n in names}
    notes = []
    for name in sorted(names):
        old = _current(data, name)
        value = kw[name]
        shown = value.value if hasattr(value, "value") else value
        if old is not None and str(old) == str(shown):
            notes.append(f"note: {_flag(name)} {shown} is what {where} has already")
        else:
            notes.append(f"note: {_flag(name)} {shown} overrides {where}'s {old if old is not None else 'default'}")
    return Resolved(override_request(base, overrides), tuple(notes))


def _search_best(kw: dict, given: set[str]) -> Resolved:
    """Search's best plan for the options given: the knobs given are pinned, the rest searched."""
    from planner.plan_file import request_from_plan
    from planner.search import search

    pinned = {k: kw[k] if k in given else None for k in kw}
    req, pins = search_inputs(pinned | {k: kw[k] for k in kw if k not in KNOBS})
    if kw.get("gpus") is None:
        raise click.UsageError(
            "Missing option '--gpus' (without --tp and --pp the best plan on N GPUs is searched; "
            "or give --tp and --pp)."
        )
    result = search(req.ctx, kw["gpus"], pins, top=1, memory_headroom=kw.get("memory_headroom") or 0.0)
    best = request_from_plan(result.plans[0], hardware=req.ctx.hardware)
    pins_given = sorted(given & set(KNOBS))
    pinned_text = f"; pinned {' '.join(_flag(k) for k in pins_given)}" if pins_given else ""
    note = f"search's best of {result.feasible:,} plans that fit (no --tp/--pp given{pinned_text})"
    return Resolved(best, searched=note)


KNOBS = (
    "tp",
    "pp",
    "dp",
    "vpp",
    "micro_batch",
    "cp",
    "ep",
    "etp",
    "fsdp",
    "sequence_parallel",
    "recompute",
    "distributed_optimizer",
)  # the searched rows of PLAN_OPTIONS: ParallelPlan fields, search pins


def _knobs(kw: dict) -> dict:
    """The parallel knobs the options set, by ParallelPlan field name, and the explicit end stages."""
    return {
        **{k: kw[k] for k in KNOBS},
        "first_stage_layers": kw["decoder_first_pipeline_num_layers"],
        "last_stage_layers": kw["decoder_last_pipeline_num_layers"],
    }


def with_run(req: api.PlanRequest, kw: dict) -> api.PlanRequest:
    """A plan from a file or a command line, with the run's --tokens and --gpu-hour-price when given."""
    run = {k: v for k, v in (("train_tokens", kw.get("tokens")), ("gpu_hour_price", kw.get("gpu_hour_price"))) if v}
    if not run:
        return req
    training = req.ctx.training.model_copy(update=run)
    return api.PlanRequest(
        ctx=api.Context(req.ctx.model, req.ctx.hardware, training, req.ctx.options), plan=req.plan, gpus=req.gpus
    )


def search_inputs(kw: dict):
    """The context and pins that search's options describe (search, sweep, --min-gpus)."""
    from planner.space.candidates import Pins

    req = api.make_request(
        model=kw["model"], hardware=kw["hardware"] or "dgx-a100-superpod", **_training(kw), options=behaviour(kw)
    )
    split = _stage_split(kw)
    explicit = kw["decoder_first_pipeline_num_layers"] or kw["decoder_last_pipeline_num_layers"]
    if explicit and split is not StageSplit.EVEN:
        raise PlannerError(
            "give either --decoder-first/last-pipeline-num-layers or "
            "--account-for-embedding/loss-in-pipeline-split, not both (Megatron-LM takes one)"
        )
    knobs = _knobs(kw)
    knobs["recompute"] = knobs["recompute"] and Recompute(knobs["recompute"])
    pins = Pins(**knobs, max_tp=kw.get("max_tp"), stage_split=None if split is StageSplit.EVEN else split)
    return req, pins


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as err:
        raise PlannerError(f"cannot read {path!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise PlannerError(f"{path!r} is not a text file") from err


def _env_pair(pair: str) -> tuple[str, str]:
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise PlannerError(f"--env {pair!r}: expected VAR=VALUE")
    return name, value


CORE = {"model", "hardware", "gpus", "global_batch", "seq_len", "precision", *KNOBS}  # always written


def _dest(opt: Option) -> str:
    return (
        opt.decls[1] if len(opt.decls) > 1 and not opt.decls[1].startswith("-") else opt.decls[0][2:].replace("-", "_")
    )


def _plan_values(pj: dict, model_ref: str | None, hardware_ref: str | None) -> dict:
    """A plan JSON's values by the name of the option that sets each."""
    par, tr = pj["parallel"], pj["training"]
    split = StageSplit(par.get("stage_split", "even"))
    return {
        **pj["options"],
        **{k: v for k, v in par.items() if k != "dp"},
        "model": model_ref or pj["model"],
        "hardware": hardware_ref or pj["hardware"],
        "gpus": pj["gpus"],
        "global_batch": tr["global_batch"],
        "seq_len": tr["seq_len"],
        "precision": tr["precision"],
        "tokens": tr.get("train_tokens"),
        "gpu_hour_price": tr.get("gpu_hour_price"),
        "account_for_embedding_in_pipeline_split": split.embedding_counted,
        "account_for_loss_in_pipeline_split": split.loss_counted,
        "decoder_first_pipeline_num_layers": par.get("first_stage_layers"),
        "decoder_last_pipeline_num_layers": par.get("last_stage_layers"),
    }


def command_args(pj: dict, model_ref: str | None = None, hardware_ref: str | None = None) -> list[str]:
    """The plan options that rebuild a plan JSON on the command line (the model by the name or path
    the user gave): every parallel knob, and each behaviour option that differs from its default."""
    from planner.plan import DEFAULT_TRAIN_TOKENS

    values = _plan_values(pj, model_ref, hardware_ref)
    defaults = {_dest(o): o.default for o in PLAN_OPTIONS} | {"tokens": DEFAULT_TRAIN_TOKENS}
    args: list[str] = []
    for opt in PLAN_OPTIONS:
        dest = _dest(opt)
        value = values.get(dest)
        if value is None or (opt.plan_only and dest != "gpus") or (dest not in CORE and value == defaults.get(dest)):
            continue
        moe = bool(pj.get("model_spec", {}).get("num_experts"))
        if not moe and ((dest == "etp" and value == values["tp"]) or (dest in ("cp", "ep") and value == 1)):
            continue
        name = opt.decls[0]
        if opt.flag and opt.solo:
            args += [name] if value else []
        elif opt.flag:
            args.append(name if value else f"--no-{name[2:]}")
        else:
            args += [name, f"{value:g}" if isinstance(value, float) else str(value)]
    return args


def commands(pj: dict, model_ref: str | None = None, hardware_ref: str | None = None) -> dict[str, str]:
    """The explain and export command lines that reproduce a plan JSON."""
    import shlex

    args = shlex.join(command_args(pj, model_ref, hardware_ref))
    return {"explain": f"megaplan explain {args}", "export": f"megaplan export {args} --format slurm"}
