"""Paired scoring: every named verifier's exact E[tau + 1 | drafted tree] at every (K', L') cell.

The first K' of K i.i.d. drafted paths, cut to depth L', are K' i.i.d. paths of depth L' at the
same context (docs/theory.md section 12), so one drafted tree answers every cell. A verifier
with a one-pass grid law (verifiers.grid: bv, token, gbv, nodeopt, spectr and the other node
rules) gets every cell from one pass per K'; the others are evaluated cell by cell.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from ..verifiers.gbv import shared_key_orders
from ..verifiers.grid import grid_values
from ..verifiers.law import DraftTree
from ..verifiers.registry import block_law, get_verifier


def score_cells(paths: int, depth: int) -> list[tuple[int, int]]:
    """Every (K', L') with 1 <= K' <= paths and 1 <= L' <= depth (K' major)."""
    return [(k, d) for k in range(1, paths + 1) for d in range(1, depth + 1)]


def cell_name(cell: tuple[int, int]) -> str:
    """The key of a (K', L') cell in records: "K,L"."""
    return f"{cell[0]},{cell[1]}"


def cut_tree(tree: DraftTree, paths: int, depth: int) -> DraftTree:
    """The first `paths` drafted paths cut to `depth` tokens (with their rows).

    The first K' of K i.i.d. drafted paths, cut to depth L', are K' i.i.d. paths of depth
    L' with the rows along them (docs/theory.md section 12, real models), so the cut tree
    is a sample of the (K', L') tree at the same context.
    """
    return DraftTree(tree.tokens[:, :paths, :depth], tree.target_rows[:, :paths, : depth + 1],
                     tree.draft_rows[:, :paths, :depth])


def score_grid(
    names: tuple[str, ...] | list[str],
    tokens: torch.Tensor,
    target_rows: torch.Tensor,
    draft_rows: torch.Tensor,
    cells: list[tuple[int, int]] | None = None,
    dtype: torch.dtype = torch.float64,
    max_elements: int = 1 << 25,
    seconds: dict[str, float] | None = None,
    to_cpu: bool = True,
    share_sorts: bool = True,
    one_pass: bool = True,
) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Exact conditional E[tau + 1 | tree] of every named verifier at every (K', L') cell.

    tokens [B, K, L], target_rows [B, K, L+1, V], draft_rows [B, K, L, V] (any dtype; cast
    to `dtype` in chunks of rows so that one chunk holds at most `max_elements` target-row
    entries). cells: the (K', L') to score (default: only (K, L)); cell (K', L') scores the
    tree of the first K' paths cut to depth L' (`cut_tree`) on the same rows. A verifier
    that reads path 0 only (VerifierSpec.multipath False) is evaluated once per L' and its
    value shared by every K'. Returns {cell: {name: [B] float64 on the CPU}} (to_cpu False:
    on the rows' device, no host read). seconds: if
    given, the time spent in each verifier's law is added to seconds[name].

    share_sorts: within a chunk, every law sorts each distinct node row by its key once
    (verifiers.gbv.shared_key_orders: a row equal in full to one sorted before reuses its
    order, so every value is the same bit for bit); the first verifier to sort a row pays
    for it in `seconds`.

    one_pass: a verifier with a grid law (verifiers.grid.grid_values) scores every cell from
    one pass per K' over the whole tree (its values equal the per-cell laws' up to the order
    of float sums, exactly on rational rows: tests/test_grid.py); False: every cell's law on
    its own cut tree (the pipeline before issue 33, part 1).
    """
    batch, paths, levels, vocab = target_rows.shape
    cells = [(paths, levels - 1)] if cells is None else list(cells)
    if any(not (1 <= k <= paths and 1 <= d < levels) for k, d in cells):
        raise ValueError(f"cells must lie in [1, {paths}] x [1, {levels - 1}], got {cells}")
    chunk = max(1, max_elements // max(paths * levels * vocab, 1))
    out: dict[tuple[int, int], dict[str, list[torch.Tensor]]] = {
        cell: {name: [] for name in names} for cell in cells}
    single = {name: not get_verifier(name).multipath for name in names}
    for start in range(0, batch, chunk):
        part = slice(start, start + chunk)
        tree = DraftTree(tokens[part], target_rows[part].to(dtype), draft_rows[part].to(dtype))
        with shared_key_orders() if share_sorts else nullcontext():
            _score_chunk(names, tree, cells, single, out, seconds, to_cpu, one_pass)
    return {cell: {name: torch.cat(values) for name, values in by_name.items()}
            for cell, by_name in out.items()}


def _score_chunk(names: tuple[str, ...] | list[str], tree: DraftTree,
                 cells: list[tuple[int, int]], single: dict[str, bool],
                 out: dict[tuple[int, int], dict[str, list[torch.Tensor]]],
                 seconds: dict[str, float] | None, to_cpu: bool, one_pass: bool = True) -> None:
    """Every named verifier's value at every cell of one chunk of rows, appended to out."""
    for name in names:
        begin = time.perf_counter()
        done: dict[tuple[int, int], torch.Tensor] = {}
        if one_pass:
            needed = sorted({(1, d) if single[name] else (k, d) for k, d in cells})
            grid = grid_values(name, tree, needed)
            for key, value in (grid or {}).items():
                value = value.double()
                done[key] = value.cpu() if to_cpu else value
        for k, d in cells:
            key = (1, d) if single[name] else (k, d)
            if key not in done:
                law = block_law(name, cut_tree(tree, *key))
                value = law.block_efficiency().double()
                done[key] = value.cpu() if to_cpu else value
            out[(k, d)][name].append(done[key])
        if seconds is not None:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - begin


def score_tree(
    names: tuple[str, ...] | list[str],
    tokens: torch.Tensor,
    target_rows: torch.Tensor,
    draft_rows: torch.Tensor,
    dtype: torch.dtype = torch.float64,
    max_elements: int = 1 << 25,
    seconds: dict[str, float] | None = None,
) -> dict[str, torch.Tensor]:
    """Exact conditional E[tau + 1 | tree] of every named verifier on the whole drafted tree
    (`score_grid` at the one cell (K, L)): {name: [B] float64 on the CPU}."""
    cell = (int(tokens.shape[1]), int(tokens.shape[2]))
    return score_grid(names, tokens, target_rows, draft_rows, [cell], dtype, max_elements,
                      seconds)[cell]

