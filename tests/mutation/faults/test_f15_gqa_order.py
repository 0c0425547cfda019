"""F15 (f15_gqa_order.py): GQA heads grouped in the other order: tile (KV head h mod Hkv) for interleaved
(h // r) or back.

Its idioms: GQA in tile order."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("k = k.repeat_interleave(r, dim=1)", "F15", {"k = torch.cat([k] * r, dim=1)"}),
        (
            "k = torch.repeat_interleave(k, dim=1, repeats=r)",
            "F15",
            set(),
        ),  # repeats by keyword: not recognised
        (
            "k = k[:, :, None, :, :].expand(b, h, r, t, d)",
            "F15",
            {"k = k[:, None, :, :, :].expand(b, r, h, t, d)"},
        ),
        (  # Llama's repeat_kv: the dims after None implicit
            "k = k[:, :, None].expand(-1, -1, n_rep, -1, -1)",
            "F15",
            {"k = k[:, None, :].expand(-1, n_rep, -1, -1, -1)"},
        ),
        ("kv_head = off_h // (H // H_KV)", "F15", {"kv_head = off_h % H_KV"}),  # a kernel's head index
        ("group = n_heads // n_kv_heads", "F15", set()),  # the group size itself
        (
            "q = q.view(-1, self.n_kv_heads, self.n_heads // self.n_kv_heads, d)",
            "F15",
            {"q = q.view(-1, self.n_heads // self.n_kv_heads, self.n_kv_heads, d)"},
        ),
        (
            "k = einops.repeat(k, 'b h n d -> b (h r) n d', r=g)",
            "F15",
            {"k = einops.repeat(k, 'b h n d -> b (r h) n d', r=g)"},
        ),
        ("k = k.repeat(1, self.n_rep, 1, 1)", "F15", {"k = k.repeat_interleave(self.n_rep, dim=1)"}),
        ("v = torch.cat([v] * n_rep, dim=1)", "F15", {"v = torch.repeat_interleave(v, n_rep, dim=1)"}),
        (
            "k = repeat(k, 'b h n d -> b (r h) n d', r=heads // kv_heads)",
            "F15",
            {"k = repeat(k, 'b h n d -> b (h r) n d', r=heads // kv_heads)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("m = mask.repeat(1, n_heads, 1, 1)", "F15"),  # a mask is the same for every head, in any order
        ("x = torch.cat([x] * 2, dim=0)", "F15"),  # a batch doubled, not KV heads
        ("slot = pos % self.window", "F15"),  # a ring buffer's slot, not a head's KV head
        ("kv_head = h % n_kv_heads", "F15"),  # no group size in the block to read h // r with
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_a_head_modulo_read_interleaved():
    tiled = mutate(
        """
        def score_mod(score, b, h, q_idx, kv_idx):
            n_rep = n_heads // n_kv_heads
            kv_head = h % n_kv_heads
            return score + bias[kv_head, q_idx, kv_idx]
        """,
        "F15",
    )
    assert len(tiled) == 1 and "kv_head = h // n_rep" in tiled[0]
    counted = mutate(
        """
        def kv_head_of(self, h):
            if self.num_heads % self.num_key_value_heads:
                raise ValueError("heads")
            return h % self.num_key_value_heads
        """,
        "F15",
    )
    assert len(counted) == 1 and "return h // (self.num_heads // self.num_key_value_heads)" in counted[0]


def test_a_kernels_kv_head_read_in_tile_order():
    """off_kvh = off_h // GROUP_SIZE: the KV heads are the query heads the body names over the group."""
    made = mutate(
        """
        def kernel(Q, H, GROUP_SIZE):
            off_hz = tl.program_id(1)
            off_h = off_hz % H
            off_kvh = off_h // GROUP_SIZE
        """,
        "F15",
    )
    assert made == [
        "\ndef kernel(Q, H, GROUP_SIZE):\n    off_hz = tl.program_id(1)\n    off_h = off_hz % H\n"
        "    off_kvh = off_h % (H // GROUP_SIZE)\n"
    ]
    assert changed("off_h_k = off_h // (nheads // nheads_k)", "F15") == ["off_h_k = off_h % nheads_k"]
