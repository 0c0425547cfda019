"""impl/ against torch's kernels, case by case (benches/cases.py), in the same run.

Each case is timed for each side, grouped by case; `python -m benches.report` turns the saved
JSON into ratios impl/torch.  Before timing, impl and torch must agree (it is the same
computation), so a fast path that went wrong cannot look fast.  The causal cases' "kernels" side
(impl's tiles without a mask or anything else) is no attention: it is timed, not compared.
"""

from __future__ import annotations

import pytest
import torch

from benches.cases import CASES

_checked: set[str] = set()


@pytest.mark.parametrize(("name", "side"), [(name, side) for name, c in CASES.items() for side in c.sides])
def test_attention(benchmark, name: str, side: str) -> None:
    case = CASES[name]
    with torch.no_grad():
        functions = case.functions()
        if name not in _checked:
            torch.testing.assert_close(functions["impl"](), functions["torch"](), rtol=1e-4, atol=1e-4)
            _checked.add(name)
        benchmark.group = name
        benchmark.extra_info.update(case=name, side=side, seq=case.seq, window=case.window, kind=case.kind)
        out = benchmark.pedantic(functions[side], rounds=case.rounds, iterations=1, warmup_rounds=1)
    assert out.shape[-2] == case.seq  # (B, H, T, d) or the block's (B, T, D)
