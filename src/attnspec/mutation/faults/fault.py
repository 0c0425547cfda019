"""What a catalogue fault is: its statement, the requirements expected to catch it, its operators (mutmut's
operator shape: a function that takes one libcst node and yields mutated copies of it), where a target
exposes its sites, the evidence that code has its feature, and the generic edits an annotation
(``# attnspec: site F12``) turns on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

Operator = Callable[[cst.CSTNode], Iterator[cst.CSTNode]]
CORE = "the attention core (every target has it)"


@dataclass(frozen=True)
class Fault:
    id: str
    description: str
    source: str  # "ch8": course chapter 8; "book": the AttentionBlock chapter; "real": seen in real code
    kills: tuple[str, ...]  # requirement ids (attnspec/specs/requirements.toml) expected to kill it
    operators: tuple[tuple[type[cst.CSTNode], Operator], ...]
    reached_through: str  # what a target must expose for the kit to exercise the fault's sites
    # the evidence that code has the fault's feature (generators/evidence.py): alternatives, each a set of
    # words that must all be on one line of code; a word is a lower-case part of an identifier
    # (matchers.name_words: attention_mask -> attention, mask), after "=", a whole identifier
    # (=attention_mask), or one of the operators "+", "%", "//" and "(" (a call)
    evidence: tuple[set[str], ...] = ()
    voided_by: frozenset[str] | set[str] = frozenset()  # words that void the evidence on their line
    needs: str | None = None  # a fault whose feature this one's only exists beside (a RoPE offset: RoPE)
    generic: tuple[Operator, ...] = ()  # the structural edits an annotation of the fault turns on (edits.py)
    # a fault of tiled kernels' online softmax (its running max, rescale, exp2, split combine): impl/, which
    # has none, shows no site of it, and the main job's gate does not ask for one (flash-ref's campaign
    # and the Triton corpus grade it)
    kernel_only: bool = False
