"""The oracle with each catalogue fault applied: what attention, a layer or a decode computes when its
code has one of the documented faults (src/attnspec/mutation/faults/, one module per fault), so that a
target that misses the oracle can be told which fault it behaves as if it had, and how to fix it.

A ``Counterfactual`` names its fault (``F22``; "" for another legitimate convention, with the name a
target declares it under), says what the code does and what to change, and computes the output with the
fault applied at each level where the fault lives:

- ``attention(case)``: an attention call, q (B, Hq, Tq, d), k, v and its ``Call``;
- ``layer(case)``: a layer over x (B, T, D) with the keywords of attention_layer_oracle, decoded in
  ``chunks`` where the case has them;
- ``rope(case)``: RoPE alone, x (..., T, d) at some positions, its rotary share declared.

Most faults change only what the call asks for (``Call``: no scale, a window one key wider, the triangle
flipped as a mask_mod, the soft-cap applied before the scale as a score_mod...): those are written once
as a change of the Call (``called``) and hold at both levels.  The rest spell the fault out with the
oracle's own pieces.  Either returns None where the fault cannot show on the case (no window to widen).
Nothing here imports the reference implementation.
"""

from __future__ import annotations

from .attention import (
    hidden_logits_zero,
    mask_after_the_softmax,
    mod_after_the_mask,
    softmax_over_queries,
)
from .calls import (
    attention_only,
    band_flipped,
    called,
    documents_leak,
    extra_slopes_first,
    flipped,
    heads_reversed,
    mask_counted_from_one,
    masked,
    mirrored,
    next_power_of_two_slopes,
    power_of_two_slopes,
    scaled_after_the_mod,
    shifted_documents,
    slopes_for,
)
from .cases import AttentionCase, Counterfactual, LayerCase, RopeCase
from .layers import (
    decoded_with_swapped_cache,
    heads_merged_without_transpose,
    heads_split_without_transpose,
    layer_changed,
    lifted,
    norm_dropped,
    qk_norm_after_rope,
    residual_on_the_normed_input,
    rope_on_values,
    rope_restarted_each_chunk,
    rotary_last_features,
    rotary_slices_mixed,
    rotary_whole_head,
)
from .rope import rope_last_features, rope_rotated_slice_last, rope_whole_head

__all__ = [
    "COUNTERFACTUALS",
    "AttentionCase",
    "Counterfactual",
    "LayerCase",
    "RopeCase",
    "at_attention",
    "at_layer",
    "at_rope",
]

LN2 = 0.6931471805599453  # exp2(x) = exp(x * ln 2): the scale of a base-2 softmax given natural-base logits

