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

Exact law on i.i.d. drafts: first_visit_law (below). There IS structure: every node of the
drafted prefix tree is tested at most once, at its first visit (candidate order, then depth),
so the stop is the first-visited accepted node of the largest depth, and the law is a sum over
the nodes of products of multinomial generating functions over subtrees (the memo on (node,
paths through it): Psi_w; the state handed down: only the order of first visits at the stop's
depth, split before / after the stop). It calls spectr_gbv_tests (the rule's own tests) once
on the V^L leaves; its arithmetic is O(N K^4) (N nodes): 0.7 s in float64 at (8, 4, 3) and
(8, 4, 4), under 0.3 s at (8, 3, 4), (4, 4, 4), (16, 2, 4) and (2, 8, 3) (Dirichlet 0.5, seed
0, on a shared core), where the previous candidate recursion (a Markov chain over the sets of
earlier prefixes) was over its work limit at (8, 4, 3) and (8, 4, 4) and took 10-18 s at
(8, 3, 4) and (4, 4, 4) in the recorded grid, and the ordered enumeration has up to 4096^4
tuples. Its docstring says why it is exact;
tests/test_spectr_gbv.py checks it against the ordered enumeration entry by entry in exact
rationals (hypothesis, ties, zeros, undefined stops).

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import ops
from .law import MASS_TOLERANCE, BlockLaw, DraftTree, LawMassError, register
from .multipath import canonical_paths, shared_prefix
from .tree import all_paths, depth_offset, num_nodes, prefix_node_indices

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
# exact law on i.i.d. drafts: first-visit generating functions
# ---------------------------------------------------------------------------

def first_visit_work(vocab: int, depth: int, paths: int) -> int:
    """Upper bound on the evaluations of first_visit_law: the V^L leaves whose tests are
    evaluated (one vectorised call of spectr_gbv_tests), plus its polynomial products (one per
    child of a node of depth < L-1, three per node of depth 1..L-1) weighted by (K+1)^2, the
    coefficients of one product (gap's MAX_STRUCTURED compares this with its limit)."""
    inner = num_nodes(vocab, depth - 2)  # nodes of depth 0..L-2 (0 when L = 1)
    level = num_nodes(vocab, depth - 1) - 1  # nodes of depth 1..L-1
    return vocab ** depth + (vocab * inner + 3 * level) * (paths + 1) ** 2


def first_visit_law(model: Any, paths: int) -> tuple[np.ndarray, int, tuple[int, Any]]:
    """(emit [N, V], evaluations, (undefined nodes, undefined mass)): the exact law of the
    released rule on K i.i.d. draft paths, with no enumeration of draft tuples and no state
    set of earlier prefixes: O(V^L) rule tests and O(N K^4) arithmetic.

    Why this is exact. Give every node u of depth 1..L-1 one coin c(u) ~ Bernoulli(h(u)) and
    every candidate j one coin f_j ~ Bernoulli(h_L(x_j)), all independent given the paths
    (h from spectr_gbv_tests, the rule's own code: a test depends on its node only). The rule
    tests a node of the drafted prefix tree at most once, at its FIRST VISIT (candidate order,
    then depth: a later candidate sharing the prefix skips it), and only while the accepted
    length a is below its depth; an accepting test sets (a, z) to (depth, node). Hence:
      - the block is the full path x_j iff f_0 = .. = f_(j-1) = 0 < f_j: P(full path x) =
        sum_(j<K) g^j Q(x) h_L(x), g = sum_x Q(x) (1 - h_L(x)) (the node coins do not matter);
      - otherwise (all f_j = 0: the K paths are i.i.d. from the tilted weights
        Q'(x) = Q(x) (1 - h_L(x))) the rule stops at the first-visited node u among the
        accepted nodes (c = 1) of the largest depth D (the root when none): every accepted
        node deeper than a moves a, and a later accepted node of depth D does not.
    So P(stop at u, |u| = D) = E over K i.i.d. Q'-paths of 1{u drafted} h(u)
    prod_(v drafted, D < |v| < L) (1 - h(v)) prod_(w drafted, |w| = D, first visited before u)
    (1 - h(w)). Below a node w the drafted subtree given m paths through w is m i.i.d. paths
    below w, so Psi_w(x) = sum_m psi_w(m) x^m / m!, with psi_w(m) = the Q'-weighted sum over
    ordered m-tuples through w of prod over their drafted nodes strictly below w (depth < L)
    of (1 - h), satisfies the multinomial (exponential generating function) recursion
        Psi_w = exp(Q'(w) x)                                  (|w| = L - 1),
        Psi_w = prod_(children c) [1 + (1 - h(c)) (Psi_c - 1)]  (|w| < L - 1).
    Order at depth D: split the K positions at u's first appearance j; a node w of depth D
    drafted b times before j and a times after contributes psi_w(b + a) / (b! a!) x^b y^a,
    times (1 - h(w)) when b >= 1, i.e. A_w(x, y) = Psi_w(y) + (1 - h(w)) (Psi_w(x + y) -
    Psi_w(y)); u contributes h(u) Psi_u'(y). Then
        P(stop at u) = sum_(j<K) j! (K-1-j)! [x^j y^(K-1-j)] h(u) Psi_u'(y) prod_(w != u) A_w,
        P(stop at the root) = K! [x^K] Psi_root,
    the products over w != u by prefix and suffix products. All in the model's numbers:
    exact rationals stay rational. The outcome probabilities (full paths, stops) must sum to
    one (checked here: exactly in rationals, within 1e-12 in float64); the law emits the
    residual row at the stop (the target row after a full path), and a stop whose residual
    row is all zero is counted as undefined (module docstring).
    """
    vocab, depth, exact = model.vocab_size, model.depth, model.exact
    zero = model.target[0, 0] * 0 if exact else 0.0
    one = zero + 1
    tests, rows, full, q_leaf, kept = _node_tests(model, paths)
    target = model.target if exact else np.asarray(model.target, np.float64)
    leaf_offset = depth_offset(vocab, depth)
    # tilted leaf weights Q'(x) = Q(x) (1 - h_L(x)) and their sums at every node, by level
    mass = [[zero] * vocab ** d for d in range(depth + 1)]
    for x in kept:
        mass[depth][x] = q_leaf[x] * (1 - full[x])
    for d in range(depth - 1, -1, -1):
        below = mass[d + 1]
        mass[d] = [sum(below[i * vocab:(i + 1) * vocab], zero) for i in range(vocab ** d)]
    g = mass[0][0]
    emit = np.empty((num_nodes(vocab, depth), vocab), dtype=object if exact else np.float64)
    emit[...] = zero
    # full paths: stop at candidate j with prob g^j Q(x) h_L(x)
    repeat = sum((g ** j for j in range(paths)), zero)
    total = zero
    for x in kept:
        stop = repeat * q_leaf[x] * full[x]
        if stop != 0:
            total = total + stop
            emit[leaf_offset + x] = emit[leaf_offset + x] + stop * target[leaf_offset + x]
    factorial = [math.factorial(m) for m in range(paths + 1)]
    products = 0
    # Psi_w as EGF coefficient lists [K+1] (None where Q'(w) = 0), deepest level first
    psi: list[list[Any]] = [[] for _ in range(depth)]
    psi[depth - 1] = [None if m == 0 else [m ** k / factorial[k] for k in range(paths + 1)]
                      for m in mass[depth - 1]]
    for d in range(depth - 2, -1, -1):
        level = []
        for i in range(vocab ** d):
            if mass[d][i] == 0:
                level.append(None)
                continue
            poly = [one] + [zero] * paths
            for t in range(vocab):
                child = psi[d + 1][i * vocab + t]
                if child is None:
                    continue
                keep = 1 - tests[depth_offset(vocab, d + 1) + i * vocab + t]
                poly = _product(poly, [one] + [keep * c for c in child[1:]], zero)
                products += 1
            level.append(poly)
        psi[d] = level
    stops = {0: zero if psi[0][0] is None else factorial[paths] * psi[0][0][paths]}
    for d in range(1, depth):
        offset = depth_offset(vocab, d)
        present = [i for i, poly in enumerate(psi[d]) if poly is not None]
        blocks = [_before_after(psi[d][i], 1 - tests[offset + i], paths, zero)
                  for i in present]
        unit = _before_after([one] + [zero] * paths, zero, paths, zero)
        prefix = [unit]
        for block in blocks:
            prefix.append(_product2(prefix[-1], block, paths, zero))
        suffix = [unit]
        for block in reversed(blocks):
            suffix.append(_product2(suffix[-1], block, paths, zero))
        suffix.reverse()
        products += 3 * len(present)
        for n, i in enumerate(present):
            others = _product2(prefix[n], suffix[n + 1], paths, zero)
            poly, test = psi[d][i], tests[offset + i]
            derivative = [(a + 1) * poly[a + 1] for a in range(paths)]  # Psi_u'(y)
            value = zero
            for j in range(paths):
                rest = paths - 1 - j
                inner = sum((others[j][rest - a] * derivative[a] for a in range(rest + 1)), zero)
                value = value + factorial[j] * factorial[rest] * inner
            stops[offset + i] = test * value
    undefined_nodes, undefined_mass = 0, zero
    for node, stop in stops.items():
        total = total + stop
        if stop == 0:
            continue
        row = rows[node]
        if sum(row, zero) == 0:  # the rule has no token here (module docstring)
            undefined_nodes += 1
            undefined_mass = undefined_mass + stop
        emit[node] = emit[node] + stop * row
    if (total != 1) if exact else abs(float(total) - 1) > MASS_TOLERANCE:
        raise LawMassError(f"spectr_gbv: first-visit law on V={vocab}, L={depth}, K={paths} has "
                           f"outcome mass {float(total)!r}, not 1")
    return emit, len(kept) + products, (undefined_nodes, undefined_mass)


first_visit_law.kind = "first-visit recursion"
first_visit_law.work = first_visit_work


def _node_tests(model: Any, paths: int) -> tuple[list[Any], np.ndarray, list[Any], list[Any],
                                                  list[int]]:
    """(tests [N] h(u) at the nodes of depth 1..L-1 (zero elsewhere), rows [N, V] the
    residual rows at the nodes of depth 0..L-1, full [V^L] h_L(x), q [V^L] Q(x), kept: the
    leaves with Q(x) > 0) from ONE call of spectr_gbv_tests on the kept leaves packed K to a
    tree (the tests of a path read its own nodes only; K enters as the rule's K)."""
    vocab, depth = model.vocab_size, model.depth
    tokens = all_paths(vocab, depth)  # [P, L]
    nodes = prefix_node_indices(tokens, vocab)  # [P, L+1]
    q_path = model.draft_path_probabilities()
    kept = np.nonzero(q_path != 0)[0]
    packed = np.concatenate([kept, np.repeat(kept[-1:], (-len(kept)) % paths)]).reshape(-1, paths)
    at = nodes[packed]  # [B, K, L+1]
    target = model.target if model.exact else np.asarray(model.target, np.float64)
    draft = model.draft if model.exact else np.asarray(model.draft, np.float64)
    tests, residuals, _ = spectr_gbv_tests(DraftTree(tokens[packed], target[at],
                                                     draft[at[..., :-1]]))
    tests = _numpy(tests).reshape(-1, depth + 1)[:len(kept)]
    residuals = _numpy(residuals).reshape(-1, depth + 1, vocab)[:len(kept)]
    at = at.reshape(-1, depth + 1)[:len(kept)]
    zero = model.target[0, 0] * 0 if model.exact else 0.0
    count = num_nodes(vocab, depth)
    node_tests = [zero] * count
    rows = np.empty((count, vocab), dtype=object if model.exact else np.float64)
    rows[...] = zero
    for length in range(depth):
        rows[at[:, length]] = residuals[:, length]
        if length:
            for node, test in zip(at[:, length].tolist(), tests[:, length].tolist(), strict=True):
                node_tests[node] = test
    full = [zero] * vocab ** depth
    q_leaf = [zero] * vocab ** depth
    q_values = q_path.tolist()
    for x, test in zip(kept.tolist(), tests[:, depth].tolist(), strict=True):
        full[x], q_leaf[x] = test, q_values[x]
    return node_tests, rows, full, q_leaf, kept.tolist()


def _product(a: list[Any], b: list[Any], zero: Any) -> list[Any]:
    """Product of two power series truncated at the degree of a."""
    return [sum((a[i] * b[m - i] for i in range(m + 1)), zero) for m in range(len(a))]


def _before_after(poly: list[Any], keep: Any, paths: int, zero: Any) -> list[list[Any]]:
    """A_w(x, y) = Psi_w(y) + keep (Psi_w(x + y) - Psi_w(y)) as coefficients [b][a] of
    x^b y^a, b + a <= K - 1 (first_visit_law): [0][a] = c_a, [b][a] = keep C(b+a, b) c_(b+a)."""
    return [[poly[a] if b == 0 else keep * math.comb(b + a, b) * poly[b + a]
             for a in range(paths - b)] for b in range(paths)]


def _product2(p: list[list[Any]], r: list[list[Any]], paths: int, zero: Any) -> list[list[Any]]:
    """Product of two series in x, y truncated at total degree K - 1 (coefficients [b][a])."""
    return [[sum((p[b1][a1] * r[b - b1][a - a1] for b1 in range(b + 1) for a1 in range(a + 1)),
                 zero) for a in range(paths - b)] for b in range(paths)]


def _numpy(values: Any) -> np.ndarray:
    return ops.as_float64(values) if ops.is_torch(values) else np.asarray(values)


@register("spectr_gbv", "SpecTr-GBV (Lin et al. 2026) as released: multi-draft greedy block "
          "verification with path-probability tests (LOSSY by the audit)", multipath=True,
          lossless=False, draft_sampling=(), may_be_undefined=True,
          exact_law=first_visit_law)
def spectr_gbv(tree: DraftTree) -> BlockLaw:
    return spectr_gbv_law(tree)
