"""ATTN-4 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_attention.py::test_matches_the_oracle[torch.float32]).

The call: B=3, 6 query heads over 3 KV heads, Tq=3 queries over Tk=8 keys, head size 1, causal,
documents [[0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 2]], q, k, v
heads after positions in memory, float32. Against attnspec's float64 oracle: 2 of 54 rows wrong, the
first at batch 2, head 1, query 2; max |out - oracle| = 9.894e-05, where the tolerance policy allows
1.517e-05 for these inputs.

Run it (python attnspec-failures/test_matches_the_oracle_torch.float32.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 1.51717683720202e-05, f"max |out - oracle| = {error:.3e}, over the 1.517e-05 allowed here"
