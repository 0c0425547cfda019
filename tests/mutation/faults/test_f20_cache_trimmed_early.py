"""F20 (f20_cache_trimmed_early.py): windowed cache trimmed to what it keeps before the chunk is attended."""

from __future__ import annotations

from tests.fixtures.mutation import mutate


def test_a_windowed_cache_trimmed_before_the_chunk_is_attended():
    """Both idioms: a ring buffer returning old + new (trimmed to the window along the concatenated
    axis), and a cache that keeps a slice of old + new and returns it whole (returns what it keeps)."""
    ring = mutate(
        """
        def update(self, k, v):
            if self.window is None:
                return self.append(k, v)
            old_k, old_v = self.read()
            self.write(k, v)
            return torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=-2)
        """,
        "F20",
    )
    assert len(ring) == 1
    assert "(torch.cat([old_k, k], dim=2))[:, :, -self.window:]" in ring[0]
    assert "(torch.cat([old_v, v], dim=-2))[..., -self.window:, :]" in ring[0]
    kept = mutate(
        """
        def update(self, key_states, value_states):
            full_k = torch.cat([self.keys, key_states], dim=-2)
            full_v = torch.cat([self.values, value_states], dim=-2)
            self.keys = full_k[:, :, -self.sliding_window + 1 :, :]
            self.values = full_v[:, :, -self.sliding_window + 1 :, :]
            return full_k, full_v
        """,
        "F20",
    )
    assert len(kept) == 1 and "return self.keys, self.values" in kept[0]
    unwindowed = """
        def update(self, k, v):
            return torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        """
    assert mutate(unwindowed, "F20") == []  # a full cache returns everything it holds: no window to trim to
