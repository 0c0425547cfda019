"""F6 (f06_post_norm.py): post-norm instead of pre-norm (norm after the residual sum)."""

from __future__ import annotations

from tests.fixtures.mutation import mutate


def test_post_norm_in_statement_form():
    decoder = mutate(
        """
        def forward(self, hidden):
            residual = hidden
            hidden = self.input_norm(hidden)
            hidden = self.attn(hidden)
            hidden = residual + hidden
            return hidden
        """,
        "F6",
    )
    assert len(decoder) == 1
    assert "hidden = hidden\n" in decoder[0] and "hidden = self.input_norm(residual + hidden)" in decoder[0]

