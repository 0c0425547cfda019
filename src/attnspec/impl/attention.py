"""Scaled dot-product attention with GQA, per-head sinks and sliding windows.

    Attn(Q, K, V) = softmax(Q K^T * scale + M) V,   scale = 1 / sqrt(d)

q is (B, Hq, Tq, d); k and v are (B, Hkv, Tk, d) and (B, Hkv, Tk, dv).  KV head g serves
query heads g*r .. g*r + r - 1 with r = Hq // Hkv.  A sink is one logit per query head,
appended as an extra softmax column (not scaled, independent of q) and dropped after
the softmax, so it only takes probability mass away from the real keys.  A padding mask
(B, Tk), True for a real token's key, masks the pads' keys too; a query that then sees no key
(a pad before every real token) outputs 0, as a blind query does.

Three variants of the logits and the mask, each off unless asked for:

- ``softcap``: each scaled logit s becomes softcap * tanh(s / softcap) (Gemma 2), before the mask;
- ``alibi_slopes`` (Hq,): ALiBi's bias slope_h * (j - p) is added to the (capped) logit of key j for
  the query at position p, a penalty linear in the distance (BLOOM, MPT);
- ``document_ids`` (B, Tk): packed sequences, the document of each key; the query at position p
  sees only keys of document_ids[p], on top of its mask (a query before the first key: of the first
  key's document).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .masks import additive_mask, attention_mask, check_mask_options
from .options import AttentionOptions


def check_attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: AttentionOptions
) -> None:
    """Raise a ValueError/TypeError naming the argument for every malformed input."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, T, d), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"batch sizes differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (B, Hkv, Tk): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k head_dim differ: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if min(q.shape) < 1 or min(k.shape) < 1 or v.shape[3] < 1:
        raise ValueError(f"empty dimension: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"query heads must be a multiple of KV heads: Hq={n_heads}, Hkv={n_kv_heads}")
    sinks, padding_mask = options.sinks, options.padding_mask
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"sinks must be a torch.Tensor or None, got {type(sinks).__name__}")
        if sinks.shape != (n_heads,):
            raise ValueError(f"sinks must have shape (Hq,) = ({n_heads},), got {tuple(sinks.shape)}")
        if sinks.device != q.device:
            raise ValueError(f"sinks on {sinks.device} but q on {q.device}")
    if padding_mask is not None:
        check_per_key("padding_mask", padding_mask, "a bool", (torch.bool,), q, k)
    check_variants(q, k, options)


def check_per_key(
    name: str, labels: object, kind: str, dtypes: tuple, q: torch.Tensor, k: torch.Tensor
) -> None:
    """Raise unless ``labels`` is a (B, Tk) tensor of one of ``dtypes`` on q's device: one value per key
    (a padding mask, document ids)."""
    if not isinstance(labels, torch.Tensor) or labels.dtype not in dtypes:
        raise TypeError(f"{name} must be {kind} tensor (B, Tk), got {describe(labels)}")
    if labels.shape != (k.shape[0], k.shape[2]):
        raise ValueError(
            f"{name} must have shape (B, Tk) = ({k.shape[0]}, {k.shape[2]}), got {tuple(labels.shape)}"
        )
    if labels.device != q.device:
        raise ValueError(f"{name} on {labels.device} but q on {q.device}")


def check_variants(q: torch.Tensor, k: torch.Tensor, options: AttentionOptions) -> None:
    """Raise a ValueError/TypeError naming the argument for a malformed variant."""
    document_ids, softcap, alibi_slopes = options.document_ids, options.softcap, options.alibi_slopes
    if document_ids is not None:
        check_per_key("document_ids", document_ids, "an int", (torch.int32, torch.int64), q, k)
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, int | float):
            raise TypeError(f"softcap must be a float or None, got {type(softcap).__name__} {softcap!r}")
        if not softcap > 0:
            raise ValueError(f"softcap must be > 0, got softcap={softcap!r}")
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or not alibi_slopes.is_floating_point():
            raise TypeError(f"alibi_slopes must be a float tensor (Hq,), got {describe(alibi_slopes)}")
        if alibi_slopes.shape != (q.shape[1],):
            raise ValueError(
                f"alibi_slopes must have shape (Hq,) = ({q.shape[1]},), got {tuple(alibi_slopes.shape)}"
            )
        if alibi_slopes.device != q.device:
            raise ValueError(f"alibi_slopes on {alibi_slopes.device} but q on {q.device}")


