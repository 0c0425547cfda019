"""What a campaign's results depend on, so that ``--incremental`` re-runs only what changed and
``--shard`` splits the mutants the same way on every machine.

A generator describes its campaign as a *state* (generators/: mutmut's workspace, or the sites in
the given files): fingerprints of the world (the environment, the suite's support code, the mutated
files' module-level code), of every test, of every mutated function, the span of each function,
and per mutant its function, code, site lines, operator and the operator's version.

A mutant's previous result is reused when all of these are unchanged (StrykerJS's rule):
- the source of the function it mutates, and its own code (so the operator made the same change);
- its operator: the catalogue's source for a catalogue fault, mutmut's version for mutmut's own;
- for a mutant killed up to its first failure, its killing test, still covering it and with the same
  fingerprint (its module's source, the test modules it imports, and the suite's support code:
  every other file of the suite, the pytest configuration); for any other (a survivor, a mutant no
  test ran, a kill-matrix row), the tests that cover it: the same node ids, each with the same
  fingerprint;
- the matrix: a mutant graded up to its first failure has no kill-matrix row to give.
Only Killed, Survived and NoCoverage are reused; a Timeout or an error is run again.  Anything that
changes every result (the versions of Python and the packages, the mutated files' module-level
code, which no function hash covers, the support code) makes a full campaign.

The clean run is incremental on the same terms: a test runs again when its fingerprint changed or
when it called a function whose source changed (its coverage may have changed); every other test
keeps its previous coverage and duration (the tests are deterministic under the mutation profile).

As in Stryker, a mutant is judged by its function and its tests: when another function that those
tests also run changes, the reused result is the one of the previous code.  A full campaign (CI's
main job) makes no such assumption.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import platform
import textwrap
import zlib
from importlib import metadata
from pathlib import Path

VERSION = 1
PACKAGES = ("torch", "hypothesis", "pytest", "numpy", "mutmut", "libcst")
REUSABLE = ("Killed", "Survived", "NoCoverage")
RESULT_FIELDS = ("status", "failures", "tests_run", "seconds", "matrix")


def digest(*texts: str) -> str:
    sha = hashlib.sha256()
    for text in texts:
        sha.update(text.encode("utf-8"))
        sha.update(b"\0")
    return sha.hexdigest()[:20]


def code_digest(function_text: str) -> str:
    """The digest of a function's code: its syntax tree without its docstring, so that a change to
    its docstring, its comments or its layout changes no digest (and re-runs no mutant); its text's
    digest when it does not parse on its own."""
    try:
        tree = ast.parse(textwrap.dedent(function_text))
    except SyntaxError:
        return digest(function_text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str) and len(body) > 1:
                    node.body = body[1:]
    return digest(ast.dump(tree))


def shard_of(name: str, count: int) -> int:
    """The shard (1..count) of a mutant: a stable hash of its name, the same on every machine."""
    return zlib.crc32(name.encode("utf-8")) % count + 1


def in_shard(name: str, shard: list[int] | None) -> bool:
    return shard is None or shard_of(name, shard[1]) == shard[0]


def environment() -> str:
    versions = [platform.python_version()]
    for package in PACKAGES:
        try:
            versions.append(f"{package}=={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} missing")
    return digest(*versions)


def imported_test_modules(source: str) -> set[str]:
    """Names of the test_*.py modules a test module imports (their tests' helpers are its code too)."""
    names: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # not Python (a command's own record of itself): no test modules it imports
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.name for a in node.names} | {(node.module or "").rpartition(".")[2]}
        elif isinstance(node, ast.Import):
            names |= {a.name.rpartition(".")[2] for a in node.names}
    return {name for name in names if name.startswith("test_")}


def test_fingerprints(test_paths: dict[str, Path], support: str) -> dict[str, str]:
    """Per test: its module's source, the test modules it imports and the suite's ``support``."""
    modules: dict[Path, str] = {}
    for path in test_paths.values():
        if path not in modules:
            source = path.read_text(encoding="utf-8")
            imported = sorted(imported_test_modules(source))
            texts = [path.with_name(f"{name}.py") for name in imported]
            modules[path] = digest(
                support, source, *(p.read_text(encoding="utf-8") for p in texts if p.exists())
            )
    return {nodeid: modules[path] for nodeid, path in test_paths.items()}


