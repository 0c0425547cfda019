"""The catalogue's mutants at their sites in any Python file, swapped into the live function at
run time: the engine's generator for code that does not live in this repository (a modeling file
of an installed package, a user's kernel or module), the user's files never written.

Every top-level function and every method of a top-level class is a candidate, decorated ones
included (mutmut skips those, and real code decorates its forward methods), and each operator of
each fault runs on every node of its type inside the function's body.  A mutant keeps the whole
mutated module source; :class:`CodeSwap` compiles it and puts the mutated function's code into the
live function (so every reference to it, an adapter's or a test's included, runs the mutant), and
for a test command that runs in other processes, exports it to them (suites/command.py).

A mutant's name is ``<module>.<qualname>__<fault>_<n>``, n counting that fault's mutants in that
function, so an edit to one function renames none of the others' mutants.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import subprocess
import sys
import types
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .. import history
from ..faults import GENERIC, operator_table, source_digest
from ..faults.annotations import annotations
from ..reports.stryker import changed_span, line_column, offset_of


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


def function_spans(source: str) -> dict[str, tuple[int, int, int]]:
    """qualname -> (its ``def`` line, its last line, its first body line) for every candidate."""
    module = cst.parse_module(source)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    spans = {}
    for qualname, node in functions(module):
        body = node.body.body[0] if isinstance(node.body, cst.IndentedBlock) else node.body
        spans[qualname] = (positions[node].start.line, positions[node].end.line, positions[body].start.line)
    return spans


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
    annotated = {
        line: {fault for fault in named if faults is None or fault in faults}
        for line, named in annotations(source).items()
    }
    made: list[SiteMutant] = []
    for qualname, function in functions(module):
        if only is not None and qualname not in only:
            continue
        visitor = _Nodes()
        function.body.visit(visitor)
        found = [
            (node, fault, mutated)
            for node in visitor.nodes
            for node_type, fault, operator in table
            if isinstance(node, node_type)
            for mutated in operator(node)
        ]
        where = (module_name, qualname, path)
        here = placed(source, module, positions, where, found, [])
        # then the annotated lines the operators left without a mutant of the fault named there
        generic = [
            (node, fault, mutated)
            for node in visitor.nodes
            for fault in sorted(annotated.get(positions[node].start.line, ()))
            if not any(m.fault == fault and positions[node].start.line in m.lines for m in here)
            for operator in GENERIC.get(fault, ())
            for mutated in operator(node)
        ]
        made += placed(source, module, positions, where, generic, here)
    made.sort(key=lambda mutant: (mutant.start, mutant.name))
    return made


def placed(
    source: str,
    module: cst.Module,
    positions: dict,
    where: tuple[str, str, str],
    found: list[tuple[cst.CSTNode, str, cst.CSTNode]],
    before: list[SiteMutant],
) -> list[SiteMutant]:
    """``before`` and then the mutants that ``found`` (node, fault, mutated node) make in one function
    (``where``: its module, qualname and shown path), numbered on from ``before``'s."""
    module_name, qualname, path = where
    made = list(before)
    seen = {mutant.source for mutant in made}
    count: dict[str, int] = {}
    for mutant in made:
        count[mutant.fault] = count.get(mutant.fault, 0) + 1
    for node, fault, mutated in found:
        text = module.deep_replace(node, mutated).code
        if text == source or text in seen:  # no change, or the same mutant by another idiom
            continue
        seen.add(text)
        compile(text, path, "exec")  # an operator that writes invalid Python is a bug here
        count[fault] = count.get(fault, 0) + 1
        span = positions[node]
        node_span = (
            offset_of(source, span.start.line, span.start.column),
            offset_of(source, span.end.line, span.end.column),
        )
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
    return made


