"""Base recipes per Bridge tag, and the fields each sets (generated from Bridge's own code, in data/)."""

from __future__ import annotations

import functools
import json
from importlib import resources

from planner.bridge.table import GPU_LIBRARY_RECIPES, GPU_PERF_FILES, GPU_RECIPE_KEEPS, LEGACY_NAMES, RECIPES
from planner.errors import PlannerError


@functools.cache
def _defaults() -> dict:
    text = resources.files("planner.bridge.data").joinpath("recipe_defaults.json").read_text("utf-8")
    return json.loads(text)


def defaults(tag: str, name: str) -> dict:
    """The base recipe's fields at ``tag`` before any override ({} when not dumped)."""
    return _defaults().get("recipes", {}).get(tag, {}).get(name, {})


def resolve(tag: str, recipe: str | None, model: str, gpu: str | None = None) -> tuple[str, str, str]:
    """(recipe name, its module, the megaplan model preset it builds) for a named recipe or the model's: on ``gpu``
    (b200, gb200, gb300: ``bridge_gpu``) the tag's library recipe for that GPU where it has one
    (``GPU_LIBRARY_RECIPES``), else the model's first recipe for no other GPU (H100)."""
    known = RECIPES[tag]
    if recipe is None:
        names = [n for n, (_, preset) in known.items() if preset == model]
        if not names:
            raise PlannerError(
                f"no Megatron-Bridge {tag} base recipe for model {model!r} is known; give --bridge-recipe NAME "
                f"(known: {', '.join(sorted(known))})"
            )
        own = GPU_LIBRARY_RECIPES.get(tag, {}).get((model, gpu or ""))
        others = set(GPU_LIBRARY_RECIPES.get(tag, {}).values())
        recipe = own if own in names else next((n for n in names if n not in others), names[0])
    module, _, name = recipe.rpartition(":")
    name = LEGACY_NAMES.get(tag, {}).get(name, name)  # Bridge's own alias: the recipe it runs
    if name in known:
        return name, module or known[name][0], known[name][1]
    raise PlannerError(
        f"--bridge-recipe {recipe}: not a Megatron-Bridge {tag} pretraining recipe megaplan knows; "
        f"allowed: {', '.join(sorted(known))}"
    )


def preset_of(tag: str, recipe: str) -> str:
    return resolve(tag, recipe, "")[2]


def section_fields(tag: str) -> dict[str, set[str]]:
    """Every ConfigContainer section's field names at ``tag`` (dumped from Bridge's classes)."""
    return {k: set(v["fields"]) for k, v in _defaults().get("sections", {}).get(tag, {}).items()}


BRIDGE_GPUS = ("gb300", "gb200", "b300", "b200", "h100")  # the GPUs Bridge v0.6.0's recipe names and folders say


def bridge_gpu(hardware) -> str | None:
    """The GPU a Bridge recipe name says for a hardware spec, from its GPU's name (B200-SXM-180GB: b200;
    B200-in-GB200-186GB: gb200; B300-in-GB300-288GB: gb300; B300-SXM-270GB: b300; H100-SXM5-80GB: h100), else None."""
    name = hardware.gpu.name.lower()
    inside = next((g for g in ("gb300", "gb200") if f"-in-{g}" in name), None)
    return inside or next((g for g in ("b300", "b200", "h100") if name.startswith(g)), None)


def base_note(tag: str, name: str, model: str, gpu: str | None, named: bool) -> str | None:
    """The export header's line on the base recipe of a Blackwell plan: the GPU's own library recipe, or why an
    H100 one (Bridge has none for that GPU; its performance recipes are benchmarks: ``GPU_PERF_FILES``); None on
    another GPU or where the user named the recipe."""
    if named or gpu not in ("b200", "b300", "gb200", "gb300"):
        return None
    if GPU_LIBRARY_RECIPES.get(tag, {}).get((model, gpu)) == name:
        kept = GPU_RECIPE_KEEPS.get(name)
        return f"base recipe {name}: Megatron-Bridge {tag}'s {gpu.upper()} library recipe for {model}" + (
            f"; kept from it (no plan setting decides them): {kept}" if kept else ""
        )
    perf = GPU_PERF_FILES.get(tag, {}).get((model, gpu))
    bench = (
        f"; its {gpu.upper()} performance recipes ({perf}) are benchmarks, not a base for a run (perf_recipes/"
        "_common.py _benchmark_common: no checkpoint saves, no evaluation, the learning rate decayed over 50 steps)"
        if perf
        else ""
    )
    return (
        f"base recipe {name} is an H100 recipe: Megatron-Bridge {tag} has no {gpu.upper()} library recipe for "
        f"{model}{bench}; every field the plan decides is written over it"
    )
