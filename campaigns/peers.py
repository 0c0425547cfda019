"""The kit measured against the correctness recipes its peers use, on the same corpus of targets.

Two recipes, written here from their projects' documented rules (not from their code):

- ``kernelbench_check``: KernelBench's correctness rule.  One fixed problem (B=2, H=8 query and KV
  heads, Tq = Tk = 128, d=64, causal), inputs drawn from U[0, 1), five trials of different seeds;
  a trial passes when the output has the reference's shape and ``torch.allclose(out, ref)`` holds
  with atol = rtol = 1e-4 in float32, 1e-2 in float16 and bfloat16 (run only for a target that
  declares "float16").  The reference is torch's F.scaled_dot_product_attention under attnspec's
  conventions (the ``torch`` adapter), run in the tested dtype, as KernelBench runs its reference
  model in the precision under test.
- ``flash_grid_check``: FlashAttention's test rule over a grid of its kind: lengths (Tq, Tk) that
  include 1 and odd lengths in the hundreds, head dims 32, 59 and 64, MHA/GQA/MQA, causal and local
  (windowed) attention, sinks, non-causal attention, standard normal inputs in bfloat16 (a few in
  float16) for a target that declares "float16", else in float32.  A case passes when

      max|out - golden| <= 2 * max|ref_lowp - golden| + 2 * max|(g + 0.3) - 0.3 - g|

  where golden is attnspec's float64 oracle (``attention_oracle_by_rows``; FlashAttention's golden is
  the same reference upcast to float32, which for float32 targets would be no golden at all),
  ref_lowp a plain eager attention computed wholly in the tested dtype with the other order of
  operations (the scale applied to k, not q), and the last term FlashAttention's floor: twice the
  rounding error of the tested dtype near 0.3 (g: golden rounded to that dtype).

Both recipes generate only cases inside the target's declared capabilities: a peer recipe must not
fail a target for something it never claimed.  A target that raises, or returns another shape or a
non-finite value, fails the case.  The FlashAttention grid stops at a target's first failing case.

``python -m campaigns.peers --table`` runs both recipes and the kit on the
corpus (CORRECT, the broken kernels and the broken targets), writes peers-table.json beside this file
and the table between the markers of docs/explanation/peers.md; test_peers.py recomputes the
recipes' verdicts and checks them, and the kit's, against that file.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from attnspec.adapters import torch_sdpa
from attnspec.kit.loading import load
from attnspec.protocol.memory_layouts import as_given
from attnspec.protocol.targets import Target
from attnspec.specs.oracle import attention_oracle_by_rows
from examples.zoo import KERNELS as ZOO_KERNELS
from tests.fixtures import broken_kernels, broken_targets

# --- the corpus -------------------------------------------------------------------------------------

# Correct targets: each passes the kit (test_broken_kernels.py, test_conformance.py,
# test_capability_subsets.py, test_zoo.py).  A kernel added to the zoo's list (test_zoo.KERNELS) joins the
# corpus; `--table --only NAME` adds its row.  The recipes grade attention functions: no module target.
# Neighbours that declare their convention (declared_targets.py) are correct under it, for the kit and,
# through the same translation (targets.load), for the recipes.
DECLARED = (
    "tests.fixtures.declared_targets:INCLUSIVE_WINDOW",
    "tests.fixtures.declared_targets:TOP_LEFT",
)
CORRECT = ("flash-ref", "torch", "examples.toy_attention:attention", *ZOO_KERNELS, *DECLARED)
BROKEN_KERNELS = {
    f"tests.fixtures.broken_kernels:{name}": name for name in broken_kernels.BUGS
}
# The broken copies of the torch adapter whose attention is broken (the RoPE- and layer-only ones are
# the adapter's correct attention).
BROKEN_TARGETS = {
    f"tests.fixtures.broken_targets:{name}": name
    for name, obj in vars(broken_targets).items()
    if isinstance(obj, Target) and obj.attention not in (torch_sdpa.attention, None)
}


def corpus() -> dict[str, str]:
    """Target name -> "correct" or "broken", in the table's order."""
    return {
        **{name: "correct" for name in CORRECT},
        **{name: "broken" for name in BROKEN_KERNELS},
        **{name: "broken" for name in BROKEN_TARGETS},
    }


