"""SpecTr-GBV (Lin, Sheng, Cai, Zhou, arXiv 2604.25925, 2026), law first.

Source: the paper's claim and the released code (github junemily/SpecTr-GBV,
src/engine.py, `Decoding.speculative_decoding`); the rule below is the code's behaviour,
re-derived and written here from its description (no code copied). "GBV" there is Sun et
al.'s greedy block verification, not this toolkit's `gbv`.

Notation (target P, draft Q; the code's "b" = big = target and "s" = small = draft):
for a node z, P(z) and Q(z) are its target and draft path probabilities,
    rho(z) = min(1, Q(z)/P(z))   (1 when P(z) = 0 and Q(z) > 0, 0 when Q(z) = 0),
    phi(z) = P(z) (1 - rho(z))^K,     psi(z) = P(z) (1 - (1 - rho(z))^K),
with K the number of drafted paths ("candidates").
Tests. A prefix z of length l < L is accepted w.p.
    h(z) = [sum_t phi(z t) - phi(z)] / [1 - (1 - Q(z))^K - sum_t psi(z t)]   (clipped to [0, 1];
           a zero denominator gives 1 when the numerator is > 0, else 0),
a full path z (l = L) w.p.  h_L(z) = psi(z) / (1 - (1 - Q(z))^K).
Order. Candidates j = 0..K-1 in turn; a = current accepted length (0 at the start).
Candidate j tests its own prefixes of lengths a+1, ..., L-1 in increasing order (a moves
up on every acceptance, the selected candidate becomes j), skipping a prefix that an
earlier candidate already tested (the code's `seen_prefixes`; an earlier candidate with
the same prefix of that length always tested and rejected it, so the skip is "j is not
the lowest path with this prefix"); then it tests its full path (never skipped): on
acceptance the block is that path and verification ends. The accepted prefix of a later
candidate need not extend an earlier one: the block is the selected candidate's prefix.
Correction. If the accepted length a < L, with z the selected candidate's prefix of
length a (the root when nothing was accepted), Y ∝ P(z t) (1 - rho(z t)^K) (the code's
`1 - min(.,1) ** K`: the power binds before the minus); if a = L, Y ~ p(.|z) (bonus).

The paper claims this attains the optimal expected acceptance length under i.i.d.
drafting, E[tau] = sum_{t=1..L} sum_{|z|=t} psi(z) (`claimed_expected_accepted`). Both the
losslessness and that value are checked by this toolkit, not assumed: the audit and the
gap command report what they find (README findings). Registered with lossless=False and
no draft law it is lossless under (draft_sampling=()), because the exact law is lossy,
already with K = 1 at L = 2 and with K = 2 at L = 1 (tests/test_baselines.py): `gap`
reports it without holding it to the claims, and `audit` fails it.

Undefined steps. Where every child z t has Q(z t) >= P(z t) (rho = 1), the correction row
P(z t)(1 - rho^K) is all zero: the released rule has no token to emit when it stops at z
(the code would sample from a zero vector). The law function returns a zero correction row
there, so the law has mass < 1; it is registered may_be_undefined, and the exact law reports
the configurations and the mass where it is undefined (verifiers.exact.ExactResult), which
`gap` prints instead of a block efficiency.

Exact law on i.i.d. drafts: candidate_recursion (below; a Markov chain over the accepted
length, the selected node and the set of earlier candidates' prefixes, calling
spectr_gbv_tests), not the ordered K-tuples; its work grows with the number of those sets
(candidate_states_bound), so at (8, 3, 4), (4, 4, 4) and (2, 8, 3) `gap` still estimates it.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import ops
from .law import BlockLaw, DraftTree, register
from .multipath import canonical_paths, shared_prefix
from .tree import all_paths, num_nodes, prefix_node_indices

Array = Any


def _power(base: Array, exponent: int) -> Array:
    out = base * 0 + 1
    for _ in range(exponent):
        out = out * base
    return out


def _capped_ratio(draft_mass: Array, target_mass: Array) -> Array:
    """rho = min(1, Q/P); 1 where P = 0 < Q, 0 where Q = 0."""
    ratio = ops.minimum(ops.safe_div(draft_mass, target_mass), 1)
    return ops.where((target_mass == 0) & (draft_mass > 0), ratio * 0 + 1, ratio)


def _clip_unit(a: Array) -> Array:
    return ops.minimum(ops.maximum(a, 0), 1)


def spectr_gbv_tests(tree: DraftTree) -> tuple[Array, Array, Array]:
    """(h [B, K, L+1], residual [B, K, L+1, V], path mass P [B, K, L+1]).

    h[:, k, l] is the acceptance probability of path k's prefix of length l (l = 1..L;
    h[:, :, 0] = 0); residual[:, k, l] the correction row at that prefix (l < L), the
    target row at l = L.
    """
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    paths, depth = tree.paths, tree.depth
    p_drafted, q_drafted = tree.drafted_probabilities()  # [B, K, L]
    one = ops.ones(p_drafted.shape[:2], like=p_drafted)  # [B, K]
    target_mass, draft_mass = [one], [one]
    for i in range(depth):
        target_mass.append(target_mass[-1] * p_drafted[:, :, i])
        draft_mass.append(draft_mass[-1] * q_drafted[:, :, i])
    tests = [one * 0]
    residuals = []
    for length in range(depth + 1):
        big, small = target_mass[length], draft_mass[length]  # [B, K]
        if length < depth:
            child_big = big[..., None] * target[:, :, length]  # [B, K, V]
            child_small = small[..., None] * draft[:, :, length]
            child_rho = _capped_ratio(child_small, child_big)
            raw = ops.positive_part(child_big * (1 - _power(child_rho, paths)))
            residuals.append(ops.safe_div(raw, ops.total(raw, -1, keepdim=True)))
        else:
            residuals.append(target[:, :, depth])
        if length == 0:
            continue
        rho = _capped_ratio(small, big)
        drafted_somewhere = 1 - _power(1 - small, paths)
        if length == depth:
            tests.append(_clip_unit(ops.safe_div(big * (1 - _power(1 - rho, paths)),
                                                 drafted_somewhere)))
            continue
        numerator = (ops.total(child_big * _power(1 - child_rho, paths), -1)
                     - big * _power(1 - rho, paths))
        denominator = drafted_somewhere - ops.total(child_big * (1 - _power(1 - child_rho, paths)),
                                                    -1)
        h = ops.where(denominator > 0, ops.safe_div(numerator, denominator),
                      ops.where(numerator > 0, one, one * 0))
        tests.append(_clip_unit(h))
    del tokens
    return ops.stack(tests, 2), ops.stack(residuals, 2), ops.stack(target_mass, 2)


def spectr_gbv_law(tree: DraftTree) -> BlockLaw:
    """Exact law of the released SpecTr-GBV rule (module docstring)."""
    tokens = ops.index_like(tree.target_rows, tree.tokens)
    batch, paths, depth = tree.batch, tree.paths, tree.depth
    tests, residuals, _ = spectr_gbv_tests(tree)
    canon = canonical_paths(shared_prefix(tokens))  # [B, K, L+1]
    lowest = canon == ops.arange(paths, canon)[None, :, None]  # path k is the lowest with its prefix
    # state[l][k]: P(still verifying, accepted length l, selected candidate k), l < L
    zero = tests[:, 0, 0] * 0
    state = [[zero for _ in range(paths)] for _ in range(depth)]
    state[0][0] = zero + 1
    full = [zero for _ in range(paths)]  # P(block = full path k)
    for j in range(paths):
        for length in range(1, depth):
            h = ops.where(lowest[:, j, length], tests[:, j, length], zero)
            moved = zero
            for a in range(length):
                for k in range(paths):
                    moved = moved + state[a][k] * h
                    state[a][k] = state[a][k] * (1 - h)
            state[length][j] = state[length][j] + moved
        h_full = tests[:, j, depth]
        for a in range(depth):
            for k in range(paths):
                full[j] = full[j] + state[a][k] * h_full
                state[a][k] = state[a][k] * (1 - h_full)
    stop = ops.stack([ops.stack([state[a][k] for a in range(depth)] + [full[k]], 1)
                      for k in range(paths)], 1)  # [B, K, L+1]
    del batch
    return BlockLaw(stop, residuals)


def claimed_expected_accepted(target_nodes: np.ndarray, draft_nodes: np.ndarray,
                              depths: np.ndarray, paths: int) -> Any:
    """The paper's claimed optimum E[tau] = sum over nodes z of depth 1..L of psi(z).

    target_nodes, draft_nodes: [N] path probabilities P(z), Q(z) of every node (shortlex,
    root included; float64 or exact); depths [N]. Exact when the inputs are.
    """
    keep = depths >= 1
    big, small = target_nodes[keep], draft_nodes[keep]
    rho = _capped_ratio(small, big)
    return ops.total(big * (1 - _power(1 - rho, paths)), 0)



# ---------------------------------------------------------------------------
# exact law on i.i.d. drafts by the candidate recursion
# ---------------------------------------------------------------------------

def candidate_states_bound(vocab: int, depth: int, paths: int, last: bool = True) -> int:
    """Upper bound on the (state, candidate prefix) pairs of candidate_recursion: states
    (accepted length a, selected node, set S of earlier (L-1)-prefixes) before candidate j
    number at most sum_{i<=j} C(U, i) (1 + j (L-1)) with U = V^(L-1); each meets U prefixes.
    last=False: without the last candidate's pairs (those are evaluated vectorised)."""
    prefixes = vocab ** max(depth - 1, 0)
    total = 0
    for j in range(paths if last else paths - 1):
        sets = sum(math.comb(prefixes, i) for i in range(min(j, prefixes) + 1))
        total += sets * (1 + j * max(depth - 1, 0)) * prefixes
    return total


