"""KERN-3, MASK-1 fail on this call of examples.zoo.flex_softcap_documents:cap_after_mask (found by test_kernels.py::test_extreme_keys_behind_the_diagonal_do_not_leak).

The call: B=2, 3 query heads over 1 KV head, Tq=17 queries over Tk=17 keys, head size 3 (values 1),
causal, documents [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0,
0, 0, 0, 0, 0, 0, 0, 0]], float64. Against attnspec's float64 oracle: 38 of 102 rows wrong, the
first at batch 0, head 0, query 0; max |out - oracle| = 2.451e-06, where the tolerance policy allows
2.396e-10 for these inputs.

Run it (python attnspec-failures/test_extreme_keys_behind_the_diagonal_do_not_leak.py), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("examples.zoo.flex_softcap_documents:cap_after_mask", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("examples.zoo.flex_softcap_documents:cap_after_mask", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= 2.3963070774200443e-10, f"max |out - oracle| = {error:.3e}, over the 2.396e-10 allowed here"
