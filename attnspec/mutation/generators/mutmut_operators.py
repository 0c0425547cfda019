"""Runs inside a campaign workspace (copied there as attnspec_driver.py, next to
attnspec_catalogue.py and attnspec_engine.py): installs the operator list, writes tags.json, has
mutmut generate the mutants (its copy of the workspace, ``mutants/``, with every function a
trampoline), then runs the engine there on PLAN.json.

    python attnspec_driver.py [--faults-only] --max-children N PLAN.json

tags.json maps every mutant name to the operator that made it and the span of the node it
replaced.  mutmut records neither, so the driver replays mutmut's own mutant enumeration
(`create_mutations`, the code path `mutmut run` takes) with each operator wrapped so that it
notes the nodes it yields, and names the mutants the way mutmut does: per top-level function
or method, `<mangled name>__mutmut_<i>` in visiting order.  The report checks the replay
against what mutmut generated (same mutant names, changed text inside the replayed node).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

import attnspec_catalogue as catalogue
import attnspec_engine as engine  # imported before mutmut takes the workspace off sys.path
import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from mutmut.mutation import mutators
from mutmut.mutation.file_mutation import create_mutations
from mutmut.mutation.trampoline_templates import mangle_function_name
from mutmut.utils.file_utils import walk_mutatable_files
from mutmut.utils.format_utils import get_mutant_name


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
    return builtin + catalogue.operator_table()


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults-only", action="store_true")
    parser.add_argument("--max-children", type=int, required=True)
    parser.add_argument("plan")
    args = parser.parse_args()
    plan = str(Path(args.plan).resolve())  # read from mutants/, once mutmut made it

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
    os.chdir("mutants")
    return engine.main(plan)


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


if __name__ == "__main__":
    sys.exit(main())
