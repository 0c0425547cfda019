"""Per-token decode time and KV-cache memory over a long decode: full attention vs a window.

    python -m benches.decode_curve [--steps 4096] [--window 128] [--out reports]

Both layers decode the same tokens one at a time from an empty cache, taking turns of 64
steps in one process so that machine noise hits both alike.  Writes decode-curve.png and
decode-curve.json under --out and prints a table of median time per token (over the 64 steps
ending at each row), the cache's held bytes (what grows) and its allocated bytes, and the lowest
ratio full/windowed over the whole curve (below 1 where the window decodes slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import matplotlib
import torch

from attnspec.impl import AttentionBlock, KVCache, ModelConfig

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

BLOCK = 64  # steps per median
ROWS = (64, 128, 192, 256, 512, 1024, 2048, 4096)  # each a median of the BLOCK steps ending there
SIZES = dict(d_model=512, n_heads=8, n_kv_heads=8, head_dim=64, use_sinks=True)


def held_bytes(cache: KVCache) -> int:
    """Bytes of the positions the cache holds: held x B x Hkv x (d + dv) x element size."""
    assert cache.buffers is not None
    keys, values = cache.buffers
    batch, kv_heads, _, d = keys.shape
    return cache.held() * batch * kv_heads * (d + values.shape[3]) * keys.element_size()


def allocated_bytes(cache: KVCache) -> int:
    """Bytes of the cache's buffers, every slot counted (a full cache preallocates max_len)."""
    assert cache.buffers is not None
    return sum(t.numel() * t.element_size() for t in cache.buffers)


def run(steps: int, window: int) -> dict:
    kinds = {"full": None, f"window{window}": window}
    blocks = {}
    for kind, w in kinds.items():
        torch.manual_seed(0)  # the same weights for both layers
        blocks[kind] = AttentionBlock(ModelConfig(window=w, window_layers="all", **SIZES)).eval()
    tokens = torch.randn(steps, 1, 1, SIZES["d_model"], generator=torch.Generator().manual_seed(1))
    for block in blocks.values():  # warm up off the record
        warm = block.new_cache(8)
        for t in range(8):
            block(tokens[t], offset=t, cache=warm)
    caches = {kind: block.new_cache(steps) for kind, block in blocks.items()}
    record = {kind: {"us": [], "held": [], "allocated": []} for kind in kinds}
    # The kinds take turns BLOCK steps at a time (which one goes first alternates), so machine noise
    # hits both alike; turns of one step would let the full layer's large cache evict the windowed
    # layer's weights from the CPU caches at every step, and bill that to the window.
    for first in range(0, steps, BLOCK):
        order = list(kinds) if first // BLOCK % 2 == 0 else list(reversed(kinds))
        for kind in order:
            for t in range(first, min(first + BLOCK, steps)):
                start = time.perf_counter()
                blocks[kind](tokens[t], offset=t, cache=caches[kind])
                record[kind]["us"].append((time.perf_counter() - start) * 1e6)
                record[kind]["held"].append(held_bytes(caches[kind]))
                record[kind]["allocated"].append(allocated_bytes(caches[kind]))
        if (first + BLOCK) % 512 == 0:
            print(f"step {first + BLOCK}/{steps}", file=sys.stderr, flush=True)
    return record


def median_ending(values: list[float], step: int) -> float:
    return statistics.median(values[max(0, step - BLOCK) : step])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    with torch.no_grad():
        record = run(args.steps, args.window)
    full, win = record["full"], record[f"window{args.window}"]

    rows = []
    for step in sorted({s for s in ROWS if s <= args.steps} | {args.steps}):
        row = {"step": step}
        for name, rec in (("full", full), ("window", win)):
            row[f"{name}_us"] = median_ending(rec["us"], step)
            row[f"{name}_held_bytes"] = rec["held"][step - 1]
            row[f"{name}_allocated_bytes"] = rec["allocated"][step - 1]
        row["ratio"] = row["full_us"] / row["window_us"]
        rows.append(row)
    print(
        f"{'step':>5} | {'full us':>8} {'win us':>8} {'full/win':>8} | {'full held KiB':>13} "
        f"{'win held KiB':>12} | {'full alloc KiB':>14} {'win alloc KiB':>13}"
    )
    for r in rows:
        print(
            f"{r['step']:>5} | {r['full_us']:>8.0f} {r['window_us']:>8.0f} {r['ratio']:>8.2f} | "
            f"{r['full_held_bytes'] / 1024:>13.0f} {r['window_held_bytes'] / 1024:>12.0f} | "
            f"{r['full_allocated_bytes'] / 1024:>14.0f} {r['window_allocated_bytes'] / 1024:>13.0f}"
        )
    ratios = {str(r["step"]): r["ratio"] for r in rows if r["step"] in (512, args.steps)}
    for step, ratio in ratios.items():
        print(f"full/windowed time per token at step {step}: {ratio:.2f}x")
    ends = list(range(BLOCK, args.steps + 1, BLOCK)) or [args.steps]
    curve = {s: median_ending(full["us"], s) / median_ending(win["us"], s) for s in ends}
    lowest = min(curve, key=curve.__getitem__)  # below 1 where the window decodes slower
    print(
        f"full/windowed over the whole curve ({len(ends)} medians of {BLOCK} steps): "
        f"lowest {curve[lowest]:.2f}x at step {lowest} (up to W both layers do the same work)"
    )

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rec in (("full attention", full), (f"window W={args.window}", win)):
        ax_t.plot(ends, [median_ending(rec["us"], s) for s in ends], label=name)
        ax_m.plot(range(1, args.steps + 1), [b / 1024 for b in rec["held"]], label=name)
    ax_t.set(xlabel="decode step", ylabel=f"µs / token (median of {BLOCK} steps)", title="time per token")
    ax_t.set_yscale("log")  # a noise spike should not flatten the curves
    ax_m.set(xlabel="decode step", ylabel="KV cache held (KiB)", title="cache memory held")
    for ax in (ax_t, ax_m):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "decode-curve.png", dpi=120)
    setting = dict(batch=1, threads=2, dtype="float32", window=args.window, steps=args.steps, **SIZES)
    report = dict(
        setting=setting, block=BLOCK, rows=rows, ratio_full_over_window=ratios,
        lowest_ratio=dict(step=lowest, ratio=curve[lowest]),
    )  # fmt: skip
    (args.out / "decode-curve.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'decode-curve.png'} and {args.out / 'decode-curve.json'}")


if __name__ == "__main__":
    main()
