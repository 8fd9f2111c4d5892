"""The GEMM shape law's half-dimension x½, measured on a kernel benchmark rather than fitted to runs.

``presets/reference/gemm_kernels.csv`` holds OpenXLA's published matmul throughput per GPU (the
``kDefaultMatmulPTable`` of ``xla/service/gpu/model/matmul_interpolator_data.h``, BF16 in and out) at
the training shapes it covers: M = b·m ≥ 4,096 tokens and N, K ≥ 2,048 (its dimensions stop at 4,096;
a batch of b GEMMs of m rows is read as one of b·m rows, the tile count the waves see). This module
fits the law of ``planner.costs.compute.gemm_efficiency``,

    η(M, N, K) = η_max · Π_{x ∈ (M, N, K)} x / (x + x½),

to those rows on log throughput, η_max as the rows' geometric level (a short benchmark runs at boost
clock, above the sustained clock of a training run, so only the shape dependence, x½, carries over to
the runs) and x½ by a scan, and reports each row's error. The hardware presets' ``gemm_half_dim``
cites the result as its kernel prior (``Factor.prior``), so the calibration is pulled toward the shape
dependence a kernel table measures, not only what the runs' own shapes (mostly ≥ 4,096 wide) imply.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from planner.costs.compute import gemm_efficiency
from planner.presets import presets_root

HALF_DIM_SCAN = np.arange(10.0, 2000.0, 1.0)  # x½ candidates, one element apart (the band is 32-1024)


@dataclass(frozen=True)
class GemmRow:
    gpu: str
    cc: str
    M: int  # batch × m: the rows the tiles cover
    N: int
    K: int
    tflops: float
    peak_tflops: float

    @property
    def eta(self) -> float:
        """The measured fraction of the dense 16-bit peak."""
        return self.tflops / self.peak_tflops


@dataclass(frozen=True)
class GemmFit:
    eta_max: float
    half_dim: float
    rms_log: float  # rms of ln(measured/law) over the rows
    max_abs_log: float
    rows: int


def gemm_rows(cc: str, role: str = "fit") -> list[GemmRow]:
    """The table's rows of one compute capability (``"9.0"``, ``"10.0"``) and role."""
    text = (presets_root() / "reference" / "gemm_kernels.csv").read_text()
    return [
        GemmRow(
            r["gpu"],
            r["compute_capability"],
            int(r["batch"]) * int(r["m"]),
            int(r["n"]),
            int(r["k"]),
            float(r["tflops_per_s"]),
            float(r["peak_tflops"]),
        )
        for r in csv.DictReader(io.StringIO(text))
        if r["compute_capability"] == cc and r["role"] == role
    ]


def shape_log_errors(rows: list[GemmRow], eta_max: float, half_dim: float) -> np.ndarray:
    """ln(measured η / the law's η) of each row."""
    M, N, K = (np.array([getattr(r, x) for r in rows], dtype=float) for x in ("M", "N", "K"))
    law = gemm_efficiency(M, N, K, eta_max=eta_max, half_dim=half_dim)
    return np.log(np.array([r.eta for r in rows])) - np.log(law)


def fit_half_dim(cc: str, rows: list[GemmRow] | None = None) -> GemmFit:
    """The (η_max, x½) whose law is closest to the rows on log throughput: for each x½ of the scan,
    η_max is the geometric mean of measured over the law's shape factor (the least-squares level), and
    the x½ with the least rms is kept."""
    rows = gemm_rows(cc) if rows is None else rows
    best = None
    for x in HALF_DIM_SCAN:
        err = shape_log_errors(rows, 1.0, x)
        level = float(np.exp(err.mean()))
        rms = float(np.sqrt(np.mean((err - err.mean()) ** 2)))
        if best is None or rms < best[0]:
            best = (rms, x, level)
    rms, x, level = best
    worst = float(np.max(np.abs(shape_log_errors(rows, level, x))))
    return GemmFit(eta_max=level, half_dim=float(x), rms_log=rms, max_abs_log=worst, rows=len(rows))
