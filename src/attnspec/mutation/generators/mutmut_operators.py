"""mutmut's operators and the catalogue's, through mutmut's trampolines, as the engine's generator.

The impl/ campaign (campaigns/campaign.py) copies impl/, specs/ and properties/ into a workspace laid
out as the installed package, and this package beside them as ``attnspec_mutation`` (the name
``mutants`` belongs to mutmut's output folder there).  This module then runs in the workspace:

    python -m attnspec_mutation.generators.mutmut_operators [--faults-only] --max-children N PLAN.json

1. it installs the operator list (mutmut's own unless --faults-only, then the catalogue's) and has
   mutmut generate its copy of the workspace, ``mutants/``, with every function of impl/ a
   trampoline that runs the original or the mutant MUTANT_UNDER_TEST names, read at every call;
2. it writes tags.json: every mutant's operator and the span of the node it replaced.  mutmut
   records neither, so this replays mutmut's own mutant enumeration (``create_mutations``, the code
   path ``mutmut run`` takes) with each operator wrapped so that it notes the nodes it yields, and
   names the mutants the way mutmut does: per top-level function or method,
   ``<mangled name>__mutmut_<i>`` in visiting order.  read_mutants checks the replay against what
   mutmut generated (same mutant names, changed text inside the replayed node);
3. it runs the engine in ``mutants/`` with :class:`Trampolines` as the generator and the pytest
   session of PLAN.json as the test source.

Nothing here may import ``attnspec`` before the engine runs: the tests must import the package
from mutmut's copy.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import sys
import textwrap
import traceback
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from mutmut.mutation import mutators
from mutmut.mutation.diff_apply import generated_function_names
from mutmut.mutation.file_mutation import create_mutations
from mutmut.mutation.trampoline_templates import mangle_function_name
from mutmut.utils.file_utils import walk_mutatable_files
from mutmut.utils.format_utils import get_mutant_name, orig_function_and_class_names_from_key

from .. import faults as catalogue_module
from ..history import code_digest, digest, environment, site_lines, test_fingerprints
from ..history import coverage as tests_by_function
from ..reports.stryker import Mutant, changed_span, fill_result, line_column, offset_of


def operator_table(faults_only: bool) -> list[tuple[type, str, object]]:
    """(node type, name, operator): mutmut's own operators (unless faults_only), then the catalogue."""
    builtin = (
        []
        if faults_only
        else [
            (node_type, op.__name__.removeprefix("operator_"), op)
            for node_type, op in mutators.mutation_operators
        ]
    )
    return builtin + catalogue_module.operator_table()


def tagged(name: str, operator, made: dict):
    """`operator`, noting (original node, mutated node) -> name for every mutant it yields."""

    def tagging_operator(node):
        for mutated in operator(node):
            made[id(node), id(mutated)] = (name, node, mutated)  # the nodes are kept alive here
            yield mutated

    return tagging_operator


def functions_with_keys(module: cst.Module):
    """Top-level functions and class methods with mutmut's mangled names (the ones it mutates)."""
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            yield statement, mangle_function_name(name=statement.name.value, class_name=None)
        elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            for method in statement.body.body:
                if isinstance(method, cst.FunctionDef):
                    yield (
                        method,
                        mangle_function_name(name=method.name.value, class_name=statement.name.value),
                    )


def write_tags(table: list, out: Path) -> None:
    made: dict = {}
    mutators.mutation_operators[:] = [(node_type, tagged(name, op, made)) for node_type, name, op in table]
    tags = {}
    for path in walk_mutatable_files():
        module, mutations, _, _ = create_mutations(str(path), path.read_text())
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        by_function: dict = {}
        for mutation in mutations:
            by_function.setdefault(mutation.contained_by_top_level_function, []).append(mutation)
        for function, key in functions_with_keys(module):
            for i, mutation in enumerate(by_function.get(function, []), start=1):
                name = made[id(mutation.original_node), id(mutation.mutated_node)][0]
                span = positions[mutation.original_node]
                tags[get_mutant_name(path, f"{key}__mutmut_{i}")] = {
                    "operator": name,
                    "node": [span.start.line, span.start.column, span.end.line, span.end.column],
                }
    out.write_text(json.dumps(tags, ensure_ascii=False))


