"""Hypothesis strategies and tensor factories: every property draws its inputs here.

Tensors are not drawn element by element (slow, and shrinking a float tensor says little):
a strategy draws the shapes, the switches and a seed, and `make` builds the tensors
from that seed, so a failing example is reproducible from its printed repr.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
from hypothesis import reject
from hypothesis import strategies as st

from attnspec.kit.loading import current
from attnspec.protocol import interpreted
from attnspec.protocol.targets import CannotBuild, Refused

LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class AttnCase:
    """One attention problem: shapes, mask switches and the seed of its tensors."""

    batch: int
    n_heads: int
    n_kv_heads: int
    tq: int
    tk: int
    head_dim: int
    dv: int
    window: int | None
    use_sinks: bool
    seed: int
    magnitude: float = 1.0
    # packed sequences, for a target with "documents": the lengths of each batch row's documents (the
    # last one stretched or cut to Tk), or None for no document_ids at all
    documents: tuple[tuple[int, ...], ...] | None = None

    def make(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        """(q, k, v, sinks) on ``device`` in ``dtype``; sinks is None unless use_sinks."""
        gen = torch.Generator().manual_seed(self.seed)
        q = torch.randn(self.batch, self.n_heads, self.tq, self.head_dim, generator=gen, dtype=torch.float64)
        k = torch.randn(
            self.batch, self.n_kv_heads, self.tk, self.head_dim, generator=gen, dtype=torch.float64
        )
        v = torch.randn(self.batch, self.n_kv_heads, self.tk, self.dv, generator=gen, dtype=torch.float64)
        sinks = torch.randn(self.n_heads, generator=gen, dtype=torch.float64) * 2 if self.use_sinks else None
        q, k = q * self.magnitude, k * self.magnitude

        def put(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)

        return put(q), put(k), put(v), put(sinks)

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads

    def document_ids(self, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """(B, Tk) int64, non-decreasing along each row: the document of every key, or None."""
        return None if self.documents is None else packed_ids(self.documents, self.batch, self.tk, device)

    def keywords(self, sinks: torch.Tensor | None, device="cpu", *, causal: bool = True, scale=None) -> dict:
        """The keywords of a call of the target on this case, which the declared oracle takes as they are
        (references.py): the mask switches, the sinks and the scale, and its documents where it has
        any (a window only with the causal mask)."""
        window = self.window if causal else None
        keywords = {"causal": causal, "window": window, "sinks": sinks, "scale": scale}
        document_ids = self.document_ids(device)
        if document_ids is not None:
            keywords["document_ids"] = document_ids
        return keywords


seeds = st.integers(min_value=0, max_value=2**31 - 1)
head_dims = st.integers(1, 8).map(lambda half: 2 * half)  # even: RoPE pairs features


def seeded_randn(
    seed: int, *shape: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Standard-normal noise of ``shape`` drawn in float64 from ``seed`` (the same on every device)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def noise_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    """seeded_randn with the shape, device and dtype of ``t``."""
    return seeded_randn(seed, *t.shape, device=t.device, dtype=t.dtype)


# Head sizes: the small ones where edge cases live (1, odd), and now and then the sizes models use, whose
# longer dot products and larger logits round as real heads do.
head_sizes = st.sampled_from([*range(1, 9), 16, 64, 128])


@st.composite
def attn_cases(
    draw: st.DrawFn,
    *,
    max_t: int = 12,
    windows: bool = True,
    sinks: bool = True,
    self_attention: bool = False,
    min_tq: int = 1,
    documents: bool = True,
) -> AttnCase:
    """An attention problem with Tq <= Tk (decode-style when Tq < Tk), GQA groups, windows, sinks,
    and packed documents where the target takes them (``documents=False``: never).

    ``self_attention`` forces Tq == Tk.
    """
    n_kv_heads = draw(st.integers(1, 3))
    n_heads = n_kv_heads * draw(st.integers(1, 3))
    tk = draw(st.integers(max(min_tq, 1), max_t))
    tq = tk if self_attention else draw(st.integers(min(min_tq, tk), tk))
    head_dim = draw(head_sizes)
    dv = draw(st.one_of(st.just(head_dim), head_sizes))
    batch = draw(st.integers(1, 3))
    sizes = (batch, n_heads, n_kv_heads, tq, tk, head_dim, dv)
    return fit_to_target(_with_switches(draw, *sizes, windows=windows, sinks=sinks, documents=documents))


@st.composite
def blind_query_cases(draw: st.DrawFn, max_t: int = 8) -> AttnCase:
    """Tq > Tk under the causal mask: the first Tq - Tk queries (absolute positions < 0)
    can see no key at all."""
    case = draw(attn_cases(max_t=max_t))
    if not current().supports("blind"):
        return case  # queries that see no key are beyond the target (the blind-query tests need it)
    return fit_to_target(replace(case, tq=case.tk + draw(st.integers(1, 4))))  # within max_len


def _with_switches(
    draw: st.DrawFn, *sizes: int, windows: bool, sinks: bool, documents: bool = True
) -> AttnCase:
    """The case of ``sizes`` (batch, Hq, Hkv, Tq, Tk, d, dv) with a window, sinks, magnitude and seed,
    and documents for a target with "documents"."""
    tk = sizes[4]
    window = draw(st.one_of(st.none(), st.integers(1, tk + 2))) if windows else None
    use_sinks = draw(st.booleans()) if sinks else False
    magnitude = draw(st.sampled_from([1.0, 0.1, 3.0]))
    packed = draw(packed_documents(sizes[0], tk)) if documents and current().supports("documents") else None
    return AttnCase(*sizes, window, use_sinks, draw(seeds), magnitude, packed)


@st.composite
def document_lengths(draw: st.DrawFn, length: int, near: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The lengths of the documents packed into a row of ``length`` tokens, boundaries anywhere: one
    document, or cuts drawn at any position (or at the positions ``near``: a kernel's block edges),
    often at the first and the last token (one-token documents at either end) and between neighbours
    (one-token documents inside)."""
    if length == 1 or draw(st.integers(0, 4)) == 0:
        return (length,)
    inside = sorted(n for n in near if 1 <= n < length)
    cuts: set[int] = set()
    # a count, then each cut: drawing integers costs Hypothesis half of what building a set of a one_of
    # strategy on every call did (which was half of the time a kernel case took to draw)
    for _ in range(draw(st.integers(0, min(length - 1, 6)))):
        if inside and draw(st.booleans()):
            cuts.add(inside[draw(st.integers(0, len(inside) - 1))])
        else:
            cuts.add(draw(st.integers(1, length - 1)))
    if draw(st.booleans()):
        cuts.add(1)  # a one-token document first
    if draw(st.booleans()):
        cuts.add(length - 1)  # a one-token document last
    edges = [0, *sorted(cuts), length]
    return tuple(b - a for a, b in zip(edges, edges[1:], strict=False))