HERE = Path(__file__).resolve().parent
TABLE_JSON = HERE / "peers-table.json"
PAGE = HERE.parent / "docs" / "explanation" / "peers.md"
BEGIN = "<!-- peers table: python -m campaigns.peers --table -->"
END = "<!-- end of peers table -->"

KEYWORDS = ("causal", "window", "sinks", "scale")
HALF = (torch.float16, torch.bfloat16)
SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


def _call(target: Target, q, k, v, *, causal=True, window=None, sinks=None):
    """The output of one call as the protocol makes it (every keyword passed, clones of the inputs, so
    a target that writes into them cannot change another case), on contiguous inputs, as the peers
    hand them (not in the kit's memory layouts: memory_layouts.py)."""
    sinks = None if sinks is None else sinks.clone()
    with as_given():
        return target.attention(
            q.clone(), k.clone(), v.clone(), causal=causal, window=window, sinks=sinks, scale=None
        )


@contextmanager
def _one_thread():
    """One torch thread while a recipe runs: its tensors are small, and on a busy machine the idle
    threads of a pool spin for the cores other processes need (a recipe took 5 times as long)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _unusable(out, shape) -> str:
    """Why ``out`` is no output of ``shape`` ("" if it is one)."""
    if not isinstance(out, torch.Tensor):
        return f"returned a {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(shape):
        return f"output shape {tuple(out.shape)}, expected {tuple(shape)}"
    if not bool(torch.isfinite(out).all()):
        return "non-finite output"
    return ""


# --- KernelBench-style ------------------------------------------------------------------------------

KB_SHAPE = (2, 8, 128, 64)  # B, H (query and KV heads), T, d
KB_SEEDS = (0, 1, 2, 3, 4)
KB_TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def kernelbench_check(target: Target) -> tuple[bool, str]:
    """(passed, detail): five seeded trials of the fixed causal problem, allclose against the torch
    reference in float32 and, for a target that declares "float16", in float16 and bfloat16."""
    with _one_thread():
        return _kernelbench(target)


def _kernelbench(target: Target) -> tuple[bool, str]:
    dtypes = [torch.float32] + (list(HALF) if target.supports("float16") else [])
    for dtype in dtypes:
        tol = KB_TOLERANCE[dtype]
        for seed in KB_SEEDS:
            gen = torch.Generator().manual_seed(seed)
            shape = (*KB_SHAPE[:3], target.head_size(KB_SHAPE[3]))  # d=64 unless it takes other sizes
            q, k, v = (torch.rand(shape, generator=gen).to(dtype) for _ in range(3))
            ref = torch_sdpa.attention(q, k, v, causal=True)
            where = f"{SHORT[dtype]} seed {seed}"
            try:
                out = _call(target, q, k, v)
            except Exception as error:
                return False, f"{where}: raised {type(error).__name__}: {str(error)[:80]}"
            problem = _unusable(out, ref.shape)
            if problem:
                return False, f"{where}: {problem}"
            if not torch.allclose(out, ref, atol=tol, rtol=tol):
                diff = (out.double() - ref.double()).abs().max().item()
                return False, f"{where}: not allclose at {tol:g} (max diff {diff:.1e})"
    done = ", ".join(SHORT[dtype] for dtype in dtypes)
    return True, f"{len(KB_SEEDS)} seeds in {done}"


# --- FlashAttention-style grid ----------------------------------------------------------------------

FA_BATCH, FA_HEADS = 2, 6
# FlashAttention's rule is made for half precision, where the reference's own rounding of the weights
# to bf16 dominates every other error.  In float32 a flash kernel's rescaling of its running sums adds
# errors of the reference's own size: torch's SDPA was 2.3 times the eager float32 reference's error on
# one case of the grid (1.0e-6 against 4.4e-7), past the factor 2 with FlashAttention's floor.  So in
# float32 the floor is torch.testing's default float32 atol, which PyTorch's SDPA tests fall back on.
FLOAT32_FLOOR = 1e-5
LAYOUTS = {"mha": FA_HEADS, "gqa": 2, "mqa": 1}  # KV heads for 6 query heads


@dataclass(frozen=True)
class Case:
    tq: int
    tk: int
    head_dim: int
    n_kv_heads: int
    causal: bool
    window: int | None
    sinks: bool
    dtype: torch.dtype
    seed: int

    def label(self) -> str:
        layout = {FA_HEADS: "MHA", 1: "MQA"}.get(self.n_kv_heads, f"GQA {FA_HEADS}/{self.n_kv_heads}")
        parts = [f"Tq={self.tq} Tk={self.tk} d={self.head_dim} {layout}"]
        parts.append(
            ("causal" if self.window is None else f"window {self.window}") if self.causal else "full"
        )
        parts += ["sinks"] if self.sinks else []
        return " ".join(parts + [SHORT[self.dtype]])

    def inputs(self):
        gen = torch.Generator().manual_seed(self.seed)
        q = torch.randn(FA_BATCH, FA_HEADS, self.tq, self.head_dim, generator=gen)
        k = torch.randn(FA_BATCH, self.n_kv_heads, self.tk, self.head_dim, generator=gen)
        v = torch.randn(FA_BATCH, self.n_kv_heads, self.tk, self.head_dim, generator=gen)
        sinks = torch.randn(FA_HEADS, generator=gen) if self.sinks else None
        return tuple(None if t is None else t.to(self.dtype) for t in (q, k, v, sinks))


# FlashAttention's grid, at CPU sizes: lengths (Tq, Tk) with 1 and odd lengths in the hundreds (Tq < Tk
# needs "decode", Tq > Tk "blind"), each run in four variants, the head dim going round 64, 59, 32.
# fmt: off
LENGTHS = (
    (1, 239), (3, 799), (127, 512), (113, 203), (128, 217), (108, 256), (256, 512),
    (1, 1), (113, 113), (217, 217), (239, 239),
    (256, 128), (799, 3),
)
# fmt: on
HEAD_DIMS = (64, 59, 32)
# (KV layout, features): each feature is used only where the target declares it.  "window" is a window
# drawn as FlashAttention draws its left size (uniform in [0, Tk), W = left + 1 keys), "full" is
# causal=False ("non_causal"), "fp16" float16 instead of bfloat16 (both need "float16").
VARIANTS = (
    ("mha", ""),
    ("gqa", "window"),
    ("mqa", "window sinks fp16"),
    ("gqa", "full sinks"),
)


def flash_cases(target: Target) -> list[Case]:
    """The grid's cases inside ``target``'s capabilities (without a capability a case loses that
    feature, or is left out when its lengths need it), without repeats."""
    half = target.supports("float16")
    cases: list[Case] = []
    for n, (tq, tk) in enumerate(LENGTHS):
        if (tq < tk and not target.supports("decode")) or (tq > tk and not target.supports("blind")):
            continue
        for j, (layout, features) in enumerate(VARIANTS):
            features = set(features.split())
            n_kv = LAYOUTS[layout] if target.supports("gqa") else FA_HEADS
            causal = not ("full" in features and target.supports("non_causal"))
            window = None
            if causal and "window" in features and target.supports("window"):
                window = random.Random(n).randrange(tk) + 1
            sinks = "sinks" in features and target.supports("sinks")
            dtype = (torch.float16 if "fp16" in features else torch.bfloat16) if half else torch.float32
            head_dim = target.head_size(HEAD_DIMS[(n + j) % len(HEAD_DIMS)])  # its declared sizes
            case = Case(tq, tk, head_dim, n_kv, causal, window, sinks, dtype, seed=100 * n + j)
            if all(case.label() != other.label() for other in cases):
                cases.append(case)
    return cases


def eager_attention(q, k, v, *, causal, window, sinks, dtype):
    """A plain softmax attention computed wholly in ``dtype`` with the scale applied to k (the other
    order of operations): FlashAttention's low-precision reference."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    r = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
    scores = q @ (k * (1.0 / math.sqrt(q.shape[-1]))).transpose(-2, -1)
    tq, tk = q.shape[2], k.shape[2]
    if causal:
        scores = scores.masked_fill(~torch_sdpa.allowed_keys(tq, tk, window), -math.inf)
    if sinks is not None:
        column = sinks.to(dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        scores = torch.cat([scores, column], dim=-1)
    seen = scores.amax(dim=-1, keepdim=True) > -math.inf  # a query that sees no key outputs 0
    weights = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1).masked_fill(~seen, 0.0)
    return weights[..., :tk] @ v


