"""Print what each published series of one plan at different micro-batch counts says of a step: the seconds a
micro-batch adds and the seconds beyond them, measured and as megaplan predicts them (planner.fidelity.series;
docs/cost-model.md §10.1). Usage: python scripts/series_split.py"""

from __future__ import annotations

from planner.fidelity.runs import load_runs
from planner.fidelity.series import series_splits
from planner.fidelity.validate import prepare, validate


def main() -> None:
    runs = [r for r in load_runs() if "time" in r.metric]
    rows = {r["id"]: r for r in validate(runs, moe=False)["runs"]}
    points = []
    for run in runs:
        if run.id not in rows or not rows[run.id]["in_bar"]:
            continue
        req = prepare(run)
        p, training = req.plan, req.ctx.training
        m = training.global_batch // (p.dp * p.micro_batch)
        o = req.ctx.options
        precision = "NVFP4" if o.fp4 else f"FP8 {o.fp8_recipe.value}" if o.fp8 else "BF16"
        release = "-".join(run.id.split("-")[:2])  # the source and its release or round: MLPERF-v4.1, DGXC-v25.04
        key = (
            f"{req.ctx.model.name} on {run.hardware}: TP{p.tp} PP{p.pp} CP{p.cp} V{p.vpp} b{p.micro_batch} "
            f"s{training.seq_len}, {precision} ({release})"
        )
        points.append((run.id, key, m, rows[run.id]["published"], rows[run.id]["predicted"]))
    for s in series_splits(points):
        (am, bm), (ap, bp) = s.measured_s, s.predicted_s
        errors = ", ".join(f"m {m}: {e:+.1f} %" for m, e in zip(s.microbatches, s.errors_pct, strict=True))
        print(s.key)
        print(f"  a micro-batch {am:.4f} s measured, {ap:.4f} s predicted ({100 * (ap / am - 1):+.1f} %)")
        print(f"  beyond them   {bm:.3f} s measured, {bp:.3f} s predicted ({bp - bm:+.3f} s)")
        print(f"  {errors}")


if __name__ == "__main__":
    main()