COUNTERFACTUALS: tuple[Counterfactual, ...] = (
    called(
        "F1",
        "the mask adds 0 where it should add -inf (or is built and never applied): every key is attended",
        "fill the hidden positions with -inf (or finfo.min), and add the mask to the scores",
        lambda call, tq, tk, heads, d: (
            {"causal": False, "window": None, "mask_mod": None, "document_ids": None}
            if (masked(call) or call.document_ids is not None or call.mask_mod is not None)
            else None
        ),
    ),
    called(
        "F19",
        "the causal flag is lost on the way to attention: a causal call attends bidirectionally",
        "hand causal (is_causal) on to the attention call unchanged",
        lambda call, tq, tk, heads, d: {"causal": False} if masked(call) else None,
    ),
    called(
        "F2",
        "the causal triangle is flipped: each query sees the keys after it instead of those before",
        "keep the keys j <= p (tril, not triu; >= p - W + 1 for the band's other side)",
        flipped,
    ),
    called(
        "F2",
        "the window's bound is flipped: each query sees the keys before its window instead of those in it",
        "keep the keys p-W < j <= p (j > p - W)",
        band_flipped,
    ),
    attention_only(
        "F3",
        "the 1/sqrt(d) scale is missing: the logits are q.k unscaled",
        "multiply the scores by 1/sqrt(head_dim) (or the scale the call gives)",
        lambda call, tq, tk, heads, d: {"scale": 1.0} if call.scale is None else None,
    ),
    attention_only(
        "F3",
        "the scale the call gives is ignored: the logits are scaled by 1/sqrt(d)",
        "use the scale argument where one is given",
        lambda call, tq, tk, heads, d: {"scale": None} if call.scale is not None else None,
    ),
    attention_only(
        "F30",
        "exp2 of logits never multiplied by log2(e): every logit scaled by ln 2 (0.693), a softmax in base 2 "
        "of natural-base logits",
        "fold log2(e) into the scale the exp2 takes (qk_scale = sm_scale * 1.4427), the sinks too",
        lambda call, tq, tk, heads, d: {"scale": (d**-0.5 if call.scale is None else call.scale) * LN2},
    ),
    called(
        "F10",
        "the sinks are ignored: no sink column joins the softmax",
        "append each head's sink logit to its row before the softmax (and drop its column after)",
        lambda call, tq, tk, heads, d: {"sinks": None} if call.sinks is not None else None,
    ),
    called(
        "F24",
        "each document starts one token early: its first query sees the previous document's last token, "
        "which no longer sees its own document",
        "cut the documents at cu_seqlens exactly (not one token before)",
        shifted_documents(-1),
    ),
    called(
        "F24",
        "each document starts one token late: its first token is counted in the previous document",
        "cut the documents at cu_seqlens exactly (not one token after)",
        shifted_documents(+1),
    ),
    called(
        "F24",
        "each document also sees the previous document's last token (a boundary off by one)",
        "start each document's keys at its own first token (cu_seqlens[i], not cu_seqlens[i] - 1)",
        documents_leak,
    ),
    Counterfactual(
        "F1",
        "the hidden keys' logits are set to 0, not -inf (masked_fill with 0): they weigh like a zero score",
        "fill the hidden positions with -inf (or finfo.min)",
        hidden_logits_zero,
        layer=lifted(hidden_logits_zero),
    ),
    Counterfactual(
        "F1",
        "the mask is applied to the weights after the softmax: each row is normalised over the keys it may "
        "not see too (a log-sum-exp or a sum taken before the mask)",
        "mask the logits (-inf) before the softmax, or take the normaliser over the visible keys only",
        mask_after_the_softmax,
        layer=lifted(mask_after_the_softmax),
    ),
    Counterfactual(
        "F14",
        "the softmax runs over the queries (dim=-2), not the keys",
        "normalise each query's row: softmax(scores, dim=-1)",
        softmax_over_queries,
        layer=lifted(softmax_over_queries),
    ),
    Counterfactual(
        "F22",
        "the score_mod (soft-cap) is applied after the mask: hidden keys get the logit mod(-inf) (-cap) "
        "and weight",
        "cap the scaled scores first, then mask them",
        mod_after_the_mask,
        layer=lifted(mod_after_the_mask),
    ),
    called(
        "F22",
        "the score_mod (soft-cap or bias) is applied before the 1/sqrt(d) scale",
        "scale q.k first, then apply the cap or add the bias",
        scaled_after_the_mod,
    ),
    called(
        "F23",
        "the bias reads the distance the other way round (p - j for j - p: ALiBi's sign flipped, "
        "relative buckets mirrored): distant keys are rewarded",
        "take the distance as key - query (slope_h * (j - p) for ALiBi)",
        mirrored,
    ),
    called(
        "F23",
        "the bias's heads are in reverse order (head h gets head H-1-h's slope)",
        "give head h the slope 2^(-8 (h+1) / H)",
        heads_reversed,
    ),
    called(
        "F23",
        "ALiBi's slopes come from the power-of-two formula for every head count (2^(-8 (h+1) / H))",
        "for H not a power of two, take the slopes of 2^floor(log2 H) heads, then the odd ones of twice that",
        slopes_for(power_of_two_slopes),
    ),
    called(
        "F23",
        "ALiBi's extra heads' slopes come first (those of 2H' before those of H', for H not a power of two)",
        "give the first H' heads the slopes of H' heads, then the extra ones",
        slopes_for(extra_slopes_first),
    ),
    called(
        "F23",
        "ALiBi's slopes are those of the next power of two of heads (16 for 12)",
        "compute the slopes for the model's own number of heads",
        slopes_for(next_power_of_two_slopes),
    ),
    Counterfactual(
        "F7",
        "RoPE is applied on a layer that has none (a NoPE layer rotates q and k)",
        "skip the rotation on the layers the schedule declares without positions",
        layer=layer_changed(lambda layer: layer.get("rope") is False, rope=True),
    ),
    called(
        "",
        "the mask's positions are counted from 1, not 0 (chunk or block edges one token late)",
        "number the positions from 0 when cutting the chunks (position // size)",
        mask_counted_from_one,
    ),
    Counterfactual(
        "F7", "RoPE is applied to v as well as q and k", "rotate q and k only", layer=rope_on_values
    ),
    Counterfactual(
        "F26",
        "RoPE rotates the whole head, though the layer rotates only its first rotary_dim features",
        "rotate x[..., :rotary_dim] and pass the rest through",
        layer=rotary_whole_head,
        rope=rope_whole_head,
    ),
    Counterfactual(
        "F26",
        "RoPE rotates the last rotary_dim features of each head instead of the first",
        "rotate x[..., :rotary_dim] and pass x[..., rotary_dim:] through",
        layer=rotary_last_features,
        rope=rope_last_features,
    ),
    Counterfactual(
        "F26",
        "partial rotary writes the rotated features after the ones it passes through (cat([x_pass, "
        "rotated])), where they came first",
        "return cat([rotated, x_pass], dim=-1)",
        rope=rope_rotated_slice_last,
    ),
    Counterfactual(
        "F26",
        "partial rotary passes the rotated slice through again (x[..., :r] for x[..., r:]): the head's "
        "last features are lost",
        "pass x[..., rotary_dim:] through after the rotated x[..., :rotary_dim]",
        layer=rotary_slices_mixed("first", "first"),
    ),
    Counterfactual(
        "F26",
        "partial rotary rotates x[..., r:] and passes it through again: the head's first features are lost",
        "rotate x[..., :rotary_dim] and pass x[..., rotary_dim:] through",
        layer=rotary_slices_mixed("last", "last"),
    ),
    Counterfactual(
        "F27",
        "the q/k norm is applied after RoPE instead of before it",
        "normalise q and k per head first, then rotate them",
        layer=qk_norm_after_rope,
    ),
    Counterfactual("F27", "the k norm is not applied", "normalise k as q is", layer=norm_dropped("k_norm")),
    Counterfactual("F27", "the q norm is not applied", "normalise q as k is", layer=norm_dropped("q_norm")),
    Counterfactual(
        "F4",
        "the heads are split without the transpose: (B, T, H*d) viewed as (B, H, T, d)",
        "view as (B, T, H, d), then transpose(1, 2)",
        layer=heads_split_without_transpose,
    ),
    Counterfactual(
        "F4",
        "the heads are merged without the transpose: (B, H, T, d) read as (B, T, H*d)",
        "transpose(1, 2) to (B, T, H, d) before the reshape",
        layer=heads_merged_without_transpose,
    ),
    Counterfactual(
        "F5",
        "the residual is dropped: the layer returns the attention's output alone",
        "return x + attention(norm(x))",
        layer=layer_changed(lambda layer: bool(layer.get("residual")), residual=False),
    ),
    Counterfactual(
        "F5",
        "the residual adds the normalised input, not x",
        "add x itself: x + attention(norm(x))",
        layer=residual_on_the_normed_input,
    ),
    Counterfactual(
        "F6",
        "the norm comes after the residual sum (post-norm) instead of before the attention (pre-norm)",
        "x + attention(norm(x)), not norm(x + attention(x))",
        layer=layer_changed(
            lambda layer: layer.get("norm_weight") is not None and layer.get("norm_at", "pre") == "pre",
            norm_at="post",
        ),
    ),
    Counterfactual(
        "F6",
        "the norm comes before the attention (pre-norm) though the layer's is after the residual sum",
        "norm(x + attention(x)), as the layer reports it",
        layer=layer_changed(lambda layer: layer.get("norm_at") == "post", norm_at="pre"),
    ),
    Counterfactual(
        "F6",
        "the sandwich norm on the attention's output is dropped",
        "RMS-normalise the attention's output before the residual (post_attention_layernorm)",
        layer=layer_changed(lambda layer: layer.get("post_norm") is not None, post_norm=None),
    ),
    Counterfactual(
        "F13",
        "the cache stores K and V swapped: each decoded chunk attends the cached positions' values as "
        "their keys and their keys as values",
        "write k into the key cache and v into the value cache (cache.update(k, v))",
        layer=lambda case: decoded_with_swapped_cache(case, current_too=False),
    ),
    Counterfactual(
        "F13",
        "the cache stores K and V swapped, and every chunk reads its keys and values back from it",
        "write k into the key cache and v into the value cache (cache.update(k, v))",
        layer=lambda case: decoded_with_swapped_cache(case, current_too=True),
    ),
    Counterfactual(
        "F12",
        "decoding restarts RoPE at position 0 in every chunk (the cache's length is not the offset)",
        "rotate each chunk at positions offset .. offset+T-1, offset the tokens already cached",
        layer=rope_restarted_each_chunk,
    ),
)


def at_attention() -> list[Counterfactual]:
    return [c for c in COUNTERFACTUALS if c.attention is not None]


def at_layer() -> list[Counterfactual]:
    return [c for c in COUNTERFACTUALS if c.layer is not None]


def at_rope() -> list[Counterfactual]:
    return [c for c in COUNTERFACTUALS if c.rope is not None]