def changed_since(ref: str, file: Path, spans: dict[str, tuple[int, int, int]]) -> set[str]:
    """The functions of ``file`` (qualnames, from ``spans``) whose lines changed since the git
    ``ref`` (the working tree against it, uncommitted edits included); every function of a file git
    does not know at ``ref``."""
    where = file.resolve().parent
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        known = subprocess.run(
            ["git", "cat-file", "-e", f"{ref}:{file.resolve().relative_to(Path(top).resolve()).as_posix()}"],
            cwd=where,
            capture_output=True,
        )
        diff = subprocess.run(
            ["git", "diff", "--unified=0", "--no-color", ref, "--", str(file.resolve())],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError, ValueError) as error:
        detail = getattr(error, "stderr", "") or error
        raise ValueError(f"--since {ref}: git cannot compare {file} ({str(detail).strip()})") from None
    if known.returncode != 0:
        return set(spans)
    changed: set[int] = set()
    for line in diff.splitlines():
        if line.startswith("@@"):
            new = line.split("+", 1)[1].split(" ", 1)[0]
            start, _, count = new.partition(",")
            length = int(count) if count else 1
            # a pure deletion (length 0) touches the line it follows
            changed |= set(range(int(start), int(start) + max(length, 1)))
    return {name for name, (first, last, _) in spans.items() if any(first <= n <= last for n in changed)}


# --- the generator the engine runs with --------------------------------------------------------


