"""The zoo: correct attention targets written in the styles outsiders use, none shaped like attnspec's
own code.  Each passes the whole kit (properties/meta_tests/test_zoo.py, in every test run).

- ``triton_style``: a Triton-style flash kernel (base-2 exponentials with the scale and log2 e folded into
  one float32 constant, keys zero-padded to whole blocks, batch and heads flattened, bounds read from
  tensors as Python ints, fp16/bf16 scored in float32, a split-keys decode path, no autograd);
- ``host_numpy``: a kernel that computes on the host with NumPy, so it cannot run on the meta device;
- ``prescaled_dense``: dense attention with q scaled before the product, ``baddbmm`` over a finite
  ``finfo.min`` mask bias, GQA by expand and reshape;
- ``complex_rope_llama``: a Meta-Llama-style attention layer whose RoPE rotates interleaved pairs through
  complex numbers, and declares it (``conventions = {"rope-interleaved"}``);
- ``torch_multihead``: a causal self-attention module on torch's ``nn.MultiheadAttention`` (a float mask from
  ``generate_square_subsequent_mask``, a boolean one with a window), a module target with its white box;
- ``gpt2_style``: a small Hugging-Face-GPT-2-style decoder (``Conv1D`` weights stored (in, out), a fused
  ``c_attn``, a boolean mask buffer against ``finfo.min``, LayerNorm blocks, learned positions, decoding
  through ``(key, value)`` tuples), a module target that decodes in chunks, with its white box.
"""
