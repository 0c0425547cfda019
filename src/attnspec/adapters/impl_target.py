"""impl/ itself: every capability, and every property (the default target)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from attnspec.impl import (
    AttentionBlock,
    LanguageModel,
    ModelConfig,
    alibi_slopes,
    apply_rope,
    scaled_dot_product_attention,
)
from attnspec.impl import attention as impl_attention
from attnspec.kit.strategies import randomize_
from attnspec.protocol.declared import translated
from attnspec.protocol.targets import CAPABILITIES, Layer, LayerRun, LayerSpec, Target
from attnspec.specs import mods
from attnspec.specs.oracle import split_w_qkv


def reported(block: AttentionBlock) -> dict:
    """What impl's AttentionBlock reports as a Layer: its fused q|k|v split, its output projection, its
    sinks, its RMSNorm pre-norm and its residual, its partial rotary and q/k norm, and its soft-cap and
    ALiBi as the score_mod they amount to."""
    config = block.config
    fields = {
        **split_w_qkv(block.qkv.weight, config.n_heads, config.n_kv_heads, config.head_dim),
        "wo": block.out.weight,
        "sinks": block.sinks,
        "norm_weight": block.norm.weight,
        "eps": config.norm_eps,
        "residual": True,
        "rotary_dim": config.rotary_dim,
    }
    if config.qk_norm:
        fields.update(q_norm=block.q_norm.weight, k_norm=block.k_norm.weight)
    capped = None if config.softcap is None else mods.soft_cap(config.softcap)
    biased = mods.alibi(mods.alibi_slopes(config.n_heads)) if config.alibi else None
    return {**fields, "score_mod": mods.composed(capped, biased)}


def layer(spec: LayerSpec, **switches) -> Layer:
    """impl's AttentionBlock (pre-norm, residual, one fused q|k|v matrix) as layer 0 of one; ``switches``
    turn on more of its config (softcap, alibi, rotary_dim, qk_norm), which the layer then reports."""
    config = ModelConfig(
        d_model=spec.d_model,
        n_heads=spec.n_heads,
        n_kv_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        n_layers=1,
        window=spec.window,
        window_layers="all",
        use_sinks=spec.sinks,
        rope_base=spec.base,
        **switches,
    )
    block = randomize_(AttentionBlock(config), spec).to(spec.device, spec.dtype)

    def decode(x, chunks):
        cache, outputs, start = block.new_cache(x.shape[1]), [], 0
        for size in chunks:
            outputs.append(block(x[:, start : start + size], offset=start, cache=cache))
            start += size
        return torch.cat(outputs, dim=1)

    return Layer(lambda x, offset: block(x, offset=offset), **reported(block), decode=decode)


def rope(x, positions, base=10000.0):
    return apply_rope(x, positions, base=base)


class Model(LanguageModel):
    """impl's language model of two blocks, the window of 3 on the even layer, as a model target:
    tokens -> logits, padded batches, decoding through its KV caches in chunks, each block's output.
    Its embedding dropout is on in training, so that eval mode has something to switch off."""

    def __init__(self) -> None:
        config = ModelConfig(
            d_model=16, n_heads=2, n_kv_heads=1, head_dim=8, n_layers=2, window=3, vocab_size=37, dropout=0.1
        )
        super().__init__(config)
        randomize_(self, 5)

    def decode(self, tokens: torch.Tensor, chunks: list[int], attention_mask: torch.Tensor | None = None):
        cache, outputs, start = self.new_cache(tokens.shape[1]), [], 0
        for size in chunks:
            stop = start + size
            mask = None if attention_mask is None else attention_mask[:, :stop]
            outputs.append(self(tokens[:, start:stop], mask, start, cache))
            start = stop
        return torch.cat(outputs, dim=1)

    def hidden_states(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Each block's output: MOD-5 then places the window on the even layer."""
        x, outputs = self.embed(tokens), []
        for block in self.stack.blocks:
            x = block(x)
            outputs.append(x)
        return outputs

    def layer_runs(self, tokens: torch.Tensor) -> list[LayerRun]:
        """Each block's attention sublayer (x + attention(norm(x)), its MLP a sublayer of its own) as
        the model's forward runs it: MOD-13 holds each to the oracle layer of its kind."""
        runs: list[tuple[torch.Tensor, torch.Tensor]] = []
        hooks = [
            block.attn.register_forward_hook(lambda module, args, out: runs.append((args[0], out)))
            for block in self.stack.blocks
        ]
        try:
            self(tokens)
        finally:
            for hook in hooks:
                hook.remove()
        cfg = self.config
        sizes = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rope_base)
        return [
            LayerRun(x, out, Layer(None, **reported(block.attn)), *sizes)
            for (x, out), block in zip(runs, self.stack.blocks, strict=True)
        ]


