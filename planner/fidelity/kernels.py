"""The attention-kernel law of each GPU generation, fitted to published kernel benchmarks.

``presets/reference/attention_kernels.csv`` holds the measured throughput of the kernel Megatron-Core
runs by default (Transformer Engine picks it: FlashAttention-2 on A100, cuDNN fused attention on
Hopper and Blackwell), each row with its source. This module fits the law of
``planner.costs.compute.flash_attention_efficiency`` to those rows per compute capability, bounded,
on log time (least squares, then refined to make the largest error of any row as small as it can
be, since the tables are what the law must stay within), and reports each row's error; the
hardware presets' ``attention`` sections hold the result.

- Rows with role ``fit`` set η_max, s_nc and s_diag (and the MLA factor where MLA rows exist).
- Hopper's head-width exponent α comes from H100 cuDNN 9.1 rows at head width 64 and 128
  (role ``head-dim``: the ratio of two rows of one release cancels the release's level); Blackwell
  has no such rows and borrows it.
- A100 has only forward+backward rows: the backward runs at r·η_fwd, r from FlashAttention-2's
  backward/forward ratio on H100 (role ``fwd-bwd-ratio``).
- Rows with role ``release-ratio`` (FlashAttention v1 and FlashAttention-2 on H100 in one figure of the FA2 paper)
  enter no fit: their ratio prices an older release's kernel (``flash_attn_1_over_2``).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, minimize

from planner.costs.compute import flash_attention_efficiency, flash_attention_flops
from planner.presets import presets_root

BORROWED_HEAD_DIM = {"10.0": "9.0", "10.3": "9.0"}  # no Blackwell head-width sweep: Hopper's α
BORROWED_MLA = {"9.0": "10.0"}  # no Hopper MLA rows in the fit set: Blackwell's factor
MIN_SEQ_FOR_RATIOS = 4096  # ratios of two kernels or head widths are read where both have saturated


@dataclass(frozen=True)
class KernelRow:
    gpu: str
    cc: str
    pass_: str
    causal: bool
    d_qk: int
    d_v: int
    s: int
    bh: float
    tflops: float
    exact_triangle: bool
    peak_tflops: float
    role: str
    source: str
    kernel: str = ""  # the table's kernel column: "FlashAttention-2", "cuDNN fused attention", ...

    def measured_s(self) -> float:
        """The row's time per call, from its TFLOP/s and its source's own FLOP count (the 2026
        cuDNN-frontend results count the causal triangle s(s+1)/2, the others s²/2)."""
        f_fwd, f_bwd = flash_attention_flops(self.bh, self.s, self.s, self.d_qk, self.d_v, causal=self.causal)
        if self.causal and self.exact_triangle:
            f_fwd, f_bwd = f_fwd * (1 + 1 / self.s), f_bwd * (1 + 1 / self.s)
        flops = {"fwd": f_fwd, "bwd": f_bwd, "fwd+bwd": f_fwd + f_bwd}[self.pass_]
        return float(flops) / (self.tflops * 1e12)


def kernel_rows() -> list[KernelRow]:
    text = (presets_root() / "reference" / "attention_kernels.csv").read_text()
    return [
        KernelRow(
            gpu=r["gpu"],
            cc=r["compute_capability"],
            pass_=r["pass"],
            causal=r["causal"] == "y",
            d_qk=int(r["head_dim_qk"]),
            d_v=int(r["head_dim_v"]),
            s=int(r["seq_len"]),
            bh=float(r["batch"]) * float(r["q_heads"]),
            tflops=float(r["tflops_per_s"]),
            exact_triangle=r["causal_pairs"] == "s(s+1)/2",
            peak_tflops=float(r["peak_tflops"]),
            role=r["role"],
            source=r["source"],
            kernel=r["kernel"],
        )
        for r in csv.DictReader(io.StringIO(text))
    ]


@dataclass(frozen=True)
class RowArrays:
    """Rows as arrays, so the law evaluates them all in one call."""

    passes: np.ndarray
    causal: np.ndarray
    d_qk: np.ndarray
    d_v: np.ndarray
    s: np.ndarray
    bh: np.ndarray
    peak: np.ndarray
    measured_s: np.ndarray

    @classmethod
    def of(cls, rows: list[KernelRow]) -> RowArrays:
        col = lambda f: np.array([f(r) for r in rows])
        return cls(
            col(lambda r: r.pass_),
            col(lambda r: r.causal),
            col(lambda r: r.d_qk),
            col(lambda r: r.d_v),
            col(lambda r: r.s),
            col(lambda r: r.bh),
            col(lambda r: r.peak_tflops * 1e12),
            col(lambda r: r.measured_s()),
        )


def model_s(rows: RowArrays, params: dict[str, float]) -> np.ndarray:
    """The law's time for each row, with parameters named as in AttentionKernelSpec."""
    flops = flash_attention_flops(rows.bh, rows.s, rows.s, rows.d_qk, rows.d_v, causal=rows.causal)
    out = np.zeros(len(rows.s))
    for i, p in enumerate(("fwd", "bwd")):
        used = (rows.passes == p) | (rows.passes == "fwd+bwd")
        if not used.any():
            continue
        eta = flash_attention_efficiency(
            rows.s,
            rows.d_qk,
            rows.d_v,
            causal=rows.causal,
            eta_max=params[f"{p}_efficiency"],
            row_overhead=params[f"{p}_row_overhead"],
            diagonal_overhead=params[f"{p}_diagonal_overhead"],
            head_dim_exponent=params[f"{p}_head_dim_exponent"],
            mla_factor=params.get(f"{p}_mla_factor", 1.0),
        )
        out = out + np.where(used, flops[i] / (rows.peak * eta), 0.0)
    return out