def packed_ids(
    documents: tuple[tuple[int, ...], ...], batch: int, length: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(batch, length) int64: the document of each position, from each row's document lengths (the
    last document stretched or cut to ``length``; a batch larger than the rows drawn reuses them)."""
    rows = []
    for b in range(batch):
        lengths = documents[b % len(documents)]
        ids = [n for n, size in enumerate(lengths) for _ in range(size)][:length]
        rows.append(ids + [ids[-1] if ids else 0] * (length - len(ids)))
    return torch.tensor(rows, dtype=torch.int64, device=device)


@st.composite
def packed_documents(
    draw: st.DrawFn, batch: int, length: int, near: tuple[int, ...] = ()
) -> tuple[tuple[int, ...], ...]:
    """Each of ``batch`` rows' document_lengths."""
    return tuple(draw(document_lengths(length, near)) for _ in range(batch))


def _unused(draw: st.DrawFn, low: int, high: int, used: set[int]) -> int:
    """A value of low..high that is not in ``used`` (which it joins); the range is wider than ``used``."""
    value = draw(st.sampled_from([n for n in range(low, high + 1) if n not in used]))
    used.add(value)
    return value


@st.composite
def distinct_attn_cases(draw: st.DrawFn, *, windows: bool = True, sinks: bool = True) -> AttnCase:
    """An attention problem whose sizes B, Hq, Hkv, Tq, Tk, d, dv all differ, so that no shape
    coincidence hides a confused axis, as far as the target lets them differ (Hq = Hkv without
    "gqa", Tq = Tk without "decode", dv = d without "value_dim").  Tq < Tk, or Tq > Tk (queries
    that see no key) for a target with "blind".  Each size is drawn from the values the others left
    free, so nothing is rejected."""
    target = current()
    used: set[int] = set()
    n_kv_heads = _unused(draw, 1, 3, used)
    n_heads = n_kv_heads * (draw(st.integers(2, 3)) if target.supports("gqa") else 1)
    used.add(n_heads)
    batch = _unused(draw, 1, 4, used)
    head_dim = _unused(draw, 1, 8, used)
    dv = _unused(draw, 1, 8, used) if target.supports("value_dim") else head_dim
    blind = target.supports("blind") and draw(st.booleans())
    if not target.supports("decode"):
        tq = tk = _unused(draw, 1, 9, used)
    elif blind:
        tk = _unused(draw, 1, 9, used)
        tq = _unused(draw, tk + 1, tk + 8, used)
    else:
        tq = _unused(draw, 1, 9, used)
        tk = _unused(draw, tq + 1, tq + 8, used)
    sizes = (batch, n_heads, n_kv_heads, tq, tk, head_dim, dv)
    return fit_to_target(_with_switches(draw, *sizes, windows=windows, sinks=sinks))