@functools.cache
def _references(case: Case):
    """(inputs, golden, the bound on max|out - golden|) of a case: computed once for all targets."""
    q, k, v, sinks = case.inputs()
    golden = attention_oracle_by_rows(q, k, v, causal=case.causal, window=case.window, sinks=sinks)
    lowp = eager_attention(q, k, v, causal=case.causal, window=case.window, sinks=sinks, dtype=case.dtype)
    rounded = golden.to(case.dtype)
    floor = 2 * ((rounded + 0.3) - 0.3 - rounded).abs().max().double().item()
    if case.dtype == torch.float32:  # FlashAttention tests no float32: torch.testing's float32 atol
        floor = max(floor, FLOAT32_FLOOR)
    bound = 2 * (lowp.double() - golden).abs().max().item() + floor
    return (q, k, v, sinks), golden, bound


def flash_grid_check(target: Target) -> tuple[bool, str]:
    """(passed, detail): FlashAttention's rule on every case of the grid the target can take."""
    with _one_thread():
        return _flash_grid(target)


def _flash_grid(target: Target) -> tuple[bool, str]:
    cases = flash_cases(target)
    for n, case in enumerate(cases):
        (q, k, v, sinks), golden, bound = _references(case)
        try:
            out = _call(target, q, k, v, causal=case.causal, window=case.window, sinks=sinks)
        except Exception as error:
            return False, f"{case.label()}: raised {type(error).__name__}: {str(error)[:80]}"
        problem = _unusable(out, golden.shape)
        if problem:
            return False, f"{case.label()}: {problem}"
        error = (out.double() - golden).abs().max().item()
        if not error <= bound:
            return (
                False,
                f"{case.label()}: error {error:.1e} > bound {bound:.1e} (case {n + 1} of {len(cases)})",
            )
    return True, f"{len(cases)} cases"