def generate(processes: int) -> None:
    """mutmut's generation step (what `mutmut run` does before it tests): its copy of the sources
    with every mutant and trampoline in ``mutants/``, first on sys.path."""
    from mutmut.__main__ import create_mutants
    from mutmut.mutation.trampoline import set_mutant_under_test
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths

    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    create_mutants(processes)
    print("mutants generated", flush=True)


# --- the generator the engine runs with --------------------------------------------------------


class Trampolines:
    """The engine's generator over mutmut's copy of the workspace: a mutant is switched on by
    naming it to the trampolines; the clean run names the functions each test calls from the
    trampolines' own record of their calls ("stats")."""

    unreached = "Survived"  # mutmut's own accounting: a mutant of a called function is covered
    live_check = "fail"  # with MUTANT_UNDER_TEST=fail every trampoline raises

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def state(self, test_paths: dict[str, Path]) -> dict:
        return campaign_state(self.workspace, test_paths)

    def activate(self, name: str) -> None:
        select_mutant(name)

    @contextmanager
    def recording(self, spans: dict[str, list]):
        """The functions each test calls (the set is cleared before each test), with coverage's
        tracer paused outside every trampolined call when that loses no line: a trace function
        slows every frame down, the tests' and Hypothesis' too (~40 % on the suite), while only the
        trampolined functions' lines are wanted."""
        from mutmut.core import MutmutCallStack
        from mutmut.mutation import trampoline

        select_mutant("stats")
        hits: set[str] = set()
        tracer = sys.gettrace()
        paused = tracer is not None and only_run_inside_their_calls(spans)
        original_reset = MutmutCallStack.reset

        def hit(name: str, caller: str | None = None) -> None:
            hits.add(name)
            if paused and caller is None:  # the outermost trampolined call is about to start
                sys.settrace(tracer)

        def reset(token) -> None:
            original_reset(token)
            if MutmutCallStack.get()[1] == 0:  # ... and has returned
                sys.settrace(None)

        trampoline.record_trampoline_hit = hit
        if paused:
            MutmutCallStack.reset = reset  # type: ignore[method-assign]
            sys.settrace(None)
        try:
            yield hits
        finally:
            MutmutCallStack.reset = original_reset  # type: ignore[method-assign]
            sys.settrace(tracer)
            select_mutant("")


def only_run_inside_their_calls(spans: dict[str, list]) -> bool:
    """Whether every line of these functions (``spans``: function -> [file, first, last line]) runs
    only while the function itself is being called: none holds a nested function or class (called
    later, from anywhere) or is a generator or coroutine (resumed later)."""
    texts: dict[str, list[str]] = {}
    for file, first, last in (span[:3] for span in spans.values()):
        if file not in texts:
            texts[file] = Path(file).read_text(encoding="utf-8").splitlines(keepends=True)
        lines = texts[file]
        try:
            function = ast.parse(textwrap.dedent("".join(lines[first - 1 : last]))).body[0]
        except (SyntaxError, IndexError):
            return False
        if isinstance(function, ast.AsyncFunctionDef):
            return False
        for node in ast.walk(function):
            if node is not function and isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                return False
            if isinstance(node, ast.Yield | ast.YieldFrom):
                return False
    return True


def select_mutant(name: str) -> None:
    """Have mutmut's trampolines run mutant ``name`` ("": the originals; "stats", "fail"): set
    MUTANT_UNDER_TEST, and answer the trampolines with a constant, which otherwise read os.environ
    twice at every call of a function of impl/ (~6 % of a kill-matrix child's time)."""
    from mutmut.mutation import trampoline

    os.environ["MUTANT_UNDER_TEST"] = name
    trampoline.get_mutant_under_test = lambda: name


def generated_spans(mutated: Path) -> tuple[list[str], dict[str, list[int]]]:
    spans = json.loads(mutated.with_name(mutated.name + ".spans").read_text(encoding="utf-8"))["spans"]
    return mutated.read_text(encoding="utf-8").splitlines(keepends=True), spans