MODEL = Model()
QUERY_TILE = impl_attention.QUERY_TILE  # as imported, before any test changes it


# impl tiles causal attention over more than QUERY_TILE queries (src/attnspec/impl/attention.py): the kernel
# properties draw lengths around that switch, a ragged last tile of one and two queries included.
TARGET = Target(
    "impl",
    scaled_dot_product_attention,
    frozenset(CAPABILITIES) - {"no_positions", "cross"},  # its model has RoPE; its layers self-attend
    "attnspec's impl/",
    layer=layer,
    rope=rope,
    module=MODEL,
    windows=(3, None),
    decode=MODEL.decode,
    vocab_size=MODEL.config.vocab_size,
    hidden_states=MODEL.hidden_states,
    layer_runs=MODEL.layer_runs,
    switches=(QUERY_TILE + 1,),
)


# impl's variants, each declared as a user declares the same features of their own code: the soft-cap
# and ALiBi as the score_mods they amount to (ALiBi's slopes for 6 heads, not a power of two), the
# partial rotary and q/k norm as its layer reports them.  The kit's impl target leaves them to impl's
# own tests (tests/impl/test_variants.py); the main job's grading of the diagnosis (named_faults) runs
# the diagnosis on these too, so that a fault in impl's variants can be named.
CAP = 5.0
ALIBI_HEADS = 6


def _softcapped(q, k, v, **call):
    return scaled_dot_product_attention(q, k, v, softcap=CAP, **call)


def _alibi(q, k, v, **call):
    return scaled_dot_product_attention(q, k, v, alibi_slopes=alibi_slopes(q.shape[1], q.device), **call)


def _half_rotary(x, positions, base=10000.0):
    return apply_rope(x, positions, base=base, rotary_dim=x.shape[-1] // 2)


VARIANTS = (
    replace(
        TARGET,
        name="impl (soft-capped)",
        attention=_softcapped,
        score_mod=mods.soft_cap(CAP),
        layer=partial(layer, softcap=CAP),
        module=None,
        capabilities=TARGET.capabilities - {"module", "chunks", "padding", "hidden_states", "layer_runs"},
    ),
    replace(
        TARGET,
        name="impl (ALiBi)",
        attention=_alibi,
        score_mod=mods.alibi(mods.alibi_slopes(ALIBI_HEADS)),
        heads=(ALIBI_HEADS,),
        layer=None,
        module=None,
        capabilities=TARGET.capabilities
        - {"layer", "module", "chunks", "padding", "hidden_states", "layer_runs", "cache", "offset", "sizes"},
    ),
    replace(
        TARGET,
        name="impl (partial rotary, q/k norm)",
        attention=None,
        layer=partial(layer, rotary_dim=2, qk_norm=True),
        rope=_half_rotary,
        rotary_pct=0.5,
        module=None,
        capabilities=frozenset({"layer", "float64", "gqa", "window", "sinks", "offset", "cache", "rope"}),
    ),
)


def named_faults() -> list[str]:
    """The catalogue faults the diagnosis names for impl/ and its declared variants (the main job's
    plan calls it with each killed catalogue mutant on, after the tests that killed it), on impl as a
    user's check sees it: loaded (declared.translated), its tiles as imported (a test's fixture may have
    left tiles of 3 queries on), its model built anew with the mutant on, as importing mutated code
    builds it (a window placed on the wrong layers when it is built)."""
    from attnspec.kit.diagnosis import named_faults as named

    model = Model()
    methods = {name: getattr(model, name) for name in ("decode", "hidden_states", "layer_runs")}
    built = replace(TARGET, module=model, **methods)
    tiles, impl_attention.QUERY_TILE = impl_attention.QUERY_TILE, QUERY_TILE
    try:  # translated, as loading a target translates it (a call without documents gets one)
        return named(*(translated(target) for target in (built, *VARIANTS)))
    finally:
        impl_attention.QUERY_TILE = tiles