RECIPES = {"kernelbench": kernelbench_check, "flash_grid": flash_grid_check}


# --- the kit ----------------------------------------------------------------------------------------


def kit_check(name: str) -> dict:
    """The kit's verdict on target ``name``, from a run in a subprocess under the derandomized
    "mutation" profile: for a broken kernel only the property aimed at its bug (its ``caught_by``
    expression over test_kernels.py, as test_broken_kernels.py runs it); for every other target the
    whole kit, stopping at the first failure for a broken one."""
    from tests.fixtures.kit_runs import PROPERTIES, run_properties

    if name in BROKEN_KERNELS:
        caught_by = broken_kernels.BUGS[BROKEN_KERNELS[name]].caught_by
        how = f"-k '{caught_by}' (test_kernels.py)"
        done = run_properties(
            name, "-k", caught_by, profile="mutation", selection=[str(PROPERTIES / "test_kernels.py")]
        )
    elif corpus()[name] == "broken":
        how, done = "whole kit, -x", run_properties(name, "-x", profile="mutation", as_user=True)
    else:
        how, done = "whole kit", run_properties(name, profile="mutation", as_user=True)
    output = done.stdout + done.stderr
    failed = sorted({m.split("[")[0] for m in re.findall(r"^FAILED \S+::(\S+)", output, re.MULTILINE)})
    summaries = re.findall(
        r"^=* ?(\d+ (?:passed|failed).*?)(?: in [\d.]+s.*)? ?=*$", done.stdout, re.MULTILINE
    )
    summary = re.sub(r", \d+ deselected", "", (summaries or [""])[-1])  # impl's own API, for impl only
    if done.returncode == 0:
        verdict, detail = "PASS", summary
    elif done.returncode == 1:
        verdict, detail = "FAIL", ", ".join(f"`{test}`" for test in failed) or summary
    elif done.returncode == 4 and f"--impl {name}: " in output:  # refused before any property ran
        verdict = "FAIL"
        line = output.partition(f"--impl {name}: ")[2].splitlines()[0].partition(" (the target protocol")[0]
        detail = "refused before any property: " + re.sub(r"^attention\(.*?\) ", "", line)[:160]
    else:
        verdict, detail = "ERROR", f"exit code {done.returncode}: {output[-300:]}"
    return {"verdict": verdict, "how": how, "detail": detail}