def _ratio_exponent(rows: list[KernelRow], pass_: str) -> float:
    """α from pairs of rows at head width 64 and 128 (same release, pass, mask and length):
    η64/η128 = (64/128)^α."""
    by_key = {(r.causal, r.s, r.d_qk): r for r in rows if r.pass_ == pass_ and r.s >= MIN_SEQ_FOR_RATIOS}
    logs = [
        np.log(r64.tflops / by_key[(c, s, 128)].tflops) / np.log(64 / 128)
        for (c, s, d), r64 in by_key.items()
        if d == 64 and (c, s, 128) in by_key
    ]
    return float(np.mean(logs))


def fwd_bwd_ratio(rows: list[KernelRow]) -> float:
    """η_bwd/η_fwd of FlashAttention-2 on H100 (the same kernel family as A100's), the median of
    the rows at s ≥ 4k with both passes measured."""
    fwd = {(r.causal, r.d_qk, r.s): r.tflops for r in rows if r.pass_ == "fwd" and r.s >= MIN_SEQ_FOR_RATIOS}
    ratios = [r.tflops / fwd[k] for r in rows if r.pass_ == "bwd" and (k := (r.causal, r.d_qk, r.s)) in fwd]
    return float(np.median(ratios))


def head_dim_exponents() -> dict[str, float]:
    """Hopper's α per pass from the H100 head-width rows."""
    rows = [r for r in kernel_rows() if r.role == "head-dim"]
    return {p: _ratio_exponent(rows, p) for p in ("fwd", "bwd")}


def _fit(rows: list[KernelRow], names: list[str], fixed: dict[str, float], x0, lo, hi, tie=None) -> dict:
    def params_of(x):
        p = dict(fixed, **dict(zip(names, x, strict=True)))
        return tie(p) if tie else p

    arrays = RowArrays.of(rows)

    def residuals(x):
        return np.log(model_s(arrays, params_of(x)) / arrays.measured_s)

    start = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac").x
    # then the Chebyshev fit: minimise z, the largest |log error|, subject to −z ≤ r_i(x) ≤ z
    scale = np.maximum(np.abs(start), 1e-3)
    z0 = float(np.abs(residuals(start)).max())
    r_of = lambda u: residuals(u[:-1] * scale)
    sol = minimize(
        lambda u: u[-1],
        np.append(start / scale, z0),
        method="SLSQP",
        bounds=[*zip(np.divide(lo, scale), np.divide(hi, scale), strict=True), (0, None)],
        constraints=[
            {"type": "ineq", "fun": lambda u: u[-1] - r_of(u)},
            {"type": "ineq", "fun": lambda u: u[-1] + r_of(u)},
        ],
        options=dict(maxiter=500, ftol=1e-10),
    )
    best = sol.x[:-1] * scale if sol.success and sol.x[-1] <= z0 else start
    return params_of(best)


