"""SCORE-1 fails on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_attention.py::test_a_declared_score_mod_is_applied_where_it_bends_the_logits).

The call: B=2, 2 query heads over 1 KV head, Tq=4 queries over Tk=4 keys, head size 1, causal,
documents [[0, 0, 0, 0], [0, 0, 0, 0]], q, k, v inside a longer buffer in memory, float64. Against
attnspec's float64 oracle: 3 of 16 rows wrong, the first at batch 1, head 0, query 0; max |out -
oracle| = 1.632e-01, where the tolerance policy allows 1.302e-12 for these inputs.

Run it (python attnspec-failures/test_a_declared_score_mod_is_applied_where_it_bends_the_logits.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 1.3019446323684797e-12, f"max |out - oracle| = {error:.3e}, over the 1.302e-12 allowed here"