def site_lines(original: str, mutant: str) -> list[int] | None:
    """The lines of a mutant's function (0 = its ``def`` line) that a test must execute for the
    mutant to change anything: every statement that holds a changed line (for a compound
    statement, its header: the ``if`` and its condition).  None when the change is in the
    signature (a default value acts on every call) or cannot be placed.

    A test that executes none of these lines in the clean run runs the mutant's function exactly
    as the original, so it passes as in the clean run: the tests are deterministic."""
    old, new = original.splitlines(), mutant.splitlines()
    changed: set[int] = set()  # 1-based lines of the original
    inserted: list[int] = []  # new lines between original lines i and i + 1
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            changed |= set(range(i1 + 1, i2 + 1))
        else:
            inserted.append(i1)
    try:
        function = ast.parse(textwrap.dedent(original)).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    for point in inserted:
        changed |= around_insertion(old, point, function.body[0].lineno)
    if not changed:
        return None
    if min(changed) < function.body[0].lineno:
        return None  # the signature
    statements = [node for node in ast.walk(function) if isinstance(node, ast.stmt) and node is not function]
    site: set[int] = set()
    for line in changed:
        holding = [node for node in statements if node.lineno <= line <= (node.end_lineno or node.lineno)]
        if not holding:
            return None
        inner = min(holding, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)
        body = getattr(inner, "body", None)
        last = (inner.end_lineno or inner.lineno) if not body else body[0].lineno - 1
        site |= set(range(inner.lineno, max(inner.lineno, last) + 1))
    return sorted(line - 1 for line in site)


def around_insertion(lines: list[str], point: int, body: int) -> set[int]:
    """The code lines around new lines inserted after line ``point`` (1-based) of a function whose
    body starts on line ``body``: the last one before (the statement that runs just before them, or
    the header of their block) and the first one after, skipping blank and comment lines (which no
    test "executes": an insertion glued to a comment was reported not exercised while every test
    ran it).  At the top of the body, only the line after: the one before is the signature."""

    def code(number: int) -> bool:
        text = lines[number - 1].strip()
        return bool(text) and not text.startswith("#")

    before = next((n for n in range(point, 0, -1) if code(n)), None)
    after = next((n for n in range(point + 1, len(lines) + 1) if code(n)), None)
    found = {n for n in (before, after) if n is not None}
    if before is not None and before < body:
        found.discard(before)
    return found


def function_site(original_module: str, mutated_module: str, first: int, last: int) -> list[int] | None:
    """``site_lines`` of the function on lines ``first``..``last`` (1-based) of a module and of the
    same function in the mutated module (the mutation is inside it)."""
    old, new = original_module.splitlines(), mutated_module.splitlines()
    end = last + len(new) - len(old)
    return site_lines("\n".join(old[first - 1 : last]), "\n".join(new[first - 1 : end]))


def load(path: str | None) -> dict | None:
    """A previous run's results, or None when there is none or it cannot serve (an error, another
    version of this format)."""
    if not path or not Path(path).exists():
        return None
    try:
        previous = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError:
        return None
    if previous.get("version") != VERSION or "error" in previous:
        return None
    return previous


WORLD = {
    "environment": "the versions of Python or of the packages",
    "support": "the suite's support code (its files outside the test modules)",
    "impl": "the mutated files' module-level code",
}


def why_not_reused(state: dict, previous: dict | None) -> str | None:
    """Why a previous run's results cannot serve at all (None when they can)."""
    if previous is None:
        return "no previous results that this version can read"
    changed = [WORLD[key] for key in WORLD if previous["fingerprints"].get(key) != state["fingerprints"][key]]
    return "changed since the previous run: " + "; ".join(changed) if changed else None


def same_world(state: dict, previous: dict | None) -> bool:
    return why_not_reused(state, previous) is None


def changed_functions(state: dict, previous: dict) -> set[str]:
    old, new = previous["functions"], state["functions"]
    return {f for f in set(old) | set(new) if old.get(f) != new.get(f)}


def tests_to_trace(state: dict, previous: dict | None) -> set[str]:
    """The tests the clean run must run: all of them, or under --incremental the changed ones and
    the ones that called a changed function."""
    if not same_world(state, previous):
        return set(state["tests"])
    assert previous is not None
    changed = changed_functions(state, previous)
    old_tests = previous["tests"]
    return {
        nodeid
        for nodeid, fingerprint in state["tests"].items()
        if nodeid not in old_tests
        or old_tests[nodeid].get("fingerprint") != fingerprint
        or changed & set(old_tests[nodeid]["functions"])
    }