def candidate_recursion(model: Any, paths: int) -> tuple[np.ndarray, int]:
    """(emit [N, V], (state, prefix) pairs evaluated): the exact law of the released rule on
    K i.i.d. draft paths without enumerating the ordered K-tuples.

    Why this is exact. The candidates are processed one by one and each is an i.i.d. q-path
    x_j. What the rule does with x_j depends on the past only through (a, the selected node
    z of length a) and, for the skips, on whether an earlier candidate shares x_j's prefix of
    each length l <= L-1, i.e. on the SET S of the earlier candidates' (L-1)-prefixes
    (lcp(x_j, S) = the longest shared prefix). The tests h are functions of the node
    (spectr_gbv_tests, the rule's own code, evaluated on trees whose K paths are all one path
    y, so that K enters as in the rule). So the law is a Markov chain on (a, z, S): candidate
    j with (L-1)-prefix y (probability Q(y)) tests its prefixes of lengths max(a, lcp)+1 ..
    L-1 in turn (accepting moves every state to (l, y_<=l), since every state then has a < l),
    then its full path y t (t ~ q(.|y)): stop with the full path w.p. h_L(y t), else go on
    with S + {y}. At the end a state (a, z) emits z with the residual row at z. With a =
    L-1 no later test can move the state, so S is dropped there (merging states).
    """
    vocab, depth = model.vocab_size, model.depth
    tokens = all_paths(vocab, depth)  # [P, L]
    nodes = prefix_node_indices(tokens, vocab)  # [P, L+1]
    q_path = model.draft_path_probabilities()
    keep = np.nonzero(q_path != 0)[0]
    # the trees whose K paths all equal one path y, rows as numpy arrays (object or float64:
    # the ops serve both, and no torch is needed)
    drafted = np.repeat(tokens[keep][:, None, :], paths, axis=1)  # [P', K, L]
    at = np.repeat(nodes[keep][:, None, :], paths, axis=1)  # [P', K, L+1]
    target_rows = model.target[at] if model.exact else np.asarray(model.target, np.float64)[at]
    draft_rows = model.draft[at[..., :-1]] if model.exact else np.asarray(model.draft,
                                                                           np.float64)[at[..., :-1]]
    tree = DraftTree(drafted, target_rows, draft_rows)
    tests, residuals, _ = spectr_gbv_tests(tree)
    tests, residuals = _numpy(tests)[:, 0], _numpy(residuals)[:, 0]  # [P', L+1], [P', L+1, V]
    zero = model.target[0, 0] * 0
    one = zero + 1
    h: dict[int, Any] = {}
    rows: dict[int, Any] = {}
    for r, path in enumerate(keep.tolist()):
        for length in range(depth):
            h[int(nodes[path, length])] = tests[r, length]
            rows[int(nodes[path, length])] = residuals[r, length]
    prefix_len = depth - 1
    # candidate prefixes y (length L-1) with Q(y) > 0: their nodes, Q(y), and the full paths
    prefix_of = {}
    for r, path in enumerate(keep.tolist()):
        y = tuple(tokens[path, :prefix_len].tolist())
        prefix_of.setdefault(y, []).append((r, path))
    emit = np.empty((num_nodes(vocab, depth), vocab), dtype=object)
    emit[...] = zero
    if not model.exact:
        emit = np.zeros((num_nodes(vocab, depth), vocab))
    candidates = []
    for y, members in prefix_of.items():
        q_y = zero
        full_accept = zero
        fulls = []
        for r, path in members:
            q_y = q_y + q_path[path]
            fulls.append((int(nodes[path, depth]), q_path[path] * tests[r, depth]))
        q_y_inverse_free = q_y
        for _, mass in fulls:
            full_accept = full_accept + mass
        # P(full accept | y) = sum_t q(t|y) h_L(y t) = full_accept / Q(y)
        candidates.append((y, [int(nodes[members[0][1], length]) for length in range(depth)],
                           q_y_inverse_free, full_accept, fulls))
    states: dict[tuple[int, int, frozenset], Any] = {(0, 0, frozenset()): one}
    evaluations = 0
    for j in range(paths):
        if j == paths - 1:  # the last candidate: vectorised over the states, nothing carried on
            emit, undefined = _last_candidate(model, states, candidates, h, rows, emit,
                                              prefix_len, zero, one)
            return emit, evaluations + len(states) * len(candidates), undefined
        new: dict[tuple[int, int, frozenset], Any] = {}
        for (a, selected, seen), mass in states.items():
            for y, path_nodes, q_y, full_accept, fulls in candidates:
                evaluations += 1
                shared = max((_common(y, s) for s in seen), default=0)
                dist = {(a, selected): one}
                for length in range(max(a, shared) + 1, prefix_len + 1):
                    test = h[path_nodes[length]]
                    total = zero
                    moved: dict[tuple[int, int], Any] = {}
                    for key, value in dist.items():
                        total = total + value
                        moved[key] = value * (1 - test)
                    moved[(length, path_nodes[length])] = (moved.get((length, path_nodes[length]),
                                                                     zero) + total * test)
                    dist = moved
                weight = sum(dist.values(), zero) * mass
                for leaf, leaf_mass in fulls:  # Q(y t) h_L(y t): the full path y t stops
                    emit[leaf] = emit[leaf] + weight * leaf_mass * model.target[leaf]
                go_on = q_y - full_accept  # Q(y) (1 - P(full accept | y))
                if go_on == 0:
                    continue
                grown = seen | {y}
                for (length, node), value in dist.items():
                    key = (length, node, frozenset() if length == prefix_len else grown)
                    new[key] = new.get(key, zero) + mass * value * go_on
        states = new
    raise AssertionError("unreachable: the last candidate returns")  # paths >= 1


