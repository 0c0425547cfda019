"""A correct attention kernel that cannot run on the meta device: it computes on the host with NumPy.

Kernels behind a library that takes host arrays (NumPy, a C++ extension without a meta kernel, a
vendor runtime) see real data or nothing: ``Tensor.numpy()`` has no meta implementation.  This one
copies q, k and v to the host, does the whole softmax attention with ``numpy.einsum`` in float64 or
float32, and copies the result back to q's device.  Masks are additive (0 / -inf) and built with
``numpy.tri``; KV heads are repeated for GQA; a row that sees nothing returns 0.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import numpy as np
import torch


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv) [, weights]."""
    work = np.float64 if q.dtype == torch.float64 else np.float32
    qh, kh, vh = (t.detach().cpu().numpy().astype(work) for t in (q, k, v))
    n_heads, tq, d = qh.shape[1], qh.shape[2], qh.shape[3]
    group = n_heads // kh.shape[1]
    kh, vh = np.repeat(kh, group, axis=1), np.repeat(vh, group, axis=1)
    tk = kh.shape[2]
    scores = np.einsum("bhqd,bhkd->bhqk", qh, kh) * work(d**-0.5 if scale is None else scale)
    if causal:
        # numpy.tri(N, M, k)[i, j] = 1 where j <= i + k: key j is at or before query i's position
        bias = np.where(np.tri(tq, tk, tk - tq, dtype=bool), 0.0, -np.inf)
        if window is not None:
            bias = np.where(np.tri(tq, tk, tk - tq - window, dtype=bool), -np.inf, bias)
        scores = scores + bias.astype(work)
    columns = [scores]
    if sinks is not None:
        sink = sinks.detach().cpu().numpy().astype(work).reshape(1, n_heads, 1, 1)
        columns.append(np.broadcast_to(sink, (*scores.shape[:3], 1)))
    logits = np.concatenate(columns, axis=-1)
    top = logits.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0.0, top)
    e = np.exp(logits - top)
    total = e.sum(axis=-1, keepdims=True)
    probs = np.divide(e, total, out=np.zeros_like(e), where=total > 0)[..., :tk]
    out = np.einsum("bhqk,bhkd->bhqd", probs, vh)
    result = torch.from_numpy(np.ascontiguousarray(out)).to(device=q.device, dtype=q.dtype)
    if return_weights:
        return result, torch.from_numpy(np.ascontiguousarray(probs)).to(device=q.device, dtype=q.dtype)
    return result


attention.capabilities = {
    "weights", "window", "sinks", "value_dim", "gqa", "decode", "blind", "non_causal", "scale", "float64"
}
