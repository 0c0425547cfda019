"""A correct attention over packed sequences in the style of FlashAttention's varlen interface.

The batch is unpadded into one stream of tokens, (total, H, d), and the documents in it are described by
``cu_seqlens``, the cumulative lengths a packing collator returns: sequence i is tokens
``cu_seqlens[i]:cu_seqlens[i + 1]``.  ``document_starts`` finds where each document of a row begins (the
token after an id changes), and the lengths of every row's documents, row after row, become
``cu_seqlens``; ``varlen_attention`` loops over the sequences and attends each slice on its own, causally,
bottom-right aligned within the sequence as FlashAttention 2.1+ is (a decode step's queries are the last
tokens of their document).  GQA by indexing the KV head h // (Hq / Hkv), an explicit ``softmax_scale``,
``causal=False``, a value head size of its own, fp16/bf16 computed in float32 and rounded once, float64,
autograd through the slices.

It declares "documents": the kit hands it ``document_ids`` on every call.  The boundaries come from the data
(``nonzero``, then Python ints, as a varlen launcher reads them), so it cannot run on the meta device.

Broken twin, ``off_by_one``: the collator finds where the id changes and forgets the ``+ 1``: every
document's slice starts one token early, on the last token of the previous document, which its queries
then see (and the previous document loses that token).

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def document_starts(ids: torch.Tensor) -> torch.Tensor:
    """One row of document ids (T,) -> the index of each document's first token."""
    changes = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1  # the token after the last of a document
    return torch.cat([changes.new_zeros(1), changes])


def document_starts_off_by_one(ids: torch.Tensor) -> torch.Tensor:
    changes = torch.nonzero(ids[1:] != ids[:-1]).flatten()
    return torch.cat([changes.new_zeros(1), changes])


def cumulative(lengths: list[torch.Tensor]) -> torch.Tensor:
    return F.pad(torch.cat(lengths).cumsum(0), (1, 0)).to(torch.int32)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None, causal=False):
    """q (total_q, Hq, d), k (total_k, Hkv, d), v (total_k, Hkv, dv), packed: sequence i is
    q[cu_seqlens_q[i]:cu_seqlens_q[i+1]] against k and v[cu_seqlens_k[i]:cu_seqlens_k[i+1]]."""
    n_heads, head_dim = q.shape[1], q.shape[2]
    group = n_heads // k.shape[1]
    kv_head = torch.arange(n_heads, device=q.device) // group
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outputs = []
    for i in range(len(starts_q) - 1):
        q_lo, q_hi, k_lo, k_hi = starts_q[i], starts_q[i + 1], starts_k[i], starts_k[i + 1]
        if q_hi == q_lo:
            continue
        qs = q[q_lo:q_hi].transpose(0, 1).to(work)  # (Hq, Lq, d)
        ks = k[k_lo:k_hi, kv_head].transpose(0, 1).to(work)  # (Hq, Lk, d)
        vs = v[k_lo:k_hi, kv_head].transpose(0, 1).to(work)
        scores = qs @ ks.transpose(1, 2) * scale
        if causal:  # bottom-right: the last query of the sequence sees its last key
            len_q, len_k = q_hi - q_lo, k_hi - k_lo
            future = torch.ones(len_q, len_k, dtype=torch.bool, device=q.device).triu(len_k - len_q + 1)
            scores = scores.masked_fill(future, -math.inf)
        outputs.append((torch.softmax(scores, dim=-1) @ vs).transpose(0, 1).to(q.dtype))
    return torch.cat(outputs)


def _packed(q, k, v, causal, scale, document_ids, starts_of):
    """(B, H, T, d) in and out; the collator's cu_seqlens in between."""
    batch, n_heads, tq, _ = q.shape
    tk = k.shape[2]
    lengths_q, lengths_k = [], []
    for ids in document_ids:
        starts = starts_of(ids)
        ends = torch.cat([starts[1:], starts.new_tensor([tk])])
        lengths_k.append(ends - starts)
        lengths_q.append((ends - starts.clamp(min=tk - tq)).clamp(min=0))  # queries: the last Tq tokens
    out = varlen_attention(
        q.transpose(1, 2).reshape(batch * tq, n_heads, -1),
        k.transpose(1, 2).reshape(batch * tk, k.shape[1], -1),
        v.transpose(1, 2).reshape(batch * tk, v.shape[1], -1),
        cumulative(lengths_q),
        cumulative(lengths_k),
        softmax_scale=scale,
        causal=causal,
    )
    return out.reshape(batch, tq, n_heads, -1).transpose(1, 2)


def attention(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv), document_ids (B, Tk) -> (B, Hq, Tq, dv)."""
    return _packed(q, k, v, causal, scale, document_ids, document_starts)


def off_by_one(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """The same kernel behind a collator that starts each document on the previous one's last token."""
    return _packed(q, k, v, causal, scale, document_ids, document_starts_off_by_one)


for _target in (attention, off_by_one):
    _target.capabilities = {
        "documents", "non_causal", "gqa", "decode", "value_dim", "scale", "float64", "float16", "grad"
    }
