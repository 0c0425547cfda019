"""The fault catalogue: the documented faults of the source chapters, and those seen in real attention
code, as domain mutation operators, one module per fault (``fNN_name.py``: its statement, the
requirements expected to catch it, its operators, its evidence and its generic edits).  This package
collects them: a new fault is a new module here, its idiom tests (tests/mutation/faults/) and a docs
regeneration (docs/reference/faults.md).

Each operator has mutmut's operator shape: a function that takes one libcst node and yields mutated
copies of it, registered as a ``(node type, function)`` pair in mutmut's operator list.  A campaign
calls it on every node of that type inside a function or method body and turns each yielded node into
one mutant.

The operators recognise a fault by what the code does, in the idioms attention code is written in, not
by impl/'s own names: a causal comparison is any order comparison between a key-like and a query-like
index (``key_pos <= query_pos``, ``kv_idx <= q_idx``, ``j <= i``), a mask fill is ``-inf`` in any
spelling, ``torch.finfo(dtype).min`` or a ``min_dtype``-like variable handed to a fill call, the scale
is ``/ sqrt(d)``, ``* scaling``, ``*= sm_scale``, ``d ** -0.5`` or a ``scale=`` argument, and so on
(each operator's docstring lists what it knows).  A fault may have several operators, one per idiom.

An operator that only makes sense over several statements (post-norm, RoPE on V, sinks dropped with
their column) works on a function's ``IndentedBlock`` and yields a whole new body: a mutant swaps one
node of the function, and the body is the smallest node holding every change.

The package imports nothing but libcst: a campaign copies the engine into its workspace, where the
name ``mutants`` belongs to mutmut's output folder.
"""

from __future__ import annotations

import hashlib
import re
from importlib import import_module
from pathlib import Path

import libcst as cst

from .fault import CORE, Fault, Operator

HERE = Path(__file__).parent
MODULE = re.compile(r"f(\d+)_\w+")


def _fault_modules() -> list[str]:
    """The fault modules of this package, in the order of their numbers."""
    names = [path.stem for path in HERE.glob("f*.py") if MODULE.fullmatch(path.stem)]
    return sorted(names, key=lambda name: int(MODULE.fullmatch(name).group(1)))  # type: ignore[union-attr]


def _collected() -> tuple[Fault, ...]:
    faults = tuple(import_module(f"{__name__}.{name}").FAULT for name in _fault_modules())
    ids = [fault.id for fault in faults]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"two fault modules declare the same fault id: {ids}")
    return faults


FAULTS: tuple[Fault, ...] = _collected()
FAULTS_BY_ID = {fault.id: fault for fault in FAULTS}
# the evidence of each fault (generators/evidence.py), and the generic edits of those that have some
EVIDENCE = {fault.id: fault.evidence for fault in FAULTS if fault.evidence}
GENERIC = {fault.id: fault.generic for fault in FAULTS if fault.generic}


def operator_table() -> list[tuple[type[cst.CSTNode], str, Operator]]:
    """(node type, fault id, operator) for every operator of every fault, in catalogue order."""
    return [(node_type, fault.id, op) for fault in FAULTS for node_type, op in fault.operators]


def source_digest() -> str:
    """A digest of the catalogue's code (every module of this package): a campaign's results are
    reused only while it is unchanged."""
    digest = hashlib.sha256()
    for path in sorted(HERE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


__all__ = [
    "CORE",
    "EVIDENCE",
    "FAULTS",
    "FAULTS_BY_ID",
    "GENERIC",
    "Fault",
    "Operator",
    "operator_table",
    "source_digest",
]
