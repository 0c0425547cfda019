"""The broken twins of the Triton zoo: each is one of the zoo's kernel files with one documented edit,
the bug class fast kernels ship, and the cause its check must name.

    attnspec check examples.zoo.triton_kernels.twins:SKIPPED_LAST_KEY_BLOCK

A twin is made on first use: the kernel file's source with the edit applied (the old text must occur
exactly once), written to a folder of its own and imported from there as a module, so that Triton
reads the twin's kernel source as it reads any other (``inspect.getsource``).  The folder is removed
when the process ends.
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Twin:
    kernel: str  # the zoo file the twin edits (forward.py, ...)
    old: str  # the text replaced, exactly once
    new: str
    cause: str  # the words the check's first lines name the cause with
    entry: str = "attention"  # the target object of the edited file


TWINS: dict[str, Twin] = {
    # forward.py
    # the key-block loop's bound rounded down: a partial last block never read
    "SKIPPED_LAST_KEY_BLOCK": Twin(
        "forward.py",
        "    for start_n in range(lo, hi, BLOCK_N):",
        "    for start_n in range(lo, (hi // BLOCK_N) * BLOCK_N, BLOCK_N):",
        "only when the last key or query block is partial",
    ),
    "NOT_RESCALED": Twin(  # the accumulator kept as it was when the running max grows
        "forward.py",
        "        acc = acc * alpha[:, None]\n        acc = tl.dot(",
        "        acc = tl.dot(",
        "only when the keys span several key blocks",
    ),
    "FINITE_MAX_START": Twin(  # the running max starts at a "safe" finite value, not -inf
        "forward.py",
        'm_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
        "m_i = tl.full([BLOCK_M], -1.0e4, dtype=tl.float32)",
        "only at logits far below zero",
    ),
    "EXP2_WITHOUT_LOG2E": Twin(  # exp2 of logits in base e: every logit scaled by ln 2
        "forward.py",
        "    qk_scale = sm_scale * LOG2E",
        "    qk_scale = sm_scale",
        "exp2 of logits never multiplied by log2(e)",
    ),
    "BATCH_OFFSET_LOST": Twin(  # every sequence of the batch reads the first one's keys
        "forward.py",
        "    k_base = K + off_z * stride_kz + off_kvh * stride_kh",
        "    k_base = K + off_kvh * stride_kh",
        "a batch offset lost",
    ),
    "BLOCK_SKIP_OFF_BY_ONE": Twin(  # the causal bound one key short: a block starting on the diagonal skipped
        "forward.py",
        "hi = tl.minimum(N_KV, (start_m + 1) * BLOCK_M + (N_KV - N_Q))",
        "hi = tl.minimum(N_KV, (start_m + 1) * BLOCK_M + (N_KV - N_Q) - 1)",
        "only where a query's own key is the first of a key block",
    ),
    # decode.py
    "SPLITS_COMBINED_WITHOUT_RESCALE": Twin(  # the splits' sums and accumulators added as they are
        "decode.py",
        "        l_i += scale * l_s\n        acc += scale[:, None] * acc_s\n",
        "        l_i += l_s\n        acc += acc_s\n",
        "only on the decode path",
    ),
    "SINK_IN_EVERY_SPLIT": Twin(  # the sink joins the sum once per split, not once per query
        "decode.py",
        "        acc += scale[:, None] * acc_s\n"
        "    if HAS_SINKS:\n"
        "        sink = tl.load(Sinks + off_h) * 1.4426950408889634  # a natural-log logit, to base 2\n"
        "        l_i += tl.exp2(sink - m_safe)\n",
        "        acc += scale[:, None] * acc_s\n"
        "        if HAS_SINKS:\n"
        "            sink = tl.load(Sinks + off_h) * 1.4426950408889634  # a natural-log logit, to base 2\n"
        "            l_i += tl.exp2(sink - m_safe)\n",
        "the sink counted once per key split",
    ),
    # varlen.py
    "SEQUENCE_START_LOST": Twin(  # the key pointer not advanced to the sequence's start in cu_seqlens_k
        "varlen.py",
        "    k_base = K + k_start * stride_kt + off_kvh * stride_kh",
        "    k_base = K + off_kvh * stride_kh",
        "a batch offset lost",
    ),
    "DOCUMENT_START_OFF_BY_ONE": Twin(  # each document starts on the previous one's last token
        "varlen.py",
        "starts = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1",
        "starts = torch.nonzero(ids[1:] != ids[:-1]).flatten()",
        "each document starts one token early",
    ),
    # backward.py: the forward exact, the backward wrong.  GRAD-1 (gradcheck) fails first and names the
    # input whose gradient is wrong by its index (0: q, 1: k, 2: v, 3: sinks); GRAD-2 then names it
    "DELTA_NOT_SUBTRACTED": Twin(  # the dQ kernel's dS = P * dP, delta = rowsum(dO * O) never subtracted
        "backward.py",
        "        ds = p * (dp - delta[:, None])",
        "        ds = p * dp",
        "only dQ is wrong",
    ),
    "DK_WITHOUT_SCALE": Twin(  # dK = dS^T Q left without the softmax scale
        "backward.py",
        "    dk = dk * sm_scale\n",
        "",
        "dK is off by exactly the softmax scale",
    ),
    "GQA_GRADIENTS_NOT_SUMMED": Twin(  # dK and dV of the group's first query head only (an MHA loop)
        "backward.py",
        "    for g in range(GROUP):",
        "    for g in range(1):",
        "only with GQA",
    ),
    "SINK_MAX_LEFT_OUT_OF_LSE": Twin(  # the running max not raised to the sink: lse too small, P too big
        "backward.py",
        "        m_i = m_new\n\n    seen",
        "\n    seen",
        "only with sinks",
    ),
    "MASK_FORGOTTEN_IN_DQ": Twin(  # the dQ kernel recomputes P = exp(S - lse) without the mask
        "backward.py",
        "        p = tl.where(visible, tl.exp(qk - lse[:, None]), 0.0)",
        "        p = tl.exp(qk - lse[:, None])",
        "only dQ is wrong",
    ),
}

_made: dict[str, object] = {}
_folder: list[Path] = []


def _twin_folder() -> Path:
    if not _folder:
        folder = Path(tempfile.mkdtemp(prefix="attnspec-triton-twins-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _folder.append(folder)
    return _folder[0]


def edited_source(name: str) -> str:
    """The twin's source: its kernel file with its one edit."""
    twin = TWINS[name]
    source = (HERE / twin.kernel).read_text(encoding="utf-8")
    if source.count(twin.old) != 1:
        raise ValueError(f"twin {name}: {twin.old!r} occurs {source.count(twin.old)} times in {twin.kernel}")
    return source.replace(twin.old, twin.new)


def twin(name: str) -> object:
    """The target of twin ``name``, its module made and imported once."""
    if name not in _made:
        module_name = f"attnspec_triton_twin_{name.lower()}"
        path = _twin_folder() / f"{module_name}.py"
        path.write_text(edited_source(name), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        _made[name] = getattr(module, TWINS[name].entry)
    return _made[name]


def __getattr__(name: str) -> object:
    if name in TWINS:
        return twin(name)
    raise AttributeError(name)
