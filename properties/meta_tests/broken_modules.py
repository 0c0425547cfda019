"""Broken copies of the example modules (examples/learner_block.py, examples/nanogpt_attention.py), each
with one plumbing bug that users of attention modules really make; test_broken_modules.py runs the
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


@dataclass(frozen=True)
class Bug:
    """A broken module: how to build it, the property aimed at it (a pytest -k expression over
    test_modules.py, or over test_attention_layer.py for a ``white_box`` bug, which every property
    of test_modules.py passes) and the words its failure must contain."""

    build: object
    caught_by: str
    says: str
    white_box: bool = False


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
    "WINDOW_NOT_PASSED_ON": Bug(WindowNotPassedOn, "test_each_output_depends", "should change and no other"),
    "MISSING_SCALE": Bug(_nanogpt(MissingScale), "test_layer_matches", "layer vs oracle layer", True),
    "HEADS_SPLIT_BY_A_STRIDED_VIEW": Bug(
        _nanogpt(HeadsSplitByAStridedView), "test_layer_matches", "layer vs oracle layer", True
    ),
}

torch.manual_seed(0)
for _name, _bug in BUGS.items():
    _module = _bug.build()
    _module.capabilities = {"float64"}
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