# --- the table --------------------------------------------------------------------------------------


def recipe_verdicts(name: str) -> dict:
    """Both recipes on target ``name``: {recipe: {"verdict", "detail", "seconds"}}."""
    target = load(name)
    results = {}
    for recipe, check in RECIPES.items():
        start = time.perf_counter()
        passed, detail = check(target)
        seconds = round(time.perf_counter() - start, 2)
        results[recipe] = {"verdict": "PASS" if passed else "FAIL", "detail": detail, "seconds": seconds}
    return results


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    return re.split(r"\.(?=\s+[A-Z]|$)", text, maxsplit=1)[0]


def describe(name: str) -> str:
    """The table's first column: the target, and for a broken one what is wrong with it."""
    if name in BROKEN_KERNELS:
        bug = broken_kernels.BUGS[BROKEN_KERNELS[name]]
        doc = _first_sentence(bug.kernel.__doc__ or bug.kernel.problem.__doc__)
        return f"kernel `{BROKEN_KERNELS[name]}` ({bug.kind}): {doc}"
    if name in BROKEN_TARGETS:
        doc = _first_sentence(getattr(broken_targets, BROKEN_TARGETS[name]).attention.__doc__)
        return f"target `{BROKEN_TARGETS[name]}`: {doc}"
    return f"`{name}`"


def render(table: dict) -> str:
    """The markdown table of peers-table.json."""
    lines = [
        "| target | is | the kit | KernelBench-style | FlashAttention grid |",
        "|---|---|---|---|---|",
    ]
    for row in table["targets"]:
        cells = [row["about"], row["expected"]]
        for result in (row["kit"], row["kernelbench"], row["flash_grid"]):
            verdict, detail = result["verdict"], result["detail"]
            if verdict == "PASS":
                cells.append(f"PASS ({detail})")
            else:
                cells.append(f"**{verdict}**: {detail}".replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_table() -> dict:
    return json.loads(TABLE_JSON.read_text())


def page_table(text: str) -> str:
    """The table between PAGE's markers."""
    return text.partition(BEGIN)[2].partition(END)[0].strip()


def write_table(only: list[str] | None = None, kit: bool = True) -> dict:
    """Recompute the rows of ``only`` (every target when None; the kit too when ``kit``), keep the other
    rows of the existing file, write peers-table.json and PAGE's table."""
    old = {row["target"]: row for row in read_table()["targets"]} if TABLE_JSON.exists() else {}
    rows = []
    for name, expected in corpus().items():
        if only is not None and name not in only and name in old:
            rows.append(old[name])
            continue
        start = time.perf_counter()
        row = {"target": name, "about": describe(name), "expected": expected}
        row["kit"] = kit_check(name) if kit or name not in old else old[name]["kit"]
        row.update(recipe_verdicts(name))
        print(
            f"{name}: kit {row['kit']['verdict']}, kernelbench {row['kernelbench']['verdict']}, "
            f"flash grid {row['flash_grid']['verdict']} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        rows.append(row)
    table = {"made_by": "python -m campaigns.peers --table", "targets": rows}
    TABLE_JSON.write_text(json.dumps(table, indent=1) + "\n")
    text = PAGE.read_text()
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        PAGE.write_text(head + BEGIN + "\n" + render(table) + "\n" + END + rest.partition(END)[2])
    else:
        print(f"{PAGE} has no markers {BEGIN!r} ... {END!r}: the table was not inserted")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m campaigns.peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--table", action="store_true", help="run the recipes and the kit, write the table")
    parser.add_argument("--only", nargs="+", metavar="TARGET", help="recompute only these rows")
    parser.add_argument("--no-kit", action="store_true", help="keep the kit's recorded verdicts")
    parser.add_argument("targets", nargs="*", help="without --table: run both recipes on these targets")
    args = parser.parse_args(argv)
    if args.table:
        print(render(write_table(args.only, kit=not args.no_kit)))
        return 0
    for name in args.targets or list(corpus()):
        print(name, json.dumps(recipe_verdicts(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
