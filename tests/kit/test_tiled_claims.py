"""The attention properties that claim impl's tiled path take it, and fail when it is broken.

Before, ATTN-4 and ATTN-9 asked impl for the weights, which only the explicit path returns: their
"tiled" runs ran the explicit path twice, and a tile band that ends one key late (each tile sees one
future key) passed them.  conftest.py now fails a test that claims the tiled path and never takes it;
this shows that the properties catch that bug on the tiled path.
"""

from __future__ import annotations

import os

import pytest
import torch

from attnspec.impl import attention as impl_attention
from attnspec.kit.fixtures import ATTENTION_PATHS
from attnspec.kit.patching import module_attributes
from attnspec.kit.properties import test_attention

# impl's tiled path, under the properties run against impl
pytestmark = pytest.mark.skipif(
    os.environ.get("ATTNSPEC_IMPL", "impl") != "impl", reason="the tiled path is impl's: run against impl"
)


def band_one_key_late(q, k, v, options):
    """impl's tiled path with the bug: each tile's key band ends one key after its last query."""
    tq, tk = q.shape[2], k.shape[2]
    first = tk - tq  # the absolute position of query 0
    tiles = []
    for start in range(0, tq, impl_attention.QUERY_TILE):
        stop = min(start + impl_attention.QUERY_TILE, tq)
        window = options.window
        lo = 0 if window is None else max(0, first + start - window + 1)
        hi = min(first + stop + 1, tk)  # one key late: the correct band ends at first + stop
        tile, _ = impl_attention.explicit_attention(
            q[:, :, start:stop], k[:, :, lo:hi], v[:, :, lo:hi], options.keys(lo, hi)
        )
        tiles.append(tile)
    return torch.cat(tiles, dim=2)


@pytest.mark.parametrize(
    "prop, kwargs",
    [
        (test_attention.test_matches_the_oracle, {"dtype": torch.float64}),
        (test_attention.test_matches_torch_sdpa, {"dtype": torch.float64}),
        (test_attention.test_future_positions_do_not_change_the_prefix, {}),
    ],
    ids=["ATTN-4", "ATTN-5", "ATTN-9"],
)
def test_a_tile_band_one_key_late_fails_the_properties_on_the_tiled_path(prop, kwargs):
    broken = {"tiled_attention": band_one_key_late, "QUERY_TILE": ATTENTION_PATHS["tiled"]}
    with module_attributes(impl_attention, **broken), pytest.raises(AssertionError):
        prop(device=torch.device("cpu"), **kwargs)
