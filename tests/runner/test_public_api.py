"""The public API: everything a declaration or a white box needs is importable from attnspec itself,
lazily (``import attnspec`` imports neither torch nor pytest), and the paths the docs gave until now
still import, each with a DeprecationWarning naming its new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import attnspec

OLD_PATHS = {  # the module, the new path its warning names, names the docs imported from it
    "attnspec.properties.targets": (
        "attnspec.protocol.targets",
        ("Layer", "LayerKind", "LayerSpec", "Target"),
    ),
    "attnspec.properties.layouts": ("attnspec.protocol.layouts", ("fused_projections", "pre_norm")),
    "attnspec.properties.hypothesis_helpers": ("attnspec.kit.strategies", ("randomize_", "AttnCase")),
    "attnspec.properties.kernel_cases": ("attnspec.kit.kernel_cases", ()),
}


def test_import_attnspec_alone_imports_neither_torch_nor_pytest():
    code = "import sys, attnspec; print(sorted({'torch', 'pytest'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(attnspec.API))
def test_every_public_name_is_the_object_of_its_module(name):
    if attnspec.API[name] == "attnspec.adapters.hf_models":
        pytest.importorskip("transformers")
    assert getattr(attnspec, name) is getattr(importlib.import_module(attnspec.API[name]), name)
    assert name in dir(attnspec)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Layers'"):
        attnspec.Layers  # noqa: B018


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_documented_path_still_imports_with_a_warning_naming_the_new_one(old):
    new, names = OLD_PATHS[old]
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(said) == 1 and old in said[0] and new in said[0], said
    for name in names:
        assert getattr(module, name) is getattr(attnspec, name)
