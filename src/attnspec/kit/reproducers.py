"""Reproducers: a failing property handed back as a call of the user's own code that they can run alone.

While the properties run, the last calls of the target's attention are kept (``recorded``: the
arguments, not copies).  When a property fails, ``failing_call`` looks among the calls of its last
example, the smallest failing case Hypothesis replays last, for one whose output the oracle disagrees
with beyond the tolerance policy, and ``write`` saves it where `attnspec check` asked ($ATTNSPEC_FAILURES;
unset, none is written): its tensors in ``NAME.pt`` and a script ``NAME.py`` of a few lines that calls the
target on them, compares with the float64 oracle, and fails as the property did.  ``attend`` and
``oracle`` are what that script calls.  A property whose failure no single call shows against the
oracle (a gradient, two calls that must agree bitwise) gets none.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import torch

from attnspec.kit import loading
from attnspec.kit.asserts import Conditioning
from attnspec.kit.recording import CALLS, described, first_error, in_words, raised_by_the_target
from attnspec.kit.references import declared_attention
from attnspec.protocol import targets
from attnspec.protocol.memory_layouts import as_given
from attnspec.specs.tolerance import golden_bound

GIB = 2**30
OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "not enough memory")  # torch's allocators say


def out_of_memory(error: BaseException) -> str | None:
    """For an allocation that failed in a property: what was asked for, under which cap, on which call
    of the target (a runaway allocation is a failure of the target, not an input it refuses); None for
    any other error."""
    error = first_error(error)
    text = str(error)
    if not (isinstance(error, MemoryError) or any(words in text for words in OUT_OF_MEMORY)):
        return None
    asked = re.search(r"allocate (\d+) bytes", text)
    words = f"it asked for {int(asked.group(1)) / GIB:.1f} GiB" if asked else f"{type(error).__name__}"
    try:
        import resource

        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, AttributeError):
        cap = -1
    if cap > 0:
        words += f" (a process of the check may take {cap / GIB:.1f} GiB: --max-memory)"
    call = getattr(error, "attnspec_call", None)
    on = f" on {in_words(*call)}" if call else ""
    return f"the target exhausted memory: {words}{on}"


def layer_refusal(error: BaseException) -> str | None:
    """For a layer the target would not build for a spec within its declarations (targets.Refused), or a
    declaration or report the kit cannot take (targets.Undeclarable), anywhere in the chain of causes:
    its one line; None for any other error."""
    seen = first_error(error)
    while seen is not None:
        if isinstance(seen, targets.Refused | targets.Undeclarable):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def refusal(target: targets.Target, error: BaseException) -> str | None:
    """For an error the target raised on an input: what it raised, on which call, and what to declare,
    found by calling it again with that call changed in one respect at a time (_what_to_declare);
    None for any other error, and where no such change makes it take the call: a crash on a problem it
    declares is a failure, not a refusal."""
    error = first_error(error)
    if not raised_by_the_target(error) or not hasattr(error, "attnspec_call"):
        return None
    args, kwargs = error.attnspec_call  # the call that raised (of several failures, the first's)
    if len(args) != 3 or not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in args):
        return None
    raised = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    call = {"q": args[0], "k": args[1], "v": args[2], "keywords": kwargs}
    declare = _what_to_declare(target, *args, kwargs)
    return None if declare is None else f"it raised {raised.rstrip(': ')} on {described(call)}; {declare}"


def _what_to_declare(target: targets.Target, q, k, v, keywords: dict) -> str | None:
    if not all(t.is_contiguous() for t in (q, k, v)) and _takes_contiguous(target, q, k, v, keywords):
        return (
            "it takes contiguous inputs only: make it read its inputs' strides (model code hands attention "
            "transposed views), or declare attention.needs_contiguous = True"
        )
    b, hq, tq, d = q.shape
    tk, dv = k.shape[2], v.shape[3]
    short_q, short_k = _within(tq, tk, 8)
    retries = [
        (
            q.dtype != torch.float32,
            dict(dtype=torch.float32),
            f"it takes float32: drop the capability that brings {str(q.dtype).removeprefix('torch.')} "
            "('float64', 'float16')",
        ),
        (
            (d, dv) != (16, 16),
            dict(d=16, dv=16),
            "it takes head size 16: declare the head sizes it takes (attention.head_dims = (...))",
        ),
        (
            (tq, tk) != (short_q, short_k),
            dict(tq=short_q, tk=short_k),
            f"it takes Tq={short_q}, Tk={short_k}: declare the longest sequence it takes "
            "(attention.max_len = N)",
        ),
        (
            hq > 1,
            dict(hq=1, hkv=1),
            "it takes one head: declare the head counts it takes (attention.heads = (...))",
        ),
        (
            b > 1,
            dict(b=1),
            "it takes a batch of one: declare the largest batch it takes (attention.max_batch = N)",
        ),
    ]
    for switch, value, capability in (
        ("window", None, "window"),
        ("sinks", None, "sinks"),
        ("causal", True, "non_causal"),
    ):
        if keywords.get(switch, value) != value:
            retries.append(
                (True, {switch: value}, f"it takes {switch}={value}: drop the capability {capability!r}")
            )
    if _takes(target, q, k, v, keywords):  # the call as the retries make it (no weights asked for, ...)
        return None  # is taken unchanged: no change of the inputs explains the error
    for differs, change, says in retries:
        if differs and _takes(target, q, k, v, keywords, **change):
            return says
    return None  # no single change of its dtype, head size, length, head count, batch or switches


def _takes_contiguous(target: targets.Target, q, k, v, keywords: dict) -> bool:
    """Whether the target returns from the same call on contiguous copies of its inputs."""
    try:
        with torch.no_grad(), as_given():
            target.attention(q.contiguous(), k.contiguous(), v.contiguous(), **keywords)
    except Exception:
        return False
    return True


def _within(tq: int, tk: int, longest: int) -> tuple[int, int]:
    from attnspec.kit.strategies import within_length  # it imports this module's users

    return within_length(tq, tk, longest)


def _takes(target, q, k, v, keywords: dict, **change) -> bool:
    """Whether the target returns from the call with ``change``: a dtype, sizes or a keyword."""
    b, hq, tq, d = q.shape
    hkv, tk, dv = k.shape[1], k.shape[2], v.shape[3]
    sizes = dict(b=b, hq=hq, hkv=hkv, tq=tq, tk=tk, d=d, dv=dv, dtype=q.dtype)
    sizes.update({key: value for key, value in change.items() if key in sizes})
    switches = {**keywords, **{key: value for key, value in change.items() if key not in sizes}}
    switches.pop("return_weights", None)
    if switches.get("sinks") is not None:
        switches["sinks"] = switches["sinks"].new_zeros(sizes["hq"]).to(sizes["dtype"])
    if switches.get("document_ids") is not None:
        switches["document_ids"] = switches["document_ids"].new_zeros(sizes["b"], sizes["tk"])
    if switches.get("window") is not None:
        switches["window"] = min(switches["window"], sizes["tk"])
    made = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=made, dtype=torch.float64).to(q.device, sizes["dtype"])

    try:
        with torch.no_grad():
            target.attention(
                randn(sizes["b"], sizes["hq"], sizes["tq"], sizes["d"]),
                randn(sizes["b"], sizes["hkv"], sizes["tk"], sizes["d"]),
                randn(sizes["b"], sizes["hkv"], sizes["tk"], sizes["dv"]),
                **switches,
            )
    except Exception:
        return False
    return True


def failing_call(target: targets.Target) -> dict | None:
    """The last recorded call of ``target`` whose output the oracle disagrees with, as a dict: the call
    (q, k, v and its keywords), the error and the bound it exceeds, and the wrong rows in words."""
    for args, kwargs in reversed(list(CALLS)):
        if len(args) != 3 or not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in args):
            continue
        q, k, v = (x.detach() for x in args)
        keywords = {name: value for name, value in kwargs.items() if name != "return_weights"}
        try:
            judged = judge(target.attention, q, k, v, keywords)
        except Exception:  # the call itself raises, or the oracle cannot take it: not this call
            continue
        if judged is not None:
            return {"q": q.cpu(), "k": k.cpu(), "v": v.cpu(), "keywords": _on_cpu(keywords), **judged}
    return None


def judge(attention: Callable, q, k, v, keywords: dict) -> dict | None:
    """The error of one call against the oracle, when it exceeds the tolerance policy's bound."""
    with torch.no_grad():
        out = attention(q, k, v, **keywords)
    if isinstance(out, tuple):
        out = out[0]
    golden, _ = declared_attention(q, k, v, **keywords)
    ref = golden if q.dtype == torch.float64 else declared_attention(q, k, v, dtype=q.dtype, **keywords)[0]
    if out.shape != golden.shape:
        return None
    error = (out.detach().cpu().double() - golden).abs().nan_to_num(nan=float("inf"))
    bound = golden_bound(golden, ref, q.dtype, Conditioning(q, k, v, **keywords).term("out"))
    worst = error.max().item() if error.numel() else 0.0
    if worst <= bound:
        return None
    return {"error": worst, "bound": bound, "rows": wrong_rows(error.amax(dim=-1) > bound)}


