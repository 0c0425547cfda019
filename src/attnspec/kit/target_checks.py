"""The target is checked once, before any property runs: a target that cannot be called as the
protocol says (src/attnspec/protocol/targets.py) would otherwise fail most properties at once, each with a
message about something else (a batch "leak" from unpacking a tensor as (out, weights), say).
A target that cannot even be loaded (its module does not import) gets one line too (load_problem).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import replace

import torch

from attnspec.kit import recording
from attnspec.kit.frames import kit_code, raised_at
from attnspec.kit.names import Died
from attnspec.protocol import targets
from attnspec.protocol.targets import Target

SEE = "(the target protocol and the conventions: `attnspec conventions` prints them)"


KEYWORDS = {"causal": True, "window": None, "sinks": None, "scale": None}
CALL = ", ".join(f"{name}={value}" for name, value in KEYWORDS.items())


def load_problem(name: str, error: Exception) -> str:
    """The one line for ``error``, raised while loading target ``name`` (targets.load: importing its
    module, which may raise anything, then looking the object up): what it is and, for an error in
    the target's code, the file and line."""
    module = targets.ADAPTERS.get(name, name).partition(":")[0]
    if isinstance(error, ModuleNotFoundError):
        return f"--impl {name}: {error} ({targets.missing_module_hint(name, error)})"
    if isinstance(error, SyntaxError):  # IndentationError too: the file and line are the error's own
        where = f" at {error.filename}, line {error.lineno}" if error.filename else ""
        return f"--impl {name}: {module} cannot be imported: {type(error).__name__}{where}: {error.msg}"
    frames = traceback.extract_tb(error.__traceback__)
    where = raised_at(frames)
    if any(frame.filename.startswith("<frozen importlib") for frame in frames):
        at = f" at {where}" if where else ""
        message = str(error).splitlines()[0] if str(error) else ""
        return f"--impl {name}: {module} cannot be imported: {type(error).__name__}{at}: {message}"
    return f"--impl {name}: {error}" + (f" (raised at {where})" if where else "")


WARM_UP = 0.25  # seconds: a first call slower than this is timed again, warm


def first_calls(target: Target, device: torch.device | str = "cpu") -> tuple[list[str], float, float, float]:
    """``target_problems``, and what the first call, a warm one and one on new sizes cost (for `attnspec
    check`'s estimate and its fit to a time): a slow first call may be a warm-up (eager FlexAttention:
    1-2 s, then milliseconds), so it is timed again, and on other sizes, which a target that compiles
    per shape pays for again (eager FlexAttention: 0.2-0.3 s)."""
    started = time.perf_counter()
    problems = target_problems(target, device)
    first = call = new_sizes = time.perf_counter() - started
    if first > WARM_UP and not problems:
        started = time.perf_counter()
        target_problems(target, device)
        call = time.perf_counter() - started
        new_sizes = new_sizes_call(target, device) or call
    return problems, first, call, new_sizes


def new_sizes_call(target: Target, device: torch.device | str = "cpu") -> float | None:
    """Seconds a call of an attention function on sizes it has not met takes: the probe's problem with
    a query fewer (and a key fewer where Tq must be Tk), no larger in any size, so as safe to call.  None
    for a module or a layer, or where the call raises (the properties will say what it refuses)."""
    if target.attention is None:
        return None
    batch, n_heads, n_kv_heads, tq, tk, d, dv = probe_shapes(target)
    tk = tk if target.supports("decode") else tk - 1
    gen = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(batch, heads, t, width, generator=gen).to(device)
        for heads, t, width in ((n_heads, tq - 1, d), (n_kv_heads, tk, d), (n_kv_heads, tk, dv))
    )
    started = time.perf_counter()
    try:
        target.attention(q, k, v, **KEYWORDS)
    except Exception:  # a refusal is the properties' to report
        return None
    return time.perf_counter() - started


def probed(
    target: Target, device: torch.device | str, isolation: object | None
) -> tuple[list[str], float, float, float]:
    """``first_calls`` in a forked probe where the run isolates the target (attnspec/runner/parallel.py),
    so that a target that crashes or hangs on its first call is told so in one line."""
    try:
        if isolation is None:
            return first_calls(target, device)
        return isolation.in_a_fork(lambda: first_calls(target, device))  # type: ignore[attr-defined]
    except Died as died:
        return [f"--impl {target.name}: its first call, attention(q, k, v, {CALL}), {died}"], 0.0, 0.0, 0.0
    except Exception as error:  # the kit could not even look at what came back (a --device meta, ...)
        said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (
            [f"--impl {target.name}: its first call on device {device} could not be checked: {said}"],
            0.0,
            0.0,
            0.0,
        )


