"""Models at the sizes people build, for the module properties' rounding (properties/relations.py): impl's
language model 256 wide, four layers (windows of 3 on the even ones), heads of 64, a vocabulary of
4096, float32, its parameters at twice randomize_'s spread.  Its padded, chunked and per-sequence runs
differ by float32's rounding alone (logits of ~20 moving by up to 4e-4: torch.testing.assert_close's
defaults fail every one of 20 cases), which the kit must not call a bug; its twin ``LEAKY_PADS`` lets
every real token attend to the pads, which it must."""

from __future__ import annotations

from attnspec.impl import ModelConfig
from attnspec.properties.adapters.impl_target import Model
from attnspec.properties.hypothesis_helpers import randomize_


class Realistic(Model):
    """impl's language model (impl_target.Model: decoding, padding, each layer's output) at realistic
    sizes."""

    def __init__(self) -> None:
        config = ModelConfig(
            d_model=256, n_heads=4, n_kv_heads=2, head_dim=64, n_layers=4, window=3, vocab_size=4096
        )
        super(Model, self).__init__(config)
        randomize_(self, 7, std=1.0)
        self.vocab_size, self.windows = config.vocab_size, (3, None, 3, None)


class LeakyPads(Realistic):
    """The same model, its padding mask dropped: real tokens attend to the pads (MOD-9 must fail)."""

    def forward(self, tokens, attention_mask=None, offset=0, cache=None):
        return super().forward(tokens, None, offset, cache)


MODEL = Realistic().eval()
MODEL.capabilities = {"module", "chunks", "padding", "hidden_states"}
LEAKY_PADS = LeakyPads().eval()
LEAKY_PADS.capabilities = MODEL.capabilities
