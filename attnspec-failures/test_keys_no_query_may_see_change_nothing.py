"""KERN-3, ATTN-2 fail on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_kernels.py::test_keys_no_query_may_see_change_nothing).

The call: B=1, 8 query heads over 2 KV heads, Tq=47 queries over Tk=48 keys, head size 1 (values 4),
causal, documents [[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]], q, k, v heads after positions in
memory, float64. Against attnspec's float64 oracle: 376 of 376 rows wrong, the first at batch 0,
head 0, query 0; max |out - oracle| = 3.238e-02, where the tolerance policy allows 2.644e-12 for
these inputs.

Run it (python attnspec-failures/test_keys_no_query_may_see_change_nothing.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 2.6440378118831947e-12, f"max |out - oracle| = {error:.3e}, over the 2.644e-12 allowed here"