def probe_shapes(target: Target) -> tuple[int, int, int, int, int, int, int]:
    """(B, Hq, Hkv, Tq, Tk, d, dv) of the probe: sizes that differ wherever the target lets them."""
    n_heads, n_kv_heads = target.head_counts(6 if target.supports("gqa") else 2, 2)
    n_kv_heads = n_kv_heads if target.supports("gqa") else n_heads
    tq = 3 if target.supports("decode") else 5
    d = target.head_size(4)
    dv = target.head_size(7) if target.supports("value_dim") else d
    return 1, n_heads, n_kv_heads, tq, 5, d, dv


def target_problems(target: Target, device: torch.device | str = "cpu") -> list[str]:
    """What keeps ``target`` from being checked, one line each; [] if nothing.

    It calls attention(q, k, v, **KEYWORDS) as the properties do (an argument the target does not
    support is passed as None), and again with return_weights=True when the target declares
    "weights", on a small causal problem, and looks at what comes back; a module target is called
    once on x (1, 5, D)."""
    if target.attention is None and target.module is None:
        return layer_problems(target, device)
    if target.attention is None:
        return module_problems(target, device)
    with recording.as_returned():
        return _attention_problems(target, device)


def _attention_problems(target: Target, device: torch.device | str) -> list[str]:
    batch, n_heads, n_kv_heads, tq, tk, d, dv = probe_shapes(target)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, t, width, generator=gen).to(device)
        for heads, t, width in ((n_heads, tq, d), (n_kv_heads, tk, d), (n_kv_heads, tk, dv))
    )
    call = f"--impl {target.name}: attention(q, k, v, {CALL})"
    try:
        out = target.attention(q, k, v, **KEYWORDS)
    except Exception as error:  # any failure of the first call is the one line to show
        return [] if crashed(error) else [f"{call} raised {raised_as(error)} {SEE}"]
    problems = _result_problems(call, out, "(B, Hq, Tq, dv)", (batch, n_heads, tq, dv), q)
    if target.supports("weights"):
        problems += _weights_problems(target, q, k, v, (batch, n_heads, tq, tk))
    return problems


