"""Three honest states for a fault without a mutant: absent (the code has no such feature) or present
but not recognised (the code visibly has it in an idiom no operator knows), said with its line, and
first in the summary; sited faults are graded as before."""

from __future__ import annotations

from pathlib import Path

from attnspec.mutation.generators.evidence import evidence
from attnspec.mutation.generators.sites import mutants_in
from attnspec.mutation.reports.stryker import Mutant
from attnspec.mutation.reports.summary import fault_rows, summary_text

REPO = Path(__file__).resolve().parents[2]

LLAMA_STYLE = """
import torch


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(torch.nn.Module):
    def forward(self, x, past_length=0, attention_mask=None):
        positions = torch.arange(past_length, past_length + x.shape[1])  # decode: from the cache's end
        cos, sin = self.table(positions)
        q, k = self.q(x), self.k(x)
        q = (q * cos) + (rotate_half(q) * sin)
        return q
"""


def test_a_feature_the_code_has_is_found_on_its_line_and_one_it_lacks_is_not():
    found = evidence(LLAMA_STYLE)
    lines = LLAMA_STYLE.splitlines()
    assert "torch.arange(past_length" in lines[found["F12"].line - 1]  # a RoPE offset, beside RoPE
    assert "cos, sin" in lines[found["F7"].line - 1]
    assert "F17" not in found  # attention_mask only as a parameter: no padding mask is applied
    # the toy kernel has no RoPE, no cache, no dropout: those are absent, not unrecognised
    toy = evidence((REPO / "examples" / "toy_attention.py").read_text())
    assert not {"F7", "F12", "F13", "F21"} & set(toy), toy


def test_a_parameter_a_keyword_or_a_class_name_is_no_evidence():
    source = """
class CausalSelfAttention:
    def forward(self, x, sinks=None, window=None):
        return self.layer(x, rope=False, CausalSelfAttention=None)
"""
    assert evidence(source) == {}


COMPLEX_ROPE = """
import torch


class Attention(torch.nn.Module):
    def forward(self, x, freqs_cis, start_pos):
        q = self.wq(x).view(x.shape[0], x.shape[1], self.n_heads, -1).float()
        q = torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * freqs_cis)
        return q.flatten(3)
"""


def test_an_unrecognised_fault_has_its_own_status_and_leads_the_summary():
    mutants = [
        Mutant(name=m.name, path=m.path, operator=m.fault, status="Killed", start=m.start, end=m.end)
        for m in mutants_in(COMPLEX_ROPE, "llama", "llama.py")
    ]
    sited = {m.operator for m in mutants}
    present = {f: f"llama.py:{e.line}" for f, e in evidence(COMPLEX_ROPE).items() if f not in sited}
    assert "F7" in present  # RoPE through complex numbers: freqs_cis, no operator's idiom
    rows = fault_rows(mutants, {}, strict=True, present=present)
    for fault in present:
        assert rows[fault]["status"] == "not recognised" and rows[fault]["present"] == present[fault]
    assert rows["F23"]["status"] == "no site"  # no ALiBi here
    text, _ = summary_text("mutation campaign of `pytest`", mutants, rows, {}, 1.0, Path("r"), strict=True)
    first = text.splitlines()[0]
    named = ", ".join(sorted(present, key=lambda fault: int(fault[1:])))
    assert first.startswith("NOT GRADED: ") and first.endswith(f"not graded ({named}): see below"), first


def test_an_annotated_line_is_mutated_with_the_faults_generic_operators():
    line = (
        "        q = torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * freqs_cis)"
    )
    annotated = COMPLEX_ROPE.replace(line, line + "  # attnspec: site F7")
    number = annotated.splitlines().index(line + "  # attnspec: site F7") + 1
    made = [m for m in mutants_in(annotated, "llama", "llama.py") if m.fault == "F7"]
    assert made and all(m.lines == range(number, number + 1) for m in made)
    lines = {m.source.splitlines()[number - 1].split("#")[0].strip() for m in made}
    # among them, RoPE not applied: the complex view of q taken back without the rotation
    assert "q = torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)))" in lines
    assert evidence(annotated)["F7"].line == number


def test_an_annotation_adds_nothing_where_the_operators_already_placed_the_fault():
    line = "        q = (q * cos) + (rotate_half(q) * sin)"
    annotated = LLAMA_STYLE.replace(line, line + "  # attnspec: site F7")
    plain = [m.replacement for m in mutants_in(LLAMA_STYLE, "llama", "llama.py")]
    assert [m.replacement for m in mutants_in(annotated, "llama", "llama.py")] == plain


def test_an_annotated_fault_without_a_generic_operator_is_present_on_its_line():
    source = "def forward(self, x):\n    x = self.norm(x + self.attn(x))  # attnspec: site F6\n    return x\n"
    assert evidence(source)["F6"].line == 2
    assert [m for m in mutants_in(source, "m", "m.py") if m.fault == "F6"] == []
