"""Reference values the properties compare against: the spec oracle under the target's declaration
(its score_mod and mask_mod, in the kit's head order, and the call's documents), the spec oracle
applied to impl's modules (every size and switch read from the config, only the learned parameters
from the module), float64 dot products and sink probabilities, and the exact dependency structure
of a function."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnspec.kit.loading import current
from attnspec.protocol.declared import kit_mods
from attnspec.protocol.targets import Layer, LayerKind, LayerRun, LayerSpec, Target
from attnspec.specs.mods import alibi, alibi_slopes, composed, mask_values, reach, score_values, soft_cap
from attnspec.specs.oracle import (
    Call,
    attention_block_oracle,
    attention_grad_oracle,
    attention_oracle,
    attention_oracle_by_rows,
    ffn_oracle,
    rms_norm_oracle,
    visible_for,
)
from attnspec.specs.tolerance import attention_conditioning, gradient_conditioning

# --- the oracle under the target's declaration ------------------------------------------------------
#
# Every property that compares a target with the oracle, or reads which keys a query may see, goes
# through these: the keywords of the call (causal, window, sinks, scale, document_ids) plus the
# target's declared mods.  A property never builds the mask itself.


def declared_keywords(q: torch.Tensor, k: torch.Tensor, **call) -> dict:
    """The oracle's keywords for a call of the target on q (B, Hq, ...) and k (B, Hkv, ...): the call's
    own (the return_weights switch aside) and the target's score_mod and mask_mod in the kit's heads,
    unless the call names its own (impl's variants: test_variants.py)."""
    score_mod, mask_mod = kit_mods(current(), q.shape[1], k.shape[1])
    keywords = {name: value for name, value in call.items() if name != "return_weights"}
    return {"score_mod": score_mod, "mask_mod": mask_mod, **keywords}


def declared_layer_keywords(target: Target, layer: Layer, spec: LayerSpec, offset: int = 0) -> dict:
    """attention_layer_oracle's keywords for ``layer``, built from ``spec`` at ``offset``: the sizes,
    window and RoPE base from the spec, the target's declared mods (the kind's own mask and RoPE for a
    layer of a declared kind), the rest as the layer reports it."""
    score_mod, mask_mod = kit_mods(target, spec.n_heads, spec.n_kv_heads, layer.score_mod)
    reported = layer.reported()
    if spec.kind is not None:  # the kind's own mask (a chunk at the layer's positions), RoPE or none
        if spec.kind.mask not in ("causal", "window"):
            mask_mod = spec.kind.mask_mod(offset)
        if spec.kind.rope is not None:  # declared: a layer that reports otherwise misses the oracle
            reported["rope"] = spec.kind.rope
    return {
        "score_mod": score_mod,
        "mask_mod": mask_mod,
        **reported,
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "window": spec.window,
        "base": spec.base,
        "offset": offset,
    }


# what a cross-attention layer reports that its oracle takes
CROSS_REPORTED = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "norm_weight", "norm_bias", "norm", "eps")