def find_code(code: types.CodeType, qualname: str) -> types.CodeType | None:
    """The code object of ``qualname`` among the constants of a module's (or a class's) code."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_qualname == qualname:
                return const
            inner = find_code(const, qualname)
            if inner is not None:
                return inner
    return None


def live_function(module_name: str, qualname: str) -> types.FunctionType:
    """The function object that runs ``module.qualname``, under any decorators that wrap it."""
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = vars(obj)[part] if isinstance(obj, type) and part in vars(obj) else getattr(obj, part)
    obj = getattr(obj, "__func__", obj)  # staticmethod, classmethod
    obj = getattr(obj, "fget", obj)  # property
    found = unwrapped(obj, qualname)
    if found is None:
        raise LookupError(f"{module_name}.{qualname} is wrapped by {obj!r}, which does not expose it")
    return found


def unwrapped(obj: object, qualname: str) -> types.FunctionType | None:
    """The function of ``qualname`` under the wrappers around it: ``obj`` itself, what a wrapper
    names in ``__wrapped__``, or a function a wrapper keeps in its closure (decorators that do not
    set ``__wrapped__``: an ``__init__`` replaced by one that calls the original, or a function
    turned into a callable module whose ``forward`` calls it)."""
    queue, seen = [obj], set()
    while queue and len(seen) < 64:
        obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            if obj.__code__.co_qualname == qualname:
                return obj
            queue += [cell.cell_contents for cell in obj.__closure__ or () if cell_filled(cell)]
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            queue.append(wrapped)
        if not isinstance(obj, (types.FunctionType, type)):
            methods = vars(type(obj))
            queue += [methods[name] for name in ("forward", "__call__") if name in methods]
    return None


def cell_filled(cell: types.CellType) -> bool:
    try:
        return cell.cell_contents is not cell
    except ValueError:  # a closure variable not bound yet
        return False


def install(mutant: dict) -> None:
    """Put the mutant's code (``file``: its whole mutated module) into the live function it mutates, or
    into the Triton kernel it mutates (triton_kernel)."""
    source = Path(mutant["file"]).read_text(encoding="utf-8")
    code = find_code(compile(source, mutant["original"], "exec"), mutant["qualname"])
    if code is None:
        raise LookupError(f"{mutant['qualname']} not found in the mutated module")
    kernel = triton_kernel(mutant["module"], mutant["qualname"])
    if kernel is not None:
        install_kernel(kernel, mutant)
        return
    function = live_function(mutant["module"], mutant["qualname"])
    if code.co_freevars != function.__code__.co_freevars:
        raise LookupError(f"{mutant['qualname']}: the mutant's closure differs from the function's")
    function.__code__ = code


def triton_kernel(module_name: str, qualname: str) -> object | None:
    """The ``@triton.jit`` kernel that ``module.qualname`` is (under triton.autotune's and
    triton.heuristics' wrappers: the object whose ``fn`` is the function), or None for anything else."""
    if "triton" not in sys.modules or "." in qualname:
        return None
    from triton.runtime.jit import JITFunction

    try:
        obj = getattr(importlib.import_module(module_name), qualname)
    except (ImportError, AttributeError):
        return None
    interpreted = sys.modules.get("triton.runtime.interpreter")
    kinds = (JITFunction, *([interpreted.InterpretedFunction] if interpreted else []))
    for _ in range(4):
        if isinstance(obj, kinds):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def install_kernel(kernel, mutant: dict) -> None:
    """A Triton kernel reads its function's source, not its code: Triton's interpreter parses it again
    when it first runs the kernel, and the compiler compiles the text it kept.  The kernel is given the
    mutated function, compiled from the mutated module's own file (``file``, whose text holds it).  A
    kernel compiled for a GPU is refused: run the tests with TRITON_INTERPRET=1 to grade it."""
    if not hasattr(kernel, "rewriter"):
        raise LookupError(
            f"{mutant['qualname']} is a Triton kernel compiled for a GPU: run the tests under "
            "TRITON_INTERPRET=1 (Triton's interpreter) to grade its mutants"
        )
    from triton.runtime.interpreter import FunctionRewriter

    source = Path(mutant["file"]).read_text(encoding="utf-8")
    code = find_code(compile(source, mutant["file"], "exec"), mutant["qualname"])
    old = kernel.fn
    if code is None or code.co_freevars != old.__code__.co_freevars:
        raise LookupError(f"{mutant['qualname']}: the mutant's kernel differs from the kernel's signature")
    new = types.FunctionType(code, old.__globals__, old.__name__, old.__defaults__, old.__closure__)
    new.__kwdefaults__, new.__annotations__ = old.__kwdefaults__, old.__annotations__  # tl.constexpr marks
    new.__qualname__, new.__module__ = old.__qualname__, old.__module__
    kernel.fn = new
    kernel.rewriter = FunctionRewriter(new, **kernel.kwargs)


ACTIVE = "ATTNSPEC_MUTANT"  # the active mutant (JSON of its plan entry) for processes a command starts


class CodeSwap:
    """The engine's generator over planned site mutants (the plan's ``mutants``, ``functions`` and
    ``support`` entries, written by campaign.py)."""

    unreached = "NoCoverage"  # a mutant whose lines no test executes is not exercised
    live_check = None

    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.by_name = {mutant["name"]: mutant for mutant in plan["mutants"]}

    def state(self, test_paths: dict[str, Path]) -> dict:
        functions = self.plan["functions"]  # key -> {file, first, last, body, digest}
        mutants = {}
        for mutant in self.plan["mutants"]:
            mutants[mutant["name"]] = {
                "function": mutant["function"],
                "code": mutant["code"],
                "site": mutant["site"],  # campaign.write_plan: history.function_site
                "operator": mutant["fault"],
                "operator_version": source_digest(),
                "fault": mutant["fault"],
            }
        support = history.digest(*self.plan["support"])
        return {
            "fingerprints": {
                "environment": history.environment(),
                "support": support,
                "impl": self.plan["context"],
            },
            "tests": history.test_fingerprints(test_paths, support),
            "functions": {key: span["digest"] for key, span in functions.items()},
            "spans": {key: [s["file"], s["first"], s["last"], s["body"]] for key, s in functions.items()},
            "mutants": mutants,
        }

    def settle(self) -> None:
        """Each mutant's module under the name the tests imported its file by (called once the clean
        run's modules are imported here).  The planned name comes from the ``__init__.py`` files above
        the file; a namespace package has none (keras' sdist: ``keras/src/...`` imported as
        ``keras.src...``, planned as ``src...``): the mutants went into a second copy of the module
        that no test ran, and every one of them survived."""
        by_file: dict[str, str] = {}
        for module_name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                by_file.setdefault(os.path.realpath(file), module_name)
        for mutant in self.plan["mutants"]:
            original = os.path.realpath(mutant["original"])
            planned = getattr(sys.modules.get(mutant["module"]), "__file__", None)
            if isinstance(planned, str) and os.path.realpath(planned) == original:
                continue
            if original in by_file:
                mutant["module"] = by_file[original]

    def activate(self, name: str) -> None:
        mutant = self.by_name[name]
        os.environ[ACTIVE] = json.dumps(mutant)
        os.environ["MUTANT_UNDER_TEST"] = name
        install(mutant)

    def recording(self, spans: dict[str, list]):
        return nullcontext(None)  # the functions a test calls: the body lines it executes
