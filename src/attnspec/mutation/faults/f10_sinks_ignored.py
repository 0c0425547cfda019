"""F10: sinks ignored (not passed, or the sink column dropped before the softmax)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped, keyword_nulled
from .fault import Fault
from .matchers import (
    call_name,
    drop_args,
    keyword,
    literal_int,
    name_words,
    names_in,
    positional,
    replace_arg,
    triton_launch,
)


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


def sink_term(node: cst.CSTNode) -> bool:
    return any("sink" in name.lower() for name in names_in(node))


def operator_sink_term_dropped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """A kernel's sink left out of the softmax's denominator: l_i = l_i + tl.math.exp2(sink - m_i) ->
    l_i, l_i += exp(sink - m) -> pass; and a launch's switch kernel[grid](..., HAS_SINKS=s is not None)
    -> HAS_SINKS=False."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        if sink_term(node.right) and not sink_term(node.left) and m.findall(node.right, m.Call()):
            yield node.left
    elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
        if sink_term(node.value) and not sink_term(node.target) and m.findall(node.value, m.Call()):
            yield cst.Pass()
    elif triton_launch(node):
        for arg in node.args:
            switch = arg.keyword is not None and name_words(arg.keyword.value) & {"has", "use", "with"}
            if switch and "sink" in arg.keyword.value.lower() and not m.matches(arg.value, m.Name("False")):
                yield replace_arg(node, arg, cst.Name("False"))


FAULT = Fault(
    "F10",
    "sinks ignored (not passed, or the sink column dropped before the softmax)",
    "book",
    ("BLOCK-5", "SINK-2"),
    (
        (cst.Call, operator_ignore_sinks),
        (cst.IndentedBlock, operator_sink_column_dropped),
        (cst.BinaryOperation, operator_sink_term_dropped),
        (cst.AugAssign, operator_sink_term_dropped),
        (cst.Call, operator_sink_term_dropped),
    ),
    "the 'sinks' capability",
    evidence=({"sink"}, {"sinks"}),
    generic=(keyword_nulled, call_unwrapped),
)
