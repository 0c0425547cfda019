"""Key/value caches written the way Hugging Face cache classes and generate loops write them."""

import torch


class DynamicCache:
    """Grows without bound: every layer keeps all keys and values seen so far."""

    def __init__(self):
        self.key_cache = []
        self.value_cache = []

    def update(self, key_states, value_states, layer_idx):
        # key_states / value_states: (batch, num_kv_heads, seq_len, head_dim)
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]  # expect: F13

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx:
            return 0
        return self.key_cache[layer_idx].shape[-2]  # expect: F12


class SlidingWindowCache(DynamicCache):
    """Keeps only the last `window` positions of each layer; positions keep counting past the window."""

    def __init__(self, window):
        super().__init__()
        self.window = window
        self._seen_tokens = 0

    def update(self, key_states, value_states, layer_idx):
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        full_keys, full_values = super().update(key_states, value_states, layer_idx)  # expect: F13
        # the current chunk attends over everything it may need; only the stored copy is trimmed
        self.key_cache[layer_idx] = full_keys[:, :, -self.window :]  # expect: F11
        self.value_cache[layer_idx] = full_values[:, :, -self.window :]  # expect: F11
        return full_keys, full_values  # expect: F13 F20

    def get_seq_length(self, layer_idx=0):
        return self._seen_tokens  # expect: F12


@torch.no_grad()
def generate(model, input_ids, max_new_tokens, attention_mask=None, past_key_values=None, eos_token_id=None):
    if past_key_values is None:
        past_key_values = DynamicCache()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    next_input_ids = input_ids
    for _ in range(max_new_tokens):
        past_len = past_key_values.get_seq_length()  # expect: F12
        seq_len = next_input_ids.shape[1]
        position_ids = torch.arange(past_len, past_len + seq_len, device=input_ids.device)  # expect: F12
        logits = model(  # expect: F17 F18
            next_input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids.unsqueeze(0),
            past_key_values=past_key_values,
        )
        next_tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        input_ids = torch.cat([input_ids, next_tokens], dim=-1)
        new_column = attention_mask.new_ones((attention_mask.shape[0], 1))
        attention_mask = torch.cat([attention_mask, new_column], dim=-1)
        next_input_ids = next_tokens
        if eos_token_id is not None and (next_tokens == eos_token_id).all():
            break
    return input_ids
