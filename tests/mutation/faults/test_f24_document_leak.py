"""F24 (f24_document_leak.py): document boundary leaks by one token (the previous document's last token
seen, a cu_seqlens slice).

Its idioms: a document mask that also lets each document see the previous one's last token."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "return document_id[q_idx] == document_id[kv_idx]",
            "F24",
            {
                "return (document_id[q_idx] == document_id[kv_idx]) | (document_id[q_idx] == "
                "torch.cat([document_id[..., 1:], document_id[..., -1:]], dim=-1)[kv_idx])"
            },
        ),
        (
            "return packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]",
            "F24",
            {
                "return (packed_sequence_mask[batch_idx, q_idx] == "
                "packed_sequence_mask[batch_idx, kv_idx]) | (packed_sequence_mask[batch_idx, q_idx] == "
                "torch.cat([packed_sequence_mask[..., 1:], packed_sequence_mask[..., -1:]], dim=-1)"
                "[batch_idx, kv_idx])"
            },
        ),
        (
            "same = (queries[:, :, None] == document_ids[:, None, :]) & seen",
            "F24",
            {
                "same = ((queries[:, :, None] == document_ids[:, None, :]) | (queries[:, :, None] == "
                "torch.cat([document_ids[..., 1:], document_ids[..., -1:]], dim=-1)[:, None, :])) & seen"
            },
        ),
        (
            "hidden = doc_q[:, :, None] != segment_ids[:, None, :]",
            "F24",
            {
                "hidden = (doc_q[:, :, None] != segment_ids[:, None, :]) & (doc_q[:, :, None] != "
                "torch.cat([segment_ids[..., 1:], segment_ids[..., -1:]], dim=-1)[:, None, :])"
            },
        ),
        ("k_start = tl.load(cu_seqlens_k + off_b)", "F24", {"k_start = tl.load(cu_seqlens_k + off_b) - 1"}),
        (
            "k_len = tl.load(cu_seqlens_k + off_b + 1) - k_start",
            "F24",
            {"k_len = tl.load(cu_seqlens_k + off_b + 1) + 1 - k_start"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("if document_ids.shape != (2, 3):\n        raise ValueError('d')", "F24"),  # a size check
        ("ok = document_ids.device == q.device", "F24"),
        ("same = labels[:, None] == labels[None, :]", "F24"),  # no documents named
        ("causal = kv_idx <= q_idx", "F24"),
        (
            "for lo in range(0, 8, 4):\n        o = attend(q, k[:, :, lo:lo + 4], v[:, :, lo:lo + 4])",
            "F24",
        ),  # key blocks of a tiled loop, not documents
        ("q_start = tl.load(cu_seqlens_q + off_b)", "F24"),  # the queries' bound reads no other document
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_a_varlen_loop_slices_keys_one_token_too_wide():
    made = mutate(
        """
        def varlen(q, k, v, cu_seqlens, out):
            for i in range(len(cu_seqlens) - 1):
                start, end = cu_seqlens[i], cu_seqlens[i + 1]
                out[:, :, start:end] = attend(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end])
            return out
        """,
        "F24",
    )
    assert len(made) == 1
    assert (
        "out[:, :, start:end] = attend(q[:, :, start:end], k[:, :, max(start - 1, 0):end], "
        "v[:, :, max(start - 1, 0):end])"
    ) in made[0]
