"""Triton kernels checked on a CPU, through Triton's interpreter.

``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates a kernel: set to 1 beforehand, the kernel
runs on the host, in NumPy, on CPU tensors; otherwise it is compiled for a GPU at its first launch.
So the choice is made before the target's module is imported (prepare): in a run on the CPU, where
triton is installed, kernels are interpreted, unless ``TRITON_INTERPRET`` was set already (the user's
own choice, kept); in a run on a GPU they run compiled.  A module imported earlier, its kernels
already compiled ones, is refused with what to do (compiled_kernels).

The interpreter computes on bfloat16's bit patterns (it supports loads, stores and casts of bfloat16,
no arithmetic: Triton's debugging guide says so): an interpreted kernel is not checked in bfloat16,
and the verdict says it (note).
"""

from __future__ import annotations

import importlib.util
import os
import sys

INTERPRET_ENV = "TRITON_INTERPRET"
NO_BFLOAT16 = (
    "torch.bfloat16: Triton's interpreter computes on bfloat16's bit patterns (only loads, stores and casts "
    "are right), so an interpreted kernel is not checked in it; check it compiled on a GPU (--device cuda)"
)


def prepare(device: str) -> None:
    """Before a target's module is imported: switch Triton's interpreter on for a run on the CPU where
    triton is installed (a kernel compiled for a GPU cannot take CPU tensors; a module that defines no
    kernel is not affected), unless ``TRITON_INTERPRET`` is set already."""
    if INTERPRET_ENV not in os.environ and device.startswith("cpu") and importlib.util.find_spec("triton"):
        os.environ[INTERPRET_ENV] = "1"


_KERNELS: list[str] = []  # the target's kernels this process runs interpreted (found)


def active() -> bool:
    """Whether the target of this process has Triton kernels, run interpreted."""
    return bool(_KERNELS)


def note(half: bool) -> str:
    """What the verdict says of an interpreted target ("" for another); ``half``: it declares fp16/bf16."""
    if not active():
        return ""
    unchecked = "; bfloat16 not checked" if half else ""
    return f"its Triton kernels interpreted on the CPU ({INTERPRET_ENV}=1{unchecked})"


def kernels(modules: list[object]) -> tuple[list[str], list[str]]:
    """The Triton kernels defined in ``modules``: (interpreted, compiled for a GPU); through
    triton.autotune's and triton.heuristics' wrappers."""
    if "triton" not in sys.modules:
        return [], []
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    def kind(value: object) -> type | None:  # only Triton's own objects are looked into (a lazy
        for _ in range(4):  # module's attribute may import anything, or raise)
            if isinstance(value, (JITFunction, InterpretedFunction)):
                return type(value)
            owner = type(value).__module__
            if not isinstance(owner, str) or not owner.startswith("triton."):
                return None
            value = getattr(value, "fn", None)
        return None

    found: tuple[list[str], list[str]] = ([], [])
    for module in modules:
        for name, value in sorted(vars(module).items()):
            if (made := kind(value)) is not None:
                found[made is JITFunction].append(f"{module.__name__}.{name}")
    return found


def found(modules: list[object], device: str) -> None:
    """The kernels of the target's modules (its own, and those its import loaded), noted for the run:
    a ValueError for kernels compiled for a GPU in a run on the CPU (defined before the interpreter was
    switched on: the module imported first, or ``TRITON_INTERPRET=0``)."""
    interpreted_ones, compiled = kernels(modules)
    if compiled and device.startswith("cpu"):
        raise ValueError(
            f"its Triton kernels ({', '.join(compiled)}) were compiled for a GPU, and this run is on the "
            f"CPU: set {INTERPRET_ENV}=1 before the module is imported (attnspec check does it unless "
            f"{INTERPRET_ENV} is set), or check it on a GPU with --device cuda"
        )
    _KERNELS[:] = interpreted_ones