def fit_to_target(case: AttnCase) -> AttnCase:
    """The case without what the implementation under test does not support (--impl): one KV
    head per query head without "gqa", Tq = Tk without "decode", dv = d without "value_dim", no
    window, no sinks, no documents, head sizes among its declared ``head_dims``, head counts among its
    declared ``heads``, lengths up to its declared ``max_len``, batches up to its ``max_batch``."""
    target = current()
    batch = min(case.batch, target.max_batch or case.batch)
    head_dim = target.head_size(case.head_dim)
    n_heads, n_kv_heads = target.head_counts(case.n_heads, case.n_kv_heads)
    tq, tk = within_length(case.tq if target.supports("decode") else case.tk, case.tk, target.max_len)
    documents = case.documents[:batch] if case.documents is not None else None
    return replace(
        case,
        batch=batch,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads if target.supports("gqa") else n_heads,
        tq=tq,
        tk=tk,
        head_dim=head_dim,
        dv=target.head_size(case.dv) if target.supports("value_dim") else head_dim,
        window=case.window if target.supports("window") else None,
        use_sinks=case.use_sinks and target.supports("sinks"),
        documents=documents if target.supports("documents") else None,
    )


def within_length(tq: int, tk: int, longest: int | None) -> tuple[int, int]:
    """Tq and Tk cut to ``longest`` (None: as they are), with fewer queries than keys, as many, or more
    as before wherever the length leaves room for it."""
    if longest is None or max(tq, tk) <= longest:
        return tq, tk
    fewer, more = tq < tk, tq > tk
    tq, tk = min(tq, longest), min(tk, longest)
    if fewer and tq >= tk:
        tq = max(1, tk - 1)
    if more and tq <= tk:
        tk = max(1, tq - 1)
    return tq, tk


def spanning_tiles() -> AttnCase:
    """A causal problem whose 8 queries span three tiles of impl's tiled path as the properties run it
    (tiles of 3 queries, the last one ragged) over 10 keys, with GQA, a window, sinks and no two sizes
    alike, fitted to the target: an explicit example for properties that must take that path in
    every profile."""
    return fit_to_target(AttnCase(1, 6, 2, 8, 10, 4, 3, 4, True, seed=11))


def causal_flags() -> st.SearchStrategy[bool]:
    """causal True or False, or only True when the target has no "non_causal" (a target with a
    mask_mod has none: its mask_mod is the whole mask, and it is called with causal=True)."""
    return st.booleans() if current().supports("non_causal") else st.just(True)


def unmasked_causal() -> bool:
    """The causal switch of a call whose mask hides nothing, for the properties of the "permutable"
    law (laws.py): causal=False, or for a target whose mask_mod lets every query see every key the
    causal=True it is always called with."""
    return current().mask_mod is not None


def scales(low: float, high: float) -> st.SearchStrategy[float | None]:
    """The default scale (None) or an explicit one in [low, high] when the target takes one."""
    return st.one_of(st.none(), st.floats(low, high)) if current().supports("scale") else st.none()


