"""The zoo: correct attention targets written in the styles outsiders use, none shaped like attnspec's
own code.  Each passes the whole kit (tests/targets/test_zoo.py, in every test run; the
FlexAttention one, slow when eager, passes a selection of it there and the whole kit under the ci profile).

- ``triton_style``: a Triton-style flash kernel (base-2 exponentials with the scale and log2 e folded into
  one float32 constant, keys zero-padded to whole blocks, batch and heads flattened, bounds read from
  tensors as Python ints, fp16/bf16 scored in float32, a split-keys decode path, no autograd);
- ``host_numpy``: a kernel that computes on the host with NumPy, so it cannot run on the meta device;
- ``prescaled_dense``: dense attention with q scaled before the product, ``baddbmm`` over a finite
  ``finfo.min`` mask bias, GQA by expand and reshape;
- ``logsumexp_exact``: an exact float32 kernel normalised by ``torch.logsumexp`` (weights ``exp(s - lse)``,
  never divided by their sum), GQA by grouped views, with a hand-written backward (an ``autograd.Function``
  that recomputes the weights from the saved ``lse``, FlashAttention's way); twin ``lse_before_the_mask``:
  the log-sum-exp taken over the whole row, the mask applied to the weights after it;
- ``complex_rope_llama``: a Meta-Llama-style attention layer whose RoPE rotates interleaved pairs through
  complex numbers, and declares it (``conventions = {"rope-interleaved"}``);
- ``torch_multihead``: a causal self-attention module on torch's ``nn.MultiheadAttention`` (a float mask from
  ``generate_square_subsequent_mask``, a boolean one with a window), a module target with its white box;
- ``gpt2_style``: a small Hugging-Face-GPT-2-style decoder (``Conv1D`` weights stored (in, out), a fused
  ``c_attn``, a boolean mask buffer against ``finfo.min``, LayerNorm blocks, learned positions, decoding
  through ``(key, value)`` tuples), a module target that decodes in chunks, with its white box;
- ``neox_style``: a Hugging-Face-GPT-NeoX-style attention module (a per-head fused ``query_key_value``,
  ``rotate_half`` RoPE after the cache's length, ``layer_past`` in and ``present`` out, ``**kwargs``),
  wrapped as a user does to check it, a module target that decodes in chunks;
- ``cross_attention``: a Hugging-Face-Whisper-style decoder cross-attention sublayer (queries from the
  normed decoder states, keys and values from the encoder's output of another length and width) and
  torch's ``nn.MultiheadAttention(kdim=, vdim=)``, "cross" targets checked by their white box; twin
  ``CAUSAL_ON_CONTEXT``: a decoder's causal mask reused on the encoder's tokens, ``CAUSAL_NO_KEY``: that
  mask aligned bottom-right (the first queries of a longer decoder see no encoder token), ``KEYS_FROM_X``:
  keys and values projected from the decoder's own states;
- ``vit_encoder``: a timm-ViT-style bidirectional encoder (a fused ``qkv`` split by ``permute``, q scaled
  before the product, an additive key-padding mask, no positions in the blocks), a module target that
  declares its mask_mod all-visible;
- ``llama4_style``: a Meta-Llama-4-style decoder stack (complex-number RoPE on interleaved pairs, a
  gainless q/k ``L2Norm`` after it, chunked attention on three layers in four and a NoPE full-attention
  layer every fourth), a module target that declares its schedule of layers and whose white box builds
  the kind the kit asks for; twins ``CHUNKS_OFF_BY_ONE`` (the chunks cut at positions counted from 1) and
  ``ROPE_ON_NOPE_LAYERS`` (every layer rotates, the NoPE one too);
- ``modernbert_style``: a ModernBERT-style encoder (a fused ``Wqkv``, half-split RoPE with a base per kind
  of layer, a global layer every third from the first and local windows between, the first layer's
  attention norm an identity), a module target that declares its schedule; twin
  ``LOCAL_ON_WRONG_LAYERS`` (the global layers counted from 1: the local windows on the wrong layers);
- ``olmo2_style``: an AllenAI-OLMo-2-style block (a fused ``att_proj``, q and k RMS-normalised over their
  whole width before the head split, norms after the sublayers, none before), a module target whose
  white box reports ``qk_norm_over="width"``; twin ``QK_NORM_PER_HEAD`` (the norm moved after the head
  split, as per-head q/k norm code has it: each head normalised alone);
- ``gptj_style``: a GPT-J-style block (``rotate_every_two`` on the first quarter of each head, its base 10000
  written into the code, attention and MLP in parallel), a module target that declares
  ``conventions = {"rope-interleaved"}``, ``rope_base`` and its head sizes, its layer ``rotary_dim``; twin
  ``HALF_SPLIT_PAIRS`` (GPT-NeoX's ``rotate_half`` on GPT-J's quarter);
- ``falcon_multiquery``: a Falcon-7B-style multi-query block (one fused ``query_key_value`` of the query
  heads then one key and one value head, ``rotate_half`` RoPE, batch and heads folded for ``bmm``), a
  module target built with one KV head only, which declares ``kv_heads = (1,)`` (its ``layer`` raises
  ``CannotBuild`` for another count); twin ``KV_REPEATED`` (the KV head repeated over the folded axis
  with ``repeat``, not ``repeat_interleave``: sequences read each other's keys beyond a batch of one);
- ``t5_relative_bias``: a T5-style encoder self-attention sublayer (an ``nn.Embedding`` of per-head biases
  at the bucket of each distance, the logits never scaled, an RMS norm without mean), a module target
  whose white box reports the bias read from its own table as ``Layer.score_mod``; twins
  ``FLIPPED_BUCKETS`` (the distance taken as query - key) and ``SCALED_BEFORE_THE_BIAS`` (SDPA with the
  bias as its float mask, which scales the logits by 1/sqrt(d) first).

Three module targets have broken twins with bugs their users ship: ``torch_multihead``'s
``NORMED_IN_FLOAT32`` (an RMS norm cast to float32 in a module that declares float64),
``neox_style``'s ``KWARGS_SWALLOW_THE_CACHE`` (the cache handed over as ``past_key_value=``, which
NeoX's ``**kwargs`` takes without an error) and ``vit_encoder``'s ``CAUSAL_LEFT_ON`` (a decoder's
``is_causal=True`` in an encoder) and ``PADS_ATTENDED`` (the padding bias built, never added).

Five more declare what their attention computes (protocol/declared.py), each beside a broken twin with
a bug their users ship, which the kit fails:

- ``flex_softcap_documents``: ``torch.nn.attention.flex_attention`` run eagerly, a Gemma-2-style
  soft-capping score_mod and a causal document mask built from ``document_ids`` (declares score_mod,
  mask_mod, "documents"); twin ``cap_after_mask``: the mask as a -inf score, soft-capped after it;
- ``varlen_packed``: a FlashAttention-varlen-style kernel, ``cu_seqlens`` from the document ids and a loop
  over the documents (declares "documents"); twin ``off_by_one``: each document starts one token early;
- ``alibi_bloom``: BLOOM-style ALiBi, slopes from the closest power of two, a ``baddbmm`` over the bias
  (declares the equivalent score_mod and its 12 heads); twin ``flipped_sign``: the bias slope * (q - kv);
- ``alibi_falcon``: Falcon-RW-style ALiBi, the bias added to the raw dot products before the 1/sqrt(d)
  scale, so BLOOM's bias divided by sqrt(d) (declares it for its 4 heads of 16 features); twin
  ``declared_as_bloom``: the same code declared with BLOOM's bias;
- ``tiled_gqa_attend``: an x-transformers-``Attend``-style einsum core whose KV heads are tiled with
  ``k.repeat`` (declares ``conventions = {"gqa-tile"}``); twin ``interleaved_groups``: grouped h // r.
"""

