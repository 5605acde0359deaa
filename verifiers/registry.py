"""The verifier registry: every verifier module is imported here, in listing order, and the
lookups every consumer uses (the audit, `gap`, the sweep, the plots and the engine).

A new verifier is one module with `@register` law functions (verifiers.law) and one line
below; nothing else lists verifier names.
"""

from __future__ import annotations

# The import order below is the order in which verifiers are listed.
# isort: off
from . import single_path  # noqa: F401  bv, token, bv_first_failure
from . import gbv  # noqa: F401  gbv, gbv_clipped, gbv_broken
from . import multipath  # noqa: F401  specinfer, rrsw, naive_tree, spectr, nss, khisti, traversal
from . import spectr_gbv  # noqa: F401  spectr_gbv (lossy as released)
from . import nodeopt  # noqa: F401  nodeopt
from . import bv_extended  # noqa: F401  bv_extended
# isort: on
from .gbv import gbv_selection
from .law import REGISTRY, BlockLaw, DraftTree, VerifierSpec
from .nodeopt import nodeopt_selection
from .structure import path_selection_rows

# Selection laws of the select-then-BV verifiers whose modules do not set the hook in their
# @register call (gbv.py, nodeopt.py): their exact law on i.i.d. drafts is BV against the
# law of the selected path (verifiers.structure), read off their own selection functions.
# (The hook belongs in those @register calls; it is set here until their owner moves it.)
_SELECTIONS = {
    "gbv": lambda tree: gbv_selection(tree, clip=False)[1],
    "gbv_clipped": lambda tree: gbv_selection(tree, clip=True)[1],
    "nodeopt": lambda tree, support=None: nodeopt_selection(tree, support)[1][:, 0],
}
for _name, _selection in _SELECTIONS.items():
    if _name in REGISTRY and REGISTRY[_name].selection_rows is None:
        REGISTRY[_name].selection_rows = path_selection_rows(_selection)

__all__ = ["REGISTRY", "block_law", "compared_verifiers", "get_verifier", "unknown_verifiers",
           "verifier_names"]


def get_verifier(name: str) -> VerifierSpec:
    """The registered verifier `name` (KeyError naming the known ones otherwise)."""
    if name not in REGISTRY:
        raise KeyError(f"unknown verifier {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def verifier_names(include_broken: bool = False, draft_sampling: str | None = None) -> list[str]:
    """Registered verifiers (lossless ones unless include_broken), optionally only those
    lossless under the given draft sampling."""
    return [n for n, s in REGISTRY.items() if (include_broken or s.lossless)
            and (draft_sampling is None or draft_sampling in s.draft_sampling)]


def block_law(name: str, tree: DraftTree) -> BlockLaw:
    """Exact law of the named verifier's output block."""
    spec = get_verifier(name)
    return spec.law(tree, **spec.options)


def compared_verifiers() -> list[str]:
    """The verifiers every comparison (`gap`, the sweep) shows by default, in listing order:
    every lossless one, and every one registered as claimed lossless under NO draft law
    (lossless=False, draft_sampling=(): a published rule whose loss we measure and report,
    e.g. spectr_gbv as released). Left out: the deliberately broken variants (lossless=False
    with draft laws, held to the claims so that the checks are seen to fail), which are
    compared only when asked for by name."""
    return [n for n, s in REGISTRY.items() if s.lossless or not s.draft_sampling]


def claimed_lossless(name: str, draft_sampling: str) -> bool:
    """The verifier is claimed (and held to be) lossless under this draft law."""
    return draft_sampling in get_verifier(name).draft_sampling


def unknown_verifiers(names: list[str] | tuple[str, ...]) -> list[str]:
    """The names among `names` that are not registered (broken variants count as registered)."""
    return [n for n in names if n not in REGISTRY]
