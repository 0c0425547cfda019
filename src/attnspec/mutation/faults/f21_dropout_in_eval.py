"""F21: dropout not switched off in eval mode (training=True, or the eval guard on p dropped)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import call_name, keyword, positional, replace_arg, words


def operator_dropout_left_on(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Dropout not switched off in eval: dropout(x, p, training=self.training) -> training=True, and
    0.0 if not self.training else p -> p (p if self.training else 0 -> p)."""
    if isinstance(node, cst.Call) and "dropout" in call_name(node):
        arg = keyword(node, "training", "train")
        if arg is None and len(positional(node)) >= 3:
            arg = positional(node)[2]
        if arg is not None and not m.matches(arg.value, m.Name("True")):
            yield replace_arg(node, arg, cst.Name("True"))
    elif isinstance(node, cst.IfExp) and "training" in words(node.test):
        negative = isinstance(node.test, cst.UnaryOperation) and isinstance(node.test.operator, cst.Not)
        yield node.orelse if negative else node.body


FAULT = Fault(
    "F21",
    "dropout not switched off in eval mode (training=True, or the eval guard on p dropped)",
    "real",
    ("MOD-4", "LM-2"),
    ((cst.Call, operator_dropout_left_on), (cst.IfExp, operator_dropout_left_on)),
    "a model or module with dropout, p > 0 in its config (MOD-4)",
    evidence=({"dropout", "training"},),
)