# The zoo's correct targets, by kind (tests/targets/test_zoo.py checks each; campaigns/seeds.py sweeps
# their seeds; campaigns/peers.py grades the kernels with the peers' recipes).
KERNELS = (  # attention functions (the peers' recipes grade them too: peers.py)
    "examples.zoo.triton_style:attention",
    "examples.zoo.host_numpy:attention",
    "examples.zoo.prescaled_dense:attention",
    "examples.zoo.complex_rope_llama:attention",
    "examples.zoo.logsumexp_exact:attention",  # weights exp(s - lse), never divided: lse's rounding counts
)
MODULES = (  # the first two with a white box
    "examples.zoo.torch_multihead:ATTENTION",
    "examples.zoo.gpt2_style:MODEL",
    "examples.zoo.neox_style:ATTENTION",
    "examples.zoo.vit_encoder:ENCODER",  # bidirectional: declares its mask_mod
    "examples.zoo.olmo2_style:BLOCK",  # q/k norm over the whole width (qk_norm_over="width"), norms after
    "examples.zoo.gptj_style:BLOCK",  # interleaved rotary on a quarter of each head, its base fixed
    "examples.zoo.llama4_style:MODEL",  # a schedule: chunked RoPE layers and a NoPE layer
    "examples.zoo.modernbert_style:ENCODER",  # a schedule: global and local bidirectional layers
    "examples.zoo.falcon_multiquery:ATTENTION",  # one KV head only: declares kv_heads = (1,)
    "examples.zoo.t5_relative_bias:ATTENTION",  # its layer's score_mod read from its own bias table
)
# Attention functions checked under a declaration of what they compute (attnspec/protocol/declared.py); not in
# KERNELS, since the peers' recipes know neither mods nor documents.
FLEX = "examples.zoo.flex_softcap_documents:attention"
DECLARING = (
    "examples.zoo.varlen_packed:attention",
    "examples.zoo.alibi_bloom:attention",
    "examples.zoo.tiled_gqa_attend:attention",
    "examples.zoo.alibi_falcon:attention",  # Falcon's ALiBi: BLOOM's divided by sqrt(d), its head size fixed
)
CROSS = (  # cross-attention layers, checked by their white box alone
    "examples.zoo.cross_attention:WHISPER",
    "examples.zoo.cross_attention:TORCH_MHA",
)
ZOO = KERNELS + MODULES + DECLARING + CROSS

# They read values out of tensors (.tolist(), .numpy()) or refuse the meta device (FlexAttention): the
# device property needs a real second device.
