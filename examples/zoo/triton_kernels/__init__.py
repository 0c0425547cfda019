"""The Triton zoo: real ``@triton.jit`` attention kernels, written as kernel authors write them (none a
copy of any project's), each checked by the whole kit: compiled on a GPU, through Triton's interpreter
on a CPU (``attnspec check`` switches it on).  They need ``pip install 'attnspec[triton]'``; ``tox -e
triton`` checks them as a user does (tests/triton/), ``tox -e cuda`` compiled on a GPU.

- ``forward``: a fused forward, one program per (query block, batch x head): an online softmax in base 2
  (the scale and log2 e folded into one constant), causal and sliding-window block skipping, GQA by
  pointer arithmetic, per-head sinks joined after the loop, fp16/bf16 inputs with float32 scores and
  accumulator and the weights rounded to the input dtype for ``tl.dot(p, v)`` (it declares
  ``conventions = {"weights-in-input-dtype"}``);
- ``decode``: flash-decoding, the keys cut into splits reduced by their own programs into float32
  scratch, then a combine kernel that rescales each split by ``exp2(m_split - m_max)`` and adds the sink
  once; a problem that is not a decode step runs the same kernels with one split (it declares the
  switch lengths);
- ``varlen``: packed sequences, ``cu_seqlens`` built from the kit's ``document_ids``, one program per
  (query block, head, sequence), causal within each document (it declares "documents");
- ``backward``: a forward that saves the log-sum-exp and the FlashAttention-2 backward: a pre-pass for
  delta = rowsum(dO * O), one kernel for dK and dV over the query blocks, one for dQ over the key blocks,
  wrapped in an ``autograd.Function`` (it declares "grad").

twins.py holds their broken twins, each one edit of a kernel file with a bug class fast kernels ship,
and the cause its check names in the first lines of its report.
"""

# The correct kernels (tests/triton/test_triton_zoo.py checks each as a user does).
KERNELS = (
    "examples.zoo.triton_kernels.forward:attention",
    "examples.zoo.triton_kernels.decode:attention",
    "examples.zoo.triton_kernels.varlen:attention",
    "examples.zoo.triton_kernels.backward:attention",
)
