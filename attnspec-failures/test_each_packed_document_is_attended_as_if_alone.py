"""ATTN-16 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_attention.py::test_each_packed_document_is_attended_as_if_alone).

The call: B=3, 6 query heads over 2 KV heads, Tq=1 query over Tk=4 keys, head size 1 (values 128),
causal, documents [[0, 0, 0, 1], [0, 1, 1, 2], [0, 0, 0, 1]], float64. Against attnspec's float64
oracle: 17 of 18 rows wrong, the first at batch 0, head 0, query 0; max |out - oracle| = 1.030e-01,
where the tolerance policy allows 3.287e-12 for these inputs.

Run it (python attnspec-failures/test_each_packed_document_is_attended_as_if_alone.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 3.2874086202474823e-12, f"max |out - oracle| = {error:.3e}, over the 3.287e-12 allowed here"