@dataclass(frozen=True)
class BlockCase:
    """A small ModelConfig's arguments plus the input's batch, length and seed.

    norm_eps, rope_base and ffn_hidden default to ModelConfig's defaults; block_cases draws
    other values too, so a block that ignored one of these config fields would disagree
    with an oracle that reads them from the config.
    """

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_layers: int
    window: int | None
    window_layers: str
    use_sinks: bool
    activation: str
    batch: int
    seq: int
    seed: int
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    ffn_hidden: int | None = None
    softcap: float | None = None
    alibi: bool = False
    rotary_dim: int | None = None
    qk_norm: bool = False

    def config(self):
        from attnspec.impl import ModelConfig

        return ModelConfig(
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            n_layers=self.n_layers,
            window=self.window,
            window_layers=self.window_layers,
            use_sinks=self.use_sinks,
            activation=self.activation,
            norm_eps=self.norm_eps,
            rope_base=self.rope_base,
            ffn_hidden=self.ffn_hidden,
            softcap=self.softcap,
            alibi=self.alibi,
            rotary_dim=self.rotary_dim,
            qk_norm=self.qk_norm,
        )

    def module(
        self,
        kind: str,
        layer_idx: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> torch.nn.Module:
        """An "attention", "mlp", "transformer" block (as layer ``layer_idx``) or a "stack" built
        from this config, with seeded random parameters (sinks and norm gains too)."""
        from attnspec.impl import AttentionBlock, MLPBlock, TransformerBlock, TransformerStack

        cfg = self.config()
        module = {
            "attention": lambda: AttentionBlock(cfg, layer_idx),
            "transformer": lambda: TransformerBlock(cfg, layer_idx),
            "stack": lambda: TransformerStack(cfg),
            "mlp": lambda: MLPBlock(cfg),
        }[kind]()
        return randomize_(module.to(device=device, dtype=dtype), self.seed + 1)

    def input(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.batch, self.seq, self.d_model, generator=gen, dtype=torch.float64)
        return x.to(device=device, dtype=dtype)


@st.composite
def block_cases(
    draw: st.DrawFn, *, max_seq: int = 10, max_layers: int = 3, sinks: bool | None = None
) -> BlockCase:
    """A tiny block or stack configuration (Hq != Hkv often, T != d) and an input.

    norm_eps is drawn up to 1 (against inputs of unit RMS, so eps visibly changes the norm),
    rope_base away from 10000 (head_dim >= 4 makes the base matter), ffn_hidden from None
    (the default width) down to 1; the attention's soft-cap (small enough to bind on logits of
    unit size) and ALiBi on or off; RoPE on all of each head or on its first pairs (rotary_dim), and
    q/k norm on or off.
    """
    n_kv_heads = draw(st.integers(1, 2))
    n_heads = n_kv_heads * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([2, 4, 6, 8]))
    d_model = draw(st.sampled_from([8, 12, 16, 24]))
    seq = draw(st.integers(1, max_seq))
    window = draw(st.one_of(st.none(), st.integers(1, max_seq + 1)))
    return BlockCase(
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        n_layers=draw(st.integers(1, max_layers)),
        window=window,
        window_layers=draw(st.sampled_from(["even", "all"])),
        use_sinks=draw(st.booleans()) if sinks is None else sinks,
        activation=draw(st.sampled_from(["relu", "gelu", "swiglu"])),
        batch=draw(st.integers(1, 2)),
        seq=seq,
        seed=draw(seeds),
        norm_eps=draw(st.sampled_from([1e-5, 1e-6, 1e-2, 0.5, 1.0])),
        rope_base=draw(st.sampled_from([10000.0, 10.0, 100.0, 500000.0])),
        ffn_hidden=draw(st.one_of(st.none(), st.integers(1, 12))),
        softcap=draw(st.sampled_from([None, None, 0.5, 3.0])),
        alibi=draw(st.booleans()),
        rotary_dim=draw(st.sampled_from([None, None, *range(2, head_dim + 1, 2)])),
        qk_norm=draw(st.booleans()),
    )


LAYER_SIZES = "OBJ.heads, OBJ.kv_heads, OBJ.head_dims, OBJ.tied_width, OBJ.tied_context"


