"""The efficiency factors of the cost model, each with where it stands: measured, fitted (with its
uncertainty), carried over from another preset, assumed, or not identifiable by the data that
was fitted, and the band of physically plausible values the fit may not leave.

A factor's band is anchored to published measurements (kernel and GEMM benchmarks, nccl-tests,
vendor specifications) and named in its ``source``; ``megaplan calibrate`` fits inside it.
"""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator


class Status(StrEnum):
    MEASURED = "measured"  # read from a published measurement
    FITTED = "fitted"  # fitted by megaplan calibrate to runs that identify it, with its uncertainty
    CARRIED = "carried over"  # another preset's fitted value (same GPU, or no runs of its own)
    ASSUMED = "assumed"  # no measurement found: a stated assumption
    NOT_IDENTIFIABLE = "not identifiable"  # the fit's runs cannot tell it apart: kept at its anchor


class Prior(BaseModel):
    """A published kernel measurement a fit is pulled toward, with its relative standard uncertainty:
    the least squares adds the residual σ_run·ln(θ/θ₀)/σ, θ the factor (or its ratio to ``per``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    value: PositiveFloat = Field(description="θ₀, the measured value (of the factor, or of factor / per)")
    sigma: PositiveFloat = Field(le=2.0, description="relative standard uncertainty of θ₀ (σ of ln θ₀)")
    per: str | None = Field(None, description="the prior is on this factor's ratio to another factor")


class Drift(BaseModel):
    """A fitted factor's leave-one-source-out drift: its range over the refits that each leave one
    source family of runs out (megaplan calibrate), and how many such refits."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    low: float = Field(description="the least value of the refits without one source")
    high: float = Field(description="the largest value of the refits without one source")
    sources: int = Field(ge=2, description="source families held out in turn (one refit each)")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"drift must be low <= high, got [{self.low:g}, {self.high:g}]")
        return self


class Factor(BaseModel):
    """Provenance of one calibration value."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    status: Literal["measured", "fitted", "carried over", "assumed", "not identifiable"]  # Status's values
    source: str = Field(min_length=1, description="the measurement, fit or assumption the value comes from")
    band: list[float] | None = Field(
        None, min_length=2, max_length=2, description="physically plausible [low, high]; fits stay inside"
    )
    sigma: NonNegativeFloat | None = Field(None, description="one standard error of a fitted value")
    prior: Prior | None = Field(None, description="the kernel measurement the fit is regularised toward")
    loso: Drift | None = Field(None, description="a fitted value's range when each source is left out of the fit")

    @model_validator(mode="after")
    def _fitted_has_sigma(self) -> Self:
        if self.band is not None and not self.band[0] <= self.band[1]:
            raise ValueError(f"band must be [low, high], got {list(self.band)}")
        if self.status == Status.FITTED and self.sigma is None:
            raise ValueError("a fitted factor needs its standard error (sigma)")
        return self


class Calibration(BaseModel):
    """The few efficiency factors of the cost model (``megaplan calibrate`` fits them per GPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    gemm_efficiency: PositiveFloat = Field(le=1.0, description="eta_max: large BF16 GEMMs' fraction of peak")
    gemm_half_dim: NonNegativeFloat = Field(description="GEMM dimension at which a dimension's factor is 1/2")
    fp8_gemm_efficiency: PositiveFloat | None = Field(
        None, le=1.0, description="per-tensor FP8 GEMMs' fraction of the FP8 peak; None: no FP8 tensor cores"
    )
    mxfp8_gemm_ratio: PositiveFloat | None = Field(
        None, le=1.0, description="MXFP8 GEMM time over per-tensor FP8 GEMM time, inverted (Blackwell); None: no MXFP8"
    )
    nvfp4_gemm_ratio: PositiveFloat | None = Field(
        None,
        le=1.0,
        description="NVFP4 GEMMs' fraction of the NVFP4 peak over per-tensor FP8 GEMMs' of the FP8 peak "
        "(η_nvfp4 = fp8_gemm_efficiency · this); None: no NVFP4 tensor cores",
    )
    attention_scale: PositiveFloat = Field(
        1.0, description="multiplier on the attention kernel's measured efficiency (hardware attention section)"
    )
    memory_efficiency: PositiveFloat = Field(le=1.0, description="fraction of HBM bandwidth memory-bound ops reach")
    nvlink_bus_efficiency: PositiveFloat = Field(le=1.0, description="NCCL bus bandwidth / NVLink bandwidth")
    network_bus_efficiency: PositiveFloat = Field(le=1.0, description="NCCL bus bandwidth / NIC bandwidth")
    a2a_network_efficiency: PositiveFloat | None = Field(
        None,
        le=1.0,
        description="the expert all-to-all's bandwidth over a rail NIC / NIC bandwidth (None: network_bus_efficiency)",
    )
    layer_overhead_us: NonNegativeFloat = Field(0.0, description="host/launch time per layer forward (backward 2x)")
    moe_host_op_us: NonNegativeFloat | None = Field(
        None, description="host time per eager op a MoE layer issues for each local expert (None: not modelled)"
    )
    persistent_gemm_comm_share: NonNegativeFloat | None = Field(
        None,
        le=1.0,
        description="the share of a hidden MoE dispatch's time the compute-bound work beside it loses where GEMMs "
        "are persistent with a static tile schedule (Hopper); None: the dispatcher's own SM share",
    )
    cp_graphed_step_us: NonNegativeFloat | None = Field(
        None,
        description="GPU time per context-parallel ring step, in each pass, when CUDA graphs replay the attention "
        "block, beyond the step's attention, transfer and contention (None: not modelled)",
    )
    straggler_sigma: NonNegativeFloat | None = Field(
        None,
        le=0.2,
        description="sigma of one GPU's pace relative to the mean (same SKU): a synchronous step waits for the "
        "slowest of N (None: not modelled)",
    )
    factors: dict[str, Factor] = Field(description="field name -> status, band, uncertainty and source")

    @model_validator(mode="after")
    def _every_factor_sourced_and_in_band(self) -> Self:
        fields = [n for n in type(self).model_fields if n != "factors" and getattr(self, n) is not None]
        missing = [n for n in fields if n not in self.factors]
        if missing:
            raise ValueError(f"factors must say where each value comes from; missing: {', '.join(missing)}")
        unknown = sorted(set(self.factors) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"factors names unknown fields: {', '.join(unknown)}")
        for name, f in self.factors.items():
            if f.prior is not None and f.prior.per is not None and f.prior.per not in fields:
                raise ValueError(f"{name}: its prior is per {f.prior.per}, which this calibration does not give")
        for name in fields:
            band = self.factors[name].band
            value = getattr(self, name)
            if band is not None and not band[0] - 1e-9 <= value <= band[1] + 1e-9:
                raise ValueError(f"{name} = {value:g} lies outside its band [{band[0]:g}, {band[1]:g}]")
        return self

    def band(self, name: str) -> tuple[float, float] | None:
        band = self.factors[name].band
        return None if band is None else (band[0], band[1])
