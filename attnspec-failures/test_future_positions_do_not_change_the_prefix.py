"""ATTN-9 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_attention.py::test_future_positions_do_not_change_the_prefix).

The call: B=1, 3 query heads over 3 KV heads, Tq=3 queries over Tk=3 keys, head size 1, causal,
documents [[0, 0, 0]], q, k, v heads after positions in memory, float64. Against attnspec's float64
oracle: 6 of 9 rows wrong, the first at batch 0, head 0, query 0; max |out - oracle| = 4.019e-09,
where the tolerance policy allows 1.459e-12 for these inputs.

Run it (python attnspec-failures/test_future_positions_do_not_change_the_prefix.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 1.4587164024092136e-12, f"max |out - oracle| = {error:.3e}, over the 1.459e-12 allowed here"
