"""F19: causal flag lost on the way to attention (causal=causal or self.is_causal set to False)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import keyword_nulled
from .fault import Fault
from .matchers import CAUSAL_KEYWORDS, causal_keyword, func_name, replace_arg


def operator_causal_flag_lost(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The causal flag lost on its way: f(..., causal=causal) / is_causal=self.is_causal / causal=True
    -> False, a Triton launch's kernel[grid](..., IS_CAUSAL=causal) -> False, and self.is_causal = True
    -> False (F1 has the literal is_causal=True of a call)."""
    if isinstance(node, cst.Call):
        arg = causal_keyword(node)
        if arg is None or m.matches(arg.value, m.Name("False")):
            return
        if arg.keyword.value == "is_causal" and m.matches(arg.value, m.Name("True")):
            return  # F1's
        yield replace_arg(node, arg, cst.Name("False"))
    elif isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if (
            func_name(target) in CAUSAL_KEYWORDS
            and isinstance(node.value, (cst.Name, cst.Attribute, cst.UnaryOperation))
            and not m.matches(node.value, m.Name("False"))
        ):  # a flag (True, config.is_decoder, not bidirectional), not a mask named causal
            yield node.with_changes(value=cst.Name("False"))


FAULT = Fault(
    "F19",
    "causal flag lost on the way to attention (causal=causal or self.is_causal set to False)",
    "real",
    ("MOD-1", "BLOCK-3", "ATTN-2"),
    ((cst.Call, operator_causal_flag_lost), (cst.Assign, operator_causal_flag_lost)),
    "a module or layer whose code forwards the causal flag (SDPA's is_causal read from it)",
    # a flag handed to attention: _attn_fwd(q, k, v, causal), attention(q, k, v, causal)
    evidence=({"is", "causal"}, {"causal", "self"}, {"causal", "attn", "("}, {"causal", "attention", "("}),
    generic=(keyword_nulled,),
)
