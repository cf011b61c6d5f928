"""Deterministic parameter initialization shared by the Python golden scripts and model/golden_init.h.

Every element of every parameter is a pure function of (tensor name, flat index), so fixtures never need to
store weights: the C++ side recomputes them bit for bit.

    key = FNV-1a 64 of the UTF-8 name
    x   = key + (index + 1) * 0x9E3779B97F4A7C15            (mod 2^64)
    h   = splitmix64 finalizer of x
    u   = float32((int64(h >> 40) - 2^23) * 2^-23)          exact, in [-1, 1)

Per kind: weights (Linear/Embedding/Conv/rel_embeddings) u * 2^-4; biases u * 2^-6;
LayerNorm weight float32(1) + float32(u * 2^-3) (one f32 add); LayerNorm bias u * 2^-5.
"""

import numpy as np

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1

# The four kinds, named as model/golden_init.h names them.
WEIGHT, BIAS, LAYERNORM_WEIGHT, LAYERNORM_BIAS = "weight", "bias", "layernorm_weight", "layernorm_bias"


def fnv1a64(name: str) -> int:
    h = FNV_OFFSET
    for byte in name.encode("utf-8"):
        h ^= byte
        h = (h * FNV_PRIME) & MASK64
    return h


def kind_of(name: str) -> str:
    """The init kind of an HF parameter name (LayerNorm modules are named 'LayerNorm' in DeBERTa-v2)."""
    if name.endswith("LayerNorm.weight"):
        return LAYERNORM_WEIGHT
    if name.endswith("LayerNorm.bias"):
        return LAYERNORM_BIAS
    if name.endswith(".bias"):
        return BIAS
    return WEIGHT


def unit_values(name: str, index: np.ndarray) -> np.ndarray:
    """u in [-1, 1) as float32 for the given flat indices (any integer array)."""
    key = np.uint64(fnv1a64(name))
    with np.errstate(over="ignore"):
        x = key + (index.astype(np.uint64) + np.uint64(1)) * np.uint64(GOLDEN_GAMMA)
        z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = z ^ (z >> np.uint64(31))
    top24 = (h >> np.uint64(40)).astype(np.int64) - (1 << 23)
    # |top24| <= 2^23 fits a float32 mantissa exactly, and the power-of-two scale is exact too.
    return (top24.astype(np.float32) * np.float32(2.0**-23)).astype(np.float32)


def values(name: str, index: np.ndarray, kind: str | None = None) -> np.ndarray:
    kind = kind or kind_of(name)
    u = unit_values(name, index)
    if kind == WEIGHT:
        return u * np.float32(2.0**-4)
    if kind == BIAS:
        return u * np.float32(2.0**-6)
    if kind == LAYERNORM_WEIGHT:
        return np.float32(1.0) + u * np.float32(2.0**-3)  # float32 + float32: one rounded f32 add
    if kind == LAYERNORM_BIAS:
        return u * np.float32(2.0**-5)
    raise ValueError(f"unknown init kind {kind!r}")


def fill(name: str, shape, chunk: int = 1 << 22) -> np.ndarray:
    """The whole tensor, computed in chunks so 10M-element tensors don't need GBs of uint64 temporaries."""
    numel = int(np.prod(shape)) if len(shape) else 1
    out = np.empty(numel, dtype=np.float32)
    for begin in range(0, numel, chunk):
        end = min(numel, begin + chunk)
        out[begin:end] = values(name, np.arange(begin, end, dtype=np.int64))
    return out.reshape(shape)
