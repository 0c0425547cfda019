"""F20: windowed cache trimmed to what it keeps before the chunk is attended."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import WINDOW_WORDS, WINDOWED_CACHE, call_name, dim_arg, literal_int, words


def window_attribute(node: cst.CSTNode) -> cst.Attribute | None:
    """The first self.<window> (self.window, self.sliding_window) a block mentions."""
    for found in m.findall(node, m.Attribute(value=m.Name("self"))):
        if words(found.attr) & WINDOW_WORDS:
            return found
    return None


def concat_dim(node: cst.CSTNode) -> int | None:
    """The axis of cat([...], dim=d) / cat([...], d) with a literal d, else None."""
    if call_name(node) not in ("cat", "concat", "concatenate"):
        return None
    arg = dim_arg(node, 1)
    return None if arg is None else literal_int(arg.value)


def last_positions(expr: cst.BaseExpression, dim: int, window: cst.Attribute) -> cst.BaseExpression:
    """expr[..., -W:, :] (dim -2) or expr[:, :, -W:] (dim 2): the last W positions along dim."""
    code = cst.Module([]).code_for_node
    keep = f"-{code(window)}:"
    index = ", ".join(["...", keep] + [":"] * (-dim - 1)) if dim < 0 else ", ".join([":"] * dim + [keep])
    return cst.parse_expression(f"({code(expr)})[{index}]")


def operator_cache_trimmed_early(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """A windowed cache that hands the chunk only what it keeps: return torch.cat([old_k, k], dim=2), ...
    -> each trimmed to the last self.window positions, and self.keys = full[..., -w + 1:, :] ...
    return full, ... -> return self.keys, ...: the first queries of a chunk of several tokens lose
    keys their window still covers."""
    window = window_attribute(node)
    if window is None:
        return
    kept: dict[str, cst.BaseExpression] = {}  # returned name -> the self attribute that keeps a slice of it
    for statement in node.body:
        line = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(line, cst.Assign) and len(line.targets) == 1 and isinstance(line.value, cst.Subscript):
            target, source = line.targets[0].target, line.value.value
            if isinstance(target, cst.Attribute) and isinstance(source, cst.Name):
                kept[source.value] = target
        if not isinstance(line, cst.Return) or line.value is None:
            continue
        returned = line.value.elements if isinstance(line.value, cst.Tuple) else None
        values = [e.value for e in returned] if returned else [line.value]
        if all(isinstance(v, cst.Name) and v.value in kept for v in values):
            trimmed = [kept[v.value] for v in values]
        elif all(concat_dim(v) is not None for v in values):
            trimmed = [last_positions(v, concat_dim(v), window) for v in values]
        else:
            continue
        value = cst.Tuple([cst.Element(v) for v in trimmed], lpar=[], rpar=[]) if returned else trimmed[0]
        new_line = statement.with_changes(body=[line.with_changes(value=value)])
        yield node.with_changes(body=[new_line if s is statement else s for s in node.body])


FAULT = Fault(
    "F20",
    "windowed cache trimmed to what it keeps before the chunk is attended",
    "real",
    ("CACHE-1", "MOD-7"),
    ((cst.IndentedBlock, operator_cache_trimmed_early),),
    "a windowed layer's cache, decoded in chunks of several tokens (CACHE-1, MOD-7)",
    evidence=WINDOWED_CACHE,
    voided_by={"=cache_position"},
)