def wrong_rows(wrong: torch.Tensor) -> str:
    """Which (batch, head, query) rows are wrong, in words."""
    where = wrong.nonzero().tolist()
    b, h, i = where[0]
    return f"{len(where)} of {wrong.numel()} rows wrong, the first at batch {b}, head {h}, query {i}"


def write(folder: Path, name: str, call: dict, target_name: str, requirement: str, test: str) -> Path:
    """The call's tensors (NAME.pt) and the script that replays it (NAME.py); returns the script."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
    data = {key: call[key] for key in ("q", "k", "v", "keywords")}
    torch.save(data, folder / f"{stem}.pt")
    script = folder / f"{stem}.py"
    shown = script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script
    about = (
        f"The call: {described(call)}. Against attnspec's float64 oracle: {call['rows']}; max |out - oracle| "
        f"= {call['error']:.3e}, where the tolerance policy allows {call['bound']:.3e} for these inputs."
    )
    text = SCRIPT.format(
        target=target_name,
        requirement=f"{requirement} {'fail' if ',' in requirement else 'fails'}",
        test=test,
        about=textwrap.fill(about, 100),
        bound=call["bound"],
        script=shown,
    )
    script.write_text(text, encoding="utf-8")
    return shown


SCRIPT = '''"""{requirement} on this call of {target} (found by {test}).

