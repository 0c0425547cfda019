"""The parameters of common attention-module layouts, as a Layer reports them (targets.Layer).

A layer target's ``layer(spec)`` builds its module at the spec's sizes, randomizes it, and returns
``Layer(forward, **parameters)``; these read the parameters from the modules people write:

- ``projections(q, k, v, o)``: four separate projections (a course learner's q/k/v/out, Llama's
  q_proj/k_proj/v_proj/o_proj);
- ``fused_projections(qkv, o, spec)``: one projection whose outputs are q | k | v (nanoGPT's and
  minGPT's ``c_attn``/``c_proj``);
- ``per_head_fused_projections(qkv, o, n_heads)``: one projection whose outputs hold, head by head, that
  head's q, k and v (GPT-NeoX's and BLOOM's ``query_key_value``, viewed as (..., H, 3 * d));
- ``multihead_attention(mha)``: torch's ``nn.MultiheadAttention`` (``in_proj_weight``, ``out_proj``; with
  ``kdim``/``vdim``, a cross-attention layer's ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``);
- ``pre_norm(norm)``: a LayerNorm or RMSNorm before the attention (``Layer(residual=True)`` for
  ``x + attn(norm(x))``).

A projection is an ``nn.Linear`` or anything with ``weight`` (out, in) and ``bias``; ``in_out=True``
reads a weight stored (in, out), as GPT-2's ``Conv1D`` stores it.  The matrices are the module's own
tensors (not copies): the oracle reads what the forward pass uses.
"""

from __future__ import annotations

import torch

from attnspec.protocol.targets import LayerSpec


def _weight_and_bias(projection, in_out: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = projection.weight
    return (weight.T if in_out else weight), getattr(projection, "bias", None)


def projections(q, k, v, o, *, in_out: bool = False) -> dict:
    """wq, wk, wv, wo and their biases (None where a projection has none) of four projections."""
    found = {}
    for name, projection in zip("qkvo", (q, k, v, o), strict=True):
        found[f"w{name}"], found[f"b{name}"] = _weight_and_bias(projection, in_out)
    return found


def split_fused(
    weight: torch.Tensor, bias: torch.Tensor | None, spec: LayerSpec
) -> dict[str, torch.Tensor | None]:
    """wq, wk, wv and bq, bk, bv of one (out, in) matrix whose output features are q | k | v
    (Hq*d, then Hkv*d twice)."""
    nq, nkv = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    if weight.shape[0] != nq + 2 * nkv:
        if weight.shape[0] == 3 * weight.shape[1]:  # q, k and v each as wide as the input
            why = "its heads are d_model / n_heads wide: declare tied_width = True on the target"
        else:
            why = "is its weight stored (in, out)? (in_out=True)"
        raise ValueError(
            f"a fused q|k|v projection of {weight.shape[0]} outputs, but the spec's heads need "
            f"{nq} + 2 * {nkv}: {why}"
        )
    cuts = (slice(0, nq), slice(nq, nq + nkv), slice(nq + nkv, nq + 2 * nkv))
    found: dict[str, torch.Tensor | None] = {}
    for name, cut in zip("qkv", cuts, strict=True):
        found[f"w{name}"], found[f"b{name}"] = weight[cut], None if bias is None else bias[cut]
    return found


def fused_projections(qkv, o, spec: LayerSpec, *, in_out: bool = False) -> dict:
    """The parameters of a fused q | k | v projection ``qkv`` and the output projection ``o``."""
    found = split_fused(*_weight_and_bias(qkv, in_out), spec)
    found["wo"], found["bo"] = _weight_and_bias(o, in_out)
    return found


def split_per_head(t: torch.Tensor | None, n_heads: int) -> list[torch.Tensor | None]:
    """The q, k and v rows of a fused weight (out, in) or bias (out,) whose rows hold, head by head,
    that head's q, k and v, d rows each (three Nones for no bias)."""
    if t is None:
        return [None] * 3
    if t.shape[0] % (3 * n_heads):
        raise ValueError(
            f"a per-head fused q|k|v projection of {t.shape[0]} outputs, not 3 x {n_heads} heads"
        )
    per_head = t.reshape(n_heads, 3, -1, *t.shape[1:])
    return [per_head[:, i].reshape(-1, *t.shape[1:]) for i in range(3)]


def per_head_fused_projections(qkv, o, n_heads: int, *, in_out: bool = False) -> dict:
    """The parameters of a projection ``qkv`` whose outputs hold, head by head, q, k and v (GPT-NeoX,
    BLOOM: ``view(B, T, H, 3 * d)`` then a split of the last axis), and the output projection ``o``."""
    weight, bias = _weight_and_bias(qkv, in_out)
    found: dict[str, torch.Tensor | None] = {}
    for name, w, b in zip("qkv", split_per_head(weight, n_heads), split_per_head(bias, n_heads), strict=True):
        found[f"w{name}"], found[f"b{name}"] = w, b
    found["wo"], found["bo"] = _weight_and_bias(o, in_out)
    return found


def multihead_attention(mha: torch.nn.MultiheadAttention) -> dict:
    """The parameters of torch's nn.MultiheadAttention: its in_proj_weight (q | k | v), or with kdim or
    vdim != embed_dim (cross-attention: a layer of the "cross" capability) its q_proj_weight,
    k_proj_weight and v_proj_weight; in_proj_bias (q | k | v) and out_proj."""
    if mha.in_proj_weight is None:  # keys and values projected from a context of another width
        embed = mha.embed_dim
        bias = mha.in_proj_bias
        biases = [None] * 3 if bias is None else [bias[i * embed : (i + 1) * embed] for i in range(3)]
        weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
        found = {f"w{name}": w for name, w in zip("qkv", weights, strict=True)}
        found |= {f"b{name}": b for name, b in zip("qkv", biases, strict=True)}
        found["wo"], found["bo"] = mha.out_proj.weight, mha.out_proj.bias
        return found
    if mha.bias_k is not None:
        raise ValueError(
            "nn.MultiheadAttention(add_bias_kv=True) attends to an extra learned key: no Layer has one"
        )
    spec = LayerSpec(mha.embed_dim, mha.num_heads, mha.num_heads, mha.head_dim)
    found = split_fused(mha.in_proj_weight, mha.in_proj_bias, spec)
    found["wo"], found["bo"] = mha.out_proj.weight, mha.out_proj.bias
    return found


def pre_norm(norm, kind: str | None = None) -> dict:
    """norm_weight, norm_bias, norm and eps of a pre-norm: an nn.LayerNorm, an nn.RMSNorm, or a norm
    of your own with ``weight`` and ``eps`` (or ``variance_epsilon``), of ``kind`` "rms" or "layer"."""
    if kind is None:
        if isinstance(norm, torch.nn.LayerNorm):
            kind = "layer"
        elif isinstance(norm, torch.nn.RMSNorm):
            kind = "rms"
        else:
            raise TypeError(
                f"say which norm a {type(norm).__name__} is: pre_norm(norm, kind='rms' or 'layer')"
            )
    weight = getattr(norm, "weight", None)
    if weight is None:
        raise ValueError(f"the {type(norm).__name__} has no weight (elementwise_affine=False): report ones")
    eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", None))
    if eps is None:  # nn.RMSNorm(eps=None) uses the machine epsilon of the input's dtype
        eps = torch.finfo(weight.dtype).eps
    return {"norm_weight": weight, "norm_bias": getattr(norm, "bias", None), "norm": kind, "eps": float(eps)}
