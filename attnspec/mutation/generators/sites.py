"""Where the fault catalogue finds sites in any Python source file, and the mutants it makes there.

This is the catalogue applied without mutmut, for code that does not live in this repository (a
modeling file of an installed package, a user's kernel): every top-level function and every
method of a top-level class is a candidate, decorated ones included (mutmut skips those, and
real code decorates its forward methods), and each operator of each fault runs on every node of
its type inside the function's body.  A mutant keeps the whole mutated module source; the test
runner compiles it and swaps the mutated function's code into the live function.

A mutant's name is ``<module>.<qualname>__<fault>_<n>``, n counting that fault's mutants in that
function, so an edit to one function renames none of the others' mutants.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .catalogue import FAULTS, operator_table
from .report import changed_span, line_column, offset_of


@dataclass
class SiteMutant:
    name: str
    fault: str
    module: str  # the module it belongs to, as imported (transformers.models.llama.modeling_llama)
    qualname: str  # of the function whose code it replaces (LlamaAttention.forward)
    path: str  # the file, as shown in reports
    start: tuple[int, int]  # 1-based line and column of the changed span, end exclusive
    end: tuple[int, int]
    replacement: str
    diff: str
    source: str = field(repr=False)  # the whole mutated module

    @property
    def lines(self) -> range:
        """The original lines the change touches (a pure insertion: the line it is glued to)."""
        return range(self.start[0], max(self.end[0], self.start[0]) + 1)


class _Nodes(cst.CSTVisitor):
    """Every node of a function body, in visiting order (nested functions and lambdas included)."""

    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return True


def functions(module: cst.Module) -> list[tuple[str, cst.FunctionDef]]:
    """(qualname, node) of every top-level function and every method of a top-level class."""
    found = []
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            found.append((statement.name.value, statement))
        elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef):
                    found.append((f"{statement.name.value}.{member.name.value}", member))
    return found


def mutants_in(
    source: str, module_name: str, path: str, only: set[str] | None = None, faults: set[str] | None = None
) -> list[SiteMutant]:
    """Every catalogue mutant of ``source`` (optionally only in the functions named in ``only``
    and of the fault ids in ``faults``), in file order."""
    module = cst.parse_module(source)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    table = [(t, fault, op) for t, fault, op in operator_table() if faults is None or fault in faults]
    made: list[SiteMutant] = []
    for qualname, function in functions(module):
        if only is not None and qualname not in only:
            continue
        visitor = _Nodes()
        function.body.visit(visitor)
        count: dict[str, int] = {}
        seen: set[str] = set()
        for node in visitor.nodes:
            span = positions[node]
            node_span = (
                offset_of(source, span.start.line, span.start.column),
                offset_of(source, span.end.line, span.end.column),
            )
            for node_type, fault, operator in table:
                if not isinstance(node, node_type):
                    continue
                for mutated in operator(node):
                    text = module.deep_replace(node, mutated).code
                    if text == source or text in seen:  # no change, or the same mutant by another idiom
                        continue
                    seen.add(text)
                    compile(text, path, "exec")  # an operator that writes invalid Python is a bug here
                    count[fault] = count.get(fault, 0) + 1
                    start, end, replacement = changed_span(source, text, node_span)
                    diff = difflib.unified_diff(
                        source.splitlines(), text.splitlines(), f"a/{path}", f"b/{path}", n=1, lineterm=""
                    )
                    made.append(
                        SiteMutant(
                            name=f"{module_name}.{qualname}__{fault}_{count[fault]}",
                            fault=fault,
                            module=module_name,
                            qualname=qualname,
                            path=path,
                            start=line_column(source, start),
                            end=line_column(source, end),
                            replacement=replacement,
                            diff="\n".join(diff),
                            source=text,
                        )
                    )
    made.sort(key=lambda mutant: (mutant.start, mutant.name))
    return made


def fault_reach(paths: list[Path]) -> dict[str, int]:
    """{fault id: mutants} over every function of the given files (the catalogue's reach there)."""
    reach = {fault.id: 0 for fault in FAULTS}
    for path in paths:
        for mutant in mutants_in(path.read_text(encoding="utf-8"), path.stem, str(path)):
            reach[mutant.fault] += 1
    return reach
