"""Time, GPU-hours, money and energy to train on a number of tokens at a plan's throughput.

    train_s    = T / (tokens/s)                    (T tokens at the predicted throughput)
    GPU-hours  = n · train_s / 3600
    cost       = GPU-hours × price per GPU-hour
    energy     = GPU-hours × TDP                   (GPUs only, at their rated board power)

For GPT-3-like models tokens/s = n·X/(8·P) under full recomputation, which turns the first line
into Narayanan et al. 2021 Eq. 4, training time ≈ 8·T·P/(n·X). The energy counts the GPUs only, at
their thermal design power (the hardware preset's ``gpu.tdp_watts``): no CPUs, network, storage
or cooling (PUE); it is None where the preset gives no power.
"""

from __future__ import annotations

SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600
WATT_HOURS_PER_MWH = 1e6


def train_time_s(tokens: float, tokens_per_s: float) -> float:
    """Seconds to process ``tokens`` at ``tokens_per_s``."""
    return tokens / tokens_per_s


def train_cost_terms(
    tokens_per_s: float,
    gpus: int,
    *,
    tokens: float,
    gpu_hour_price: float | None = None,
    tdp_watts: float | None = None,
) -> dict:
    """The plan JSON's time-and-cost keys: train_tokens, train_days, gpu_hours, gpu_hour_price,
    cost (None without a price) and energy_mwh (None without a TDP)."""
    seconds = train_time_s(tokens, tokens_per_s)
    gpu_hours = gpus * seconds / SECONDS_PER_HOUR
    return {
        "train_tokens": tokens,
        "train_days": seconds / SECONDS_PER_DAY,
        "gpu_hours": gpu_hours,
        "gpu_hour_price": gpu_hour_price,
        "cost": gpu_hours * gpu_hour_price if gpu_hour_price is not None else None,
        "energy_mwh": gpu_hours * tdp_watts / WATT_HOURS_PER_MWH if tdp_watts is not None else None,
    }
