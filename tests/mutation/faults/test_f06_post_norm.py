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



def test_post_norm_with_the_residual_added_last():
    """litgpt's Block: x_normed = norm_1(x); x = attn(x_normed) + x; return mlp(norm_2(x)) + x."""
    block = mutate(
        """
        def forward(self, x):
            h = self.norm_1(x)
            x = self.attn(h) + x
            return self.mlp(self.norm_2(x)) + x
        """,
        "F6",
    )
    assert any("h = x\n" in m and "x = self.norm_1(self.attn(h) + x)" in m for m in block)
    assert any("return self.norm_1(self.mlp(x) + x)" in m for m in block)


def test_a_sum_without_the_normed_input_is_no_residual():
    assert (
        mutate(
            """
            def forward(self, x, bias):
                h = self.norm(x)
                y = self.proj(h) + bias
                return y
            """,
            "F6",
        )
        == []
    )