def cross_keywords(layer: Layer, spec: LayerSpec) -> dict:
    """cross_attention_layer_oracle's keywords for a cross-attention ``layer`` built from ``spec``."""
    reported = {name: getattr(layer, name) for name in CROSS_REPORTED}
    sizes = {"n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads, "head_dim": spec.head_dim}
    return {**reported, **sizes, "residual": layer.residual, "scale": layer.scale}


def reached(kinds, seq: int) -> torch.Tensor:
    """(T, T) bool: which inputs each output depends on through layers of these kinds (specs.mods.reach of
    their masks)."""
    return reach([mask_values(kind.mask_mod(), 1, 1, seq, seq)[0, 0] for kind in kinds])


def declared_kinds(target: Target, count: int) -> tuple[LayerKind, ...]:
    """Each layer's kind: the schedule's, else causal layers (or an encoder's bidirectional ones), their
    positions as each layer reports them."""
    if target.schedule:
        return target.schedule
    mask = "causal" if target.mask_mod is None else "bidirectional"
    return (LayerKind(mask, rope=None),) * count


def run_keywords(target: Target, run: LayerRun, kind: LayerKind) -> dict:
    """attention_layer_oracle's keywords for one of the module's own layers as ``kind``: its reported
    parameters, the kind's mask, RoPE as the kind declares (else as the layer reports) at the kind's base
    (else the layer's), the target's declared score_mod (or the layer's own)."""
    run.layer.check_reports(LayerSpec(run.input.shape[-1], run.n_heads, run.n_kv_heads, run.head_dim))
    score_mod, mask_mod = kit_mods(target, run.n_heads, run.n_kv_heads, run.layer.score_mod)
    reported = run.layer.reported()
    if kind.rope is not None:
        reported["rope"] = kind.rope
    return {
        "score_mod": score_mod,
        "mask_mod": mask_mod if kind.mask in ("causal", "window") else kind.mask_mod(),
        **reported,
        "n_heads": run.n_heads,
        "n_kv_heads": run.n_kv_heads,
        "head_dim": run.head_dim,
        "window": kind.window,
        "base": run.base if kind.base is None else kind.base,
        "offset": 0,
    }


def declared_attention(q, k, v, **call) -> tuple[torch.Tensor, torch.Tensor]:
    """specs.oracle.attention_oracle under the declaration: (output, weights)."""
    return attention_oracle(q, k, v, **declared_keywords(q, k, **call))


def declared_attention_by_rows(q, k, v, **call) -> torch.Tensor:
    """specs.oracle.attention_oracle_by_rows under the declaration: the output, for long sequences."""
    return attention_oracle_by_rows(q, k, v, **declared_keywords(q, k, **call))


def declared_gradients(q, k, v, d_out, **call) -> tuple:
    """specs.oracle.attention_grad_oracle under the declaration: (dq, dk, dv, dsinks)."""
    return attention_grad_oracle(q, k, v, d_out, **declared_keywords(q, k, **call))


def declared_conditioning(q, k, v, dtype: torch.dtype, **call) -> tuple[torch.Tensor, torch.Tensor, float]:
    """specs.tolerance.attention_conditioning under the declaration."""
    keywords = declared_keywords(q, k, **call)
    keywords.pop("padding_mask", None)
    return attention_conditioning(q, k, v, dtype=dtype, **keywords)


def declared_gradient_conditioning(q, k, v, d_out, dtype: torch.dtype, **call) -> tuple:
    """specs.tolerance.gradient_conditioning under the declaration: (dQ, dK, dV) terms."""
    keywords = declared_keywords(q, k, **call)
    keywords.pop("padding_mask", None)
    return gradient_conditioning(q, k, v, d_out, dtype=dtype, **keywords)


def declared_mask(q: torch.Tensor, k: torch.Tensor, causal: bool = True, window=None, document_ids=None, **_):
    """(B, Hq, Tq, Tk) bool on the CPU: where each query of a call on q and k may see each key under the
    declaration (its mask_mod, or the causal mask and window of the call; its documents).  Keywords the
    mask does not read (sinks, scale) are accepted, so a call's keywords can be passed as they are."""
    _, mask_mod = kit_mods(current(), q.shape[1], k.shape[1])
    return visible_for(q, k, Call(causal=causal, window=window, mask_mod=mask_mod, document_ids=document_ids))


def seen_keys(q: torch.Tensor, k: torch.Tensor, **call) -> torch.Tensor:
    """(B, Hq, Tq, Tk) bool on the CPU: the keys each query's softmax gives weight to under the
    declaration: the declared mask's, less any a score_mod sets to -inf."""
    scores = declared_scores(q, k, call.get("scale"))
    return declared_mask(q, k, **call) & (scores > -math.inf)


def declared_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """(B, Hq, Tq, Tk) float64 on the CPU: the logits the declaration softmaxes, score_mod(q.k * scale)
    (queries bottom-right), before any mask."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (dot_products(q, k) * scale).cpu()
    score_mod, _ = kit_mods(current(), q.shape[1], k.shape[1])
    return scores if score_mod is None else score_values(score_mod, scores)


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Boolean (T_out, T_in): entry (i, j) is True iff output token i has a non-zero
    derivative with respect to input token j (x is (1, T, D), computed in float64)."""
    x = x.detach().double().requires_grad_(True)
    jac = torch.autograd.functional.jacobian(fn, x)  # (1, T, D, 1, T, D)
    return jac.abs().sum(dim=(0, 2, 3, 5)) != 0


def dot_products(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Unscaled q.k in float64, (B, Hq, Tq, Tk): query head h reads KV head h // (Hq/Hkv)."""
    group = q.shape[1] // k.shape[1]
    kv_head = torch.arange(q.shape[1], device=k.device) // group
    return q.double() @ k.double()[:, kv_head].transpose(-2, -1)


def sink_probability(q, k, sinks, allowed, scale=None) -> torch.Tensor:
    """p_sink = e^s / (e^s + sum over visible j of e^score_j), (B, Hq, Tq) in float64 on the CPU, the
    scores under the declaration (declared_scores) and ``allowed`` (Tq, Tk) or (B, Hq, Tq, Tk); zero
    everywhere when there are no sinks."""
    scores = declared_scores(q, k, scale)
    if sinks is None:
        return torch.zeros(scores.shape[:-1], dtype=torch.float64)
    scores = scores.masked_fill(~allowed.cpu(), -math.inf)
    sink = sinks.detach().double().cpu().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.exp(sink[..., 0] - torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1))


def scheduled_window(cfg, layer_idx: int) -> int | None:
    """MASK-4: the window on even layers (or on all layers), full attention elsewhere."""
    return cfg.window if cfg.window_layers == "all" or layer_idx % 2 == 0 else None


def config_score_mod(cfg):
    """The score_mod of an impl config's attention (specs/mods.py's reference mods): its soft-cap, then
    ALiBi with the slopes of its number of heads; None for plain logits."""
    capped = None if cfg.softcap is None else soft_cap(cfg.softcap)
    biased = alibi(alibi_slopes(cfg.n_heads)) if cfg.alibi else None
    return composed(capped, biased)


def block_variants(block, cfg) -> dict:
    """The oracle's q_norm, k_norm and rotary_dim for an AttentionBlock: the gains of its per-head norms
    where the config asks for qk_norm (an error where the block has none), the config's rotary_dim."""
    if not cfg.qk_norm:
        return {"rotary_dim": cfg.rotary_dim}
    q_norm, k_norm = getattr(block, "q_norm", None), getattr(block, "k_norm", None)
    if not (hasattr(q_norm, "weight") and hasattr(k_norm, "weight")):
        raise AssertionError("the config asks for qk_norm, but the block has no q_norm and k_norm gains")
    return {"q_norm": q_norm.weight, "k_norm": k_norm.weight, "rotary_dim": cfg.rotary_dim}


def block_oracle(
    block, cfg, layer_idx: int, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """specs.oracle.attention_block_oracle for an AttentionBlock built from ``cfg`` as layer
    ``layer_idx``.  Every size and switch (eps, RoPE base, window, soft-cap, ALiBi) comes from the
    config and the schedule, only the learned parameters from the module: a module that ignored a
    config field would otherwise agree with itself.  With the config's qk_norm, the gains of the
    block's per-head norms; its rotary_dim from the config."""
    return attention_block_oracle(
        x,
        norm_weight=block.norm.weight,
        eps=cfg.norm_eps,
        w_qkv=block.qkv.weight,
        w_out=block.out.weight,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        window=scheduled_window(cfg, layer_idx),
        sinks=block.sinks,
        offset=offset,
        base=cfg.rope_base,
        dtype=dtype,
        score_mod=config_score_mod(cfg),
        **block_variants(block, cfg),
    )


# The oracles read every size and switch from the CONFIG (and the layer index), and only the
# learned parameters from the module: a module that ignored a config field (norm eps, RoPE base,
# FFN width or activation, the window schedule) would otherwise agree with itself.


def ffn_width(cfg) -> int:
    """FFN-1: the config's ffn_hidden, else 4D (ReLU/GELU) or 8D/3 rounded up to a multiple of 8."""
    if cfg.ffn_hidden is not None:
        return cfg.ffn_hidden
    if cfg.activation == "swiglu":
        at_least = -(-8 * cfg.d_model // 3)  # ceil(8D/3) in integers
        return -(-at_least // 8) * 8
    return 4 * cfg.d_model


def mlp_oracle(mlp, cfg, x: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """x + FFN(RMSNorm(x)) from the oracle's norm and FFN: the config's eps, activation and
    width, the block's own weights."""
    ffn = mlp.ffn
    width = ffn_width(cfg)
    assert ffn.w1.weight.shape == (width, cfg.d_model), (
        f"MLPBlock W1 is {tuple(ffn.w1.weight.shape)}, config asks for ({width}, {cfg.d_model})"
    )
    w3 = ffn.w3.weight if cfg.activation == "swiglu" else None
    normed = rms_norm_oracle(x, mlp.norm.weight, cfg.norm_eps, dtype=dtype)
    branch = ffn_oracle(normed, ffn.w1.weight, ffn.w2.weight, w3, cfg.activation, dtype)
    return x.detach().cpu().to(dtype) + branch


def stack_oracle(
    stack, cfg, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A TransformerStack from the oracle: per layer, the attention block (that layer's window from
    the schedule) and then the MLP block, with the stack's learned parameters."""
    for layer_idx, block in enumerate(stack.blocks):
        x = mlp_oracle(block.mlp, cfg, block_oracle(block.attn, cfg, layer_idx, x, offset, dtype), dtype)
    return x


def float_mask_attention(q, k, v, mask: torch.Tensor, *, sinks=None, scale=None):
    """SDPA with an additive float ``mask`` (Tq, Tk) or (B, Hq, Tq, Tk), -inf where a key is hidden, and
    ``sinks`` as one extra all-zero key and value whose mask column holds the sink logit."""
    batch, n_heads, tq, tk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    gqa = n_heads != k.shape[1]
    mask = mask.to(device=q.device, dtype=q.dtype).expand(batch, n_heads, tq, tk)
    if sinks is not None:
        sink_column = sinks.to(device=q.device, dtype=q.dtype).view(1, n_heads, 1, 1)
        mask = torch.cat([mask, sink_column.expand(batch, n_heads, tq, 1)], dim=-1)
        k = torch.cat([k, k.new_zeros(*k.shape[:2], 1, k.shape[3])], dim=2)
        v = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[3])], dim=2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
