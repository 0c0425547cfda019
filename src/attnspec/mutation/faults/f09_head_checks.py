"""F9: n_heads % n_kv_heads and even head_dim checks removed."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault


def operator_drop_divisibility_check(node: cst.If) -> Iterator[cst.CSTNode]:
    """if cfg.a % cfg.b != 0: raise ValueError(...) -> if False: ... (the check never fires).

    Only checks on configuration fields (``self.n_heads % self.n_kv_heads``, ``self.head_dim % 2``)
    count: the same test on local tensor sizes at call time is ERR-1's business, not F9's.
    """
    divisibility = m.Comparison(
        left=m.BinaryOperation(operator=m.Modulo(), left=m.Attribute()),
        comparisons=[m.ComparisonTarget(operator=m.NotEqual())],
    )
    raises = m.SimpleStatementLine(body=[m.Raise(exc=m.Call(func=m.Name("ValueError")))])
    if node.orelse is None and m.matches(node.test, divisibility) and m.matches(node.body.body[0], raises):
        yield node.with_changes(test=cst.Name("False"))


FAULT = Fault(
    "F9",
    "n_heads % n_kv_heads and even head_dim checks removed",
    "book",
    ("ERR-2", "LAYER-2"),
    ((cst.If, operator_drop_divisibility_check),),
    "a layer that declares 'sizes' (LAYER-2: layer(spec) refuses sizes it cannot compute), or impl's "
    "constructor checks (ERR-2)",
    evidence=({"heads", "divisible"}, {"kv", "heads", "assert"}, {"kv", "heads", "raise"}, {"%", "heads"}),
)