def fit_generation(cc: str) -> dict[str, float]:
    """The AttentionKernelSpec numbers of one compute capability, fitted to its ``fit`` rows."""
    all_rows = kernel_rows()
    rows = [r for r in all_rows if r.cc == cc and r.role == "fit"]
    if cc == "8.0":
        r = fwd_bwd_ratio([x for x in all_rows if x.role == "fwd-bwd-ratio"])

        def tie(p):  # one shape for both passes, the backward at r × the forward's η_max
            q = dict(p)
            for k in ("row_overhead", "diagonal_overhead", "head_dim_exponent"):
                q[f"bwd_{k}"] = q[f"fwd_{k}"]
            q["bwd_efficiency"] = r * q["fwd_efficiency"]
            return q

        names = ["fwd_efficiency", "fwd_row_overhead", "fwd_diagonal_overhead", "fwd_head_dim_exponent"]
        return _fit(rows, names, {}, [0.7, 200, 200, 0.2], [0.05, 0, 0, 0], [1, 5000, 5000, 2], tie)
    alpha = head_dim_exponents()
    out: dict[str, float] = {}
    for p in ("fwd", "bwd"):
        mine = [r for r in rows if r.pass_ == p]
        mla = any(r.d_qk != r.d_v for r in mine)
        names = [f"{p}_efficiency", f"{p}_row_overhead", f"{p}_diagonal_overhead"] + (
            [f"{p}_mla_factor"] if mla else []
        )
        fixed = {f"{p}_head_dim_exponent": alpha[p]}
        x0, lo, hi = (
            [0.7, 300, 300, 1.0][: len(names)],
            [0.05, 0, 0, 0.5][: len(names)],
            [1, 5000, 5000, 1.5][: len(names)],
        )
        out.update(_fit(mine, names, fixed, x0, lo, hi))
    if cc in BORROWED_MLA:
        donor = fit_generation(BORROWED_MLA[cc])
        out.update({k: donor[k] for k in ("fwd_mla_factor", "bwd_mla_factor")})
    return out


def kernel_errors(cc: str, params: dict[str, float], role: str = "fit") -> list[tuple[KernelRow, float]]:
    """(row, model/measured − 1 in throughput) for every row of a role on one compute capability."""
    rows = [r for r in kernel_rows() if r.cc == cc and r.role == role]
    errors = RowArrays.of(rows).measured_s / model_s(RowArrays.of(rows), params) - 1
    return list(zip(rows, errors.tolist(), strict=True))


def implied_attention_ratio(t_predicted_s: float, t_published_s: float, t_attention_s: float) -> float:
    """How much slower than the law a run's attention must have been for its step to take the published time,
    the rest of the step as predicted: T_pub = (T − T_att) + x·T_att, so x = (T_pub − T + T_att)/T_att
    (T the predicted step, T_att its attention part; x = 1: the law's speed)."""
    return (t_published_s - t_predicted_s + t_attention_s) / t_attention_s


def law_ratios(gpu: str, params: dict[str, float], kernel: str | None = None) -> list[tuple[KernelRow, float]]:
    """Measured over law time of every attention_kernels.csv row of ``gpu`` (``kernel``: only that kernel's
    rows), the law with ``params`` (an AttentionKernelSpec's fields): > 1, the kernel ran slower than the law."""
    rows = [r for r in kernel_rows() if r.gpu == gpu and (kernel is None or r.kernel == kernel)]
    if not rows:
        return []
    arrays = RowArrays.of(rows)
    return list(zip(rows, (arrays.measured_s / model_s(arrays, params)).tolist(), strict=True))


def release_time_ratio(
    gpu: str,
    kernel: str,
    params: dict[str, float],
    min_s: int = 8192,
    d: int = 128,
    *,
    causal: bool = False,
    max_s: int | None = None,
) -> float:
    """How much longer an older kernel's attention takes than the law (``params``): its summed measured time over
    the law's, forward and backward, over its rows of ``gpu`` at head width ``d``, unmasked (``causal``: masked)
    and between ``min_s`` and ``max_s`` keys (both passes are measured there). H100 FlashAttention-2 (the FA3
    paper's Fig. 5-6, unmasked, 8k and 16k, at 1830 MHz): 1.70; B200 cuDNN 9.13.1 (cudnn-frontend's table,
    causal, 8k): (1.589 + 5.526 ms)/(1.581 + 4.999 ms of law, forward + backward) = 1.081."""
    rows = [
        (row, q)
        for row, q in law_ratios(gpu, params, kernel)
        if row.causal == causal
        and min_s <= row.s <= (max_s or row.s)
        and row.d_qk == row.d_v == d
        and row.pass_ in ("fwd", "bwd")
    ]
    if not rows:
        raise ValueError(
            f"no {'causal' if causal else 'unmasked'} {kernel} row of {gpu} at {min_s}-{max_s} keys, d {d}"
        )
    measured = sum(row.measured_s() for row, _ in rows)
    return measured / sum(row.measured_s() / q for row, q in rows)