def describe(t: object) -> str:
    """A value as an error message names it: a tensor's shape, dtype and device, else its type."""
    if isinstance(t, torch.Tensor):
        return f"shape {tuple(t.shape)} {t.dtype} on {t.device}"
    return type(t).__name__


def alibi_bias(slopes: torch.Tensor, tq: int, tk: int) -> torch.Tensor:
    """(Hq, Tq, Tk) ALiBi bias slope_h * (j - p) for key j and the query at position p = Tk - Tq + i,
    in the dtype of ``slopes`` and on its device (the distances are whole numbers, exact in it)."""
    query_pos = torch.arange(tk - tq, tk, dtype=slopes.dtype, device=slopes.device)[:, None]
    key_pos = torch.arange(tk, dtype=slopes.dtype, device=slopes.device)[None, :]
    return slopes[:, None, None] * (key_pos - query_pos)


def same_document(document_ids: torch.Tensor, tq: int) -> torch.Tensor:
    """(B, Tq, Tk) bool: query i (at position Tk - Tq + i) and key j lie in one document; a query
    at a position before the first key lies in the first key's document (one document is none)."""
    tk = document_ids.shape[1]
    positions = torch.arange(tk - tq, tk, device=document_ids.device).clamp(min=0)
    queries = document_ids[:, positions]  # (B, Tq): the document at each query's position
    return queries[:, :, None] == document_ids[:, None, :]


# Queries per tile of the tiled path.  Causal attention over more queries than one tile runs
# tile by tile; the properties run with a tile of 3 queries and with tiling off.
QUERY_TILE = 128


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    scale: float | None = None,
    return_weights: bool = False,
    padding_mask: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    softcap: float | None = None,
    alibi_slopes: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention output (B, Hq, Tq, dv); with ``return_weights`` also the (B, Hq, Tq, Tk) weights.

    ``padding_mask`` (B, Tk) bool: True for the key of a real token, False for a pad's (never seen);
    ``document_ids``, ``softcap`` and ``alibi_slopes``: the variants of the module docstring.
    The path follows the size: causal attention over more than QUERY_TILE queries (and no more
    queries than keys) is tiled, everything else takes the explicit formula.  Both compute the
    same values."""
    options = AttentionOptions(
        causal=causal,
        window=window,
        sinks=sinks,
        scale=scale,
        padding_mask=padding_mask,
        document_ids=document_ids,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
    )
    check_attention_inputs(q, k, v, options)
    check_mask_options(causal, window)
    tq, tk = q.shape[2], k.shape[2]
    if causal and not return_weights and QUERY_TILE < tq <= tk:
        return tiled_attention(q, k, v, options)
    out, weights = explicit_attention(q, k, v, options)
    if return_weights:
        return out, weights.to(q.dtype)
    return out


def tiled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: AttentionOptions
) -> torch.Tensor:
    """Causal attention, QUERY_TILE queries at a time, each tile given only the keys it may see:
    its causal prefix, or with a window the band of (tile + W - 1) keys that ends at its last
    query, so a window costs O(T*W) time and memory instead of O(T^2).

    Query i sits at absolute position Tk - Tq + i (bottom-right).  A tile's queries are then the
    bottom-right queries of its key slice too, so each tile is the explicit formula on a slice: the
    slice's documents are its keys', and ALiBi's bias depends on distances only, which the slice keeps."""
    tq, tk = q.shape[2], k.shape[2]
    first = tk - tq  # the absolute position of query 0
    out = q.new_empty(q.shape[0], q.shape[1], tq, v.shape[3])
    # Largest tiles first: the smaller ones after them reuse the memory those freed (tiles of
    # growing size would fault fresh pages in every time, ~15% of the causal time measured).
    for start in reversed(range(0, tq, QUERY_TILE)):
        stop = min(start + QUERY_TILE, tq)
        window = options.window
        lo = 0 if window is None else max(0, first + start - window + 1)  # oldest key in the band
        hi = first + stop  # one past the tile's last query: later keys are the future
        q_tile, k_band, v_band = q[:, :, start:stop], k[:, :, lo:hi], v[:, :, lo:hi]
        tile, _ = explicit_attention(q_tile, k_band, v_band, options.keys(lo, hi))
        out[:, :, start:stop] = tile
    return out


