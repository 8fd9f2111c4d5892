"""Hardware specs (GPU, node, network tiers, calibration) and collective costs on them."""

from planner.hardware.spec import Calibration, GPUSpec, HardwareSpec, NetworkSpec, NetworkTier, NodeSpec

__all__ = ["Calibration", "GPUSpec", "HardwareSpec", "NetworkSpec", "NetworkTier", "NodeSpec"]
