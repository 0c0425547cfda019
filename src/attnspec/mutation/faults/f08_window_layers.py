"""F8: sliding window on the wrong layers (odd layers, every layer, or never passed on)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import keyword, mentions_window, names_in, plus, replace_arg, words


def operator_window_layers(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """layer_idx % 2 == 0 -> != 0 (window on odd layers) and -> True (window on every layer);
    layer_type == "sliding_attention" -> != and -> True."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    flipped = {cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal}.get(type(target.operator))
    if not flipped:
        return
    parity = m.matches(node.left, m.BinaryOperation(operator=m.Modulo())) and "layer" in words(node.left)
    sliding = any(
        isinstance(side, cst.SimpleString) and "sliding" in side.evaluated_value
        for side in (node.left, target.comparator)
    )
    if parity or sliding:
        yield node.with_changes(comparisons=[target.with_changes(operator=flipped())])
        yield cst.Name("True")


def layer_types_lookup(node: cst.CSTNode) -> bool:
    """config.layer_types[i] (any receiver): the schedule's entry for layer i."""
    return (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, cst.Attribute | cst.Name)
        and "layer_types" in names_in(node.value)
        and len(node.slice) == 1
    )


def operator_schedule_lookup(node: cst.Subscript) -> Iterator[cst.CSTNode]:
    """masks[config.layer_types[i]] -> masks["full_attention"] (the window reaches no layer) and ->
    masks[config.layer_types[i - 1]] (each layer gets its predecessor's kind): how a model picks each
    layer's mask from its schedule (transformers' causal_mask_mapping)."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return
    entry = node.slice[0].slice.value
    if not layer_types_lookup(entry):
        return
    yield node.with_changes(
        slice=[node.slice[0].with_changes(slice=cst.Index(cst.SimpleString('"full_attention"')))]
    )
    index = entry.slice[0].slice
    if isinstance(index, cst.Index):
        shifted = entry.with_changes(
            slice=[entry.slice[0].with_changes(slice=cst.Index(plus(index.value, -1)))]
        )
        yield node.with_changes(slice=[node.slice[0].with_changes(slice=cst.Index(shifted))])


def operator_window_choice_dropped(node: cst.IfExp) -> Iterator[cst.CSTNode]:
    """A if config.sliding_window is None else B -> A (and B if w is not None else A -> A): the choice of
    the windowed mask (or path) dropped, as if no window were configured."""
    test = node.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and mentions_window(test.left)):
        return
    target = test.comparisons[0]
    if not m.matches(target.comparator, m.Name("None")):
        return
    if isinstance(target.operator, cst.Is):
        yield node.body
    elif isinstance(target.operator, cst.IsNot):
        yield node.orelse


def operator_window_not_passed(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., window=w) -> f(..., window=None) (also sliding_window=): the window never arrives."""
    arg = keyword(node, "window", "sliding_window", "window_size")
    if arg is not None and not m.matches(arg.value, m.Name("None")):
        yield replace_arg(node, arg, cst.Name("None"))


FAULT = Fault(
    "F8",
    "sliding window on the wrong layers (odd layers, every layer, or never passed on)",
    "book",
    ("MASK-4", "RF-2"),
    (
        (cst.Comparison, operator_window_layers),
        (cst.Call, operator_window_not_passed),
        (cst.Subscript, operator_schedule_lookup),
        (cst.IfExp, operator_window_choice_dropped),
    ),
    "a stack or a model with windowed layers (MOD-5 through each layer's output, MOD-7)",
    evidence=({"window", "layer"}, {"sliding", "layer"}),
)
