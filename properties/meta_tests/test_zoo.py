"""The zoo (examples/zoo/): correct targets written in other styles pass the whole kit, each in a
subprocess as a user runs it (under the ci profile in CI: kit_runs.kit_profile); a declared
convention is what makes the complex-RoPE layer pass, and without it the run fails and names the
convention it follows."""

from __future__ import annotations

import pytest
import torch

from attnspec.properties.meta_tests.kit_runs import assert_passes, run_properties

KERNELS = (  # attention functions (the peers' recipes grade them too: peers.py)
    "examples.zoo.triton_style:attention",
    "examples.zoo.host_numpy:attention",
    "examples.zoo.prescaled_dense:attention",
    "examples.zoo.complex_rope_llama:attention",
)
MODULES = ("examples.zoo.torch_multihead:ATTENTION", "examples.zoo.gpt2_style:MODEL")  # with a white box
ZOO = KERNELS + MODULES

# They read values out of tensors (.tolist(), .numpy()): the device property needs a real second device.
CANNOT_RUN_ON_META = ZOO[:2]


@pytest.mark.parametrize("target", ZOO)
def test_each_correct_target_of_the_zoo_passes_the_whole_kit(target):
    done = run_properties(target, as_user=True)
    assert_passes(done)
    if target in CANNOT_RUN_ON_META and not torch.cuda.is_available():  # skipped with its reason, counted
        assert "--   device        cannot run on the meta device" in done.stdout, done.stdout[-3000:]


def test_the_complex_rope_layer_without_its_declaration_fails_naming_interleaved_pairs():
    done = run_properties(
        "examples.zoo.complex_rope_llama:UNDECLARED", "-k", "rope or layer", profile="mutation", as_user=True
    )
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "interleaved RoPE pairs" in done.stdout, done.stdout[-4000:]
