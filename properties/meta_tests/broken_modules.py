"""Broken copies of the example modules (examples/learner_block.py, examples/nanogpt_attention.py) and of
the zoo's GPT-2-style language model (examples/zoo/gpt2_style.py), each with one plumbing bug that users
of attention modules and models really make (the model's are the classes public trackers report: masks
dropped once a cache is attached or added as booleans, decode positions from 0, padding ignored,
inverted or sharing one position, a cache trimmed before its chunk is attended, windows on the wrong
layers); test_broken_modules.py runs the
module properties against each and checks that the property aimed at it fails and says what broke.
The white-box bugs (a missing scale, heads split by a strided view) keep the module causal and
batch-independent: every black-box property passes them, and the layer oracle fails them.
UNDECLARED_NO_ROPE is the correct nanoGPT module whose layer does not say that it has no RoPE
(``Layer(rope=False)``), as a wrapper written to the RoPE layer protocol reports it: the kit's
diagnosis names "no RoPE" (NO_ROPE_FINDING).

    pytest properties --impl attnspec.properties.meta_tests.broken_modules:MASK_OFF_BY_ONE
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F

from attnspec.properties.targets import Layer, LayerSpec, as_target
from examples.learner_block import Decoder
from examples.nanogpt_attention import ATTENTION, CausalSelfAttention, GPTConfig, layer
from examples.zoo import gpt2_style


def heads(module: CausalSelfAttention, x: torch.Tensor):
    """q, k, v (B, nh, T, hs) of nanoGPT's fused projection, as its forward splits them."""
    B, T, C = x.size()
    return (
        t.view(B, T, module.n_head, C // module.n_head).transpose(1, 2) for t in module.c_attn(x).split(C, 2)
    )


class MaskOffByOne(CausalSelfAttention):
    """The mask built with tril(..., diagonal=1): each query also sees the next token."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        size = config.block_size
        self.bias = torch.tril(torch.ones(size, size), diagonal=1).view(1, 1, size, size)


class MaskInTrainingOnly(CausalSelfAttention):
    """The causal mask applied only while training (``if self.training``): inference sees the future."""

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = heads(self, x)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        if self.training:
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class DropoutAtInference(CausalSelfAttention):
    """Attention dropout called as F.dropout(att, p) (training=True by default): on in eval mode too."""

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = heads(self, x)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), 0.1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class BatchesMixedByAView(CausalSelfAttention):
    """The heads merged with a permute to (T, B, ...) and a reshape to (B, T, C): rows of one sequence
    end up in another."""

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = heads(self, x)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v  # (B, nh, T, hs)
        return self.c_proj(y.permute(2, 0, 1, 3).reshape(B, T, C))


class SequenceStatisticLeaks(CausalSelfAttention):
    """The input centred by its mean over the whole sequence (a norm over the wrong axis): every output
    moves with the future tokens."""

    def forward(self, x):
        return super().forward(x - x.mean(dim=1, keepdim=True))


class MissingScale(CausalSelfAttention):
    """The scores never divided by sqrt(head size): sharper weights, the same dependencies."""

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = heads(self, x)
        att = (q @ k.transpose(-2, -1)).masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return self.c_proj((F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C))


class HeadsSplitByAStridedView(CausalSelfAttention):
    """Heads split with view(B, T, hs, nh): head h takes features h, h + nh, ... of q, k and v alike, and
    the merge undoes it, so the module is another valid attention, not this module's."""

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        q, k, v = (t.view(B, T, hs, self.n_head).permute(0, 3, 1, 2) for t in self.c_attn(x).split(C, 2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v  # (B, nh, T, hs)
        return self.c_proj(y.permute(0, 2, 3, 1).reshape(B, T, C))


class PositionsFromTheEnd(Decoder):
    """Learned positions indexed from the end of the table (rows max_len-T .. max_len-1): a prefix gets
    other positions than the same tokens of the whole sequence."""

    def forward(self, x):
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens, but the position table has {self.max_len} rows")
        x = x + self.positions(torch.arange(self.max_len - T, self.max_len, device=x.device))
        for block in self.blocks:
            x = block(x)
        return x


class WindowNotPassedOn(Decoder):
    """A stack declared with a window of 3 on both layers whose window never reaches the second layer
    (it attends to the whole prefix)."""

    def __init__(self) -> None:
        super().__init__(windows=(3, None))
        self.windows = (3, 3)  # what the model's config says


class MaskDroppedWithACache(gpt2_style.Attention):
    """The causal mask applied only without a cache (``if cache is None``): a chunk after the prompt
    sees its own later tokens."""

    def attend(self, query, key, value, allowed):
        if key.shape[-2] > query.shape[-2]:  # cached keys come first: a cache is attached
            allowed = torch.ones_like(allowed) & allowed.any(-2, keepdim=True)  # only padding is kept
        return super().attend(query, key, value, allowed)


class BooleanMaskAdded(gpt2_style.Attention):
    """The boolean mask added to the float scores (True adds 1, False adds 0) instead of masking."""

    def attend(self, query, key, value, allowed):
        weights = query @ key.transpose(-1, -2) / math.sqrt(value.shape[-1]) + allowed
        return torch.softmax(weights, dim=-1) @ value


class PaddingIgnored(gpt2_style.Attention):
    """The padding mask accepted and never applied: real tokens attend to the pads."""

    def forward(self, hidden, padding=None, cache=None, layer_idx=0):
        return super().forward(hidden, None, cache, layer_idx)


class PaddingInverted(gpt2_style.Attention):
    """The padding mask's polarity inverted (0 taken for a real token): only the pads are attended to,
    or, where a query sees none, every key."""

    def forward(self, hidden, padding=None, cache=None, layer_idx=0):
        return super().forward(hidden, None if padding is None else 1 - padding, cache, layer_idx)


class CacheTrimmedBeforeTheChunk(gpt2_style.Attention):
    """A windowed layer's keys, cached and new, trimmed to the last W before the chunk is attended, not
    after: a chunk of several tokens loses keys its first queries still see."""

    def attend(self, query, key, value, allowed):
        if self.window is not None and key.shape[-2] > query.shape[-2]:
            cached = key.shape[-2] - query.shape[-2]
            lost = max(0, cached + query.shape[-2] - self.window)  # what keeps the last W in all
            allowed = allowed.clone()
            allowed[..., :lost] = False
        return super().attend(query, key, value, allowed)


class DecodePositionsFromZero(gpt2_style.GPT2LMHeadModel):
    """Every chunk after the prompt gets position ids from 0 (the past length never added)."""

    def hidden(self, input_ids, attention_mask=None, position_ids=None, cache=None):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        return super().hidden(input_ids, attention_mask, position_ids, cache)


class OneSharedPositionForThePaddedBatch(gpt2_style.LanguageModel):
    """Decoding a left-padded batch with one position for the whole batch after the prompt (the cache's
    length), not each sequence's count of real tokens."""

    def decode(self, tokens, chunks, attention_mask=None):
        cache, outputs, start = gpt2_style.Cache(len(self.model.h)), [], 0
        for i, size in enumerate(chunks):
            end = start + size
            mask = None if attention_mask is None else attention_mask[:, :end]
            position_ids = None if mask is None or i > 0 else gpt2_style.position_ids_from(mask)[:, start:end]
            outputs.append(self.model(tokens[:, start:end], mask, position_ids, cache))
            start = end
        return torch.cat(outputs, dim=1)


class DropoutLeftOn(gpt2_style.Attention):
    """Attention dropout called as F.dropout(weights, 0.1), on at inference too."""

    def attend(self, query, key, value, allowed):
        weights = query @ key.transpose(-1, -2) / math.sqrt(value.shape[-1])
        weights = weights.masked_fill(~allowed, torch.finfo(weights.dtype).min)
        return F.dropout(torch.softmax(weights, dim=-1), 0.1) @ value


def _gpt2(
    attention=None, model=gpt2_style.GPT2LMHeadModel, wrapper=gpt2_style.LanguageModel, windows=(4, None)
):
    """The zoo's language model with one of its classes swapped for a broken one; ``windows`` builds the
    blocks with other windows than the model declares, (4, None)."""

    def build():
        built = model(attn_windows=windows)
        for block in built.h:
            if attention is not None:
                block.attn.__class__ = attention
        lm = wrapper(built)
        lm.windows = (4, None)
        return lm

    return build


MODEL_CAPABILITIES = frozenset({"float64", "chunks", "padding", "hidden_states"})


@dataclass(frozen=True)
class Bug:
    """A broken module: how to build it, the property aimed at it (a pytest -k expression over
    test_modules.py, or over test_attention_layer.py for a ``white_box`` bug, which every property
    of test_modules.py passes) and the words its failure must contain."""

    build: object
    caught_by: str
    says: str
    white_box: bool = False
    capabilities: frozenset[str] = frozenset({"float64"})


def _nanogpt(cls):
    return lambda: cls(GPTConfig())


BUGS = {
    "MASK_OFF_BY_ONE": Bug(_nanogpt(MaskOffByOne), "test_later_tokens", "outputs 0.."),
    "MASK_IN_TRAINING_ONLY": Bug(_nanogpt(MaskInTrainingOnly), "test_later_tokens", "outputs 0.."),
    "DROPOUT_AT_INFERENCE": Bug(_nanogpt(DropoutAtInference), "test_two_calls", "dropout left on"),
    "BATCHES_MIXED_BY_A_VIEW": Bug(
        _nanogpt(BatchesMixedByAView), "test_each_sequence_alone", "alone vs its rows"
    ),
    "SEQUENCE_STATISTIC_LEAKS": Bug(_nanogpt(SequenceStatisticLeaks), "test_later_tokens", "changed"),
    "POSITIONS_FROM_THE_END": Bug(PositionsFromTheEnd, "test_a_prefix_alone", "tokens alone"),
    "WINDOW_NOT_PASSED_ON": Bug(WindowNotPassedOn, "test_each_output_depends", "depend on it and no other"),
    "MISSING_SCALE": Bug(_nanogpt(MissingScale), "test_layer_matches", "layer vs oracle layer", True),
    "HEADS_SPLIT_BY_A_STRIDED_VIEW": Bug(
        _nanogpt(HeadsSplitByAStridedView), "test_layer_matches", "layer vs oracle layer", True
    ),
    "MODEL_MASK_DROPPED_WITH_A_CACHE": Bug(
        _gpt2(MaskDroppedWithACache),
        "test_decoding_in_chunks",
        "decoding in chunks",
        False,
        MODEL_CAPABILITIES,
    ),
    "MODEL_BOOLEAN_MASK_ADDED": Bug(
        _gpt2(BooleanMaskAdded), "test_later_tokens", "outputs 0..", False, MODEL_CAPABILITIES
    ),
    "MODEL_PADDING_IGNORED": Bug(
        _gpt2(PaddingIgnored), "test_a_padded_batch", "padded to", False, MODEL_CAPABILITIES
    ),
    "MODEL_PADDING_INVERTED": Bug(
        _gpt2(PaddingInverted), "test_a_padded_batch", "padded to", False, MODEL_CAPABILITIES
    ),
    "MODEL_CACHE_TRIMMED_BEFORE_THE_CHUNK": Bug(
        _gpt2(CacheTrimmedBeforeTheChunk),
        "test_decoding_in_chunks",
        "decoding in chunks",
        False,
        MODEL_CAPABILITIES,
    ),
    "MODEL_DECODE_POSITIONS_FROM_ZERO": Bug(
        _gpt2(model=DecodePositionsFromZero),
        "test_decoding_in_chunks",
        "decoding in chunks",
        False,
        MODEL_CAPABILITIES,
    ),
    "MODEL_ONE_SHARED_POSITION_FOR_THE_PADDED_BATCH": Bug(
        _gpt2(wrapper=OneSharedPositionForThePaddedBatch),
        "test_a_left_padded",
        "left-padded) decoded",
        False,
        MODEL_CAPABILITIES,
    ),
    "MODEL_WINDOW_ON_THE_WRONG_LAYER": Bug(
        _gpt2(windows=(None, 4)), "test_each_output_depends", "layer 0's outputs", False, MODEL_CAPABILITIES
    ),
    "MODEL_DROPOUT_LEFT_ON": Bug(
        _gpt2(DropoutLeftOn), "test_two_calls", "dropout left on", False, MODEL_CAPABILITIES
    ),
}

torch.manual_seed(0)
for _name, _bug in BUGS.items():
    _module = _bug.build()
    _module.capabilities = set(_bug.capabilities)
    if _bug.white_box:  # its white box, as the example declares it, built from the broken class
        _module.capabilities |= {"layer"}
        _module.layer = partial(layer, build=type(_module))
        _module.tied_width = True
    _module.__doc__ = type(_module).__doc__
    globals()[_name] = _module


def rope_not_declared_off(spec: LayerSpec) -> Layer:
    """nanoGPT's attention as a layer that reports the protocol's default, rope=True."""
    return replace(layer(spec), rope=True)


UNDECLARED_NO_ROPE = replace(as_target("UNDECLARED_NO_ROPE", ATTENTION), layer=rope_not_declared_off)
NO_ROPE_FINDING = "no RoPE: the layer rotates neither q nor k"


class GroupedRounding(torch.nn.Module):
    """Each output scaled by 1 + leak * tanh(the sum of its sequence): with leak = 2e-7 the last bits of
    earlier outputs move with later tokens, as an MoE's grouped GEMMs round them (rows_round_together);
    with leak = 1e-2 the future leaks for real."""

    def __init__(self, leak: float) -> None:
        super().__init__()
        self.lin, self.leak = torch.nn.Linear(8, 8), leak

    def forward(self, x):
        return self.lin(x) * (1 + self.leak * torch.tanh(x.sum(dim=1, keepdim=True)))


ROUNDING_DECLARED = GroupedRounding(2e-7)
ROUNDING_DECLARED.rows_round_together = True
ROUNDING_UNDECLARED = GroupedRounding(2e-7)
LEAK_DECLARED = GroupedRounding(1e-2)
LEAK_DECLARED.rows_round_together = True