candidate_recursion.kind = "candidate recursion"
# work in units of the node recursion's rule evaluations (gap's MAX_STRUCTURED): a (state,
# prefix) pair before the last candidate is a few dict operations in Python (about 10 batched
# evaluations), one of the last candidate a few vectorised array entries (about 1)
candidate_recursion.work = lambda vocab, depth, paths: (
    9 * candidate_states_bound(vocab, depth, paths, last=False)
    + candidate_states_bound(vocab, depth, paths))


LAST_CHUNK = 1 << 21  # (state, prefix) entries per array of the last candidate's step


def _last_candidate(model: Any, states: dict, candidates: list, h: dict, rows: dict,
                    emit: np.ndarray, prefix_len: int, zero: Any, one: Any
                    ) -> tuple[np.ndarray, tuple[int, Any]]:
    """The last candidate's step of candidate_recursion for every state at once, and the end:
    with stay[n, y] = prod over the tested lengths l of (1 - h(y_<=l)) and moved to l w.p.
    h(y_<=l) prod_{l' > l tested} (1 - h(y_<=l')), the final (a, z) of every (state, y) pair
    is summed into coefficients per node; the full paths y t stop with the total state mass."""
    exact = model.exact
    dtype = object if exact else np.float64
    count, width = len(states), len(candidates)
    index = {y: i for i, (y, *_) in enumerate(candidates)}
    keys = list(states)
    accepted = np.array([k[0] for k in keys], dtype=np.int64)
    selected = np.array([k[1] for k in keys], dtype=np.int64)
    mass = np.array([states[k] for k in keys], dtype=dtype)
    most = max((len(k[2]) for k in keys), default=0)
    seen = np.full((count, max(most, 1)), -1, dtype=np.int64)
    for n, k in enumerate(keys):
        for c, y in enumerate(k[2]):
            seen[n, c] = index[y]
    common = np.array([[_common(y, s) for s, *_ in candidates] for y, *_ in candidates],
                      dtype=np.int64).reshape(width, width)
    depth = prefix_len + 1
    test = np.empty((width, depth + 1), dtype=dtype)  # h(y_<=l), l = 1..L-1 (0 elsewhere)
    test[...] = zero
    for i, (_, path_nodes, *_) in enumerate(candidates):
        for length in range(1, depth):
            test[i, length] = h[path_nodes[length]]
    tail = np.empty((width, depth + 2), dtype=dtype)  # prod_{l' >= l} (1 - h), l = 1..L
    tail[...] = one
    for length in range(depth - 1, 0, -1):
        tail[:, length] = tail[:, length + 1] * (1 - test[:, length])
    go_on = np.array([q_y - full for _, _, q_y, full, _ in candidates], dtype=dtype)  # [U]
    total_mass = mass.sum() if count else zero
    for _, _, _, _, fulls in candidates:  # the full paths y t stop w.p. h_L(y t)
        for leaf, leaf_mass in fulls:
            emit[leaf] = emit[leaf] + total_mass * leaf_mass * model.target[leaf]
    rows_u = np.arange(width)[None, :]
    coefficient: dict[int, Any] = {}
    per_prefix = np.empty((depth, width), dtype=dtype)
    per_prefix[...] = zero
    chunk = max(1, LAST_CHUNK // max(width, 1))
    for lo in range(0, count, chunk):  # [n, U] arrays a chunk of states at a time
        part = slice(lo, lo + chunk)
        shared = np.zeros((len(accepted[part]), width), dtype=np.int64)
        for c in range(seen.shape[1]):
            column = seen[part, c]
            shared = np.where(column[:, None] >= 0, np.maximum(shared, common[column]), shared)
        start = np.maximum(accepted[part, None], shared) + 1  # first tested length [n, U]
        stay = tail[rows_u, np.minimum(start, depth)]  # [n, U] (start L: nothing tested, 1)
        stay_mass = (stay * go_on[None, :]).sum(axis=1) * mass[part]  # [n]
        for node, value in zip(selected[part].tolist(), stay_mass.tolist(), strict=True):
            coefficient[node] = coefficient.get(node, zero) + value
        for length in range(1, depth):
            moved = np.where(start <= length, test[None, :, length] * tail[None, :, length + 1],
                             zero)  # [n, U]
            per_prefix[length] = per_prefix[length] + (moved * mass[part, None]).sum(axis=0)
    for length in range(1, depth):
        for i, value in enumerate((per_prefix[length] * go_on).tolist()):
            node = candidates[i][1][length]
            coefficient[node] = coefficient.get(node, zero) + value
    undefined_nodes, undefined_mass = 0, zero
    for node, value in coefficient.items():
        row = rows[node]
        if value != 0 and sum(row, zero) == 0:  # the rule has no token here (module docstring)
            undefined_nodes += 1
            undefined_mass = undefined_mass + value
        emit[node] = emit[node] + value * row
    return emit, (undefined_nodes, undefined_mass)


def _common(y: tuple[int, ...], s: tuple[int, ...]) -> int:
    """Length of the common prefix of two prefixes."""
    n = 0
    for u, v in zip(y, s, strict=True):
        if u != v:
            break
        n += 1
    return n


def _numpy(values: Any) -> np.ndarray:
    return ops.as_float64(values) if ops.is_torch(values) else np.asarray(values)


@register("spectr_gbv", "SpecTr-GBV (Lin et al. 2026) as released: multi-draft greedy block "
          "verification with path-probability tests (LOSSY by the audit)", multipath=True,
          lossless=False, draft_sampling=(), may_be_undefined=True,
          exact_law=candidate_recursion)
def spectr_gbv(tree: DraftTree) -> BlockLaw:
    return spectr_gbv_law(tree)