def merge_tests(state: dict, previous: dict | None, traced: dict[str, dict]) -> dict[str, dict]:
    """Per test: fingerprint, duration, functions called, requirements (traced now, or kept)."""
    tests = {}
    for nodeid, fingerprint in state["tests"].items():
        entry = traced.get(nodeid)
        if entry is None:
            assert previous is not None
            entry = {k: v for k, v in previous["tests"][nodeid].items() if k != "fingerprint"}
        tests[nodeid] = dict(entry, fingerprint=fingerprint)
    return tests


def coverage(tests: dict[str, dict]) -> dict[str, list[str]]:
    """function -> the tests that call it."""
    by_function: dict[str, list[str]] = {}
    for nodeid, entry in tests.items():
        for function in entry["functions"]:
            by_function.setdefault(function, []).append(nodeid)
    return {function: sorted(nodeids) for function, nodeids in by_function.items()}


def reaching(mutant: dict, covering: list[str], tests: dict[str, dict]) -> list[str]:
    """The covering tests that execute the mutant's site (all of them when it has none: a change in
    the signature); the others pass as in the clean run (site_lines)."""
    if mutant["site"] is None:
        return list(covering)
    site = set(mutant["site"])
    return [t for t in covering if site & set(tests[t].get("lines", {}).get(mutant["function"], ()))]


def previous_killers(previous: dict | None, coverage: dict[str, list[str]]) -> dict[str, list[str]]:
    """function -> the tests that killed its mutants in the previous run and still cover it: a
    mutant of a changed function tries them first (the order of its tests, never its status)."""
    killers: dict[str, list[str]] = {}
    for entry in (previous or {}).get("mutants", {}).values():
        covering = coverage.get(entry["function"], [])
        for failure in entry.get("failures", [])[:1]:
            if failure[0] in covering and failure[0] not in killers.get(entry["function"], []):
                killers.setdefault(entry["function"], []).append(failure[0])
    return killers


def own_killers(previous: dict | None) -> dict[str, list[str]]:
    """mutant -> the test that killed it in the previous run (its first failing test)."""
    return {
        name: [entry["failures"][0][0]]
        for name, entry in (previous or {}).get("mutants", {}).items()
        if entry.get("failures")
    }


def reusable(
    name: str, entry: dict, state: dict, previous: dict | None, old_coverage: dict[str, list[str]]
) -> dict | None:
    """The previous result of mutant ``name`` (``entry``: its current fingerprints and covering
    tests; ``old_coverage``: the previous run's tests of each function), when nothing it depends on
    changed; else None."""
    if not same_world(state, previous):
        return None
    assert previous is not None
    old = previous["mutants"].get(name)
    if old is None or not unchanged(entry, old, state, previous, old_coverage):
        return None
    return {key: old[key] for key in RESULT_FIELDS if key in old}


def unchanged(
    entry: dict, old: dict, state: dict, previous: dict, old_coverage: dict[str, list[str]]
) -> bool:
    if old.get("status") not in REUSABLE:
        return False
    if any(old.get(key) != entry[key] for key in ("function", "code", "operator", "operator_version")):
        return False
    if state["functions"].get(entry["function"]) != previous["functions"].get(entry["function"]):
        return False
    if entry["matrix"] and not old.get("matrix"):
        return False
    killers = {failure[0] for failure in old.get("failures", [])}
    if not killers <= set(entry["covering"]):
        return False  # a killing test that no longer covers it
    # A mutant killed up to its first failure is killed again by its unchanged killing test: another
    # test's coverage of its function changes nothing (the calls a module's fixture makes go to
    # whichever of the module's tests runs first, so re-tracing some of them moves a constructor's
    # covering tests with no test changed).  A survivor, a mutant no test ran and a kill-matrix row
    # need the same covering tests: one that covers it now may kill it, or add to the row.
    if old.get("status") == "Killed" and not old.get("matrix"):
        needed = killers
    elif old_coverage.get(old["function"], []) != entry["covering"]:
        return False
    else:
        needed = set(entry["covering"])
    fingerprints = state["tests"]
    return all(previous["tests"].get(t, {}).get("fingerprint") == fingerprints.get(t) for t in needed)