def built_layer(spec):
    """The layer the target builds for ``spec`` (already fitted to its declarations: Target.fitted).  A
    spec it cannot be built with (it raises CannotBuild) is rejected, so that Hypothesis draws another:
    the layer is checked on the sizes it takes.  Any other error is the target refusing a spec it did
    not declare it cannot take (Refused), not a broken requirement."""
    try:
        return current().layer(spec)
    except CannotBuild:
        reject()
    except Exception as error:  # any error of the target's builder: said as a refusal
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raised = f"{type(error).__name__}: {first}".rstrip(": ")
        raise Refused(
            f"it raised {raised} building layer({spec}); declare the sizes its layer takes ({LAYER_SIZES}), "
            "or raise attnspec.CannotBuild from layer(spec) for the specs it cannot be built with"
        ) from error


# The widest fan-in whose matrices keep the drawn std: wider ones are drawn at std * sqrt(NARROW / fan-in),
# so that a layer hundreds of features wide has activations and logits of the same size as a narrow one
# (a fixed std would saturate its softmax: one key with all the weight, the others exactly 0 in float32).
NARROW = 16


def randomize_(module: torch.nn.Module, seed, std: float | None = None) -> torch.nn.Module:
    """Overwrite every parameter with seeded noise (sinks and norm gains too), in place.  ``seed`` is an
    int or the LayerSpec the module is built for (its seed and its ``std``, which the kit raises to draw
    large logits); vectors get noise of that std (0.5 by default), matrices of fan-in n above NARROW
    std * sqrt(NARROW / n)."""
    if std is None:
        std = getattr(seed, "std", 0.5)
    gen = torch.Generator().manual_seed(getattr(seed, "seed", seed))
    with torch.no_grad():
        for p in module.parameters():
            fan_in = p.shape[-1] if p.dim() >= 2 else 1
            scale = std * min(1.0, (NARROW / fan_in) ** 0.5)
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale)
    return module


FULL_PRECISION = (torch.float64, torch.float32)


def full_precision() -> tuple[torch.dtype, ...]:
    """float64 and float32; float32 alone for a target without "float64" (--impl)."""
    return FULL_PRECISION if current().supports("float64") else (torch.float32,)


def precise_dtype() -> torch.dtype:
    """The dtype of the exact and tight properties: float64, or float32 without "float64"."""
    return full_precision()[0]


def declared_dtypes() -> tuple[torch.dtype, ...]:
    """The float dtypes the target declares (float32 always), whether or not the device runs them."""
    return (*full_precision(), *(LOW_PRECISION if current().supports("float16") else ()))


@functools.cache
def float_dtypes(device: torch.device) -> tuple[torch.dtype, ...]:
    """float64, float32, and fp16/bf16 where they run on ``device`` (and the target takes them)."""
    return (*full_precision(), *low_precision_dtypes(device))


def low_precision_dtypes(device: torch.device) -> list[torch.dtype]:
    """fp16/bf16 where a matmul in that dtype runs on ``device`` (and the target takes them); no bf16 for
    Triton kernels interpreted on the CPU (protocol/interpreted.py)."""
    if not current().supports("float16"):
        return []
    supported = []
    for dtype in LOW_PRECISION:
        if dtype == torch.bfloat16 and interpreted.active():  # the interpreter's bfloat16 is its bits
            continue
        try:
            a = torch.ones(2, 2, dtype=dtype, device=device)
            (a @ a).sum().item()
            supported.append(dtype)
        except (RuntimeError, TypeError):
            pass
    return supported


# Prompt and decode chunk sizes, drawn independently of the sequence length so explicit examples
# can name them; split_sequence fits them to a sequence.
chunk_lists = st.lists(st.integers(1, 16), min_size=1, max_size=6)


def split_sequence(total: int, sizes: list[int]) -> list[int]:
    """Positive chunk sizes that add up to ``total``: ``sizes`` in order (the last one that fits
    clipped to what is left), then one token at a time; the first chunk is the prompt."""
    chunks: list[int] = []
    for size in sizes:
        left = total - sum(chunks)
        if left == 0:
            break
        chunks.append(min(size, left))
    return chunks + [1] * (total - sum(chunks))