def crashed(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the target's own code on a plain problem it declares: a failure
    of the target, which the properties fail and the diagnosis places, not a set-up problem (a call the
    target cannot even take, such as an argument its signature lacks, is raised where the kit calls it)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and not kit_code(frames[-1].filename)


def raised_as(error: BaseException) -> str:
    """An error in one line: its type and its message's first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0]}" if str(error) else type(error).__name__


def _result_problems(call: str, out: object, layout: str, shape: tuple[int, ...], q) -> list[str]:
    if not isinstance(out, torch.Tensor):
        return [f"{call} returned a {type(out).__name__}, not the output tensor {SEE}"]
    problems = []
    if tuple(out.shape) != shape:
        problems.append(f"{call} returned shape {tuple(out.shape)}, expected {layout} = {shape} {SEE}")
    if out.dtype != q.dtype or out.device != q.device:
        problems.append(f"{call} returned {out.dtype} on {out.device} for {q.dtype} inputs on {q.device}")
    return problems  # NaN or a crash inside the target on this plain problem is a failure: see crashed()


def _weights_problems(target: Target, q, k, v, shape: tuple[int, ...]) -> list[str]:
    call = f"--impl {target.name}: attention(q, k, v, {CALL}, return_weights=True)"
    try:
        result = target.attention(q, k, v, **KEYWORDS, return_weights=True)
    except Exception as error:
        return [f"{call} raised {raised_as(error)} (it declares 'weights') {SEE}"]
    if not (isinstance(result, tuple | list) and len(result) == 2):
        what = type(result).__name__ if not isinstance(result, torch.Tensor) else "tensor"
        return [f"{call} returned a {what}, not (output, weights), and the target declares 'weights' {SEE}"]
    out, weights = result
    problems = _result_problems(call + "[0]", out, "(B, Hq, Tq, dv)", (*shape[:3], v.shape[3]), q)
    return problems + _result_problems(call + "[1]", weights, "(B, Hq, Tq, Tk)", shape, q)


def meta_problem(target: Target) -> str | None:
    """Why ``target`` cannot run on the meta device (the exception's first line), or None if it runs there.

    A kernel that reads a size or a bound out of a tensor (``.item()``, ``.tolist()``), a Triton or CUDA
    kernel, or a C++ extension without a meta kernel cannot: that is no bug of theirs, and the device
    property then needs a second real device instead (skips.second_device)."""
    batch, n_heads, n_kv_heads, tq, tk, d, dv = probe_shapes(target)
    q = torch.empty(batch, n_heads, tq, d, device="meta")
    k = torch.empty(batch, n_kv_heads, tk, d, device="meta")
    v = torch.empty(batch, n_kv_heads, tk, dv, device="meta")
    try:
        target.attention(q, k, v, **KEYWORDS)
    except Exception as error:  # whatever stops it on meta
        return f"{raised_as(error)}"
    return None


# The first layers the check builds, heads and KV heads: a layer that raises CannotBuild for one (a
# multi-query layer takes one KV head) is built with the next.
FIRST_HEADS = ((2, 2), (2, 1), (4, 2), (1, 1))


def buildable_spec(target: Target, device: torch.device | str) -> targets.LayerSpec:
    """A small LayerSpec the target's layer(spec) builds (the first tried, which then raises, if it
    builds none): a layer that cannot be built with some sizes is checked on the others, and told of
    those the properties draw (a refusal, or CannotBuild)."""
    specs = [target.fitted(targets.LayerSpec(2 * h, h, kv, 4, device=device)) for h, kv in FIRST_HEADS]
    for spec in specs:
        try:
            target.layer(spec)
        except Exception:  # another size may build
            continue
        return spec
    return specs[0]


def layer_problems(target: Target, device: torch.device | str = "cpu") -> list[str]:
    """What keeps a target that is only a layer (a cross-attention layer) from being checked: the layer
    of a small LayerSpec, called on x (1, 5, D) (and, with "cross", on a context (1, 3, D)), must return
    a tensor of x's shape, dtype and device, without NaN."""
    if target.layer is None:
        return [f"--impl {target.name}: neither an attention function, a module nor a layer() {SEE}"]
    spec = buildable_spec(target, device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, spec.d_model, generator=gen).to(device)
    context = {"context": torch.randn(1, 3, spec.d_model, generator=gen).to(device)}
    across = ", context=c" if target.supports("cross") else ""
    call = f"--impl {target.name}: layer({spec}).forward(x, 0{across})"
    try:
        with torch.no_grad():
            out = target.layer(spec).forward(x, 0, **(context if target.supports("cross") else {}))
    except Exception as error:  # any failure of the first call is the one line to show
        return [] if crashed(error) else [f"{call} raised {raised_as(error)} {SEE}"]
    return _result_problems(call, out, "(B, T, D)", tuple(x.shape), x)


def module_problems(target: Target, device: torch.device | str = "cpu") -> list[str]:
    """What keeps a module target from being checked: its call on x (1, T, D) must return a tensor of
    x's shape, dtype and device, without NaN (T = 5, or its maximum length if shorter); a model's call
    on tokens (1, T) logits (1, T, V) in the default dtype."""
    seq = min(5, target.max_len or 5)
    gen = torch.Generator().manual_seed(0)
    if target.vocab_size is not None:
        x = torch.randint(0, target.vocab_size, (1, seq), generator=gen).to(device)
        call = f"--impl {target.name}: model(tokens), tokens of shape (1, {seq}) in [0, {target.vocab_size})"
        shape, layout, like = (1, seq, target.vocab_size), "(B, T, V)", torch.empty(0, device=device)
    else:
        x = torch.randn(1, seq, target.d_model, generator=gen).to(device)
        call = f"--impl {target.name}: module(x) with x of shape (1, {seq}, D={target.d_model})"
        shape, layout, like = tuple(x.shape), "(B, T, D)", x
    try:
        with torch.no_grad():
            out = target.module_in(like.dtype, x.device)(x)
    except Exception as error:  # any failure of the first call is the one line to show
        return [f"{call} raised {raised_as(error)} {SEE}"]
    return _result_problems(call, out, layout, shape, like)


def impossible_specs(target: Target, spec: targets.LayerSpec, rope: bool) -> dict[str, targets.LayerSpec]:
    """What the layer of ``spec`` (valid) cannot be built as, by the target's declarations: Hq not a
    multiple of Hkv (with gqa), an odd head size (with RoPE, unless head_dims rules it out), a width
    that is not Hq times the head size (with tied_width)."""
    bad = {}
    if target.supports("gqa") and not target.heads:
        bad["3 query heads over 2 KV heads"] = replace(
            spec, n_heads=3, n_kv_heads=2, d_model=target.layer_width(3, spec.head_dim, 3 * spec.head_dim)
        )
    if rope and not target.head_dims:
        width = target.layer_width(spec.n_heads, 3, spec.n_heads * 3)
        bad["a head size of 3 under RoPE"] = replace(spec, head_dim=3, d_model=width)
    if target.tied_width:
        bad["a width of Hq * head size + 1"] = replace(spec, d_model=spec.n_heads * spec.head_dim + 1)
    return bad


def raised_by_the_kit(error: BaseException) -> bool:
    """Whether ``error`` came from the kit's own code (reading the parameters of a layer that was
    built), not from the target's."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and kit_code(frames[-1].filename)
