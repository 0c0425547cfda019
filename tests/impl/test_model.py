"""impl's language model (attnspec/impl/model.py): the embedding, the stack, the final norm and the LM head
around it (LM-1), its dropout (LM-2) and its errors (ERR-4).

The model's padded batches and cached decoding are checked as those of any model target, by the
module properties (test_modules.py: MOD-9, MOD-10, MOD-7), and its padding mask in attention by
ATTN-13; here is what only impl's own parameters can show.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.impl import (
    AttentionBlock,
    LanguageModel,
    ModelConfig,
    scaled_dot_product_attention,
)
from attnspec.kit.asserts import assert_exactly_equal, assert_golden
from attnspec.kit.messages import message_names
from attnspec.kit.references import stack_oracle
from attnspec.kit.strategies import block_cases, randomize_, seeds
from attnspec.specs.oracle import rms_norm_oracle

both_paths = pytest.mark.usefixtures("attention_path")


def model_of(case, vocab_size: int, dtype: torch.dtype, device, dropout: float = 0.0) -> LanguageModel:
    config = replace(case.config(), vocab_size=vocab_size, dropout=dropout)
    return randomize_(LanguageModel(config), case.seed).to(device, dtype).eval()


def tokens_of(case, vocab_size: int, device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(case.seed + 1)
    return torch.randint(0, vocab_size, (case.batch, case.seq), generator=generator).to(device)


def lm_oracle(model: LanguageModel, tokens: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """head(RMSNorm(stack(embedding rows of the tokens))), the stack from the block oracles, the norm's
    eps from the config, the head a plain product: logits (B, T, V) in ``dtype`` on the CPU."""
    cfg = model.config
    embedded = model.embed.weight.detach()[tokens].to(dtype)
    hidden = stack_oracle(model.stack, cfg, embedded, dtype=dtype)
    normed = rms_norm_oracle(hidden, model.norm.weight, cfg.norm_eps, dtype=dtype)
    return normed @ model.head.weight.detach().cpu().to(dtype).T


# --------------------------------------------------------------------------- LM-1


@pytest.mark.req("LM-1")
@both_paths
@given(
    case=block_cases(), vocab_size=st.integers(1, 40), dtype=st.sampled_from([torch.float64, torch.float32])
)
def test_logits_are_the_head_of_the_normed_stack(case, vocab_size, dtype, device):
    model = model_of(case, vocab_size, dtype, device)
    tokens = tokens_of(case, vocab_size, device)
    with torch.no_grad():
        logits = model(tokens)
    assert logits.shape == (case.batch, case.seq, vocab_size) and logits.dtype == dtype
    golden = lm_oracle(model, tokens.cpu())
    reference = golden if dtype == torch.float64 else lm_oracle(model, tokens.cpu(), dtype)
    assert_golden(logits, golden, reference, f"logits vs the oracle LM ({dtype}, {case})")


@pytest.mark.req("LM-1")
@given(case=block_cases())
def test_a_mask_of_ones_changes_nothing(case, device):
    """All tokens real: the padding mask hides nothing, bitwise."""
    model = model_of(case, 11, torch.float64, device)
    tokens = tokens_of(case, 11, device)
    ones = torch.ones_like(tokens)
    with torch.no_grad():
        assert_exactly_equal(model(tokens, ones), model(tokens), "logits with a mask of ones vs without")


# --------------------------------------------------------------------------- LM-2


@pytest.mark.req("LM-2")
@given(case=block_cases(), seed=seeds)
def test_dropout_acts_in_training_only(case, seed, device):
    """The config's dropout zeroes embedding features in training (so two training calls differ), and
    eval mode switches it off: the logits of a model built without dropout."""
    model = model_of(case, 13, torch.float64, device, dropout=0.5)
    plain = model_of(case, 13, torch.float64, device)
    # 32 tokens: two dropout masks over at least 8 x 32 features never agree (2^-256), whatever the seed
    tokens = tokens_of(replace(case, batch=2, seq=16), 13, device)
    with torch.no_grad():
        assert_exactly_equal(model(tokens), plain(tokens), "eval-mode logits with dropout 0.5 vs without")
        model.train()
        torch.manual_seed(seed)
        first = model(tokens)
        assert not torch.equal(first, model(tokens)), (
            "two training calls with dropout 0.5 gave the same logits"
        )
        plain.train()
        trained = plain(tokens)
        assert_exactly_equal(trained, plain.eval()(tokens), "logits without dropout: training vs eval mode")


# --------------------------------------------------------------------------- ERR-4


@pytest.fixture(scope="module")
def small_model() -> LanguageModel:
    config = ModelConfig(d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, n_layers=2, window=3, vocab_size=10)
    return LanguageModel(config).eval()


@pytest.mark.req("ERR-4")
@pytest.mark.parametrize(
    "tokens, mask, error, words",
    [
        (torch.zeros(2, 4), None, TypeError, ("token ids", "torch.float32")),
        (torch.zeros(2, 4, 1, dtype=torch.long), None, TypeError, ("token ids", "(2, 4, 1)")),
        (torch.full((2, 4), 10), None, ValueError, ("[0, 10)", "10")),
        (torch.full((2, 4), -1), None, ValueError, ("[0, 10)", "-1")),
        (torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 3), ValueError, ("(2, 4)", "(2, 3)")),
        (torch.zeros(2, 4, dtype=torch.long), torch.full((2, 4), 2), ValueError, ("0 and 1",)),
        (torch.zeros(2, 4, dtype=torch.long), [[1] * 4] * 2, ValueError, ("(2, 4)", "list")),
        ([[0] * 4] * 2, None, TypeError, ("token ids", "list")),
    ],
    ids=[
        "float ids",
        "3-D ids",
        "id = V",
        "negative id",
        "mask shape",
        "mask values",
        "mask list",
        "ids list",
    ],
)
def test_the_model_refuses_bad_tokens_and_masks(small_model, tokens, mask, error, words):
    with torch.no_grad(), pytest.raises(error, match=message_names(*words)):
        small_model(tokens, mask)


@pytest.mark.req("ERR-4")
def test_the_model_accepts_the_edges_of_its_ranges(small_model):
    """ids 0 and V - 1, a bool mask, a row of pads only (its logits are those of nothing seen: finite)."""
    tokens = torch.tensor([[0, 9, 3, 9], [9, 0, 0, 1]])
    mask = torch.tensor([[True, True, True, True], [False, False, False, False]])
    with torch.no_grad():
        assert bool(small_model(tokens, mask).isfinite().all())


@pytest.mark.req("ERR-4")
def test_padding_masks_of_the_wrong_kind_shape_or_device_are_refused(small_model):
    q = k = v = torch.zeros(2, 1, 3, 4)  # B = 2, Tk = 3
    with pytest.raises(TypeError, match=message_names("padding_mask", "bool", "torch.int64")):
        scaled_dot_product_attention(q, k, v, padding_mask=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=message_names("padding_mask", "list")):
        scaled_dot_product_attention(q, k, v, padding_mask=[[True] * 3] * 2)
    with pytest.raises(ValueError, match=message_names("padding_mask", "(2, 3)", "(2, 4)")):
        scaled_dot_product_attention(q, k, v, padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=message_names("padding_mask", "meta", "cpu")):
        scaled_dot_product_attention(q, k, v, padding_mask=torch.ones(2, 3, dtype=torch.bool, device="meta"))
    block: AttentionBlock = small_model.stack.blocks[0].attn
    with torch.no_grad(), pytest.raises(ValueError, match=message_names("padding_mask", "(2, 5)", "(2, 3)")):
        block(torch.zeros(2, 3, 8), offset=2, padding_mask=torch.ones(2, 3, dtype=torch.bool))
