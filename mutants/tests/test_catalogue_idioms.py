"""The catalogue's operators on the idioms real attention code is written in (snippets written
here in the style of Hugging Face modeling files, gpt-oss, nanoGPT and SDPA call sites), and on
look-alikes they must leave alone."""

from __future__ import annotations

import pytest

from mutants.tests.test_machinery import mutate


def body(*lines: str) -> str:
    return "def f(self, q, k, v, x, mask, scores, scaling, sm_scale, d, window, layer_idx):\n" + "".join(
        f"    {line}\n" for line in lines
    )


def changed(code: str, fault: str) -> list[str]:
    """The lines each mutant changes (the first differing line of each)."""
    original = body(code).splitlines()
    out = []
    for mutated in mutate(body(code), fault):
        lines = mutated.splitlines()
        out.append(
            next((b.strip() for a, b in zip(original, lines, strict=False) if a != b), lines[-1].strip())
        )
    return out


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        # F1: the fill value in every spelling, and a mask built but never applied
        (
            "w = scores.masked_fill(mask == 0, float('-inf'))",
            "F1",
            {"w = scores.masked_fill(mask == 0, 0.0)", "w = scores"},
        ),
        ("low = torch.finfo(q.dtype).min", "F1", {"low = 0.0"}),
        ("position_ids = position_ids.masked_fill(attention_mask == 0, 1)", "F1", set()),  # no scores
        ("m = torch.where(mask, zero, min_dtype)", "F1", {"m = torch.where(mask, zero, 0.0)"}),
        ("scores = scores + mask", "F1", {"scores = scores"}),
        ("scores += mask[None, None]", "F1", {"pass"}),
        (
            "o = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            "F1",
            {"o = F.scaled_dot_product_attention(q, k, v, is_causal=False)"},
        ),
        (
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "F1",
            {"o = F.scaled_dot_product_attention(q, k, v, attn_mask=None)"},
        ),
        (
            "m = torch.triu(q.new_full((4, 4), -float('inf')), diagonal=1)",
            "F1",
            {"m = torch.triu(q.new_full((4, 4), 0.0), diagonal=1)"},
        ),
        # F2: causal comparisons between any key-like and query-like index, tril/triu swapped
        ("return kv_idx <= q_idx", "F2", {"return kv_idx >= q_idx"}),
        ("return j <= i", "F2", {"return j >= i"}),
        (  # Hugging Face's mask builders: key positions as an arange, query positions as cache_position
            "m = torch.arange(target_length, device=d) > cache_position.reshape(-1, 1)",
            "F2",
            {"m = torch.arange(target_length, device=d) < cache_position.reshape(-1, 1)"},
        ),
        ("m = torch.arange(n) > limit.reshape(-1, 1)", "F2", set()),
        ("return key <= position", "F2", {"return key >= position"}),
        ("m = torch.tril(torch.ones(8, 8))", "F2", {"m = torch.triu(torch.ones(8, 8))"}),
        ("m = torch.triu(full, diagonal=1)", "F2", {"m = torch.tril(full, diagonal=-1)"}),
        # F3: the scale in all its forms
        (
            "w = torch.matmul(q, k.transpose(2, 3)) * scaling",
            "F3",
            {"w = torch.matmul(q, k.transpose(2, 3))"},
        ),
        ("w = q @ k.transpose(-2, -1) / math.sqrt(d)", "F3", {"w = q @ k.transpose(-2, -1)"}),
        ("w = q @ k.transpose(-2, -1) * (1.0 / d ** 0.5)", "F3", {"w = q @ k.transpose(-2, -1) * 1.0"}),
        ("self.scaling = self.head_dim**-0.5", "F3", {"self.scaling = 1.0"}),
        ("scores *= sm_scale", "F3", {"pass"}),
        ("o = attn(q, k, v, scale=self.scaling)", "F3", {"o = attn(q, k, v, scale=1.0)"}),
        # F4: head split and merge
        ("q = self.q_proj(x).view(shape).transpose(1, 2)", "F4", {"q = self.q_proj(x).view(shape)"}),
        ("o = o.transpose(1, 2).contiguous()", "F4", {"o = o.contiguous()"}),
        (
            "q = q.view(B, T, self.n_head, C // self.n_head)",
            "F4",
            {"q = q.view(B, self.n_head, T, C // self.n_head)"},
        ),
        (
            "k = k.view(-1, self.num_key_value_heads, self.head_dim)",
            "F4",
            {"k = k.view(self.num_key_value_heads, -1, self.head_dim)"},
        ),
        ("o = o.permute(0, 2, 1, 3)", "F4", {"o = o"}),
        # F5: the residual sum written as an assignment
        ("h = residual + h", "F5", {"h = h"}),
        ("t = x + t", "F5", {"t = t"}),
        # F8: layer_types and the window argument
        (
            "w = self.window if self.layer_type == 'sliding_attention' else None",
            "F8",
            {
                "w = self.window if self.layer_type != 'sliding_attention' else None",
                "w = self.window if True else None",
            },
        ),
        (
            "o = attn(q, k, v, sliding_window=self.sliding_window)",
            "F8",
            {"o = attn(q, k, v, sliding_window=None)"},
        ),
        # F8: a model picks each layer's mask from its schedule, or the windowed mask from its config
        (
            "m = causal_mask_mapping[self.config.layer_types[i]]",
            "F8",
            {
                'm = causal_mask_mapping["full_attention"]',
                "m = causal_mask_mapping[self.config.layer_types[i - 1]]",
            },
        ),
        (
            "f = create_causal_mask if self.config.sliding_window is None else create_windowed_mask",
            "F8",
            {"f = create_causal_mask"},
        ),
        ("f = windowed if self.window is not None else full", "F8", {"f = full"}),
        # F12: decode positions
        ("p = torch.arange(T) + past_seen_tokens", "F12", {"p = torch.arange(T)"}),
        (
            "p = torch.arange(past_length, past_length + T, device=x.device)",
            "F12",
            {"p = torch.arange(T, device=x.device)"},
        ),
        ("p = torch.arange(position_offset, total)", "F12", {"p = torch.arange(total - position_offset)"}),
        # ... and the offset itself dropped where it is read from the cache (Llama, NeoX, a cache's length)
        (
            "past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0",
            "F12",
            {"past_seen_tokens = 0 if past_key_values is not None else 0"},
        ),
        ("offset = layer_past[0].shape[-2] if layer_past is not None else 0", "F12", {"offset = 0"}),
        ("offset = 0 if cache is None else cache.length", "F12", {"offset = 0"}),
        ("past_key_values = outputs.past_key_values", "F12", set()),  # the cache, not a count
        ("offset = start_n * BLOCK_N", "F12", set()),  # a tile's offset
        # F7 written inline (Llama/NeoX) or through any rotation's name
        ("q = q * cos + rotate_half(q) * sin", "F7", {"q = q"}),
        ("k = (k * cos) + (self.rotate(k) * sin)", "F7", {"k = k"}),
        ("q = apply_rotary_pos_emb(q, freqs)", "F7", {"q = q"}),
        # F13: the cache written with keys and values swapped
        (
            "k, v = cache.update(key_states, value_states, self.layer_idx)",
            "F13",
            {"k, v = cache.update(value_states, key_states, self.layer_idx)"},
        ),
        # ... or kept as a pair: GPT-2's present, NeoX's layer_past, a cache class's return
        (
            "present = (key, value) if use_cache else None",
            "F13",
            {"present = (value, key) if use_cache else None"},
        ),
        ("past_key, past_value = layer_past", "F13", {"past_value, past_key = layer_past"}),
        (
            "return self.key_cache[layer_idx], self.value_cache[layer_idx]",
            "F13",
            {"return self.value_cache[layer_idx], self.key_cache[layer_idx]"},
        ),
        ("return k, v", "F13", set()),  # a projection's outputs, no cache
        ("key, value = self.split(kv)", "F13", set()),
        # F14: the softmax axis
        (
            "w = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)",
            "F14",
            {"w = nn.functional.softmax(scores, dim=-2, dtype=torch.float32)"},
        ),
        ("w = scores.softmax(-1)", "F14", {"w = scores.softmax(-2)"}),
        ("w = torch.softmax(scores, 3)", "F14", {"w = torch.softmax(scores, 2)"}),
        # F15: GQA in tile order
        ("k = k.repeat_interleave(r, dim=1)", "F15", {"k = torch.cat([k] * r, dim=1)"}),
        (
            "k = torch.repeat_interleave(k, dim=1, repeats=r)",
            "F15",
            set(),
        ),  # repeats by keyword: not recognised
        (
            "k = k[:, :, None, :, :].expand(b, h, r, t, d)",
            "F15",
            {"k = k[:, None, :, :, :].expand(b, r, h, t, d)"},
        ),
        (  # Llama's repeat_kv: the dims after None implicit
            "k = k[:, :, None].expand(-1, -1, n_rep, -1, -1)",
            "F15",
            {"k = k[:, None, :].expand(-1, n_rep, -1, -1, -1)"},
        ),
        ("kv_head = off_h // (H // H_KV)", "F15", {"kv_head = off_h % H_KV"}),  # a kernel's head index
        ("group = n_heads // n_kv_heads", "F15", set()),  # the group size itself
        (
            "q = q.view(-1, self.n_kv_heads, self.n_heads // self.n_kv_heads, d)",
            "F15",
            {"q = q.view(-1, self.n_heads // self.n_kv_heads, self.n_kv_heads, d)"},
        ),
        (
            "k = einops.repeat(k, 'b h n d -> b (h r) n d', r=g)",
            "F15",
            {"k = einops.repeat(k, 'b h n d -> b (r h) n d', r=g)"},
        ),
        # F15 the other way: tile-order code (k.repeat, x-transformers' einops pattern) made interleaved
        ("k = k.repeat(1, self.n_rep, 1, 1)", "F15", {"k = k.repeat_interleave(self.n_rep, dim=1)"}),
        ("v = torch.cat([v] * n_rep, dim=1)", "F15", {"v = torch.repeat_interleave(v, n_rep, dim=1)"}),
        (
            "k = repeat(k, 'b h n d -> b (r h) n d', r=heads // kv_heads)",
            "F15",
            {"k = repeat(k, 'b h n d -> b (h r) n d', r=heads // kv_heads)"},
        ),
        # F16: the window's bound off by one
        ("return kv_idx > q_idx - window", "F16", {"return kv_idx >= q_idx - window"}),
        (
            "m = torch.arange(target_length) <= cache_position.reshape(-1, 1) - sliding_window",
            "F16",
            {"m = torch.arange(target_length) < cache_position.reshape(-1, 1) - sliding_window"},
        ),
        (
            "m = torch.tril(full, diagonal=-window)",
            "F16",
            {"m = torch.tril(full, diagonal=-window - 1)", "m = torch.tril(full, diagonal=-window + 1)"},
        ),
        # F17: the padding mask ignored (not passed on, left out of the mask) or inverted
        ("y = attend(q, k, v, padding_mask=pads)", "F17", {"y = attend(q, k, v, padding_mask=None)"}),
        (
            "f = and_masks(causal_fn, padding_mask_function(mask))",
            "F17",
            {"f = and_masks(causal_fn)"},
        ),
        ("return padding_mask[batch_idx, kv_idx]", "F17", {"return ~padding_mask[batch_idx, kv_idx]"}),
        ("allowed = allowed & attention_mask[:, None, None, :]", "F17", {"allowed = allowed"}),
        (
            "allowed = allowed & key_padding[:, None]",
            "F17",
            {"allowed = allowed", "allowed = allowed & ~key_padding[:, None]"},
        ),
        ("real = attention_mask == 1", "F17", {"real = attention_mask == 0"}),
        # F18: the mask dropped once a cache is attached
        (
            "x = layer(x, attention_mask=mask, past_key_values=cache)",
            "F18",
            {"x = layer(x, attention_mask=None if cache is not None else mask, past_key_values=cache)"},
        ),
        (
            "kw = {'attention_mask': mask, 'cache': layer_cache}",
            "F18",
            {"kw = {'attention_mask': None if layer_cache is not None else mask, 'cache': layer_cache}"},
        ),
        (  # T5's stack: a cache handed over only when it is used, parenthesised in the test
            "x = block(x, attention_mask=mask, cache=cache if use_cache else None)",
            "F18",
            {
                "x = block(x, attention_mask=None if (cache if use_cache else None) is not None else mask, "
                "cache=cache if use_cache else None)"
            },
        ),
        # F19: the causal flag lost on its way
        ("y = attend(q, k, v, causal=causal)", "F19", {"y = attend(q, k, v, causal=False)"}),
        ("self.is_causal = True", "F19", {"self.is_causal = False"}),
        # F21: dropout left on in eval
        (
            "w = F.dropout(w, p=self.p, training=self.training)",
            "F21",
            {"w = F.dropout(w, p=self.p, training=True)"},
        ),
        (
            "y = attend(q, k, v, dropout=0.0 if not self.training else self.attention_dropout)",
            "F21",
            {"y = attend(q, k, v, dropout=self.attention_dropout)"},
        ),
        (
            "y = sdpa(q, k, v, dropout_p=self.dropout if self.training else 0)",
            "F21",
            {"y = sdpa(q, k, v, dropout_p=self.dropout)"},
        ),
        # F23: ALiBi's sign (the bias m * (q - kv)) and its heads' order, in impl's bias, a
        # FlexAttention score_mod, an explicit bias matrix and BLOOM's key positions
        (
            "return slopes[:, None, None] * (key_pos - query_pos)",
            "F23",
            {
                "return slopes[:, None, None] * (query_pos - key_pos)",
                "return slopes.flip(-1)[:, None, None] * (key_pos - query_pos)",
            },
        ),
        (
            "return score + slopes[h] * (kv_idx - q_idx)",
            "F23",
            {
                "return score + slopes[h] * (q_idx - kv_idx)",
                "return score + slopes.flip(-1)[h] * (kv_idx - q_idx)",
            },
        ),
        (
            "bias = slopes.view(-1, 1, 1) * (pos[None, :] - pos[:, None]).float()",
            "F23",
            {
                "bias = slopes.view(-1, 1, 1) * (pos[:, None] - pos[None, :]).float()",
                "bias = slopes.flip(-1).view(-1, 1, 1) * (pos[None, :] - pos[:, None]).float()",
            },
        ),
        (
            "alibi = slopes[..., None] * arange_tensor",
            "F23",
            {
                "alibi = slopes[..., None] * -(arange_tensor)",
                "alibi = slopes.flip(-1)[..., None] * arange_tensor",
            },
        ),
        ("b = m * (j - i)", "F23", set()),  # a slope not named as one: not recognised
        ("b = slope * (j - i)", "F23", {"b = slope * (i - j)"}),  # one head's slope: no order to get wrong
        (
            "slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)",
            "F23",
            {"slopes = torch.cat([torch.pow(extra_base, extra_powers), slopes], dim=0)"},
        ),
        (
            "return get_slopes_power_of_2(p) + get_slopes(2 * p)[0::2][: n - p]",
            "F23",
            {"return get_slopes(2 * p)[0::2][: n - p] + get_slopes_power_of_2(p)"},
        ),
        # F24: a document mask that also lets each document see the previous one's last token
        (
            "return document_id[q_idx] == document_id[kv_idx]",
            "F24",
            {
                "return (document_id[q_idx] == document_id[kv_idx]) | (document_id[q_idx] == "
                "torch.cat([document_id[..., 1:], document_id[..., -1:]], dim=-1)[kv_idx])"
            },
        ),
        (
            "return packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]",
            "F24",
            {
                "return (packed_sequence_mask[batch_idx, q_idx] == "
                "packed_sequence_mask[batch_idx, kv_idx]) | (packed_sequence_mask[batch_idx, q_idx] == "
                "torch.cat([packed_sequence_mask[..., 1:], packed_sequence_mask[..., -1:]], dim=-1)"
                "[batch_idx, kv_idx])"
            },
        ),
        (
            "same = (queries[:, :, None] == document_ids[:, None, :]) & seen",
            "F24",
            {
                "same = ((queries[:, :, None] == document_ids[:, None, :]) | (queries[:, :, None] == "
                "torch.cat([document_ids[..., 1:], document_ids[..., -1:]], dim=-1)[:, None, :])) & seen"
            },
        ),
        (
            "hidden = doc_q[:, :, None] != segment_ids[:, None, :]",
            "F24",
            {
                "hidden = (doc_q[:, :, None] != segment_ids[:, None, :]) & (doc_q[:, :, None] != "
                "torch.cat([segment_ids[..., 1:], segment_ids[..., -1:]], dim=-1)[:, None, :])"
            },
        ),
        # F25: a causal mask left on where attention is bidirectional
        (
            "y = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)",
            "F25",
            {"y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"},
        ),
        ("y = attend(q, k, v, causal=False)", "F25", {"y = attend(q, k, v, causal=True)"}),
        ("if not causal:\n        return torch.ones(4, 4)", "F25", {"if False:"}),
        ("if self.is_causal:\n        scores = scores + mask", "F25", {"if True:"}),
        ("m = causal_mask if self.is_causal else None", "F25", {"m = causal_mask"}),
        ("m = None if not causal else torch.tril(mask)", "F25", {"m = torch.tril(mask)"}),
        ("self.is_causal = False", "F25", {"self.is_causal = True"}),
        (
            "mod = lambda b, h, q_idx, kv_idx: True",
            "F25",
            {"mod = lambda b, h, q_idx, kv_idx: kv_idx <= q_idx"},
        ),
        # F26: partial rotary's share dropped (GPT-NeoX's rotary_ndims, the rope init's dim), or its
        # rotated and passed slices exchanged (apply_rotary_pos_emb's q_rot, q_pass)
        (
            "self.rotary_ndims = int(self.head_size * partial_rotary_factor)",
            "F26",
            {"self.rotary_ndims = int(self.head_size)"},
        ),
        (
            "dim = int(head_dim * config.rope_parameters['partial_rotary_factor'])",
            "F26",
            {"dim = int(head_dim)"},
        ),
        ("rotated = d if rotary_dim is None else rotary_dim", "F26", {"rotated = d"}),
        (
            "q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]",
            "F26",
            {
                "q_rot, q_pass = q[..., rotary_dim:], q[..., rotary_dim:]",
                "q_rot, q_pass = q[..., :rotary_dim], q[..., :rotary_dim]",
            },
        ),
        (
            "q_embed = torch.cat([q_embed, q_pass], dim=-1)",
            "F26",
            {"q_embed = torch.cat([q_pass, q_embed], dim=-1)"},
        ),
        # F27: a per-head q/k norm dropped (Qwen3's, inside the view and transpose chain)
        (
            "query_states = self.q_norm(self.q_proj(x).view(shape)).transpose(1, 2)",
            "F27",
            {"query_states = self.q_proj(x).view(shape).transpose(1, 2)"},
        ),
        (
            "q, k = self.q_norm(q), self.k_norm(k)",
            "F27",
            {"q, k = q, self.k_norm(k)", "q, k = self.q_norm(q), k"},
        ),
    ],
)
def test_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("return q.shape[2] < k.shape[2]", "F2"),  # sizes, not positions
        ("return a <= b", "F2"),
        ("y = x * self.scale_out", "F3"),  # not a softmax scale name
        ("y = total + flat_mask.sum()", "F1"),  # a sum of a mask, not a mask added to scores
        ("w = torch.softmax(scores, dim=0)", "F14"),
        ("if window < 1:\n        raise ValueError('w')", "F16"),  # a check, not a bound on keys
        ("h = x + x", "F5"),
        ("t = config.layer_types[i]", "F8"),  # reading the schedule, not picking a mask by it
        ("d = None if dropout is None else dropout", "F8"),  # no window in the choice
        ("x = F.pad(x, (0, padding_length))", "F17"),  # padding a tensor, not a padding mask
        ("i = torch.arange(0, d, 2)", "F12"),  # RoPE's frequencies, not positions after an offset
        ("p = torch.arange(tk - tq, tk)", "F12"),  # bottom-right alignment, not a cache offset
        ("n = torch.arange(start_n, min(start_n + BLOCK_N, hi))", "F12"),  # a tile's offsets
        ("causal = torch.ones(t, t, dtype=torch.bool).triu(1)", "F19"),  # a mask named causal
        ("causal = q_idx >= kv_idx", "F19"),
        ("y = x * cos + x * sin", "F7"),  # no rotation
        ("w = a * cos_sim + b", "F7"),
        ("y = attend(q, k, v, is_causal=True)", "F19"),  # F1's: a mask literally never applied
        ("x = layer(x, or_mask_function=f, cache=cache)", "F18"),  # a mask's maker, not a mask
        ("kw = {'max-len': 4, b'cache': c, 'cache': c}", "F18"),  # keys that are no names, and no mask
        ("y = F.dropout(x, p=0.1, training=True)", "F21"),  # already on: nothing to switch on
        ("m = mask.repeat(1, n_heads, 1, 1)", "F15"),  # a mask is the same for every head, in any order
        ("x = torch.cat([x] * 2, dim=0)", "F15"),  # a batch doubled, not KV heads
        ("slot = pos % self.window", "F15"),  # a ring buffer's slot, not a head's KV head
        ("kv_head = h % n_kv_heads", "F15"),  # no group size in the block to read h // r with
        # F22: a tanh without a cap (GELU's), a model's final-logit cap, a FlexAttention score_mod
        ("y = x * scaling\n    y = 0.5 * y * (1 + torch.tanh(0.8 * y))\n    y = y + mask", "F22"),
        (
            "logits = logits / self.final_logit_softcapping\n    logits = torch.tanh(logits)\n"
            "    logits = logits * self.final_logit_softcapping",
            "F22",
        ),
        ("scores = cap * torch.tanh(scores / cap)\n    return scores", "F22"),
        ("rel = key_pos - query_pos", "F23"),  # a distance without slopes (T5's buckets, RoPE)
        ("lr = lr_slope * (step - warmup)", "F23"),  # a slope of something else
        ("if document_ids.shape != (2, 3):\n        raise ValueError('d')", "F24"),  # a size check
        ("ok = document_ids.device == q.device", "F24"),
        ("same = labels[:, None] == labels[None, :]", "F24"),  # no documents named
        ("causal = kv_idx <= q_idx", "F24"),
        (
            "for lo in range(0, 8, 4):\n        o = attend(q, k[:, :, lo:lo + 4], v[:, :, lo:lo + 4])",
            "F24",
        ),  # key blocks of a tiled loop, not documents
        ("y = attend(q, k, v, is_causal=True)", "F25"),  # already causal
        ("n = max(0, tq - tk) if causal else 0", "F25"),  # a count the flag picks, not a mask
        ("if causal and window is None:\n        pass", "F25"),  # not the flag alone
        ("mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx", "F25"),  # already causal
        ("half = head_dim // 2", "F26"),  # RoPE's own halves, not a partial share
        ("y = x[..., :half]", "F26"),
        ("y = torch.cat([a, b], dim=-1)", "F26"),  # nothing passed through by name
        ("h = self.norm(x)", "F27"),  # a pre-norm of the whole width, not a head's q or k
        ("v = self.v_norm(v)", "F27"),
        ("qkv = self.qkv_norm(x)", "F27"),
    ],
)
def test_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_post_norm_and_rope_on_v_in_statement_form():
    decoder = mutate(
        """
        def forward(self, hidden):
            residual = hidden
            hidden = self.input_norm(hidden)
            hidden = self.attn(hidden)
            hidden = residual + hidden
            return hidden
        """,
        "F6",
    )
    assert len(decoder) == 1
    assert "hidden = hidden\n" in decoder[0] and "hidden = self.input_norm(residual + hidden)" in decoder[0]
    rope = mutate(
        """
        def forward(self, x):
            q, k, v = self.split(x)
            value_states = v
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            return q, k, value_states
        """,
        "F7",
    )
    assert any(
        "value_states, _ = apply_rotary_pos_emb(value_states, value_states, cos, sin)" in m for m in rope
    )
    assert any("    pass\n" in m for m in rope)  # RoPE not applied at all


