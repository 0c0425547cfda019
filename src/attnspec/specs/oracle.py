"""Independent reference oracle, written straight from the chapters' formulas.

The mask is built key by key from the window inequality (visible_keys), each query head is served by
the KV head its index names (h // group), the softmax is spelled out with its sink column, and RoPE
and the positions loop over pairs of features; everything in float64 unless another dtype is asked
for (the tolerance policy runs the oracle in the tested dtype too).  A declared ``score_mod`` changes
each scaled logit before the mask, a declared ``mask_mod`` is the whole mask, and ``document_ids``
hide every key of another document (src/attnspec/specs/mods.py: FlexAttention's vocabulary).  Nothing here
imports impl/.  Weights use the nn.Linear layout: y = x @ W^T with W of shape (out, in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .mods import MaskMod, ScoreMod, mask_values, same_document, score_slopes

GOLDEN = torch.float64


@dataclass(frozen=True)
class Call:
    """What a call of attention asks for beyond q, k and v, in the specification's words: the mask (a
    declared ``mask_mod`` is the whole of it; else ``causal`` and a ``window`` of W keys, p-W < j <= p),
    then the keys of the query's own document (``document_ids`` (B, Tk)) and real tokens' keys
    (``padding_mask`` (B, Tk)); the ``sinks`` (Hq,), the ``scale`` (1/sqrt(d) when None) and a declared
    ``score_mod`` applied to each scaled logit.  The oracle's functions take these as keywords and hand
    them on as one Call."""

    causal: bool = True
    window: int | None = None
    sinks: torch.Tensor | None = None
    scale: float | None = None
    padding_mask: torch.Tensor | None = None
    document_ids: torch.Tensor | None = None
    score_mod: ScoreMod | None = None
    mask_mod: MaskMod | None = None


def call_of(options: dict[str, Any], function: str, padding: bool = True) -> Call:
    """The Call of ``function``'s keyword ``options`` (a TypeError naming the function for an unknown
    one, or for a padding mask it does not take)."""
    if not padding and options.get("padding_mask") is not None:
        raise TypeError(f"{function}() takes no padding_mask")
    try:
        return Call(**options)
    except TypeError:
        unknown = sorted(set(options) - set(Call.__dataclass_fields__))
        raise TypeError(f"{function}() got unexpected keyword arguments {unknown}") from None


def visible_keys(i: int, tq: int, tk: int, causal: bool = True, window: int | None = None) -> list[int]:
    """Keys that query i may attend: it sits at position tk - tq + i (bottom-right)."""
    if not causal:
        return list(range(tk))
    pos = tk - tq + i
    lowest = 0 if window is None else pos - window + 1
    return list(range(max(lowest, 0), min(pos + 1, tk)))  # the keys j with lowest <= j <= pos


def mask_oracle(tq: int, tk: int, causal: bool = True, window: int | None = None) -> torch.Tensor:
    """Boolean (tq, tk) 'may attend' mask, row i True at the keys visible_keys names."""
    mask = torch.zeros(tq, tk, dtype=torch.bool)
    for i in range(tq):
        mask[i, visible_keys(i, tq, tk, causal, window)] = True
    return mask


def _on_cpu(q, k, v, scale: float | None, dtype: torch.dtype):
    """q, k, v on the CPU in ``dtype``, and the scale (1/sqrt(d) unless given)."""
    q, k, v = (t.detach().cpu().to(dtype) for t in (q, k, v))
    return q, k, v, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def visible(batch: int, n_heads: int, tq: int, tk: int, call: Call) -> torch.Tensor:
    """(B, Hq, Tq, Tk) 'may attend': the call's ``mask_mod`` where there is one (it is the whole mask:
    ``causal`` and ``window`` do not apply), else visible_keys; then only keys of the query's own
    document (``document_ids`` (B, Tk)) and real tokens' keys (``padding_mask`` (B, Tk))."""
    if call.mask_mod is not None:
        seen = mask_values(call.mask_mod, batch, n_heads, tq, tk)
    else:
        seen = mask_oracle(tq, tk, call.causal, call.window).expand(batch, n_heads, tq, tk)
    if call.document_ids is not None:
        seen = seen & same_document(call.document_ids, tq)[:, None]
    if call.padding_mask is not None:
        seen = seen & call.padding_mask.detach().cpu().bool()[:, None, None, :]
    return seen


