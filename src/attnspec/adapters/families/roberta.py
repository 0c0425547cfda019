"""RoBERTa (transformers' RobertaForMaskedLM): BERT's encoder, positions counted from padding_idx + 1.

RoBERTa's layers are BERT's (RobertaAttention is BertAttention: self-attention with biases, then the
post-norm LayerNorm(x + dense(attn))), so its white box is hf_eager.bert_layer built from RoBERTa's own
config and attention classes, declared bidirectional as BERT's.  What RoBERTa changes is where its
learned positions start: it counts each sequence's real tokens from ``padding_idx + 1`` and gives every
pad token (the token ``pad_token_id``) the position ``padding_idx``, reading them from the tokens
(``create_position_ids_from_input_ids``), not from the attention mask.  So the model target hands it
what a tokenizer does: a padded batch has ``pad_token_id`` at every pad (the drawn token there replaced)
and its attention mask, and RoBERTa counts its positions itself.  A real token that happens to be the pad
token (the kit draws tokens at random) is skipped by that count alike whether it is padded or alone.
"""

from __future__ import annotations

from functools import partial

import torch
from transformers import RobertaConfig, RobertaForMaskedLM
from transformers.models.roberta import modeling_roberta

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use
from attnspec.protocol.targets import Target
from attnspec.specs.mods import bidirectional


class RobertaLM(hf_models.MaskedLM):
    """RobertaForMaskedLM as a model target: its positions from its tokens, each pad the pad token."""

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            return self.model(input_ids=tokens).logits
        padded = tokens.masked_fill(attention_mask == 0, self.model.config.pad_token_id)
        return self.model(input_ids=padded, attention_mask=attention_mask).logits


# RoBERTa's attention sublayer (BERT's, from RoBERTa's classes) as a target of its own and as the white box
LAYER_TARGET = Target(
    "hf-roberta",
    None,
    frozenset({"layer"}),
    "transformers RobertaAttention (self-attention and its post-norm output)",
    partial(
        hf_eager.bert_layer, config_class=RobertaConfig, attention_class=modeling_roberta.RobertaAttention
    ),
    sources=("transformers.models.roberta.modeling_roberta",),
    tied_width=True,
    mask_mod=bidirectional,
)

FAMILY = hf_models.Family(
    "Roberta",
    RobertaConfig,
    RobertaForMaskedLM,
    "transformers.models.roberta.modeling_roberta",
    # its shipped special tokens (pad 1: real positions from 2), within the vocabulary
    {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
    LAYER_TARGET,
    encoder=True,
    sizes=hf_models.REALISTIC,
    wrapper=RobertaLM,
)


def _model() -> Target:
    return hf_models.model_target(FAMILY, "hf-roberta-model")


# LAYER (the attention sublayer) and MODEL (the whole masked LM, LAYER its white box), built when first used
__getattr__ = built_on_use(__name__, {"LAYER": lambda: LAYER_TARGET, "MODEL": _model})