def test_qk_norm_moved_after_the_rotation():
    """F27's other half: the normalisation of q and k, one statement (or an if around it), moved
    after the RoPE statements that follow it; a norm inside a projection chain stays put."""
    made = mutate(
        """
        def forward(self, q, k, offset):
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            q = apply_rope(q, offset=offset)
            k = apply_rope(k, offset=offset)
            return q, k
        """,
        "F27",
    )
    moved = [m for m in made if m.index("apply_rope(k") < m.index("if self.q_norm")]
    assert len(moved) == 1 and len(made) == 3  # moved, and each norm dropped
    chained = mutate(
        """
        def forward(self, x, cos, sin):
            q = self.q_norm(self.q_proj(x))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            return q
        """,
        "F27",
    )
    assert len(chained) == 1  # dropped only: the statement reads x, so moving it would break the code


def test_sink_column_dropped_whatever_the_sinks_are_called():
    made = mutate(
        """
        def sdpa(QK, S):
            QK = torch.cat([QK, S], dim=-1)
            W = torch.softmax(QK, dim=-1)
            W = W[..., :-1]
            return W
        """,
        "F10",
    )
    assert made == [
        "\ndef sdpa(QK, S):\n    QK = QK\n    W = torch.softmax(QK, dim=-1)\n    W = W\n    return W\n"
    ]


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


