"""`python -m campaigns.stability [--runs N] [--project example|hf-llama ...]`: the same campaign run N
times (default 3) over the same reports' folder must give the same verdict and the same killing test
for every mutant, and no mutant may be "not exercised" while a test runs the code it changes.

Projects:
- ``example``: a copy of examples/user_project, both of its test files;
- ``hf-llama``: a copy of the installed transformers' modeling_llama.py (its relative imports made
  absolute, so that it imports the installed package) beside transformers' own masking_utils.py
  (where Hugging Face models build their masks: two sources, one campaign), graded by a small test
  module in the style of transformers' model tests (a tiny config: hidden 64, vocabulary 128).  Skipped,
  and said, when transformers is not installed (`pip install -e '.[conformance]'`).

"Not exercised" is checked against coverage.py run on the clean tests on its own: for each mutant
reported NoCoverage, the original lines around its change must be lines no test executed.
Exit 0 when every project agrees with itself, 1 when one does not, 2 when nothing could run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HF_TESTS = '''\
"""LlamaModel's tests in the style of transformers' model tests: a tiny config, outputs compared."""

import pytest
import torch
from transformers import LlamaConfig

from modeling_llama import LlamaForCausalLM


def tiny_config(**overrides):
    sizes = dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager",
    )
    sizes.update(overrides)
    return LlamaConfig(**sizes)


def model_and_ids(seed=0, length=12, batch=2, **overrides):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(**overrides)).eval()
    ids = torch.randint(0, 128, (batch, length))
    return model, ids


def test_logits_shape():
    model, ids = model_and_ids()
    with torch.no_grad():
        assert model(ids).logits.shape == (2, 12, 128)


def test_later_tokens_do_not_change_earlier_logits():
    model, ids = model_and_ids()
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 128
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :8], b[:, :8])


def test_left_padding_gives_the_unpadded_logits():
    model, ids = model_and_ids(batch=1)
    padded = torch.cat([torch.zeros(1, 3, dtype=ids.dtype), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], dim=1)
    with torch.no_grad():
        alone = model(ids).logits
        with_pads = model(padded, attention_mask=mask).logits[:, 3:]
    torch.testing.assert_close(with_pads, alone, atol=1e-4, rtol=1e-4)


def test_decoding_with_the_cache_matches_the_full_pass():
    model, ids = model_and_ids()
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :7], use_cache=True)
        steps = [out.logits]
        cache = out.past_key_values
        for t in range(7, 12):
            out = model(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("heads", [4, 2])
def test_a_shift_of_every_position_keeps_the_logits(heads):
    model, ids = model_and_ids(num_key_value_heads=heads)
    positions = torch.arange(12).expand(2, 12)
    with torch.no_grad():
        a = model(ids, position_ids=positions).logits
        b = model(ids, position_ids=positions + 5).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_first_token_attends_to_itself_only():
    model, ids = model_and_ids()
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    for weights in out.attentions:
        torch.testing.assert_close(weights[:, :, 0, 0], torch.ones_like(weights[:, :, 0, 0]))
        assert torch.all(weights.triu(1) == 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def test_the_eager_attention_matches_sdpa():
    model, ids = model_and_ids()
    sdpa = LlamaForCausalLM(tiny_config(attn_implementation="sdpa")).eval()
    sdpa.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, sdpa(ids).logits, atol=1e-4, rtol=1e-4)
'''


def hf_llama(folder: Path) -> tuple[Path, list[str]]:
    """A project with a copy of the installed modeling_llama.py and its tests; the sources to mutate."""
    import transformers.masking_utils as masking
    import transformers.models.llama.modeling_llama as modeling

    text = Path(modeling.__file__).read_text(encoding="utf-8")
    text = re.sub(r"^from \.\.\.", "from transformers.", text, flags=re.M)
    text = re.sub(r"^from \.", "from transformers.models.llama.", text, flags=re.M)
    project = folder / "hf-llama"
    (project / "tests").mkdir(parents=True)
    (project / "modeling_llama.py").write_text(text, encoding="utf-8")
    (project / "tests" / "test_modeling_llama.py").write_text(HF_TESTS, encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\n", encoding="utf-8")
    return project, ["modeling_llama.py", masking.__file__]


def example(folder: Path) -> tuple[Path, list[str]]:
    project = folder / "example"
    shutil.copytree(REPO / "examples" / "user_project", project, ignore=shutil.ignore_patterns("__pycache__"))
    return project, ["attention.py"]


PROJECTS = {"example": example, "hf-llama": hf_llama}


def outcomes(report: dict) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        mutant["id"]: (mutant["status"], tuple(mutant.get("killedBy", ())))
        for file in report["files"].values()
        for mutant in file["mutants"]
    }


def executed_lines(project: Path, sources: list[str], env: dict[str, str]) -> dict[str, set[int]]:
    """file -> the lines the clean tests execute, measured by coverage.py on its own."""
    data = project.parent / f"{project.name}.coverage"
    files = [str((project / s).resolve()) for s in sources]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--data-file={data}",
            "--include=" + ",".join(files),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests",
        ],
        cwd=project,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    import coverage

    measured = coverage.Coverage(data_file=str(data)).get_data()
    measured.read()
    return {Path(f).resolve().as_posix(): set(measured.lines(f) or ()) for f in measured.measured_files()}


def wrongly_not_exercised(report: dict, project: Path, sources: list[str], executed: dict) -> list[str]:
    """NoCoverage mutants whose change sits between lines the tests execute (an insertion's
    neighbours, or a changed line itself)."""
    found = []
    by_shown = {Path(s).name: (project / s).resolve().as_posix() for s in sources}
    for shown, file in report["files"].items():
        lines = executed.get(by_shown.get(Path(shown).name, ""), set())
        original = file["source"].splitlines()
        for mutant in file["mutants"]:
            if mutant["status"] != "NoCoverage":
                continue
            line = mutant["location"]["start"]["line"]
            # the changed line, or for a change glued to a comment or a blank line the code line above it
            code = next((n for n in range(line, 0, -1) if code_line(original[n - 1])), None)
            if code in lines:
                found.append(f"{mutant['id']} at {shown}:{line}")
    return found


def code_line(text: str) -> bool:
    return bool(text.strip()) and not text.strip().startswith("#")


def run_project(name: str, runs: int, folder: Path) -> tuple[bool, str]:
    project, sources = PROJECTS[name](folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_"))}
    seen, times = [], []
    out = folder / f"{name}-reports"  # one reports' folder, as a user re-runs a campaign
    for _ in range(runs):
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnspec",
                "mutate",
                *sources,
                "--out",
                str(out),
                "--",
                "pytest",
                "tests",
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        times.append(time.monotonic() - started)
        if done.returncode not in (0, 1):
            return (
                False,
                f"{name}: the campaign could not run (exit {done.returncode}):\n{done.stdout}{done.stderr}",
            )
        seen.append(json.loads((out / "mutation-report.json").read_text(encoding="utf-8")))
    first = outcomes(seen[0])
    differing = sorted(
        mutant
        for report in seen[1:]
        for mutant, outcome in outcomes(report).items()
        if first.get(mutant) != outcome
    )
    wrong = wrongly_not_exercised(seen[0], project, sources, executed_lines(project, sources, env))
    statuses: dict[str, int] = {}
    for status, _ in first.values():
        statuses[status] = statuses.get(status, 0) + 1
    said = (
        f"{name}: {len(first)} mutants ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}), "
        f"{runs} runs in {', '.join(f'{t:.0f} s' for t in times)}: "
        + (
            "the same verdicts and killers"
            if not differing
            else f"{len(set(differing))} mutants differ: {differing[:5]}"
        )
        + ("; none wrongly not exercised" if not wrong else f"; not exercised though run: {wrong}")
    )
    if differing:
        for report in seen:
            for mutant in sorted(set(differing))[:3]:
                said += f"\n  {mutant}: {outcomes(report).get(mutant)}"
    return not differing and not wrong, said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m campaigns.stability", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--project", action="append", choices=sorted(PROJECTS))
    args = parser.parse_args(argv)
    names = args.project or sorted(PROJECTS)
    ok, ran = True, 0
    with tempfile.TemporaryDirectory(prefix="attnspec-stability-") as folder:
        for name in names:
            if name == "hf-llama":
                try:
                    import transformers  # noqa: F401
                except ModuleNotFoundError:
                    print(
                        "hf-llama: not run: transformers is not installed (pip install -e '.[conformance]')"
                    )
                    continue
            good, said = run_project(name, args.runs, Path(folder))
            print(said, flush=True)
            ok, ran = ok and good, ran + 1
    if not ran:
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
