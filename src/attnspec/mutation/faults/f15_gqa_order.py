"""F15: GQA heads grouped in the other order: tile (KV head h mod Hkv) for interleaved (h // r) or back."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import (
    SIZE_WORDS,
    call_name,
    dim_arg,
    heads_like,
    is_method_call,
    keys_or_values,
    keyword,
    literal_int,
    method_receiver,
    positional,
    replace_arg,
    swap_args,
    words,
)


def operator_gqa_tile_order(node: cst.Call) -> Iterator[cst.CSTNode]:
    """KV heads repeated in tile order (h -> h mod Hkv) instead of interleaved (h -> h // r):
    repeat_interleave(x, r, dim=d) -> cat([x] * r, dim=d); x[:, :, None].expand(B, Hkv, r, ...)
    -> x[:, None].expand(B, r, Hkv, ...); view(..., Hkv, r, ...) -> view(..., r, Hkv, ...);
    einops' repeat(x, "b h n d -> b (h r) n d", r=g) -> "(r h)"."""
    name = call_name(node)
    yield from einops_regrouped(node, interleaved=True)
    if name == "repeat_interleave":
        receiver = method_receiver(node)
        args = positional(node)
        if is_method_call(node):
            tensor, repeats = receiver, args[0].value if args else None
        else:
            tensor, repeats = (args[0].value if args else None), (args[1].value if len(args) > 1 else None)
        dim = keyword(node, "dim")
        if tensor is not None and repeats is not None and dim is not None:
            yield cst.parse_expression("torch.cat([__tensor__] * (__repeats__), dim=__dim__)").visit(
                _Fill({"__tensor__": tensor, "__repeats__": repeats, "__dim__": dim.value})
            )
    if name == "expand":
        receiver = method_receiver(node)
        if isinstance(receiver, cst.Subscript):
            elements = list(receiver.slice)
            spots = [
                i for i, e in enumerate(elements) if m.matches(e, m.SubscriptElement(m.Index(m.Name("None"))))
            ]
            args = list(node.args)
            # x[:, :, None].expand(b, h, r, t, d): the dims after the last index are implicit
            if len(spots) == 1 and spots[0] >= 1 and len(args) >= len(elements):
                p = spots[0]
                moved = list(elements)
                moved[p - 1], moved[p] = (
                    elements[p].with_changes(comma=elements[p - 1].comma),
                    elements[p - 1].with_changes(comma=elements[p].comma),
                )
                yield node.with_changes(
                    func=node.func.with_changes(value=receiver.with_changes(slice=moved)),
                    args=swap_args(args, p - 1),
                )
    if name in ("view", "reshape") and not any(a.keyword or a.star for a in node.args):
        args = list(node.args)
        for i in range(len(args) - 1):
            kv = words(args[i].value) & {"kv"} or {"key", "value"} <= words(args[i].value)
            group = isinstance(args[i + 1].value, cst.BinaryOperation) and isinstance(
                args[i + 1].value.operator, cst.FloorDivide
            )
            group = group or bool(words(args[i + 1].value) & {"mult", "rep", "group", "groups", "repeats"})
            if kv and group:
                yield node.with_changes(args=swap_args(args, i))


EINOPS_GROUP = re.compile(r"\(\s*(\w+)\s+(\w+)\s*\)")


def einops_regrouped(node: cst.Call, interleaved: bool) -> Iterator[cst.CSTNode]:
    """An einops repeat of the head axis in the other order: in "b h n d -> b (h r) n d" with r=g
    given by keyword, (h r) repeats each head r times in a row (interleaved), (r h) the r copies of
    every head one after another (tile order).  Yields (h r) -> (r h) when ``interleaved``, else
    (r h) -> (h r)."""
    args = positional(node)
    if call_name(node) != "repeat" or len(args) < 2 or not isinstance(args[1].value, cst.SimpleString):
        return
    pattern = args[1].value
    opening = len(pattern.prefix) + len(pattern.quote)
    text = pattern.value[opening : -len(pattern.quote)]
    source, arrow, target = text.partition("->")
    counts = {a.keyword.value for a in node.args if a.keyword is not None}
    axes = set(re.findall(r"\w+", source))
    for match in EINOPS_GROUP.finditer(target):
        head, count = match.groups() if interleaved else reversed(match.groups())
        if arrow and head in axes and count in counts and count not in axes:
            regrouped = f"{target[: match.start()]}({match.group(2)} {match.group(1)}){target[match.end() :]}"
            quoted = f"{pattern.value[:opening]}{source}{arrow}{regrouped}{pattern.quote}"
            yield replace_arg(node, args[1], cst.SimpleString(quoted))


def operator_gqa_interleaved_order(node: cst.Call) -> Iterator[cst.CSTNode]:
    """KV heads repeated interleaved (h -> h // r) where the code groups them in tile order (h -> h
    mod Hkv), F15's other direction: k.repeat(1, r, 1, 1) -> k.repeat_interleave(r, dim=1);
    torch.cat([k] * r, dim=1) -> torch.repeat_interleave(k, r, dim=1); einops' "(r h)" -> "(h r)".
    Only keys and values are regrouped: a mask repeated over heads is the same in either order."""
    yield from einops_regrouped(node, interleaved=False)
    name = call_name(node)
    receiver = method_receiver(node)
    if name == "repeat" and is_method_call(node) and keys_or_values(receiver):
        args = positional(node)
        counted = [i for i, a in enumerate(args) if literal_int(a.value) != 1]
        if len(args) >= 3 and len(args) == len(node.args) and len(counted) == 1 and counted[0] >= 1:
            axis = counted[0]
            yield cst.parse_expression(f"__tensor__.repeat_interleave(__repeats__, dim={axis})").visit(
                _Fill({"__tensor__": receiver, "__repeats__": args[axis].value})
            )
    if name in ("cat", "concat", "concatenate") and node.args:
        listed, dim = node.args[0].value, dim_arg(node, 1)
        if dim is None or not m.matches(listed, m.BinaryOperation(operator=m.Multiply())):
            return
        for copies, repeats in ((listed.left, listed.right), (listed.right, listed.left)):
            if isinstance(copies, cst.List) and len(copies.elements) == 1:
                tensor = copies.elements[0].value
                if keys_or_values(tensor):
                    yield cst.parse_expression(
                        "torch.repeat_interleave(__tensor__, __repeats__, dim=__dim__)"
                    ).visit(_Fill({"__tensor__": tensor, "__repeats__": repeats, "__dim__": dim.value}))


HEAD_INDEX_WORDS = {"h", "head", "hq"}


GROUP_WORDS = {"rep", "reps", "repeats", "group", "groups", "mult"}


def head_index_like(node: cst.CSTNode) -> bool:
    """h, head, head_idx, q_head: the index of a query head (not a count of heads, not head_dim)."""
    w = words(node)
    return bool(w & HEAD_INDEX_WORDS) and not w & (SIZE_WORDS | {"heads", "kv", "n", "num", "d"})


def kv_heads_like(node: cst.CSTNode) -> bool:
    """n_kv_heads, self.num_key_value_heads, Hkv, n_kv: the number of KV heads."""
    w = words(node)
    kv = (
        bool(w & {"kv", "hkv", "nkv"})
        or {"key", "value"} <= w
        or ("k" in w and bool(w & {"nheads", "heads"}))
    )
    return kv and not w & (SIZE_WORDS | {"idx", "index", "pos", "cache", "proj"})


class _Operands(cst.CSTVisitor):
    """The names and dotted names (self.n_rep, as a whole) of a node, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.BaseExpression] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.found.append(node)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self.found.append(node)
        return False


def group_size(block: cst.IndentedBlock, kv_heads: cst.BaseExpression) -> cst.BaseExpression | None:
    """The query heads per KV head, as the block names it: a name assigned Hq // Hkv, a name like
    n_rep, num_key_value_groups or q_mult, or else (Hq // Hkv) from a count of query heads."""
    for assign in m.findall(block, m.Assign(targets=[m.AssignTarget(target=m.Name() | m.Attribute())])):
        value = assign.value
        if m.matches(value, m.BinaryOperation(operator=m.FloorDivide())) and kv_heads_like(value.right):
            return assign.targets[0].target
    operands = _Operands()
    block.visit(operands)
    for operand in operands.found:
        if words(operand) & GROUP_WORDS and not words(operand) & SIZE_WORDS:
            return operand
    for operand in operands.found:
        if heads_like(operand) and not kv_heads_like(operand) and not words(operand) & {"idx", "index"}:
            return cst.BinaryOperation(
                left=operand,
                operator=cst.FloorDivide(),
                right=kv_heads,
                lpar=[cst.LeftParen()],
                rpar=[cst.RightParen()],
            )
    return None


def operator_gqa_head_modulo(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """kv_head = h % n_kv_heads -> h // n_rep: a query head's KV head read interleaved where the code
    reads it in tile order (the group size as the block names it, see group_size)."""
    for statement in node.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for found in m.findall(statement, m.BinaryOperation(operator=m.Modulo())):
            if not (head_index_like(found.left) and kv_heads_like(found.right)):
                continue
            group = group_size(node, found.right)
            if group is not None:
                yield node.deep_replace(found, found.with_changes(operator=cst.FloorDivide(), right=group))


def operator_gqa_group_divide(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """kv_head = h // (H // H_KV) -> h % H_KV: a query head's KV head read in tile order where the
    code reads it interleaved, with the group size written out as Hq // Hkv."""
    group = node.right
    if not (isinstance(node.operator, cst.FloorDivide) and isinstance(group, cst.BinaryOperation)):
        return
    grouped = isinstance(group.operator, cst.FloorDivide) and kv_heads_like(group.right)
    if grouped and head_index_like(node.left):
        yield node.with_changes(operator=cst.Modulo(), right=group.right.with_changes(lpar=[], rpar=[]))


def query_heads(block: cst.IndentedBlock) -> cst.BaseExpression | None:
    """The count of query heads a kernel's body names (H, num_heads, nheads), if any."""
    operands = _Operands()
    block.visit(operands)
    for operand in operands.found:
        w = words(operand)
        heads = heads_like(operand) or bool(w & {"nheads", "nhead"})
        if heads and not kv_heads_like(operand) and not w & ({"idx", "index", "off", "k"} | GROUP_WORDS):
            return operand
    return None


def operator_kernel_group_divide(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """off_kvh = off_h // GROUP_SIZE -> off_h % (H // GROUP_SIZE): a Triton kernel's KV head read in tile
    order, the number of KV heads written as the query heads (as the body names them) over the group."""
    for statement in node.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for found in m.findall(statement, m.BinaryOperation(operator=m.FloorDivide())):
            group = found.right
            if not (head_index_like(found.left) and isinstance(group, (cst.Name, cst.Attribute))):
                continue
            if not words(group) & (GROUP_WORDS | {"kvgroup"}):
                continue
            heads = query_heads(node)
            if heads is not None:
                kv_heads = cst.BinaryOperation(
                    left=heads,
                    operator=cst.FloorDivide(),
                    right=group,
                    lpar=[cst.LeftParen()],
                    rpar=[cst.RightParen()],
                )
                yield node.deep_replace(found, found.with_changes(operator=cst.Modulo(), right=kv_heads))


class _Fill(cst.CSTTransformer):
    """Puts expressions in place of placeholder names in a parsed template."""

    def __init__(self, fills: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.fills = fills

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.fills.get(original.value, updated)


FAULT = Fault(
    "F15",
    "GQA heads grouped in the other order: tile (KV head h mod Hkv) for interleaved (h // r) or back",
    "real",
    ("GQA-1", "ATTN-4"),
    (
        (cst.Call, operator_gqa_tile_order),
        (cst.Call, operator_gqa_interleaved_order),
        (cst.IndentedBlock, operator_gqa_head_modulo),
        (cst.BinaryOperation, operator_gqa_group_divide),
        (cst.IndentedBlock, operator_kernel_group_divide),
    ),
    "the 'gqa' capability",
    evidence=(
        {"repeat", "interleave"},
        {"repeat", "kv"},
        {"rep"},
        {"kv", "groups"},
        {"expand", "kv"},
        {"kv", "head", "//"},
    ),
)