def explicit_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: AttentionOptions
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scale + M) V on checked inputs, written out: the output (B, Hq, Tq, dv) in
    q's dtype and the weights (B, Hq, Tq, Tk) in the dtype they were computed in."""
    batch, n_heads, tq, head_dim = q.shape
    n_kv_heads, tk = k.shape[1], k.shape[2]
    causal, window, sinks, scale = options.causal, options.window, options.sinks, options.scale
    padding_mask, document_ids = options.padding_mask, options.document_ids
    blind = max(0, tq - tk) if causal else 0
    if blind:
        # Bottom-right alignment puts the first Tq - Tk queries before key 0: they see nothing,
        # and their output and weights are 0 (not the NaN of a softmax over nothing).  The rest
        # each see at least the key at their own position.
        out, weights = explicit_attention(q[:, :, blind:], k, v, options)
        return F.pad(out, (0, 0, blind, 0)), F.pad(weights, (0, 0, blind, 0))
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)

    # GQA: KV head g serves query heads g*r .. g*r + r - 1.  Those r heads' queries are stacked
    # as r*Tq rows against the one KV head, so K and V are never copied r times.
    group = n_heads // n_kv_heads
    grouped_q = q.reshape(batch, n_kv_heads, group * tq, head_dim)

    # Half-precision inputs are scored and normalised in float32.
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = torch.matmul(grouped_q.to(compute) * scale, k.to(compute).mT)  # (B, Hkv, r*Tq, Tk)
    scores = scores.view(batch, n_heads, tq, tk)
    if options.softcap is not None:  # on the scaled logit, before the mask
        scores = torch.tanh(scores / options.softcap) * options.softcap
    if options.alibi_slopes is not None:
        scores = scores + alibi_bias(options.alibi_slopes.to(compute), tq, tk)
    # + M, in place (0 keeps a score, -inf masks it), from the first key that some query may not
    # see: before it M is 0.  Causal alone, query 0 sits at Tk - Tq and sees every key up to it.
    windowed = window is not None and window < tk  # a window of Tk keys or more cuts none off
    labelled = padding_mask is not None or document_ids is not None  # a mask of each batch element's own
    seen_by_all = 0 if windowed or labelled else tk - tq + 1 if causal else tk
    if seen_by_all < tk:
        # Only the keys from seen_by_all on get a mask; aligned bottom-right, they and the queries are
        # a (Tq, Tk - seen_by_all) mask of their own (a causal tile: its diagonal block, not its rows).
        allowed = attention_mask(tq, tk - seen_by_all, causal=causal, window=window, device=q.device)
        if padding_mask is not None:
            allowed = allowed & padding_mask[:, None, None, :]  # (B, 1, Tq, Tk): no pad's key is seen
        if document_ids is not None:
            allowed = allowed & same_document(document_ids, tq)[:, None]  # (B, 1, Tq, Tk)
        scores[..., seen_by_all:].add_(additive_mask(allowed))

    if sinks is not None:
        sink_column = sinks.to(compute)[:, None, None].expand(batch, n_heads, tq, 1)
        scores = torch.cat([scores, sink_column], dim=-1)  # (B, Hq, Tq, Tk + 1)
    # Without padding every row sees a key.  In place unless autograd needs the scores: a (Tq, Tk)
    # tensor less to allocate and fill (the causal tiles' largest cost after the two matmuls).
    weights = torch.softmax(scores, dim=-1, out=None if scores.requires_grad else scores)
    if sinks is not None:
        weights = weights[..., :tk]  # drop the sink column
    if padding_mask is not None:
        # A pad before every real token sees no key: its softmax is NaN.  Every masked weight is 0,
        # which sets that row to 0 and leaves the others as they are (exp(-inf) is 0 already).  (A
        # document always holds the key at its query's own position, or all of it without the mask.)
        weights = weights.masked_fill(~allowed, 0.0)

    grouped_weights = weights.reshape(batch, n_kv_heads, group * tq, tk)
    out = torch.matmul(grouped_weights, v.to(compute))  # (B, Hkv, r*Tq, dv)
    return out.view(batch, n_heads, tq, v.shape[-1]).to(q.dtype), weights