def visible_for(q, k, call: Call) -> torch.Tensor:
    """visible() for the problem of q (B, Hq, Tq, d) over k (B, Hkv, Tk, d)."""
    return visible(q.shape[0], q.shape[1], q.shape[2], k.shape[2], call)


def per_query_head(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, Hkv, T, x) keys or values as (B, Hq, T, x): query head h reads KV head h // (Hq / Hkv)."""
    group = n_heads // t.shape[1]
    return t[:, [h // group for h in range(n_heads)]]


def _logits(q, k, scale: float, score_mod) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, Hq, Tq, Tk) logits q_i . k_j * scale after ``score_mod``, and the mod's slope d mod / d logit
    (None without a mod)."""
    keys = per_query_head(k, q.shape[1])
    if q.dtype == GOLDEN:  # the golden: q_i . k_j as a product of matrices (its rounding is ~1e-16)
        logits = (q @ keys.mT) * scale
    else:  # each logit the sum of its d products, each product rounded in the dtype as it is formed
        logits = (q[:, :, :, None, :] * keys[:, :, None, :, :]).sum(dim=-1) * scale
    if score_mod is None:
        return logits, None
    return score_slopes(score_mod, logits)


def _softmax_rows(q, k, visible: torch.Tensor, sinks, scale: float, score_mod=None) -> torch.Tensor:
    """(B, Hq, Tq, Tk + 1 with sinks) the softmax of each row's logits (q_i . k_j * scale, through
    ``score_mod``) over its visible keys (``visible``: (B, Hq, Tq, Tk)), the sink last, spelled out: a
    key it may not see weighs exactly 0, and a row that sees no key, or whose every logit is -inf,
    weighs 0 everywhere (no output, no gradient)."""
    logits, _ = _logits(q, k, scale, score_mod)
    seen = visible.expand_as(logits)
    if sinks is not None:  # a row's sink counts only when the row sees a key
        sink_logits = sinks.detach().cpu().to(q.dtype)[None, :, None, None].expand(*logits.shape[:3], 1)
        logits = torch.cat([logits, sink_logits], dim=-1)
        seen = torch.cat([seen, seen.any(dim=-1, keepdim=True)], dim=-1)
    logits = torch.where(seen, logits, -math.inf)
    live = (logits > -math.inf).any(dim=-1, keepdim=True)
    logits = torch.where(live, logits, 0.0)  # a dead row: no -inf - -inf
    row = torch.exp(logits - logits.max(dim=-1, keepdim=True).values)
    return torch.where(live, row / row.sum(dim=-1, keepdim=True), 0.0)


def attention_oracle(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dtype: torch.dtype = GOLDEN, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output (B,Hq,Tq,dv), weights (B,Hq,Tq,Tk)) of softmax(score_mod(q.k * scale) + M, sink) v, M
    from visible(): ``mask_mod`` or the causal mask and window, ``document_ids``, ``padding_mask``
    (a query left without any visible key outputs 0, whatever its sink).  Each output row sums its
    visible values one key at a time, in ``dtype``, in key order."""
    call = call_of(options, "attention_oracle")
    q, k, v, scale = _on_cpu(q, k, v, call.scale, dtype)
    tk = k.shape[2]
    visible = visible_for(q, k, call)
    weights = _softmax_rows(q, k, visible, call.sinks, scale, call.score_mod)[..., :tk]
    values = per_query_head(v, q.shape[1])
    out = torch.zeros(*q.shape[:3], v.shape[3], dtype=dtype)
    for j in range(tk):
        out += torch.where(visible[:, :, :, j, None], weights[..., j, None] * values[:, :, None, j], 0.0)
    return out, weights