def function_text(lines: list[str], spans: dict[str, list[int]], generated: str, plain: str) -> str:
    start, end = spans[generated]
    return "".join(lines[start - 1 : end]).replace(f"def {generated}(", f"def {plain}(", 1)


def campaign_state(workspace: Path, test_paths: dict[str, Path]) -> dict:
    """Fingerprints of everything the results depend on, for the code in ``workspace`` (the
    campaign's copy: attnspec/ as written, mutants/ as mutmut generated it)."""
    from mutmut.utils.format_utils import mangled_name_from_mutant_name

    package = workspace / "attnspec"
    tags = json.loads((workspace / "tags.json").read_text(encoding="utf-8"))
    faults = set(json.loads((workspace / "faults.json").read_text(encoding="utf-8")))
    mutmut_version = metadata.version("mutmut")

    support_files = sorted(
        p
        for folder in ("properties", "specs")
        for p in (package / folder).rglob("*.py")
        if not p.name.startswith("test_")
    )
    support = digest(
        (workspace / "pyproject.toml").read_text(encoding="utf-8"),
        (package / "__init__.py").read_text(encoding="utf-8"),
        *(f"{p.relative_to(package)}\n{p.read_text(encoding='utf-8')}" for p in support_files),
    )
    tests = test_fingerprints(test_paths, support)

    functions: dict[str, str] = {}
    spans: dict[str, list] = {}  # function -> [mutated file, first line, last line] of its original
    mutants: dict[str, dict] = {}
    context: list[str] = []
    for meta in sorted((workspace / "mutants").rglob("*.py.meta")):
        mutated = meta.with_name(meta.name.removesuffix(".meta"))
        names = list(json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"])
        original = (workspace / mutated.relative_to(workspace / "mutants")).read_text(encoding="utf-8")
        if not names:
            context.append(original)
            continue
        lines, generated_at = generated_spans(mutated)
        rest = original
        for name in names:
            function = mangled_name_from_mutant_name(name)
            orig_name, generated = generated_function_names(name)
            plain = orig_function_and_class_names_from_key(name)[0]
            text = function_text(lines, generated_at, orig_name, plain)
            if function not in functions:
                functions[function] = code_digest(text)
                spans[function] = [str(mutated), *generated_at[orig_name]]
                rest = rest.replace(text, f"<{function}>\n", 1)
            operator = tags.get(name, {}).get("operator", "?")
            fault = operator if operator in faults else None
            code = function_text(lines, generated_at, generated, plain)
            mutants[name] = {
                "function": function,
                "code": code_digest(code),
                "site": site_lines(text, code),
                "operator": operator,
                "operator_version": catalogue_module.source_digest() if fault else mutmut_version,
                "fault": fault,
            }
        context.append(rest)  # the module without its mutated functions: constants, imports, classes
    return {
        "fingerprints": {"environment": environment(), "support": support, "impl": digest(*context)},
        "tests": tests,
        "functions": functions,
        "spans": spans,
        "mutants": mutants,
    }


# --- reading the finished workspace (for the reports) ------------------------------------------


def read_span(lines: list[str], span: list[int]) -> str:
    return "".join(lines[span[0] - 1 : span[1]])


def locate(mutant: Mutant, source: str, original_text: str, mutant_text: str, node: list[int] | None) -> None:
    """Fill mutant.start/end/replacement/diff from the two versions of its function."""
    offsets = []
    found = source.find(original_text) if original_text else -1
    while found >= 0:
        offsets.append(found)
        found = source.find(original_text, found + 1)
    if node:  # several identical functions: take the one holding the replayed node
        offsets = [o for o in offsets if line_column(source, o)[0] <= node[0]] or offsets
        offsets = offsets[-1:]
    if len(offsets) != 1:
        mutant.problem = "its function was not found in the original source"
        return
    offset = offsets[0]
    node_span = None
    if node:
        node_span = (offset_of(source, *node[:2]) - offset, offset_of(source, *node[2:]) - offset)
    start, end, mutant.replacement = changed_span(original_text, mutant_text, node_span)
    mutant.start = line_column(source, offset + start)
    mutant.end = line_column(source, offset + end)
    if node and not (
        tuple(node[:2]) <= (mutant.start[0], mutant.start[1] - 1)
        and (mutant.end[0], mutant.end[1] - 1) <= tuple(node[2:])
    ):
        mutant.problem = f"the change at {mutant.start}-{mutant.end} lies outside the replayed node {node}"
    mutated_source = source[:offset] + mutant_text + source[offset + len(original_text) :]
    diff = difflib.unified_diff(
        source.splitlines(),
        mutated_source.splitlines(),
        f"a/{mutant.path}",
        f"b/{mutant.path}",
        n=1,
        lineterm="",
    )
    mutant.diff = "\n".join(diff)


def read_mutants(workspace: Path, results: dict) -> tuple[list[Mutant], dict[str, str]]:
    """(mutants, {source path: original source}); ``results`` is the engine's results.json."""
    tags = json.loads((workspace / "tags.json").read_text(encoding="utf-8"))
    mutated_root = workspace / "mutants"
    coverage = tests_by_function(results["tests"])
    mutants: list[Mutant] = []
    sources: dict[str, str] = {}
    for meta_path in sorted(mutated_root.rglob("*.py.meta")):
        path = meta_path.relative_to(mutated_root).as_posix().removesuffix(".meta")
        names = list(json.loads(meta_path.read_text())["exit_code_by_key"])
        if not names:
            continue
        sources[path] = (workspace / path).read_text()
        spans = json.loads((mutated_root / f"{path}.spans").read_text())["spans"]
        lines = (mutated_root / path).read_text().splitlines(keepends=True)
        for name in names:
            tag = tags.get(name, {})
            mutant = Mutant(name=name, path=path, operator=tag.get("operator", "?"), status="Pending")
            fill_result(mutant, results["mutants"].get(name), coverage)
            if not tag:
                mutant.problem = "the driver's replay did not produce this mutant"
            original_name, generated_name = generated_function_names(name)
            plain_name = orig_function_and_class_names_from_key(name)[0]
            original_text, mutant_text = (
                read_span(lines, spans[generated]).replace(f"def {generated}(", f"def {plain_name}(", 1)
                for generated in (original_name, generated_name)
            )
            locate(mutant, sources[path], original_text, mutant_text, tag.get("node"))
            mutants.append(mutant)
    extra = set(tags) - {mutant.name for mutant in mutants}
    for name in sorted(extra):
        mutants.append(
            Mutant(
                name=name,
                path="?",
                operator=tags[name]["operator"],
                status="Pending",
                problem="replayed by the driver but not generated by mutmut",
            )
        )
    return mutants, sources


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults-only", action="store_true")
    parser.add_argument("--max-children", type=int, required=True)
    parser.add_argument("plan")
    args = parser.parse_args()
    plan_path = Path(args.plan).resolve()  # read from campaigns/, once mutmut made it

    table = operator_table(args.faults_only)
    # The tags are a second pass over the sources, on one core: in a child of its own while mutmut's
    # pool generates the mutants (one file, attention.py, keeps one of its workers busy the longest).
    tagger = os.fork()
    if tagger == 0:
        code = 1
        try:
            write_tags(table, Path("tags.json"))
            code = 0
        except BaseException:  # noqa: BLE001 - the parent reports the exit status
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    # mutmut's file_mutation module holds this very list object: change it in place.
    mutators.mutation_operators[:] = [(node_type, op) for node_type, _, op in table]
    generate(args.max_children)
    _, status = os.waitpid(tagger, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        print("tagging the mutants with their operators failed (above)", flush=True)
        return 2
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    os.chdir("mutants")
    from ..engine import finish
    from ..suites.pytest_suite import main as run_session

    return finish(run_session(plan, Trampolines(Path(plan["workspace"]))))


if __name__ == "__main__":
    sys.exit(main())
