"""attnspec: property-based verification and mutation testing for Transformer attention code.

Everything a declaration or a white box needs is importable from here (docs/reference/api.md):

- the target protocol: ``Target``, ``Layer``, ``LayerKind``, ``LayerSpec``, ``LayerRun``, ``CannotBuild``;
- the module layouts a ``Layer`` reports: ``projections``, ``fused_projections``,
  ``per_head_fused_projections``, ``multihead_attention``, ``pre_norm``;
- the declared score and mask modifications: ``causal``, ``bidirectional``, ``sliding_window``,
  ``chunked``, ``local``, ``shifted``, ``soft_cap``, ``alibi``, ``alibi_slopes``, ``composed``;
- the parameter randomiser ``randomize_`` and the kit's attention problem ``AttnCase``;
- the model wrappers ``CausalLM`` and ``MaskedLM`` (a Hugging Face model as a target);
- ``check``, ``PropertyFailed`` and ``NotChecked``: some of the kit's properties from your own tests;
- ``conventions()``: the text of CONVENTIONS.md, which ``attnspec conventions`` prints.

The tree says how it is built (docs/contributing.md): ``attnspec.protocol`` (what a target declares),
``attnspec.specs`` (requirements, the float64 oracles, mods, tolerance), ``attnspec.kit`` (strategies,
laws and the properties a target runs), ``attnspec.runner`` (``attnspec check``, its workers, the
pytest plugin), ``attnspec.adapters`` (built-in targets), ``attnspec.impl`` (the reference
implementation) and ``attnspec.mutation`` (``attnspec mutate``).

Each name is imported when first used: ``import attnspec`` alone imports neither torch nor pytest.

PYTEST_DONT_REWRITE: attnspec is a pytest plugin's distribution (attnspec/runner/pytest_plugin.py), whose
package pytest marks for assertion rewriting when it starts; `attnspec check` imports it first.
"""

from importlib import import_module
from pathlib import Path

# public name -> the module that defines it
API = {
    **dict.fromkeys(("check", "PropertyFailed", "NotChecked"), "attnspec.runner.api"),
    "Target": "attnspec.protocol.targets",
    **dict.fromkeys(
        ("CannotBuild", "Layer", "LayerKind", "LayerRun", "LayerSpec"), "attnspec.protocol.layers"
    ),
    **dict.fromkeys(
        ("projections", "fused_projections", "per_head_fused_projections", "multihead_attention", "pre_norm"),
        "attnspec.protocol.layouts",
    ),
    **dict.fromkeys(
        (
            "causal",
            "bidirectional",
            "sliding_window",
            "chunked",
            "local",
            "shifted",
            "soft_cap",
            "alibi",
            "alibi_slopes",
            "composed",
        ),
        "attnspec.specs.mods",
    ),
    **dict.fromkeys(("randomize_", "AttnCase"), "attnspec.kit.strategies"),
    **dict.fromkeys(("CausalLM", "MaskedLM"), "attnspec.adapters.hf_models"),
}

__all__ = sorted([*API, "conventions", "conventions_path"])


def conventions_path() -> Path:
    """CONVENTIONS.md: the conventions, the target protocol and the tolerance policy."""
    return Path(__file__).parent / "CONVENTIONS.md"


def conventions() -> str:
    """The text of CONVENTIONS.md (what `attnspec conventions` prints)."""
    return conventions_path().read_text(encoding="utf-8")


def __getattr__(name: str) -> object:
    """A public name, imported from its module when first used."""
    if name not in API:
        raise AttributeError(f"module 'attnspec' has no attribute {name!r}")
    return getattr(import_module(API[name]), name)


def __dir__() -> list[str]:
    return __all__
