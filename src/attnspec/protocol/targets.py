"""The implementation under test: impl/ by default, another one with --impl NAME.

A target is any object with

    attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False)
        q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> out (B, Hq, Tq, dv),
        or (out, weights (B, Hq, Tq, Tk)) with return_weights=True
    capabilities
        the names (CAPABILITIES) of what else it supports; an argument it does not support is
        never passed to it, and a property that needs a missing capability is skipped

and, for the RoPE properties (capability "rope"), the rotary embedding:

    rope(x, positions, base=10000.0)
        x (..., T, d) rotated at positions (T,) (a LongTensor on x's device), same shape and dtype

and, optionally, for the kernel properties, ``blocks`` and ``switches``: the block sizes a blocked
kernel tiles with and the lengths where it changes code path (Target below);

and, for the layer properties (capability "layer"), a whole attention layer:

    layer(spec: LayerSpec) -> Layer
        build the layer ``spec`` describes, every parameter drawn at random from ``spec.seed``
        (attnspec.kit.strategies.randomize_ does that), and return a Layer: its
        forward(x (B, T, D), offset) -> (B, T, D), the parameters the oracle needs and, with
        capability "cache", decode(x, chunks): x run through a fresh KV cache chunk by chunk;
        a layer may have no RoPE, biases, and an RMSNorm or LayerNorm pre-norm (Layer), and a
        module target may have one too: its white box (a black box cannot see a wrong scale)

and, declaring what its attention computes beyond the plain causal softmax (src/attnspec/protocol/declared.py,
CONVENTIONS.md), FlexAttention's ``score_mod`` and ``mask_mod``, ``conventions`` it follows on
purpose, the ``heads`` it takes, and with "documents" ``document_ids=`` (B, Tk) on every call.

NAME is a built-in adapter (ADAPTERS) or ``package.module:object`` for your own code, where the
object is such a target or a bare attention function (which then has no capability beyond
causal self-attention unless it carries a ``capabilities`` attribute).
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attnspec.protocol.layers import (  # noqa: F401 (re-exported: a target builds these)
    CannotBuild,
    Layer,
    LayerKind,
    LayerRun,
    LayerSpec,
    Refused,
    Undeclarable,
    schedule_of_windows,
)

CAPABILITIES = {
    "weights": "returns the attention weights (return_weights=True)",
    "window": "sliding windows (window=W: query p sees keys p-W < j <= p)",
    "sinks": "per-head sink logits (an extra softmax column)",
    "value_dim": "values of another head size than queries and keys (dv != d)",
    "gqa": "fewer KV heads than query heads (KV head g serves query heads g*r .. g*r+r-1)",
    "decode": "fewer queries than keys, aligned bottom-right (query i at position Tk-Tq+i)",
    "blind": "more queries than keys: the first Tq-Tk see no key and output exactly 0",
    "non_causal": "causal=False",
    "documents": "packed sequences: document_ids (B, Tk), a query sees only keys of its own document",
    "scale": "an explicit scale instead of 1/sqrt(d)",
    "float64": "float64 inputs computed in float64 throughout (no float32 softmax or RoPE angles)",
    "float16": "fp16/bf16 inputs scored and normalised in float32, the result rounded once to their dtype",
    "grad": "the output is differentiable: autograd reaches q, k, v (and tensor sinks)",
    "rope": "the rotary embedding on its own (rope(x, positions, base))",
    "layer": "a whole attention layer, checked against the oracle layer built from its parameters (layer())",
    "offset": "the layer takes a position offset (RoPE at positions offset .. offset+T-1)",
    "cache": "the layer decodes with its own KV cache (Layer.decode: a prompt, then chunks, from position 0)",
    "sizes": "the layer refuses, when built, sizes it cannot compute (Hq % Hkv != 0, an odd RoPE head size)",
    "cross": "a cross-attention layer: layer(spec).forward(x, offset, context=c), x (B, T, D) attending to"
    " c (B, Tc, Dc)",
    "module": "a module or block x (B, T, D) -> (B, T, D), or a model tokens (B, T) -> logits (B, T, V)",
    "chunks": "the module decodes in chunks: decode(x, chunks), x run chunk by chunk from position 0",
    "no_positions": "the module adds no positions: an output ignores the order of the tokens it sees",
    "padding": "the module takes a padding mask: module(x, attention_mask=m), m (B, T): 1 real token, 0 pad",
    "hidden_states": "the module returns each layer's output: hidden_states(x) -> one (B, T, D) per layer",
    "layer_runs": "the module runs its own attention layers, MLPs silenced, and reports each one's input, "
    "output and parameters: layer_runs(x) -> one LayerRun per layer",
}

# Built-in adapters: NAME -> "module:object" (imported only when chosen).
ADAPTERS = {
    "impl": "attnspec.adapters.impl_target:TARGET",
    "torch": "attnspec.adapters.torch_sdpa:TARGET",
    "hf-llama": "attnspec.adapters.hf_eager:LLAMA",
    "hf-mistral": "attnspec.adapters.hf_eager:MISTRAL",
    "hf-qwen2": "attnspec.adapters.hf_eager:QWEN2",
    "hf-gptoss": "attnspec.adapters.hf_eager:GPTOSS",
    "hf-qwen3": "attnspec.adapters.hf_eager:QWEN3",
    "hf-llama-model": "attnspec.adapters.hf_models:LLAMA",
    "hf-mistral-model": "attnspec.adapters.hf_models:MISTRAL",
    "hf-qwen2-model": "attnspec.adapters.hf_models:QWEN2",
    "hf-qwen3-model": "attnspec.adapters.hf_models:QWEN3",
    "hf-gptoss-model": "attnspec.adapters.hf_models:GPTOSS",
    "hf-gptneox": "attnspec.adapters.hf_models:GPTNEOX",
    "hf-gemma2": "attnspec.adapters.hf_models:GEMMA2",
    "hf-bloom-model": "attnspec.adapters.hf_models:BLOOM",
    "hf-bert-model": "attnspec.adapters.hf_models:BERT",
    "hf-smollm3": "attnspec.adapters.families.smollm3:LAYER",
    "hf-smollm3-model": "attnspec.adapters.families.smollm3:MODEL",
    "hf-gemma3": "attnspec.adapters.families.gemma3:LAYER",
    "hf-gemma3-model": "attnspec.adapters.families.gemma3:MODEL",
    "hf-olmo2": "attnspec.adapters.families.olmo2:LAYER",
    "hf-olmo2-model": "attnspec.adapters.families.olmo2:MODEL",
    "hf-stablelm": "attnspec.adapters.families.stablelm:LAYER",
    "hf-stablelm-model": "attnspec.adapters.families.stablelm:MODEL",
    "hf-phi": "attnspec.adapters.families.phi:LAYER",
    "hf-phi-model": "attnspec.adapters.families.phi:MODEL",
    "hf-gptj": "attnspec.adapters.families.gptj:LAYER",
    "hf-gptj-model": "attnspec.adapters.families.gptj:MODEL",
    "hf-falcon": "attnspec.adapters.families.falcon:LAYER",
    "hf-falcon-model": "attnspec.adapters.families.falcon:MODEL",
    "hf-falcon-alibi": "attnspec.adapters.families.falcon:ALIBI_LAYER",
    "hf-falcon-alibi-model": "attnspec.adapters.families.falcon:ALIBI_MODEL",
    "hf-mpt": "attnspec.adapters.families.mpt:LAYER",
    "hf-mpt-model": "attnspec.adapters.families.mpt:MODEL",
    "hf-t5": "attnspec.adapters.families.t5:LAYER",
    "hf-t5-model": "attnspec.adapters.families.t5:MODEL",
    "hf-t5-cross": "attnspec.adapters.families.t5:CROSS",
    "hf-whisper-cross": "attnspec.adapters.families.whisper:CROSS",
    "hf-llama4": "attnspec.adapters.families.llama4:LAYER",
    "hf-llama4-model": "attnspec.adapters.families.llama4:MODEL",
    "hf-cohere2": "attnspec.adapters.families.cohere2:LAYER",
    "hf-cohere2-model": "attnspec.adapters.families.cohere2:MODEL",
    "hf-modernbert": "attnspec.adapters.families.modernbert:LAYER",
    "hf-modernbert-model": "attnspec.adapters.families.modernbert:MODEL",
    "hf-roberta": "attnspec.adapters.families.roberta:LAYER",
    "hf-roberta-model": "attnspec.adapters.families.roberta:MODEL",
    "gpt-oss": "attnspec.adapters.gpt_oss_reference:TARGET",
    "flash-ref": "attnspec.adapters.flash_ref:TARGET",
}
ENV = "ATTNSPEC_IMPL"
DEVICE_ENV = "ATTNSPEC_DEVICE"  # the device of the run (--device sets it), before the target is imported


@dataclass(frozen=True)
class Target:
    """An implementation under test, as the kit checks it: its attention function (None for a module
    target), the capabilities it declares (CAPABILITIES), and what else it declares (a layer, RoPE,
    a module, mods, conventions, sizes: CONVENTIONS.md's target protocol)."""

    name: str
    attention: Callable | None  # None for a module target
    capabilities: frozenset[str]
    about: str = ""
    layer: Callable[[LayerSpec], Layer] | None = None
    rope: Callable[..., torch.Tensor] | None = None
    # The code a mutation campaign mutates to grade the kit on this target: "package.module" (every
    # function and method of it) or "package.module:f,Class.method" (only those).
    sources: tuple[str, ...] = ()
    # A blocked kernel's geometry, for the kernel properties (test_kernels.py): the block sizes it
    # tiles queries and keys with, and the lengths s at which it switches code path (Tq or Tk below s
    # takes another path than s and above).  Undeclared, the properties try common block sizes.
    blocks: tuple[int, ...] = ()
    switches: tuple[int, ...] = ()
    # Neighbouring conventions the target follows on purpose (protocol/declared.py: DECLARABLE); the kit
    # checks it under them.
    conventions: frozenset[str] = frozenset()
    # The head sizes (d, and dv with "value_dim") it takes, as kernels that tile features do (16, 32, 64,
    # 128, ...); empty: any.  Every case the kit draws uses one of them (head_size).
    head_dims: tuple[int, ...] = ()
    # The layer can only be built with d_model = n_heads * head_dim, as nanoGPT, GPT-2 and torch's
    # nn.MultiheadAttention are: every LayerSpec the kit asks for then has that width (layer_width).
    tied_width: bool = False
    # A module target ("module"): x (B, T, D) -> (B, T, D), or for a model tokens (B, T) in [0, vocab_size)
    # -> logits (B, T, V), and what its properties need to know: the width D (or the vocabulary V), the
    # sliding window of each layer (None: full causal attention; () undeclared), the longest sequence
    # it takes, with "chunks" decode(x, chunks) and with "hidden_states" hidden_states(x).  ``module`` is
    # the object named (an nn.Module is run in eval mode, and copied to float64 for float64 cases; its
    # own decode and hidden_states methods are called on that copy).
    module: Callable | None = None
    d_model: int | None = None
    windows: tuple[int | None, ...] = ()
    # the longest sequence it takes: a module's T; an attention target's Tq and Tk (kit/strategies.py:
    # fit_to_target shortens every case to it)
    max_len: int | None = None
    max_batch: int | None = None  # the largest batch it takes (fit_to_target; a module's batches)
    needs_contiguous: bool = False  # an attention target gets contiguous q, k, v (memory_layouts.py)
    decode: Callable | None = None
    vocab_size: int | None = None
    hidden_states: Callable | None = None
    layer_runs: Callable | None = None  # with "layer_runs": x -> one LayerRun per layer, in order
    # Each layer's kind, in order (LayerKind: its mask and positions); ``windows`` is the short form for
    # causal and windowed layers, translated into it.  The module properties derive what each output
    # depends on from it (MOD-5), and a white box is asked for each kind.
    schedule: tuple[LayerKind, ...] = ()
    # Its kernels round a row differently when other rows change (an MoE that groups tokens by expert, a
    # split-K GEMM): the module properties that ask "did this output change?" (MOD-1, MOD-5) then call a
    # change one beyond the dtype's tolerance, not any change of its bits.
    rows_round_together: bool = False
    # What its attention computes beyond softmax(q.k * scale + causal mask), in FlexAttention's vocabulary
    # (specs/mods.py): score_mod(score, b, h, q_idx, kv_idx) changes each scaled logit, mask_mod(b, h,
    # q_idx, kv_idx) is the whole mask (window, non_causal and blind do not apply to such a target).
    # The oracle, the strategies and the laws the properties check follow them (protocol/declared.py).
    score_mod: Callable | None = None
    mask_mod: Callable | None = None
    # The query head counts it takes, as a model whose mods read a per-head table (ALiBi's slopes, T5's
    # buckets) does; empty: any.  Every case the kit draws has one of them (head_counts).
    heads: tuple[int, ...] = ()
    # Partial rotary (GPT-NeoX's rotary_pct, Phi's partial_rotary_factor): rope() rotates the first
    # int(d * rotary_pct) features of a head of d; None: all of them.
    rotary_pct: float | None = None
    # The KV head counts its layer takes (Falcon's multi-query attention: (1,)); empty: any divisor of Hq.
    kv_heads: tuple[int, ...] = ()
    # Its cross-attention layer's context is as wide as the model (T5's, Whisper's): every LayerSpec
    # then has context_dim None.
    tied_context: bool = False
    # The RoPE base it is fixed at (GPT-J hard-codes 10000): every LayerSpec and rope() call uses it, where
    # the kit otherwise draws bases of 10, 10000 and 500000.
    rope_base: float | None = None

    def __post_init__(self) -> None:
        if self.windows and not self.schedule:  # the short form: one mechanism for both (frozen: set once)
            object.__setattr__(self, "schedule", schedule_of_windows(self.windows))
        if not all(isinstance(kind, LayerKind) for kind in self.schedule):
            raise TypeError(f"{self.name} declares a schedule of {self.schedule!r}: LayerKind(...) per layer")
        masks = tuple((kind.mask, kind.size) for kind in self.schedule)
        if self.windows and masks != tuple((k.mask, k.size) for k in schedule_of_windows(self.windows)):
            kinds = ", ".join(str(kind) for kind in self.schedule)
            raise ValueError(
                f"{self.name} declares windows {self.windows} and a schedule ({kinds}) that differ: declare "
                "the schedule alone"
            )
        unknown = self.capabilities - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")
        for name in ("score_mod", "mask_mod"):
            mod = getattr(self, name)
            if mod is not None and not callable(mod):
                raise TypeError(f"{self.name} declares a {name} that is not callable: {mod!r}")
        if "cache" in self.capabilities and "layer" not in self.capabilities:
            raise ValueError(
                f"{self.name} claims the 'cache' capability without 'layer': the cache is a layer's"
            )
        for field in ("blocks", "switches", "head_dims", "heads", "kv_heads"):
            sizes = getattr(self, field)
            if not all(isinstance(n, int) and n >= 1 for n in sizes):
                raise ValueError(f"{self.name} declares {field}={sizes!r}: positive integers expected")
        base = self.rope_base
        if base is not None and (isinstance(base, bool) or not isinstance(base, int | float) or base <= 1):
            raise ValueError(f"{self.name} declares rope_base={base!r}: a number above 1 expected")
        pct = self.rotary_pct
        if pct is not None and (
            isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 < pct <= 1
        ):
            raise ValueError(f"{self.name} declares rotary_pct={pct!r}: a fraction in (0, 1] expected")
        for field in ("max_len", "max_batch"):
            limit = getattr(self, field)
            positive = isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1
            if limit is not None and not positive:
                raise ValueError(f"{self.name} declares {field}={limit!r}: a positive integer expected")
        width = self.vocab_size if self.vocab_size is not None else self.d_model
        if "module" in self.capabilities and not (callable(self.module) and isinstance(width, int)):
            what = "a callable module and d_model (or vocab_size for a model)"
            raise TypeError(f"{self.name} claims the 'module' capability without {what}")
        for method in ("layer", "rope", "decode", "hidden_states", "layer_runs"):
            needed = "chunks" if method == "decode" else method
            if needed in self.capabilities and not callable(getattr(self, method)):
                raise TypeError(
                    f"{self.name} claims the {needed!r} capability but has no callable {method}()"
                )

    def supports(self, *names: str) -> bool:
        return set(names) <= self.capabilities

    def rotary_dim(self, d: int) -> int | None:
        """How many features of a head of ``d`` its rope() rotates: int(d * rotary_pct), or None for
        all d."""
        return None if self.rotary_pct is None else int(d * self.rotary_pct)

    def module_in(self, dtype: torch.dtype, device: torch.device | str) -> Callable:
        """The module to run in ``dtype`` on ``device``: an nn.Module is copied there once, in eval mode
        (its own parameters never change); any other callable is run as it is."""
        if not isinstance(self.module, torch.nn.Module):
            return self.module
        key = (id(self.module), dtype, str(device))
        if key not in _MODULE_COPIES:
            _MODULE_COPIES[key] = copy.deepcopy(self.module).to(device=device, dtype=dtype).eval()
        return _MODULE_COPIES[key]

    def module_method(self, name: str, dtype: torch.dtype, device: torch.device | str) -> Callable:
        """The module's ``decode`` or ``hidden_states``: the method of its copy in ``dtype`` on ``device``
        (module_in) for an nn.Module, else the declared callable."""
        module = self.module_in(dtype, device)
        return getattr(module, name) if isinstance(module, torch.nn.Module) else getattr(self, name)

    def head_size(self, n: int) -> int:
        """A head size the target takes for a drawn size ``n``: ``n`` itself when it takes any or that
        one, else one of its declared ``head_dims``, spread over them as ``n`` varies."""
        if not self.head_dims or n in self.head_dims:
            return n
        return sorted(self.head_dims)[(n - 1) % len(self.head_dims)]

    def head_counts(self, n_heads: int, n_kv_heads: int) -> tuple[int, int]:
        """(Hq, Hkv) the target takes for drawn ones: Hq itself or one of its declared ``heads`` (spread
        over them as Hq varies), and Hkv, a divisor of it (one of its declared ``kv_heads``), the drawn
        one where it can be."""
        if not self.heads or n_heads in self.heads:
            hq = n_heads
        else:
            hq = sorted(self.heads)[(n_heads - 1) % len(self.heads)]
        divisors = [g for g in range(1, hq + 1) if hq % g == 0 and (not self.kv_heads or g in self.kv_heads)]
        if not divisors:  # no declared KV head count divides Hq: the smallest Hq some declared one divides
            hkv = min(self.kv_heads)
            return (hkv * max(1, hq // hkv), hkv)
        hkv = n_kv_heads if n_kv_heads in divisors else divisors[(n_kv_heads - 1) % len(divisors)]
        return hq, hkv

    def layer_width(self, n_heads: int, head_dim: int, drawn: int) -> int:
        """d_model of a LayerSpec with these heads: ``drawn``, or n_heads * head_dim for a layer
        whose width is tied to its heads (tied_width)."""
        return n_heads * head_dim if self.tied_width else drawn

    def fitted(self, spec: LayerSpec) -> LayerSpec:
        """``spec`` within what the target declares its layer takes: its head counts (heads, kv_heads),
        head sizes (head_dims), a width tied to the heads (tied_width), a context as wide as the model
        (tied_context), its fixed RoPE base (rope_base).  Every LayerSpec the kit builds a layer from
        goes through here."""
        n_heads, n_kv_heads = self.head_counts(spec.n_heads, spec.n_kv_heads)
        if spec.n_kv_heads == spec.n_heads and not self.kv_heads:  # multi-head attention stays so
            n_kv_heads = n_heads
        head_dim = self.head_size(spec.head_dim)
        d_model = spec.d_model if n_heads == spec.n_heads else spec.d_model // spec.n_heads * n_heads
        return replace(
            spec,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            d_model=self.layer_width(n_heads, head_dim, d_model),
            context_dim=None if self.tied_context else spec.context_dim,
            base=spec.base if self.rope_base is None else float(self.rope_base),
        )

    def outputs(self, q, k, v, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(output, weights): the output of a plain call, and the weights of a return_weights call
        (None without "weights").  Two calls, because a target may take another path when it need
        not return weights: impl tiles long causal attention only then."""
        out = self.attention(q, k, v, **kwargs)
        if not self.supports("weights"):
            return out, None
        return out, self.attention(q, k, v, return_weights=True, **kwargs)[1]


# What an object declares besides its capabilities, read the same way for every kind of target: the
# Target field, and its value when the object does not declare it.
DECLARATIONS = {
    "layer": None,
    "rope": None,
    "sources": (),
    "blocks": (),
    "switches": (),
    "conventions": frozenset(),
    "head_dims": (),
    "tied_width": False,
    "score_mod": None,
    "mask_mod": None,
    "heads": (),
    "kv_heads": (),
    "tied_context": False,
    "rope_base": None,
    "max_len": None,
    "max_batch": None,
    "needs_contiguous": False,
    "rotary_pct": None,
}


# What only an attention function declares: a module's attributes of these names are its own parts
# (self.blocks, self.rope), never declarations.
KERNEL_ONLY = ("rope", "blocks", "switches", "max_batch", "needs_contiguous")


def declared_fields(obj: object, fields=tuple(DECLARATIONS)) -> dict:
    """The Target ``fields`` ``obj`` declares as attributes (DECLARATIONS), in the fields' types; a
    submodule that happens to carry a field's name (self.heads, a ModuleList) declares nothing."""
    found = {}
    for field in fields:
        default = DECLARATIONS[field]
        value = getattr(obj, field, default)
        if isinstance(value, torch.nn.Module):
            value = default
        if isinstance(default, bool):
            value = bool(value)
        elif isinstance(default, frozenset):
            value = frozenset(value)
        elif isinstance(default, tuple):
            value = tuple(value)
        found[field] = value
    return found


def as_target(name: str, obj: object) -> Target:
    """A Target from an adapter object, a bare attention function or a module (an nn.Module without an
    ``attention`` method, or any callable that declares "module")."""
    if isinstance(obj, Target):
        return replace(obj, name=name)
    if isinstance(obj, type):
        raise TypeError(f"{obj.__name__} is a class: name an instance of it (module:INSTANCE) or a function")
    declared = frozenset(getattr(obj, "capabilities", ()))
    if "module" in declared or (isinstance(obj, torch.nn.Module) and not _attention_method(obj)):
        return module_target(name, obj, declared | {"module"})
    attention = getattr(obj, "attention", obj)
    if not callable(attention):
        raise TypeError(f"{obj!r} has no callable attention(q, k, v, ...)")
    about = getattr(obj, "__doc__", "") or ""
    return Target(name, attention, declared, about, **declared_fields(obj))


def _attention_method(module: torch.nn.Module) -> bool:
    """Whether a module holds a kernel, an ``attention(q, k, v, ...)`` method: not a submodule named
    ``attention``, which a module's own layers often are (GPT-NeoX's and BERT's ``self.attention``)."""
    return hasattr(module, "attention") and not isinstance(module.attention, torch.nn.Module)


def module_target(name: str, obj, capabilities: frozenset[str]) -> Target:
    """The Target of a module: its declarations (its white box's among them), and D read from the module
    when it declares none (a model, which takes tokens, declares its vocabulary instead:
    OBJ.vocab_size = V)."""
    vocab_size = getattr(obj, "vocab_size", None)
    d_model = getattr(obj, "d_model", None)
    if d_model is None and vocab_size is None and isinstance(obj, torch.nn.Module):
        d_model = _input_width(obj)
    if not isinstance(d_model, int) and not isinstance(vocab_size, int):
        raise TypeError(
            f"{name}: the width D of its input (B, T, D) is unknown: declare it (OBJ.d_model = D), or for a "
            "model that takes tokens its vocabulary (OBJ.vocab_size = V)"
        )
    fields = declared_fields(obj, [field for field in DECLARATIONS if field not in KERNEL_ONLY])
    return Target(
        name,
        None,
        capabilities,
        getattr(obj, "__doc__", "") or "",
        **fields,
        module=obj,
        d_model=d_model,
        windows=tuple(getattr(obj, "windows", ())),
        schedule=tuple(getattr(obj, "schedule", ())),
        decode=getattr(obj, "decode", None) if "chunks" in capabilities else None,
        vocab_size=vocab_size,
        hidden_states=getattr(obj, "hidden_states", None) if "hidden_states" in capabilities else None,
        layer_runs=getattr(obj, "layer_runs", None) if "layer_runs" in capabilities else None,
        rows_round_together=bool(getattr(obj, "rows_round_together", False)),
    )


def _input_width(module: torch.nn.Module) -> int | None:
    """D of a module's (B, T, D) input: the width of the first layer that reads features (a Linear's
    in_features, a norm's normalized shape)."""
    for part in module.modules():
        if isinstance(part, torch.nn.Linear):
            return part.in_features
        if isinstance(part, torch.nn.LayerNorm | torch.nn.RMSNorm) and len(part.normalized_shape) == 1:
            return part.normalized_shape[0]
    return None


def resolve(name: str) -> object:
    """The object a target called ``name`` is made of: a built-in adapter's, or "package.module:object"
    imported (the kit makes it a checked target: attnspec/kit/loading.py)."""
    spec = ADAPTERS.get(name, name)
    if ":" not in spec:
        raise ValueError(f"neither a built-in adapter ({', '.join(ADAPTERS)}) nor package.module:object")
    module_name, _, attribute = spec.partition(":")
    obj = _imported(module_of_file(module_name), own=name not in ADAPTERS)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def _imported(module: str, own: bool) -> object:
    """``module`` imported; a user's (``own``) without writing bytecode into their project."""
    if not own:
        return importlib.import_module(module)
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return importlib.import_module(module)
    finally:
        sys.dont_write_bytecode = saved


# What a built-in adapter needs installed besides attnspec.
ADAPTER_NEEDS = {
    "hf-llama": "transformers: pip install 'attnspec[conformance]'",
    "hf-mistral": "transformers: pip install 'attnspec[conformance]'",
    "hf-qwen2": "transformers: pip install 'attnspec[conformance]'",
    "hf-gptoss": "transformers: pip install 'attnspec[conformance]'",
    **{
        f"hf-{family}-model": "transformers: pip install 'attnspec[conformance]'"
        for family in ("llama", "mistral", "qwen2", "gptoss")
    },
    **{  # Gemma 3, OLMo 2, StableLM, Phi, GPT-J (src/attnspec/adapters/families/)
        f"hf-{family}{suffix}": "transformers: pip install 'attnspec[conformance]'"
        for family in ("gemma3", "olmo2", "stablelm", "phi", "gptj")
        for suffix in ("", "-model")
    },
    **{  # Falcon (multi-query; ALiBi), MPT, T5 (encoder; cross-attention), Whisper's cross-attention
        f"hf-{name}": "transformers: pip install 'attnspec[conformance]'"
        for name in ("falcon", "falcon-alibi", "mpt", "t5", "t5-cross", "whisper-cross")
        + ("falcon-model", "falcon-alibi-model", "mpt-model", "t5-model")
    },
    **{  # Llama 4, Cohere 2, ModernBERT, RoBERTa (src/attnspec/adapters/families/)
        f"hf-{family}{suffix}": "transformers: pip install 'attnspec[conformance]'"
        for family in ("llama4", "cohere2", "modernbert", "roberta")
        for suffix in ("", "-model")
    },
    "gpt-oss": "gpt-oss: pip install --no-deps gpt-oss==0.0.9 (its torch model needs torch and safetensors)",
}


def module_of_file(module: str) -> str:
    """The module to import for a target named by its file, as a shell completes it (``kern.py``,
    ``src/kern.py``, an absolute path): its dotted name from the current directory, or, for a file
    elsewhere, its name with its folder put on sys.path.  Any other name is returned as it is."""
    if not module.endswith(".py"):
        return module
    path = Path(module)
    if not path.is_file():
        raise FileNotFoundError(f"no file {module} (a target is package.module:object, or FILE.py:object)")
    path = path.resolve()
    if path.is_relative_to(Path.cwd()):
        return ".".join(path.relative_to(Path.cwd()).with_suffix("").parts)
    sys.path.insert(0, str(path.parent))
    return path.stem


def missing_module_hint(name: str, error: ModuleNotFoundError) -> str:
    """Why the module of target ``name`` could not be imported, and what to do."""
    if name in ADAPTER_NEEDS:
        return f"the {name} adapter needs {ADAPTER_NEEDS[name]}"
    module = ADAPTERS.get(name, name).partition(":")[0]
    missing = error.name or ""
    if not missing:  # raised by hand (a lazy loader's own ModuleNotFoundError names no module)
        return f"{module} raised it while it was imported"
    if module == missing or module.startswith(missing + "."):
        return (
            f"{module} is imported from the current directory and sys.path: run from the folder "
            "that holds it, or install it"
        )
    return f"{module} imports {missing}, which is not installed"


_MODULE_COPIES: dict[tuple[int, torch.dtype, str], torch.nn.Module] = {}
