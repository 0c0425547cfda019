"""KERN-2, ATTN-1, ATTN-2 fail on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_kernels.py::test_every_output_lies_between_the_least_and_largest_value_it_may_see).

The call: B=1, 4 query heads over 2 KV heads, Tq=17 queries over Tk=17 keys, head size 4 (values 3),
causal, q, k, v inside a longer buffer in memory, float64. Against attnspec's float64 oracle: 64 of
68 rows wrong, the first at batch 0, head 0, query 0; max |out - oracle| = 8.057e-08, where the
tolerance policy allows 2.668e-12 for these inputs.

Run it (python attnspec-failures/test_every_output_lies_between_the_least_and_largest_value_it_may_see.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 2.6682395930354504e-12, f"max |out - oracle| = {error:.3e}, over the 2.668e-12 allowed here"
