"""What a target declares about a layer, and what a layer hands the kit: the masks and positions a layer
of a module may have (LayerKind, a schedule of them), the spec a layer is built from (LayerSpec), the
built layer with the parameters the oracle reads (Layer), a module's own layer caught in a run
(LayerRun), and the errors that say a layer cannot be built or declared (CannotBuild, Refused,
Undeclarable).  targets.py re-exports them: a target's ``layer(spec)`` returns a Layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnspec.specs import mods


class CannotBuild(ValueError):
    """Raised by a target's ``layer(spec)`` for a spec it cannot be built with (a head count, a KV head
    count or a context width its model does not take): the kit draws another spec, and checks the
    layer on the sizes it can take.  Sizes it never takes are better declared (Target: heads, kv_heads,
    head_dims, tied_width, tied_context), so that the kit does not draw them at all."""


class Refused(Exception):
    """The target raised building a layer for a spec within its declarations (not CannotBuild): the
    property is refused, saying what it raised and what to declare (reproducers.refusal's counterpart
    for layers)."""


class Undeclarable(ValueError):
    """What a target declares or a layer reports is something the kit cannot check (a q/k norm gain of
    a shape no form takes, say): the property is refused, saying what it could not take, and the target
    is not blamed for it."""


# The masks a layer of a module may have (LayerKind.mask), with what its size means.
KINDS = {
    "causal": "a query sees its own position and every earlier one",
    "window": "a causal sliding window of size W: q - W < kv <= q",
    "chunk": "chunked attention: the positions cut into blocks of size C from 0, causal within a block",
    "bidirectional": "every query sees every key (an encoder's layer)",
    "local": "a bidirectional local window of radius R: |q - kv| <= R",
}
SIZED = ("window", "chunk", "local")


@dataclass(frozen=True)
class LayerKind:
    """What one layer of a module attends to and with which positions: its ``mask`` (KINDS; ``size``
    is W, C or R for the sized ones), RoPE (``rope=True``, declared: the layer must rotate q and k) or
    none (``rope=False``: a NoPE layer, Llama 4's and SmolLM3's every fourth, Cohere 2's global ones),
    and the RoPE ``base`` of that kind where kinds differ (Gemma 3's local layers 10000, its global ones
    1e6).  A module declares one per layer, in order:
    ``OBJ.schedule = (LayerKind("window", 4), LayerKind("causal"), ...)``; ``OBJ.windows`` is the
    short form for causal and windowed layers, whose kinds say nothing of positions (``rope=None``: as
    the layer reports, for a model with absolute positions as much as for one with RoPE)."""

    mask: str = "causal"
    size: int | None = None
    rope: bool | None = True
    base: float | None = None

    def __post_init__(self) -> None:
        if self.mask not in KINDS:
            raise ValueError(f"LayerKind(mask={self.mask!r}): one of {sorted(KINDS)}")
        sized = isinstance(self.size, int) and not isinstance(self.size, bool) and self.size >= 1
        if (self.mask in SIZED) != sized:
            needs = "a positive size" if self.mask in SIZED else "no size"
            raise ValueError(f"LayerKind({self.mask!r}, size={self.size!r}): a {self.mask} layer has {needs}")

    @property
    def causal(self) -> bool:
        return self.mask in ("causal", "window", "chunk")

    @property
    def window(self) -> int | None:
        """W of a windowed layer (the LayerSpec window of such a layer), else None."""
        return self.size if self.mask == "window" else None

    def mask_mod(self, offset: int = 0) -> Callable:
        """The mask as a FlexAttention mask_mod (specs/mods.py), its positions counted from ``offset``."""
        kinds = {
            "causal": lambda: mods.causal,
            "window": lambda: mods.sliding_window(self.size),
            "chunk": lambda: mods.chunked(self.size),
            "bidirectional": lambda: mods.bidirectional,
            "local": lambda: mods.local(self.size),
        }
        return mods.shifted(kinds[self.mask](), offset)

    def __str__(self) -> str:
        words = self.mask if self.size is None else f"{self.mask} {self.size}"
        if self.rope is False:
            words += ", no RoPE"
        elif self.base is not None:
            words += f", RoPE base {self.base:g}"
        return words


def schedule_of_windows(windows: tuple[int | None, ...]) -> tuple[LayerKind, ...]:
    """The schedule that ``OBJ.windows`` (W or None per layer) is the short form of: positions as each
    layer reports them."""
    return tuple(LayerKind("causal" if w is None else "window", w, rope=None) for w in windows)


@dataclass(frozen=True)
class LayerSpec:
    """The attention layer a layer property asks for: window=None is full causal attention,
    sinks=False a layer without sinks (or with sinks of -inf), base the RoPE base; for a
    cross-attention layer ("cross"), context_dim the width of the context its keys and values are
    projected from (None: d_model).  The layer's parameters are drawn by randomize_(module, spec), from
    ``seed`` at the spread ``std``.  A module's white box is asked for each ``kind`` of layer its schedule
    declares (LayerKind: chunked attention, a layer without RoPE, a local bidirectional window)."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    window: int | None = None
    sinks: bool = False
    base: float = 10000.0
    seed: int = 0
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"
    context_dim: int | None = None
    # the spread of the parameters randomize_(module, spec) draws (matrices wider than 16 inputs scaled
    # down by their fan-in): 0.5, or larger where a property needs logits large enough to bend a soft-cap
    std: float = 0.5
    # for the white box of a module that declares a schedule: the kind of its layers to build (its mask,
    # RoPE or none, its base; ``window`` is the kind's W for a windowed kind, and ``base`` its base)
    kind: LayerKind | None = None


@dataclass(frozen=True)
class Layer:
    """A layer a target built: ``forward(x, offset)`` and its parameters in nn.Linear layout (out, in).

    out = Wo . attn(RoPE(x' Wq^T + bq), RoPE(x' Wk^T + bk), x' Wv^T + bv) + bo, plus x when
    ``residual``; x' is x after the layer's pre-norm when it has one (``norm_weight`` given):
    RMSNorm (``norm="rms"``) or LayerNorm (``norm="layer"``, with ``norm_bias``), with ``eps``.
    RoPE uses half-split pairs at positions offset.. (CONVENTIONS.md), after each head's q/k norm
    when it has one (``q_norm``, ``k_norm``), over the first ``rotary_dim`` features of each head when
    it rotates only those; a layer with ``rope=False`` rotates nothing (it has no positions, or absolute
    ones are added to x before it).  ``scale`` replaces 1/sqrt(d); ``post_norm`` is a sandwich norm
    on the attention's output before the residual; ``norm_at="post"`` puts the norm after the residual
    (the layer is then norm(x + out)).  Head i of
    each projection is features i*d .. (i+1)*d - 1, and ``sinks`` are the per-head sink logits.
    src/attnspec/protocol/layouts.py builds one from the common module layouts (a fused qkv projection,
    torch's nn.MultiheadAttention)."""

    forward: Callable[[torch.Tensor, int], torch.Tensor]
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    bq: torch.Tensor | None = None
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None
    bo: torch.Tensor | None = None
    sinks: torch.Tensor | None = None
    norm_weight: torch.Tensor | None = None
    norm_bias: torch.Tensor | None = None
    norm: str = "rms"
    eps: float = 1e-5
    residual: bool = False
    rope: bool = True
    # with the "cache" capability: x (B, T, D) run through a fresh KV cache of the layer in chunks of
    # the given sizes (they add up to T; the first is the prompt), from position 0; the outputs of
    # all chunks, concatenated (B, T, D)
    decode: Callable[[torch.Tensor, list[int]], torch.Tensor] | None = None
    # q/k normalisation, after the projections and before RoPE, with ``eps``; None for a layer without.
    # ``qk_norm`` is its kind: "rms" (Qwen3, Gemma 3, OLMo 2) or "layer" (StableLM, Phi: LayerNorm, with
    # q_norm_bias and k_norm_bias where it has them); ``qk_norm_over`` what it normalises: "head", each
    # head over its d features, the gains (d,) shared by every head (Qwen3) or (H, d) one per head
    # (StableLM's LayerNorm per head), or "width", all of q's (k's) heads together, gains (H * d,)
    # (OLMo 2).  Every gain and bias is in the layer's own head order.
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    q_norm_bias: torch.Tensor | None = None
    k_norm_bias: torch.Tensor | None = None
    qk_norm: str = "rms"
    qk_norm_over: str = "head"
    # partial rotary (GPT-NeoX, Phi): RoPE rotates the first rotary_dim features of each head only
    rotary_dim: int | None = None
    # the attention's scale when it is not 1/sqrt(d) (Gemma 2's query_pre_attn_scalar ** -0.5)
    scale: float | None = None
    # a sandwich norm (Gemma 2 and 3, OLMo 2): the gain (D,) of the RMSNorm, with eps, of the attention's
    # output (after Wo and bo), before the residual
    post_norm: torch.Tensor | None = None
    # "pre": the norm (norm_weight) feeds the projections; "post": it normalises x plus the attention's
    # output (the original Transformer's post-norm, BERT's)
    norm_at: str = "pre"
    # A score_mod that reads this layer's own parameters (T5's table of relative-position biases, learned
    # ALiBi slopes), in FlexAttention's form (specs/mods.py): it replaces the target's declared score_mod
    # for this layer.  Like every mod of a layer, it sees its tokens at positions 0 .. T-1 whatever the
    # offset, so it must depend on distances alone.
    score_mod: Callable | None = None

    def __post_init__(self) -> None:
        if self.norm not in ("rms", "layer"):
            raise ValueError(
                f"Layer(norm={self.norm!r}): the pre-norm is 'rms' (RMSNorm) or 'layer' (LayerNorm)"
            )
        if self.norm_at not in ("pre", "post") or (self.norm_at == "post" and self.norm_weight is None):
            raise ValueError(
                f"Layer(norm_at={self.norm_at!r}): the norm comes 'pre' (before the projections) or "
                "'post' (after the residual: give its norm_weight)"
            )
        if self.rotary_dim is not None and (self.rotary_dim < 2 or self.rotary_dim % 2):
            raise ValueError(f"Layer(rotary_dim={self.rotary_dim!r}): RoPE rotates pairs of features")
        if self.norm_bias is not None and (self.norm != "layer" or self.norm_weight is None):
            raise ValueError(
                "Layer(norm_bias=...) is LayerNorm's bias: give norm='layer' and its norm_weight"
            )
        if self.qk_norm not in ("rms", "layer") or self.qk_norm_over not in ("head", "width"):
            raise ValueError(
                f"Layer(qk_norm={self.qk_norm!r}, qk_norm_over={self.qk_norm_over!r}): the q/k norm is 'rms' "
                "or 'layer', over each 'head' or the whole 'width'"
            )
        for name in ("q", "k"):
            if getattr(self, f"{name}_norm_bias") is not None and (
                self.qk_norm != "layer" or getattr(self, f"{name}_norm") is None
            ):
                raise ValueError(
                    f"Layer({name}_norm_bias=...) is a LayerNorm's bias: give qk_norm='layer' and {name}_norm"
                )

    def check_reports(self, spec: LayerSpec) -> None:
        """Raise Undeclarable where what the layer reports is no form the oracle takes for ``spec``'s heads
        (a q/k norm gain or bias of another shape), saying what it could not take."""
        for name, heads in (("q", spec.n_heads), ("k", spec.n_kv_heads)):
            d = spec.head_dim
            forms = {"head": [(d,), (heads, d)], "width": [(heads * d,)]}[self.qk_norm_over]
            for part in (f"{name}_norm", f"{name}_norm_bias"):
                value = getattr(self, part)
                if value is not None and tuple(value.shape) not in forms:
                    raise Undeclarable(
                        f"the layer reports {part} of shape {tuple(value.shape)} with qk_norm_over="
                        f"{self.qk_norm_over!r}; for {heads} heads of {d} features the kit takes "
                        f"{' or '.join(str(form) for form in forms)}; report the gain of the q/k norm as it "
                        "normalises (Layer.qk_norm_over: 'head' or 'width')"
                    )

    def reported(self) -> dict:
        """What the layer reports, as keywords of the oracle layer (specs.oracle.attention_layer_oracle)."""
        names = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "sinks")
        names += ("norm_weight", "norm_bias", "norm", "eps", "residual", "rope", "q_norm", "k_norm")
        names += ("q_norm_bias", "k_norm_bias", "qk_norm", "qk_norm_over")
        names += ("rotary_dim", "scale", "post_norm", "norm_at")
        return {name: getattr(self, name) for name in names}


@dataclass(frozen=True)
class LayerRun:
    """One of a module's own attention layers as a pass of the module ran it (``layer_runs(x)``, the
    module's MLPs silenced so that each layer is x + its attention, as a white box is): what went in
    (B, T, D), what came out, what the layer reports (a Layer: its ``forward`` is not called), its
    sizes and its RoPE base.  The kit holds each to the oracle layer of the kind the module's schedule
    declares for it (MOD-13): a model that hands a layer the other kind's mask or rotary table, or a
    schedule that misstates the model, fails."""

    input: torch.Tensor
    output: torch.Tensor
    layer: Layer
    n_heads: int
    n_kv_heads: int
    head_dim: int
    base: float = 10000.0