def attention_oracle_by_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dtype: torch.dtype = GOLDEN, **options: Any
) -> torch.Tensor:
    """The output of attention_oracle, each row's weighted values summed at once instead of one key at
    a time (in float64 as a product of matrices): the same formula for sequences of hundreds of keys."""
    call = call_of(options, "attention_oracle_by_rows", padding=False)
    q, k, v, scale = _on_cpu(q, k, v, call.scale, dtype)
    visible = visible_for(q, k, call)
    weights = _softmax_rows(q, k, visible, call.sinks, scale, call.score_mod)[..., : k.shape[2]]
    values = per_query_head(v, q.shape[1])
    if dtype == GOLDEN:
        return weights @ values
    return (weights[..., None] * values[:, :, None]).sum(dim=-2)


def attention_grad_oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_out: torch.Tensor,
    *,
    dtype: torch.dtype = GOLDEN,
    **options: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(dq, dk, dv, dsinks) of the loss sum(out * d_out), from the derivative of the formula: with p a
    row's probabilities over its visible keys (and its sink), out_i = sum_j p_j v_j,
    dp_j = d_out_i . v_j and D_i = sum_j p_j dp_j = d_out_i . out_i,

        dv_j += p_j d_out_i     ds_j = p_j (dp_j - D_i) f'_j     dq_i += scale sum_j ds_j k_j
        dk_j += scale ds_j q_i  dsink_h -= p_sink D_i

    where f'_j is the slope of the declared ``score_mod`` at logit j (1 without one: attnspec/specs/mods.py
    takes it by autograd in the dtype).  KV head g gathers the gradients of every query head it serves,
    and dv, dk and dsinks gather them one query row at a time, in the dtype; a row that sees nothing
    adds 0."""
    call = call_of(options, "attention_grad_oracle", padding=False)
    sinks, score_mod = call.sinks, call.score_mod
    q, k, v, scale = _on_cpu(q, k, v, call.scale, dtype)
    d_out = d_out.detach().cpu().to(dtype)
    tk, tq, n_heads = k.shape[2], q.shape[2], q.shape[1]
    group = n_heads // k.shape[1]
    visible = visible_for(q, k, call)
    rows = _softmax_rows(q, k, visible, sinks, scale, score_mod)
    slopes = None if score_mod is None else _logits(q, k, scale, score_mod)[1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dsinks = None if sinks is None else torch.zeros(n_heads, dtype=dtype)
    for h in range(n_heads):
        g = h // group  # the KV head that serves query head h
        p = rows[:, h, :, :tk]  # (B, Tq, Tk)
        out = (p[..., None] * v[:, g, None]).sum(dim=2)  # (B, Tq, dv)
        dp = (v[:, g, None] * d_out[:, h, :, None, :]).sum(dim=-1)  # (B, Tq, Tk)
        big_d = (d_out[:, h] * out).sum(dim=-1, keepdim=True)  # (B, Tq, 1)
        ds = p * (dp - big_d)
        if slopes is not None:  # through the score_mod, back to the scaled logit (a hidden key adds 0)
            ds = torch.where(p > 0, ds * slopes[:, h], 0.0)
        dq[:, h] = scale * (ds[..., None] * k[:, g, None]).sum(dim=2)
        for i in range(tq):
            dv[:, g] += p[:, i, :, None] * d_out[:, h, i, None, :]
            dk[:, g] += scale * ds[:, i, :, None] * q[:, h, i, None, :]
            if dsinks is not None:
                dsinks[h] -= (rows[:, h, i, tk:] * big_d[:, i]).sum()
    return dq, dk, dv, dsinks


def rope_oracle(
    x: torch.Tensor,
    positions: list[int],
    base: float = 10000.0,
    dtype: torch.dtype = GOLDEN,
    pairs: str = "half",
    angles_in_dtype: bool = False,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Rotate each half-split pair (x_i, x_(i+d/2)) of x (..., T, d) by p * base^(-2i/d).

    With ``rotary_dim`` r < d (partial rotary: GPT-NeoX's rotary_pct, Phi's partial_rotary_factor)
    only the first r features are rotated, as a head of size r would be (pairs (x_i, x_(i+r/2)),
    angles p * base^(-2i/r)), and features r .. d-1 pass through unchanged.

    The angles are exact (float64) unless ``angles_in_dtype``: then theta_i = 1 / base^(2i/d) and
    p * theta_i are computed one rounded step at a time in ``dtype`` (2i/d, the power, the
    reciprocal, the product), as an implementation that builds its angle table in that dtype does;
    the rounded exponent alone moves theta_i by up to ln(base) * 2i/d * eps / 2.
    ``pairs="interleaved"`` rotates (x_2i, x_(2i+1)) instead: not attnspec's convention (CONVENTIONS.md),
    there to name the convention a target follows when it fails."""
    x = x.detach().cpu().to(dtype)
    d = x.shape[-1] if rotary_dim is None else rotary_dim
    if not 0 < d <= x.shape[-1] or d % 2:
        raise ValueError(f"rotary_dim {d} must be even and within the head size {x.shape[-1]}")
    half = d // 2
    y = x.clone()

    def rounded(value: float) -> float:
        return torch.tensor(value, dtype=dtype).item()

    for t, p in enumerate(positions):
        for i in range(half):
            if angles_in_dtype:
                theta = rounded(1.0 / rounded(rounded(base) ** rounded(2.0 * i / d)))
                angle = rounded(p * theta)
            else:
                angle = p * base ** (-2.0 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            first, second = (i, i + half) if pairs == "half" else (2 * i, 2 * i + 1)
            a, b = x[..., t, first], x[..., t, second]
            y[..., t, first] = a * c - b * s
            y[..., t, second] = a * s + b * c
    return y


def sinusoidal_oracle(seq_len: int, d_model: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/d_model)."""
    pe = torch.zeros(seq_len, d_model, dtype=GOLDEN)
    for p in range(seq_len):
        for i in range(d_model // 2):
            w = 10000.0 ** (-2.0 * i / d_model)
            pe[p, 2 * i] = math.sin(p * w)
            pe[p, 2 * i + 1] = math.cos(p * w)
    return pe


def rms_norm_oracle(
    x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype = GOLDEN
) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    x, weight = x.detach().cpu().to(dtype), weight.detach().cpu().to(dtype)
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def layer_norm_oracle(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, dtype: torch.dtype = GOLDEN
) -> torch.Tensor:
    """(x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last axis (the biased variance:
    the mean of the squared deviations)."""
    x, weight = x.detach().cpu().to(dtype), weight.detach().cpu().to(dtype)
    centred = x - x.mean(dim=-1, keepdim=True)
    out = centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + eps) * weight
    return out if bias is None else out + bias.detach().cpu().to(dtype)


def pre_norm_oracle(
    x: torch.Tensor,
    norm: str,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """A layer's input after its pre-norm: x itself without one (``weight`` None), else RMSNorm
    (``norm="rms"``) or LayerNorm (``norm="layer"``) with that gain (and LayerNorm's bias)."""
    x = x.detach().cpu().to(dtype)
    if weight is None:
        return x
    if norm == "rms":
        if bias is not None:
            raise ValueError("an RMSNorm has no bias (a pre-norm with a bias is norm='layer')")
        return rms_norm_oracle(x, weight, eps, dtype)
    if norm == "layer":
        return layer_norm_oracle(x, weight, bias, eps, dtype)
    raise ValueError(f"unknown pre-norm {norm!r}: 'rms' or 'layer'")


def ffn_oracle(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w3: torch.Tensor | None,
    activation: str,
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """W2 act(W1 x); SwiGLU: W2 (silu(W1 x) * W3 x).  GELU is the exact erf form."""
    x, w1, w2 = (t.detach().cpu().to(dtype) for t in (x, w1, w2))
    h = x @ w1.T
    if activation == "relu":
        h = torch.clamp(h, min=0)
    elif activation == "gelu":
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2.0)))
    elif activation == "swiglu":
        assert w3 is not None
        h = h / (1 + torch.exp(-h)) * (x @ w3.detach().cpu().to(dtype).T)
    else:
        raise ValueError(f"unknown activation {activation!r}")
    return h @ w2.T


def qk_norm_oracle(
    t: torch.Tensor,
    gain: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    kind: str = "rms",
    over: str = "head",
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """The heads t (B, n, T, d) normalised, as a q/k norm does before RoPE: RMSNorm (``kind="rms"``) or
    LayerNorm (``"layer"``, with ``bias``) over each head's d features (``over="head"``: a gain (d,)
    shared by every head, or (n, d) one per head), or over all n * d features of a token at once
    (``over="width"``: a gain (n * d,), as OLMo 2 normalises q and k)."""
    t = t.detach().cpu().to(dtype)
    batch, n, seq, d = t.shape
    if over == "width":
        flat = t.transpose(1, 2).reshape(batch, seq, n * d)
        normed = pre_norm_oracle(flat, kind, gain, bias, eps, dtype)
        return normed.reshape(batch, seq, n, d).transpose(1, 2)
    if gain.dim() == 2:  # one gain (and bias) per head: broadcast over the tokens
        gain = gain.detach().cpu()[:, None]
        bias = None if bias is None else bias.detach().cpu()[:, None]
    return pre_norm_oracle(t, kind, gain, bias, eps, dtype)


def split_w_qkv(w_qkv: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int) -> dict:
    """The q, k and v matrices of one fused (out, in) matrix whose rows are q | k | v."""
    nq, nkv = n_heads * head_dim, n_kv_heads * head_dim
    return {"wq": w_qkv[:nq], "wk": w_qkv[nq : nq + nkv], "wv": w_qkv[nq + nkv :]}


def layer_qkv_oracle(
    x: torch.Tensor,
    *,
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    bq: torch.Tensor | None = None,
    bk: torch.Tensor | None = None,
    bv: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    norm_bias: torch.Tensor | None = None,
    norm: str = "rms",
    eps: float = 1e-5,
    rope: bool = True,
    offset: int = 0,
    base: float = 10000.0,
    pairs: str = "half",
    angles_in_dtype: bool = False,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    rotary_dim: int | None = None,
    norm_at: str = "pre",
    q_norm_bias: torch.Tensor | None = None,
    k_norm_bias: torch.Tensor | None = None,
    qk_norm: str = "rms",
    qk_norm_over: str = "head",
    dtype: torch.dtype = GOLDEN,
    positions: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """RoPE(q) (B, Hq, T, d), RoPE(k) and v (B, Hkv, T, d) of an attention layer: x after its pre-norm
    (pre_norm_oracle) times each matrix (plus its bias), head i = features i*d .. (i+1)*d - 1,
    positions offset.. (rope_oracle for ``pairs`` and ``angles_in_dtype``); q and k unrotated for a
    layer without RoPE (``rope=False``: no positions, or absolute ones added to x before it).  With
    ``q_norm`` and ``k_norm``, q and k are normalised with ``eps`` before they are rotated (qk_norm_oracle:
    ``qk_norm`` "rms" or "layer" with ``q_norm_bias`` and ``k_norm_bias``, ``qk_norm_over`` "head" with
    gains (d,) as Qwen3 and Gemma 3 have them or (H, d), or "width" with gains (H * d,)).  With
    ``rotary_dim`` r, RoPE rotates the first r features of each head only (rope_oracle).  A layer whose
    norm comes after its residual (``norm_at="post"``) projects x itself.  ``positions`` (one per token)
    replaces offset, offset + 1, ... as the positions RoPE rotates by."""
    x = x.detach().cpu().to(dtype)
    batch, seq, _ = x.shape
    h = pre_norm_oracle(x, norm, norm_weight, norm_bias, eps, dtype) if norm_at == "pre" else x

    def project(w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = h @ w.detach().cpu().to(dtype).T
        return y if bias is None else y + bias.detach().cpu().to(dtype)

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:  # (B, T, n*d) -> (B, n, T, d)
        out = torch.zeros(batch, n, seq, head_dim, dtype=dtype)
        for i in range(n):
            out[:, i] = t[..., i * head_dim : (i + 1) * head_dim]
        return out

    q, k = heads(project(wq, bq), n_heads), heads(project(wk, bk), n_kv_heads)
    if q_norm is not None:
        q = qk_norm_oracle(q, q_norm, q_norm_bias, eps, qk_norm, qk_norm_over, dtype)
    if k_norm is not None:
        k = qk_norm_oracle(k, k_norm, k_norm_bias, eps, qk_norm, qk_norm_over, dtype)
    if rope:
        positions = list(range(offset, offset + seq)) if positions is None else positions
        q = rope_oracle(q, positions, base, dtype, pairs, angles_in_dtype, rotary_dim)
        k = rope_oracle(k, positions, base, dtype, pairs, angles_in_dtype, rotary_dim)
    return q, k, heads(project(wv, bv), n_kv_heads)


def block_qkv_oracle(
    x: torch.Tensor,
    *,
    norm_weight: torch.Tensor,
    eps: float,
    w_qkv: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    offset: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = GOLDEN,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    rotary_dim: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The block's RoPE(q), RoPE(k) and v over RMSNorm(x), q|k|v from one fused matrix (with its q/k
    norm and partial rotary, as layer_qkv_oracle)."""
    return layer_qkv_oracle(
        x,
        **split_w_qkv(w_qkv, n_heads, n_kv_heads, head_dim),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        norm_weight=norm_weight,
        eps=eps,
        offset=offset,
        base=base,
        dtype=dtype,
        q_norm=q_norm,
        k_norm=k_norm,
        rotary_dim=rotary_dim,
    )


def cache_positions_oracle(seen: int, window: int | None) -> list[int]:
    """The absolute positions a layer's KV cache holds after ``seen`` positions: every one, or the
    last W of a windowed layer (the W - 1 the next query still sees, and the one it evicts)."""
    first = 0 if window is None else max(0, seen - window)
    return list(range(first, seen))


def attention_layer_oracle(
    x: torch.Tensor,
    *,
    wo: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    window: int | None,
    sinks: torch.Tensor | None,
    bo: torch.Tensor | None = None,
    residual: bool = False,
    gqa: str = "grouped",
    dtype: torch.dtype = GOLDEN,
    score_mod=None,
    mask_mod=None,
    scale: float | None = None,
    post_norm: torch.Tensor | None = None,
    **qkv,
) -> torch.Tensor:
    """Wo . attn(RoPE(q), RoPE(k), v) (+ bo), plus x when the layer has a residual; ``qkv`` are the
    keywords of layer_qkv_oracle (matrices, biases, norm, head_dim, RoPE or none, offset, base,
    pairs, angles); ``score_mod`` and ``mask_mod`` modify the attention's scaled logits and mask
    (specs/mods.py) at the positions the attention oracle numbers its T tokens with, 0 .. T-1, whatever
    the offset: mods that depend on distances only, as impl's do.  ``scale`` replaces 1/sqrt(d);
    ``post_norm`` (a gain (D,)) RMS-normalises the attention's output before the residual (the sandwich
    norm of Gemma 2 and 3, OLMo 2's post-norm), with the layer's eps; with ``norm_at="post"`` the
    layer's norm applies to x plus the attention's output (the original Transformer's, BERT's).

    ``gqa="tiled"`` lets query head h read KV head h % Hkv (like k.repeat): not attnspec's
    convention, there to name the convention a target follows when it fails."""
    q, k, v = layer_qkv_oracle(x, n_heads=n_heads, n_kv_heads=n_kv_heads, dtype=dtype, **qkv)
    if gqa == "tiled":
        k, v = k.repeat(1, n_heads // n_kv_heads, 1, 1), v.repeat(1, n_heads // n_kv_heads, 1, 1)
    attn, _ = attention_oracle(
        q, k, v, window=window, sinks=sinks, scale=scale, dtype=dtype, score_mod=score_mod, mask_mod=mask_mod
    )
    merged = torch.cat([attn[:, i] for i in range(n_heads)], dim=-1)  # (B, T, Hq*d)
    return layer_output_oracle(
        x, merged, wo=wo, bo=bo, residual=residual, post_norm=post_norm, dtype=dtype, **qkv
    )


def layer_output_oracle(
    x: torch.Tensor,
    merged: torch.Tensor,
    *,
    wo: torch.Tensor,
    bo: torch.Tensor | None = None,
    residual: bool = False,
    post_norm: torch.Tensor | None = None,
    dtype: torch.dtype = GOLDEN,
    **qkv,
) -> torch.Tensor:
    """The end of attention_layer_oracle: the heads' outputs ``merged`` (B, T, Hq*d) through Wo (+ bo),
    its post-norm, the residual and a norm after it (``norm_at="post"`` in ``qkv``)."""
    out = merged @ wo.detach().cpu().to(dtype).T
    if bo is not None:
        out = out + bo.detach().cpu().to(dtype)
    eps = qkv.get("eps", 1e-5)
    if post_norm is not None:
        out = rms_norm_oracle(out, post_norm, eps, dtype)
    out = x.detach().cpu().to(dtype) + out if residual else out
    if qkv.get("norm_at", "pre") == "post":
        out = pre_norm_oracle(
            out, qkv.get("norm", "rms"), qkv["norm_weight"], qkv.get("norm_bias"), eps, dtype
        )
    return out


def cross_attention_layer_oracle(
    x: torch.Tensor,
    context: torch.Tensor,
    *,
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    wo: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    bq: torch.Tensor | None = None,
    bk: torch.Tensor | None = None,
    bv: torch.Tensor | None = None,
    bo: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    norm_bias: torch.Tensor | None = None,
    norm: str = "rms",
    eps: float = 1e-5,
    residual: bool = False,
    scale: float | None = None,
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """Wo . attn(q, k, v) (+ bo), plus x with a residual: q from x after the layer's pre-norm, k and v
    from the context (B, Tc, Dc) as it is (an encoder's output comes normalised), every query seeing
    every context token, no positions; head i is features i*d .. (i+1)*d - 1 of each projection."""
    x, context = x.detach().cpu().to(dtype), context.detach().cpu().to(dtype)
    h = pre_norm_oracle(x, norm, norm_weight, norm_bias, eps, dtype)

    def heads(source: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, n: int) -> torch.Tensor:
        y = source @ w.detach().cpu().to(dtype).T
        y = y if bias is None else y + bias.detach().cpu().to(dtype)
        return torch.stack([y[..., i * head_dim : (i + 1) * head_dim] for i in range(n)], dim=1)

    q = heads(h, wq, bq, n_heads)
    k, v = heads(context, wk, bk, n_kv_heads), heads(context, wv, bv, n_kv_heads)
    attn, _ = attention_oracle(q, k, v, causal=False, scale=scale, dtype=dtype)
    merged = torch.cat([attn[:, i] for i in range(n_heads)], dim=-1)
    out = merged @ wo.detach().cpu().to(dtype).T
    out = out if bo is None else out + bo.detach().cpu().to(dtype)
    return x + out if residual else out


def attention_block_oracle(
    x: torch.Tensor,
    *,
    norm_weight: torch.Tensor,
    eps: float,
    w_qkv: torch.Tensor,
    w_out: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    window: int | None,
    sinks: torch.Tensor | None,
    offset: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = GOLDEN,
    score_mod=None,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """x + Wout . attn(RoPE(q), RoPE(k), v) over RMSNorm(x); q|k|v from one fused matrix; ``score_mod``,
    the per-head ``q_norm`` and ``k_norm`` (with ``eps``) and partial rotary (``rotary_dim``) as in
    attention_layer_oracle."""
    return attention_layer_oracle(
        x,
        **split_w_qkv(w_qkv, n_heads, n_kv_heads, head_dim),
        wo=w_out,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        window=window,
        sinks=sinks,
        norm_weight=norm_weight,
        eps=eps,
        residual=True,
        offset=offset,
        base=base,
        dtype=dtype,
        score_mod=score_mod,
        q_norm=q_norm,
        k_norm=k_norm,
        rotary_dim=rotary_dim,
    )
