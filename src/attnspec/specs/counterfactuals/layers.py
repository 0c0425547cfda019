"""The faults of a layer and of its decode, spelled out with the oracle's pieces: RoPE on the values,
on the wrong features or restarted in each chunk, the q/k norm after RoPE or dropped, the heads split
or merged without their transpose, the residual and the norms in the wrong place, a cache that swaps
K and V."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..oracle import (
    GOLDEN,
    attention_oracle,
    layer_output_oracle,
    layer_qkv_oracle,
    pre_norm_oracle,
    qk_norm_oracle,
    rope_oracle,
)
from .cases import ATTENTION_KEYWORDS, AttentionCase, LayerCase, call_fields, layer_call, layer_oracle

Output = torch.Tensor | None  # a counterfactual's output, None where the fault cannot show on the case


def _tiled(case: LayerCase, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v repeated per query head in tile order for a layer that groups its heads so (gqa "tiled"),
    as they are otherwise."""
    n_heads = case.layer["n_heads"]
    if k.shape[1] != n_heads and case.layer.get("gqa", "grouped") == "tiled":
        return k.repeat(1, n_heads // k.shape[1], 1, 1), v.repeat(1, n_heads // k.shape[1], 1, 1)
    return k, v


def _attend(case: LayerCase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, Hq, Tq, d): the layer's attention (its window, sinks, scale, mods and GQA order) of q over
    k and v as the fault made them, the queries the last Tq positions of the keys."""
    return attention_oracle(q, *_tiled(case, k, v), **call_fields(layer_call(case.layer)))[0]


def _output(case: LayerCase, merged: torch.Tensor) -> torch.Tensor:
    """The layer's output from its heads' outputs (B, T, Hq*d): Wo, the norms and the residual."""
    tail = {key: value for key, value in case.layer.items() if key not in ATTENTION_KEYWORDS}
    return layer_output_oracle(case.x, merged, **tail)


def _merged(attn: torch.Tensor) -> torch.Tensor:
    return torch.cat([attn[:, i] for i in range(attn.shape[1])], dim=-1)


def _with_qkv(case: LayerCase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The layer's output from its own q, k and v (B, H, T, d) as the fault made them."""
    return _output(case, _merged(_attend(case, q, k, v)))


def _qkv(case: LayerCase, **change) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    layer = {**case.layer, **change}
    qkv = {key: value for key, value in layer.items() if key not in ATTENTION_KEYWORDS}
    qkv = {key: value for key, value in qkv.items() if key not in ("wo", "bo", "residual", "post_norm")}
    return layer_qkv_oracle(case.x, n_heads=layer["n_heads"], n_kv_heads=layer["n_kv_heads"], **qkv)


def _positions(case: LayerCase) -> list[int]:
    offset = case.layer.get("offset", 0)
    return list(range(offset, offset + case.x.shape[1]))


def _rope(case: LayerCase, t: torch.Tensor) -> torch.Tensor:
    layer = case.layer
    return rope_oracle(
        t,
        _positions(case),
        layer.get("base", 10000.0),
        GOLDEN,
        layer.get("pairs", "half"),
        rotary_dim=layer.get("rotary_dim"),
    )


def lifted(fault: Callable[[AttentionCase], Output]) -> Callable[[LayerCase], Output]:
    """An attention counterfactual as a layer computes it: on the layer's own q, k and v (its projections
    and RoPE), then merged, projected and added as the layer does; one forward pass."""

    def in_a_layer(case: LayerCase) -> Output:
        if case.chunks is not None:
            return None
        q, k, v = _qkv(case)
        out = fault(AttentionCase(q, *_tiled(case, k, v), layer_call(case.layer)))
        return None if out is None else _output(case, _merged(out))

    return in_a_layer


def _rotating(case: LayerCase) -> bool:
    return case.chunks is None and case.layer.get("rope", True)


def rope_on_values(case: LayerCase) -> torch.Tensor | None:
    if not _rotating(case):
        return None
    q, k, v = _qkv(case)
    return _with_qkv(case, q, k, _rope(case, v))


def rotary_whole_head(case: LayerCase) -> torch.Tensor | None:
    if not _rotating(case) or case.layer.get("rotary_dim") in (None, case.layer["head_dim"]):
        return None
    return layer_oracle(case, rotary_dim=None)


def rotary_last_features(case: LayerCase) -> torch.Tensor | None:
    """RoPE on the last r features of each head instead of the first r (the two slices swapped): the
    same as the first r of heads whose features are permuted alike in q and k."""
    layer = case.layer
    rotated, d = layer.get("rotary_dim"), layer["head_dim"]
    if not _rotating(case) or rotated in (None, d):
        return None
    if layer.get("q_norm") is not None or layer.get("k_norm") is not None:
        return None  # a gain per feature would have to follow the permutation too
    order = [*range(d - rotated, d), *range(d - rotated)]
    rows = {}
    for name, heads in (("wq", layer["n_heads"]), ("wk", layer["n_kv_heads"])):
        index = [h * d + i for h in range(heads) for i in order]
        rows[name] = layer[name][index]
        bias = layer.get(f"b{name[1]}")
        if bias is not None:
            rows[f"b{name[1]}"] = bias[index]
    return layer_oracle(case, **rows)


def rotary_slices_mixed(rotate: str, keep: str) -> Callable[[LayerCase], torch.Tensor | None]:
    """Partial rotary that rotates the ``rotate`` slice of each head ("first": x[..., :r], "last":
    x[..., r:]) and passes the ``keep`` slice through after it, where the head has two slices of r."""

    def mixed_slices(case: LayerCase) -> torch.Tensor | None:
        layer = case.layer
        r = layer.get("rotary_dim")
        if not _rotating(case) or r is None or 2 * r != layer["head_dim"]:
            return None
        q, k, v = _qkv(case, rope=False)
        base, pairs = layer.get("base", 10000.0), layer.get("pairs", "half")

        def rotated(t: torch.Tensor) -> torch.Tensor:
            slices = {"first": t[..., :r], "last": t[..., r:]}
            turned = rope_oracle(slices[rotate], _positions(case), base, GOLDEN, pairs)
            return torch.cat([turned, slices[keep]], dim=-1)

        return _with_qkv(case, rotated(q), rotated(k), v)

    return mixed_slices


def qk_norm_after_rope(case: LayerCase) -> torch.Tensor | None:
    layer = case.layer
    if not _rotating(case) or (layer.get("q_norm") is None and layer.get("k_norm") is None):
        return None
    q, k, v = _qkv(case, q_norm=None, k_norm=None)
    eps, kind, over = layer.get("eps", 1e-5), layer.get("qk_norm", "rms"), layer.get("qk_norm_over", "head")
    if layer.get("q_norm") is not None:
        q = qk_norm_oracle(q, layer["q_norm"], layer.get("q_norm_bias"), eps, kind, over)
    if layer.get("k_norm") is not None:
        k = qk_norm_oracle(k, layer["k_norm"], layer.get("k_norm_bias"), eps, kind, over)
    return _with_qkv(case, q, k, v)


def norm_dropped(name: str) -> Callable[[LayerCase], torch.Tensor | None]:
    def dropped(case: LayerCase) -> torch.Tensor | None:
        if case.chunks is not None or case.layer.get(name) is None:
            return None
        return layer_oracle(case, **{name: None, f"{name}_bias": None})

    return dropped


def heads_split_without_transpose(case: LayerCase) -> torch.Tensor | None:
    """q, k and v (B, T, H*d) viewed as (B, H, T, d) without the transpose: each "head" a run of
    tokens' features."""
    layer = case.layer
    if case.chunks is not None or case.x.shape[1] < 2 or layer.get("q_norm") is not None:
        return None
    q, k, v = _qkv(case, rope=False)
    batch, seq = case.x.shape[:2]

    def mixed(t: torch.Tensor) -> torch.Tensor:
        flat = t.transpose(1, 2).reshape(batch, seq, -1)
        return flat.reshape(batch, t.shape[1], seq, t.shape[3])

    q, k, v = mixed(q), mixed(k), mixed(v)
    if layer.get("rope", True):
        q, k = _rope(case, q), _rope(case, k)
    return _with_qkv(case, q, k, v)


def heads_merged_without_transpose(case: LayerCase) -> torch.Tensor | None:
    """The heads' outputs (B, H, T, d) read as (B, T, H*d) without the transpose: each token's
    features a run of one head's rows."""
    if case.chunks is not None or case.x.shape[1] < 2:
        return None
    q, k, v = _qkv(case)
    attn = _attend(case, q, k, v)
    return _output(case, attn.reshape(case.x.shape[0], case.x.shape[1], -1))  # (B, H, T, d) as (B, T, H*d)


def layer_changed(condition: Callable[[dict], bool], **change) -> Callable[[LayerCase], torch.Tensor | None]:
    def counterfactual(case: LayerCase) -> torch.Tensor | None:
        if case.chunks is not None or not condition(case.layer):
            return None
        return layer_oracle(case, **change)

    return counterfactual


def residual_on_the_normed_input(case: LayerCase) -> torch.Tensor | None:
    layer = case.layer
    if case.chunks is not None or not layer.get("residual") or layer.get("norm_weight") is None:
        return None
    if layer.get("norm_at", "pre") != "pre":
        return None
    without = layer_oracle(case, residual=False)
    normed = pre_norm_oracle(
        case.x.detach().cpu().to(GOLDEN),
        layer.get("norm", "rms"),
        layer["norm_weight"],
        layer.get("norm_bias"),
        layer.get("eps", 1e-5),
    )
    return without + normed


def decoded_with_swapped_cache(case: LayerCase, current_too: bool) -> torch.Tensor | None:
    """Decoded in chunks through a cache that stores each position's value as its key and its key as its
    value: every chunk attends its cached positions swapped, and its own (``current_too``: as read back
    from the cache) too."""
    layer = case.layer
    if case.chunks is None or len(case.chunks) < 2 or layer.get("gqa", "grouped") != "grouped":
        return None
    q, k, v = _qkv(case)
    if k.shape[-1] != v.shape[-1]:
        return None
    outputs, start = [], 0
    for size in case.chunks:
        stop = start + size
        keys, values = v[:, :, :stop].clone(), k[:, :, :stop].clone()
        if not current_too:
            keys[:, :, start:stop], values[:, :, start:stop] = k[:, :, start:stop], v[:, :, start:stop]
        outputs.append(_attend(case, q[:, :, start:stop], keys, values))
        start = stop
    return _output(case, _merged(torch.cat(outputs, dim=2)))


def rope_restarted_each_chunk(case: LayerCase) -> torch.Tensor | None:
    """Decoded in chunks, each chunk's q and k rotated from position 0 (the offset not handed to RoPE)."""
    if case.chunks is None or len(case.chunks) < 2 or not case.layer.get("rope", True):
        return None
    positions = [i for size in case.chunks for i in range(size)]
    return layer_oracle(case, positions=positions)