{about}

Run it (python {script}), or paste it into a test of yours.
"""

from pathlib import Path

import torch

from attnspec.kit.reproducers import attend, oracle

here = Path(__file__).resolve()
call = torch.load(here.with_suffix(".pt"))  # q, k, v and the keywords of the failing call
out = attend("{target}", call, where=here.parents[1])  # your code, called as the kit called it
expected = oracle("{target}", call)  # attnspec's float64 oracle on the same inputs
error = (out.double() - expected).abs().max().item()
assert error <= {bound!r}, f"max |out - oracle| = {{error:.3e}}, over the {bound:.3e} allowed here"
'''


def _on_cpu(keywords: dict) -> dict:
    return {
        key: value.detach().cpu() if isinstance(value, torch.Tensor) else value
        for key, value in keywords.items()
    }


def _loaded(target: str, where: Path | str | None = None) -> targets.Target:
    """The target as `attnspec check TARGET` loads it, from the folder ``where`` (by default the
    current one) as from the folder the check ran in."""
    folder = str(where if where is not None else os.getcwd())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    os.environ[targets.ENV] = target
    return loading.current()


def attend(target: str, call: dict, where: Path | str | None = None) -> torch.Tensor:
    """The output of ``target`` (imported from the folder ``where``, by default the current one) on a
    saved call, called as the kit calls it (a declared convention translated at its boundary:
    src/attnspec/protocol/declared.py)."""
    keywords = {name: value for name, value in call["keywords"].items() if name != "return_weights"}
    with torch.no_grad():
        out = _loaded(target, where).attention(call["q"], call["k"], call["v"], **keywords)
    return out[0] if isinstance(out, tuple) else out


def oracle(target: str, call: dict) -> torch.Tensor:
    """attnspec's float64 oracle on a saved call, under the target's declaration."""
    _loaded(target)
    keywords = {name: value for name, value in call["keywords"].items() if name != "return_weights"}
    return declared_attention(call["q"], call["k"], call["v"], **keywords)[0]