def release_fp8_time_ratio(
    gpu: str,
    kernel: str,
    params: dict[str, float],
    s: int,
    fp8_over_bf16: tuple[dict[int, float], dict[int, float]],
    priced: tuple[dict[int, float], dict[int, float]],
    d: int = 128,
) -> float:
    """How much longer an older release's per-tensor FP8 attention takes than megaplan prices it (the law times the
    preset's FP8/BF16 tables, ``priced``): the release's causal BF16 rows of ``gpu`` at ``s`` keys times its own
    FP8/BF16 ratios (``fp8_over_bf16``), forward plus backward, over the law's times the priced ratios. B200 cuDNN
    9.13.1 at 8k: (1.589 × 0.921 + 5.526 × 0.793 ms)/(1.581 × 0.769 + 4.999 × 0.916 ms) = 5.846/5.795 = 1.009."""
    from planner.costs.compute import time_ratio_at_seq

    rows = [
        (row, q)
        for row, q in law_ratios(gpu, params, kernel)
        if row.causal and row.s == s and row.d_qk == row.d_v == d and row.pass_ in ("fwd", "bwd")
    ]
    if {row.pass_ for row, _ in rows} != {"fwd", "bwd"}:
        raise ValueError(f"no causal {kernel} forward and backward rows of {gpu} at {s} keys, d {d}")
    index = {"fwd": 0, "bwd": 1}
    measured = sum(row.measured_s() * float(time_ratio_at_seq(s, fp8_over_bf16[index[row.pass_]])) for row, _ in rows)
    law = sum(row.measured_s() / q * float(time_ratio_at_seq(s, priced[index[row.pass_]])) for row, q in rows)
    return measured / law


def flash_attn_1_over_2(s: int, *, causal: bool = True, d: int = 128) -> float:
    """FlashAttention (v1)'s time over FlashAttention-2's on H100, forward and backward, at ``s`` keys: the ratio of
    the two kernels' throughput in one figure (Dao 2023, arXiv:2307.08691 Fig. 7, attention_kernels.csv role
    ``release-ratio``: one GPU, setup and FLOP count, so the figure's clock and convention cancel). Causal, head width
    128, 2k keys: 265/108 = 2.454."""
    rows = {
        r.kernel: r
        for r in kernel_rows()
        if r.role == "release-ratio" and r.gpu == "H100-SXM5-80GB" and r.causal == causal and r.d_qk == d and r.s == s
    }
    if {"FlashAttention (v1)", "FlashAttention-2"} - rows.keys():
        raise ValueError(f"no H100 FlashAttention (v1) / FlashAttention-2 pair at {s} keys, d {d}, causal {causal}")
    return rows["FlashAttention-2"].tflops / rows["FlashAttention (v1)"].tflops


def hopper_flash_attn_1_ratio(params: dict[str, float], s: int) -> float:
    """FlashAttention (v1)'s time over a Hopper preset's attention law: FlashAttention-2's
    (``hopper_flash_attn_2_ratio``, the FA3 paper's rows) times FlashAttention (v1)'s over FlashAttention-2's at ``s``
    keys, causal
    (``flash_attn_1_over_2``, the FA2 paper's H100 figure): 1.70 × 2.454 = 4.17 at 2k."""
    return hopper_flash_attn_2_ratio(params) * flash_attn_1_over_2(s)


def hopper_flash_attn_2_ratio(params: dict[str, float]) -> float:
    """FlashAttention-2's measured time over a Hopper preset's attention law (``params``): what Transformer Engine's
    flash-attn backend costs where cuDNN's fused attention is off (NeMo 1's 2024 launchers, NVTE_FUSED_ATTN=0) -
    ``release_time_ratio`` of the FA3 paper's H100 FlashAttention-2 rows, unmasked, 8-16k keys: 1.70."""
    return release_time_ratio("H100-SXM5-80GB", "FlashAttention-2", params)