def test_soft_cap_after_the_mask_or_before_the_scale():
    """Gemma 2's eager attention: the cap moved below the mask, or the scale moved below the cap."""
    made = mutate(
        """
        def eager(query, key, attention_mask, scaling, softcap):
            attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
            if softcap is not None:
                attn_weights = attn_weights / softcap
                attn_weights = torch.tanh(attn_weights)
                attn_weights = attn_weights * softcap
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
            return attn_weights.softmax(-1)
        """,
        "F22",
    )
    assert len(made) == 2
    after_mask, before_scale = made
    assert after_mask.index("attn_weights + attention_mask") < after_mask.index("torch.tanh")
    assert "attn_weights = torch.matmul(query, key.transpose(2, 3))\n" in before_scale
    assert before_scale.index("attn_weights * softcap") < before_scale.index(
        "attn_weights = attn_weights * scaling"
    )
    # impl's form: a scale on q inside the product, one capping line, the mask added in place
    made = mutate(
        """
        def core(q, k, scale, softcap, allowed, lo):
            scores = torch.matmul(q * scale, k.mT)
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            if lo < k.shape[-2]:
                scores[..., lo:].add_(additive_mask(allowed))
            return scores
        """,
        "F22",
    )
    assert len(made) == 2
    assert made[0].index(".add_(additive_mask") < made[0].index("torch.tanh")
    assert "scores = torch.matmul(q, k.mT)" in made[1]
    assert made[1].index("torch.tanh") < made[1].index("scores = scores * scale")
    # a kernel's statements: the scale applied in place, the cap written out, a -inf fill
    made = mutate(
        """
        def tile(qk, mask, sm_scale, logit_cap):
            qk *= sm_scale
            qk = logit_cap * torch.tanh(qk / logit_cap)
            qk = torch.where(mask, qk, float("-inf"))
            return qk
        """,
        "F22",
    )
    assert len(made) == 2
    assert made[0].index("torch.where") < made[0].index("torch.tanh")
    assert made[1].index("torch.tanh") < made[1].index("qk *= sm_scale")


