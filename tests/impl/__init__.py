"""impl's own API, checked against the oracle: masks, RoPE, positions, layers, blocks, the stack, the
KV cache, the attention paths, errors."""
