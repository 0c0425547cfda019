"""KERN-1 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_kernels.py::test_lengths_around_the_block_sizes_match_the_oracle[torch.float64]).

The call: B=1, 4 query heads over 2 KV heads, Tq=17 queries over Tk=17 keys, head size 4 (values 3),
causal, q, k, v inside a longer buffer in memory, float64. Against attnspec's float64 oracle: 64 of
68 rows wrong, the first at batch 0, head 0, query 0; max |out - oracle| = 7.428e-08, where the
tolerance policy allows 2.156e-12 for these inputs.

Run it (python attnspec-failures/test_lengths_around_the_block_sizes_match_the_oracle_torch.float64.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 2.1562512280234426e-12, f"max |out - oracle| = {error:.3e}, over the 2.156e-12 allowed here"