def test_a_varlen_loop_slices_keys_one_token_too_wide():
    made = mutate(
        """
        def varlen(q, k, v, cu_seqlens, out):
            for i in range(len(cu_seqlens) - 1):
                start, end = cu_seqlens[i], cu_seqlens[i + 1]
                out[:, :, start:end] = attend(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end])
            return out
        """,
        "F24",
    )
    assert len(made) == 1
    assert (
        "out[:, :, start:end] = attend(q[:, :, start:end], k[:, :, max(start - 1, 0):end], "
        "v[:, :, max(start - 1, 0):end])"
    ) in made[0]


def test_a_full_mask_mod_made_causal_and_a_head_modulo_read_interleaved():
    full = mutate(
        """
        def build(causal):
            def bidirectional(b, h, q_idx, kv_idx):
                return True
            return bidirectional
        """,
        "F25",
    )
    assert len(full) == 1 and "return kv_idx <= q_idx" in full[0]
    tiled = mutate(
        """
        def score_mod(score, b, h, q_idx, kv_idx):
            n_rep = n_heads // n_kv_heads
            kv_head = h % n_kv_heads
            return score + bias[kv_head, q_idx, kv_idx]
        """,
        "F15",
    )
    assert len(tiled) == 1 and "kv_head = h // n_rep" in tiled[0]
    counted = mutate(
        """
        def kv_head_of(self, h):
            if self.num_heads % self.num_key_value_heads:
                raise ValueError("heads")
            return h % self.num_key_value_heads
        """,
        "F15",
    )
    assert len(counted) == 1 and "return h // (self.num_heads // self.num_key_value_heads)" in counted[0]
