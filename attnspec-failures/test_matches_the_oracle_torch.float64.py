"""ATTN-4 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_attention.py::test_matches_the_oracle[torch.float64]).

The call: B=1, 2 query heads over 1 KV head, Tq=3 queries over Tk=5 keys, head size 4, causal,
float64. Against attnspec's float64 oracle: 4 of 6 rows wrong, the first at batch 0, head 0, query
0; max |out - oracle| = 2.416e-09, where the tolerance policy allows 1.003e-12 for these inputs.

Run it (python attnspec-failures/test_matches_the_oracle_torch.float64.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 1.002513930940845e-12, f"max |out - oracle| = {error:.3e}, over the 1.003e-12 allowed here"
