"""F10: sinks ignored (not passed, or the sink column dropped before the softmax)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped, keyword_nulled
from .fault import Fault
from .matchers import call_name, drop_args, keyword, literal_int, names_in, positional


def operator_ignore_sinks(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., sinks=s) -> f(...), and cat([scores, sink_column]) -> scores."""
    sink_args = [a for a in node.args if a.keyword and "sink" in a.keyword.value]
    if sink_args:
        yield drop_args(node, sink_args)
    if call_name(node) == "cat" and node.args and isinstance(node.args[0].value, cst.List):
        elements = node.args[0].value.elements
        kept = [e for e in elements if not any("sink" in n for n in names_in(e.value))]
        if 0 < len(kept) < len(elements):
            yield (
                kept[0].value if len(kept) == 1 else node.with_deep_changes(node.args[0].value, elements=kept)
            )


def last_column_concat(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``scores`` for cat([scores, extra], dim=-1) / cat((scores, extra), -1), else None."""
    if call_name(node) not in ("cat", "concat", "concatenate") or not node.args:
        return None
    listed = node.args[0].value
    if not isinstance(listed, (cst.List, cst.Tuple)) or len(listed.elements) != 2:
        return None
    dim = keyword(node, "dim", "axis") or (positional(node)[1] if len(positional(node)) > 1 else None)
    return listed.elements[0].value if dim is not None and literal_int(dim.value) == -1 else None


def drops_last_column(node: cst.CSTNode) -> bool:
    """x[..., :-1]"""
    return m.matches(
        node,
        m.Subscript(
            slice=[
                m.SubscriptElement(m.Index(m.Ellipsis())),
                m.SubscriptElement(
                    m.Slice(lower=None, upper=m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")))
                ),
            ]
        ),
    )


def operator_sink_column_dropped(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """s = cat([scores, sinks], dim=-1); ...; w = p[..., :-1] -> s = scores; ...; w = p: the sink
    column never enters the softmax (whatever the sinks are called)."""
    concats = m.findall(node, m.MatchIfTrue(lambda n: last_column_concat(n) is not None))
    drops = m.findall(node, m.MatchIfTrue(drops_last_column))
    if len(concats) != 1 or not drops:
        return
    body = m.replace(
        node, m.MatchIfTrue(lambda n: last_column_concat(n) is not None), lambda n, _: last_column_concat(n)
    )
    yield m.replace(body, m.MatchIfTrue(drops_last_column), lambda n, _: n.value)


FAULT = Fault(
    "F10",
    "sinks ignored (not passed, or the sink column dropped before the softmax)",
    "book",
    ("BLOCK-5", "SINK-2"),
    ((cst.Call, operator_ignore_sinks), (cst.IndentedBlock, operator_sink_column_dropped)),
    "the 'sinks' capability",
    evidence=({"sink"}, {"sinks"}),
    generic=(keyword_nulled, call_unwrapped),
)
