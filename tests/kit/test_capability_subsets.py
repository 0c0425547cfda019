"""Zero false failures: a correct target passes the kit whatever subset of capabilities it declares.

The toy kernel (examples/toy_attention.py) is correct and supports every attention-level capability.
Narrowed to a subset (ATTNSPEC_TOY_CAPABILITIES), it declares only that subset and refuses, with a
TypeError, any call that uses a capability beyond it, as a kernel without that support may.  So a run
of the kit against it fails when a property hands a target something it did not declare (float64 to
a float32 kernel, dv != d to one without "value_dim"), when a property's check only holds with a
capability the target lacks (an exact law that float32 breaks where float64 keeps it), or when the
narrowing leaves a strategy too little to draw (Hypothesis's FailedHealthCheck).

Which subsets: every property runs twice, at the smallest declaration it runs under and at the
largest.  The properties are grouped by the capabilities they need (their ``needs`` marks, read from
the source here), and each group runs against the toy narrowed to exactly those capabilities, so that
everything a group does not need is undeclared and refused; then the whole kit runs against the toy
with every capability.  That is one run per group (14 today) plus one, and each property runs twice.
The obvious enumeration (no capability, each alone, all, all but each one: 24 runs of the whole kit)
took 21 minutes under the ci profile on a 2-core machine (6 under the default profile), mostly in the
"all but one" runs, which repeat nearly every property at 150 examples eleven times; this one takes
4.5 minutes (2.5 under the default profile).  What it gives up: a property never runs with some of
the capabilities it does not need declared and others not (say "blind" without "decode"), except
where a group's needs are such a mix.  Every run uses kit_runs.kit_profile(): the ci profile in CI,
quick in a day-to-day run.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from attnspec.protocol.targets import CAPABILITIES
from examples import toy_attention
from tests.fixtures.kit_runs import PROPERTIES, run_properties

TOY = "examples.toy_attention:attention"
TOY_ENV = "ATTNSPEC_TOY_CAPABILITIES"
# What the toy kernel supports, in the order of CAPABILITIES; the properties that need the kit's
# other capabilities (rope, layer, offset, impl) are beyond it and left out.
TOY_CAPABILITIES = tuple(name for name in CAPABILITIES if name in toy_attention.SUPPORTED)


def _needs_in(node: ast.AST) -> set[str]:
    """The capabilities named by every ``....needs(...)`` call within ``node``."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "needs":
            for arg in call.args:
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise ValueError(f"needs() takes capability names as strings, got {ast.unparse(arg)}")
                names.add(arg.value)
    return names


def property_needs() -> dict[str, frozenset[str]]:
    """Node id -> the capabilities the property needs: its own needs marks and its module's
    ``pytestmark``, read from the source of properties/test_*.py."""
    needs = {}
    for path in sorted(PROPERTIES.glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module_needs: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
            ):
                module_needs |= _needs_in(node.value)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                own = set().union(*(_needs_in(decorator) for decorator in node.decorator_list))
                needs[f"{path}::{node.name}"] = frozenset(module_needs | own)
    return needs


def groups() -> dict[tuple[str, ...], list[str]]:
    """Capabilities (in TOY_CAPABILITIES order) -> the node ids of the properties that need exactly
    those, for every property the toy kernel can run."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    for node_id, needs in property_needs().items():
        if needs <= set(TOY_CAPABILITIES):
            grouped.setdefault(tuple(c for c in TOY_CAPABILITIES if c in needs), []).append(node_id)
    return dict(sorted(grouped.items(), key=lambda item: (len(item[0]), item[0])))


def run_toy(capabilities: tuple[str, ...], selection: list[str]) -> subprocess.CompletedProcess:
    """The properties in ``selection`` against the toy kernel declaring ``capabilities``, under
    kit_profile(), as a user runs them (the target checked at load time)."""
    return run_properties(TOY, as_user=True, env={TOY_ENV: ",".join(capabilities)}, selection=selection)


RUNS = [
    pytest.param(capabilities, node_ids, id="+".join(capabilities) or "none")
    for capabilities, node_ids in groups().items()
] + [pytest.param(TOY_CAPABILITIES, [str(PROPERTIES)], id="all")]


@pytest.mark.parametrize("capabilities, selection", RUNS)
def test_a_correct_target_passes_whatever_it_declares(capabilities, selection):
    done = run_toy(capabilities, selection)
    output = done.stdout + done.stderr
    declared = ",".join(capabilities) or "(none)"
    tail = f"{TOY_ENV}={declared}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert "FailedHealthCheck" not in output, tail
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail


def test_every_attention_property_is_in_a_group():
    # The grouping reads the needs marks from the source: a property it missed would never run here.
    grouped = {node_id for node_ids in groups().values() for node_id in node_ids}
    attention_level = {str(PROPERTIES / "test_attention.py"), str(PROPERTIES / "test_gqa_sinks.py")}
    missed = [n for n in property_needs() if n.split("::")[0] in attention_level and n not in grouped]
    assert not missed, f"properties that no group runs: {missed}"
    assert ("weights",) in groups() and () in groups()
