"""normkit.torch: normkit's norm kernels as torch autograd Functions and nn.Module drop-ins.

A thin layer over normkit.norm for CPU tensors (float32, float64, float16, bfloat16): every
tensor is handed to the kernel as a numpy view of its memory and every output is a tensor the
kernel writes (no copy; a tensor whose last axis is strided, or whose leading axes do not collapse
into one row stride, is made .contiguous() first; a row-strided x[::2] is used as it is). The
last axis is normalized, every leading axis is a row. A tensor on another device is a
RuntimeError naming the argument; a dtype mix is a TypeError.

- Modules (modules.py): LayerNorm, RMSNorm, PartialRMSNorm, FusedAddRMSNorm, DyT, Derf,
  ScaleNorm, L2Norm, QKL2Norm, QKRMSNorm, SeeDNorm.
- Functions and functional forms (functional.py): LayerNormFunction ... SeedNormFunction, and
  layer_norm, rms_norm, partial_rms_norm, fused_add_rms_norm, dyt, derf, l2_norm (scale_norm),
  qk_l2_norm, qk_rms_norm, seed_norm, which take the normkit options as options= and/or keywords.
"""
from . import functional
from .functional import (DerfFunction, DyTFunction, FusedAddRMSNormFunction, L2NormFunction, LayerNormFunction,
                         PartialRMSNormFunction, QKL2NormFunction, QKRMSNormFunction, RMSNormFunction,
                         SeedNormFunction, derf, dyt, fused_add_rms_norm, l2_norm, layer_norm, partial_rms_norm,
                         qk_l2_norm, qk_rms_norm, rms_norm, scale_norm, seed_norm)
from .modules import (Derf, DyT, FusedAddRMSNorm, L2Norm, LayerNorm, PartialRMSNorm, QKL2Norm, QKRMSNorm, RMSNorm,
                      ScaleNorm, SeeDNorm)
from .losses import (AggregateLossFunction, KLPenaltyFunction, PolicyLossFunction, ValueLossFunction,  # and .losses
                     aggregate_loss, kl_penalty, policy_loss, value_loss)
from .logits import LogitsStatisticsFunction, logits_statistics  # and .logits (normkit.credit's logits kernels)

__all__ = ["functional", *functional.__all__, "LayerNorm", "RMSNorm", "PartialRMSNorm", "FusedAddRMSNorm", "DyT",
           "Derf", "ScaleNorm", "L2Norm", "QKL2Norm", "QKRMSNorm", "SeeDNorm"]
