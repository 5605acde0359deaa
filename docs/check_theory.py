"""Numeric checks of the formulas and examples of docs/theory.md against the code.

    python docs/check_theory.py            # the fast checks (about a minute on one core)
    python docs/check_theory.py --slow     # also the drafting-without-replacement survey (minutes)

Every check recomputes a statement of docs/theory.md with the library (exact rationals where
the document states an exact value) and compares it with an independent computation: a closed
form, a brute-force enumeration, a second LP, or the exact value quoted in the document. Each
line prints PASS or FAIL with the section it checks; the exit status is 1 if any check fails.
Nothing here is a test of the test suite: the tests under tests/ remain the reference; this
script keeps the document honest.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from fractions import Fraction as F

import numpy as np
from speclp.lp import optimum
from speclp.lp.antichain import antichain_violations, path_masses
from speclp.lp.coarsen import coarsen_instance
from speclp.lp.colgen import master_data, priority_law
from speclp.lp.dual_bound import dual_upper_bound
from speclp.lp.hitting import HittingFunction
from speclp.lp.instance import Instance, bv_toy, dirichlet_instance, from_rows, ties_instance
from speclp.lp.node import node_optimum
from speclp.lp.node_form import antichain_form_optimum, node_form_optimum
from speclp.proofs.audit import audit_instance
from speclp.proofs.tree_selection import draft_ranked_tree, tree_accepted
from speclp.verifiers.exact import exact_result
from speclp.verifiers.single_step import nested_partitions, threshold_optimum
from speclp.verifiers.spectr_gbv import claimed_expected_accepted
from speclp.verifiers.tree import node_depths, node_index, node_parents, num_nodes

FAILURES: list[str] = []


def check(section: str, what: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  section {section:<6} {what}" + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(f"{section}: {what}")


def rows_instance(rows_p: list[list[F]], rows_q: list[list[F]], depth: int) -> Instance:
    return from_rows(np.array(rows_p, dtype=object), np.array(rows_q, dtype=object), depth)


def hu_anchor() -> Instance:
    p = [F(1, 2), F(3, 10), F(1, 5)]
    q = [F(1, 5), F(3, 10), F(1, 2)]
    return rows_instance([p] * 4, [q] * 4, 1)


def a_from_emit(emit: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """[N] A(z) = P(output node extends z) from emit [N, V] (Section 1.3)."""
    parents, _ = node_parents(vocab, depth)
    out = emit.sum(axis=1).copy()
    for z in range(num_nodes(vocab, depth) - 1, 0, -1):
        out[parents[z]] += out[z]
    return out


# ---------------------------------------------------------------------------------------

def single_path() -> None:
    expected = {2: (F(11, 9), F(10, 9)), 3: (F(5, 3), F(38, 27)), 4: (F(166, 81), F(130, 81))}
    for depth, (bv, token) in expected.items():
        model = bv_toy(depth).model(exact=True)
        got_bv = exact_result(model, "bv").block_efficiency - 1
        got_token = exact_result(model, "token").block_efficiency - 1
        closed = node_optimum(model)[1] - 1
        check("2.4", f"toy L={depth}: BV {bv}, token {token}, node optimum = BV",
              got_bv == bv and got_token == token and closed == bv,
              f"BV {got_bv}, token {got_token}, closed form {closed}")
    model = bv_toy(2).model(exact=True)
    broken = exact_result(model, "bv_first_failure")
    check("2.3", "first-failure BV on the toy (L=2): 5/9 tokens, TV 1/3",
          broken.block_efficiency - 1 == F(5, 9) and abs(broken.total_variation - 1 / 3) < 1e-15)
    for inst in (dirichlet_instance(3, 3, alpha=0.5, seed=1, denominator=16),
                 dirichlet_instance(2, 4, alpha=0.7, seed=2, denominator=12)):
        model = inst.model(exact=True)
        vocab, depth = model.vocab_size, model.depth
        result = exact_result(model, "bv")
        beta, _ = node_optimum(model)
        a = a_from_emit(result.emit, vocab, depth)
        check("2.2", f"BV: A(z) = q(z) w(z) = beta*(z) at every node, TV 0 ({inst.name})",
              all(a[i] == beta[i] for i in range(len(a))) and result.total_variation == 0)
        token = exact_result(model, "token")
        a = a_from_emit(token.emit, vocab, depth)
        parents, last = node_parents(vocab, depth)
        chain = np.empty(len(a), dtype=object)
        chain[0] = F(1)
        for z in range(1, len(a)):
            u, t = parents[z], last[z]
            chain[z] = chain[u] * min(model.target[u, t], model.draft[u, t])
        check("2.1", f"token level: A(z) = prod min(p, q) ({inst.name})",
              all(a[i] == chain[i] for i in range(len(a))))


def lp_equalities() -> None:
    for seed in range(3):
        inst = dirichlet_instance(2, 2, alpha=0.8, seed=seed, denominator=8)
        for k in (1, 2, 3):
            colgen = optimum(inst, k, method="colgen")
            full = optimum(inst, k, method="full")
            check("5.5/6", f"column generation = full LP, K={k} ({inst.name})",
                  colgen.certified and full.certified and colgen.exact_value == full.exact_value
                  and colgen.details.get("mixture_value_matches") is True,
                  f"{colgen.exact} vs {full.exact}")
        bv = exact_result(inst.model(exact=True), "bv").block_efficiency
        check("3.3", f"K=1 optimum = BV ({inst.name})", optimum(inst, 1).exact_value == bv)
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=5, denominator=16)
    model = inst.model(exact=True)
    for budget in (3, 7, 12):
        tree = draft_ranked_tree(model, budget)
        value = optimum(inst, tree_nodes=tree).exact_value
        check("4.2", f"tree LP optimum = 1 + sum_T p(n), N={budget}",
              value == 1 + tree_accepted(model, tree))


def node_form_example() -> None:
    inst = dirichlet_instance(2, 2, alpha=1.0, seed=4, denominator=8)
    form = node_form_optimum(inst, 2)
    best = optimum(inst, 2)
    check("7.1", "node form 12159/4096 > optimum 6055/2048 (K=2)",
          form.exact_value == F(12159, 4096) and best.exact_value == F(6055, 2048),
          f"{form.exact_value} vs {best.exact}")
    beta = [str(b) for b in form.details["beta"]]
    check("7.1", "node-form point beta = (7/8, 1/8, 7/8, 0, 127/4096, 1/16)",
          beta == ["7/8", "1/8", "7/8", "0", "127/4096", "1/16"], ", ".join(beta))


def antichain_form() -> None:
    inst = dirichlet_instance(2, 2, alpha=1.0, seed=4, denominator=8)
    form = antichain_form_optimum(inst, 2)
    check("7.5", "antichain form = optimum 6055/2048 on the node-form example (K=2)",
          form.certified and form.exact_value == F(6055, 2048), str(form.exact))
    beta = [F(0)] + list(node_form_optimum(inst, 2).details["beta"])
    worst = antichain_violations(beta, path_masses(inst.model(exact=True)), 2, 2, 2, exact=True)
    check("7.5", "the node-form point violates the antichain {00, 1} by 49/4096",
          bool(worst) and worst[0][1] == (2, 3) and worst[0][0] == F(49, 4096),
          f"{worst[0] if worst else None}")
    for vocab, depth, paths, seed in ((3, 2, 3, 1), (2, 3, 2, 2), (3, 3, 2, 3)):
        inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=seed, denominator=16)
        form, best = antichain_form_optimum(inst, paths), optimum(inst, paths)
        check("7.5", f"antichain form = certified optimum, K={paths} ({inst.name})",
              form.certified and best.certified and form.exact_value == best.exact_value,
              f"{form.exact} vs {best.exact}")


def dual_and_coarse() -> None:
    rng = np.random.default_rng(1)
    for seed in range(3):
        inst = dirichlet_instance(3, 2, alpha=0.8, seed=seed, denominator=16)
        coarse, _ = coarsen_instance(inst, 2)
        for k in (1, 2, 3):
            best = optimum(inst, k)
            tight = dual_upper_bound(inst, best.matching_duals, k)
            loose = dual_upper_bound(inst, rng.normal(size=(num_nodes(3, 2), 3)), k)
            check("7.3", f"dual bound: tight with the engine's duals, valid with random ones, K={k}",
                  abs(float(tight) - float(best.exact_value)) < 1e-9 and loose >= best.exact_value
                  and tight >= best.exact_value - F(1, 10**9))
            check("13.1", f"coarsened optimum >= fine optimum, K={k} ({inst.name})",
                  optimum(coarse, k).exact_value >= best.exact_value)


def depth_one() -> None:
    inst = hu_anchor()
    model = inst.model(exact=True)
    methods = [optimum(inst, 2, method=m).exact_value for m in ("closed-form", "colgen", "full")]
    check("8.3", "Hu anchor K=2: optimum 93/50 by closed form, column generation, full LP",
          methods == [F(93, 50)] * 3, str(methods))
    expected = {"specinfer": F(19, 25), "rrsw": F(19, 25), "naive_tree": F(19, 25),
                "traversal": F(19, 25), "nss": F(483, 1000), "khisti": F(8101, 10150),
                "gbv": F(43, 50), "nodeopt": F(43, 50), "gbv_clipped": F(37, 50),
                "bv": F(7, 10), "token": F(7, 10)}
    for name, value in expected.items():
        result = exact_result(model, name, paths=2)
        check("10.11", f"anchor acceptance {name} = {value}",
              result.block_efficiency - 1 == value and result.total_variation == 0)
    spectr = exact_result(model, "spectr", paths=2)
    check("10.11", "anchor acceptance spectr (K-SEQ) = 0.7914 (4 decimals)",
          abs(float(spectr.block_efficiency - 1) - 0.7914) < 5e-5 and spectr.total_variation == 0)
    p, q, k = list(model.target[0]), list(model.draft[0]), 2
    nss = sum(pt * (1 - (1 - qt) ** k) for pt, qt in zip(p, q, strict=True))
    naive = (sum(min(a, b) for a, b in zip(p, q, strict=True))
             + sum(max(a - b, 0) * (1 - (1 - b) ** (k - 1)) for a, b in zip(p, q, strict=True)))
    check("10.4/10.5", "L=1 formulas of NSS (483/1000) and NaiveTree (19/25)",
          nss == F(483, 1000) and naive == F(19, 25))
    rng = np.random.default_rng(0)

    def row(vocab: int, denominator: int = 12) -> list[F]:
        cuts = np.sort(rng.integers(0, denominator + 1, vocab - 1))
        return [F(int(x), denominator) for x in np.diff(np.concatenate([[0], cuts, [denominator]]))]

    bad = 0
    trials = 60
    for _ in range(trials):
        vocab, n = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        a, qq = row(vocab), row(vocab)
        rule = nested_partitions(np.array([a], dtype=object), np.array([qq], dtype=object), n)
        r = rule.law()[0]
        accepted = sum(min(x, y) for x, y in zip(a, r, strict=True))
        closed = threshold_optimum(np.array([a], dtype=object), np.array([qq], dtype=object), n)[0][0]
        sets = [s for size in range(vocab + 1) for s in itertools.combinations(range(vocab), size)]
        brute = min(sum(a[i] for i in range(vocab) if i not in s) + 1 - (1 - sum(qq[i] for i in s)) ** n
                    for s in sets)
        in_polytope = all(sum(r[i] for i in s) <= 1 - (1 - sum(qq[i] for i in s)) ** n for s in sets)
        bad += not (accepted == closed == brute and in_polytope and sum(r) == 1)
    check("8.1/8.5", f"nested partitions: sum min(a, r) = closed form = brute force, r in P_n "
          f"({trials} random rational rows)", bad == 0, f"{bad} mismatches")
    bad = 0
    count = 0
    for seed in range(8):
        inst = dirichlet_instance(4, 1, alpha=0.7, seed=seed, denominator=10)
        model = inst.model(exact=True)
        p, q = model.target[0], model.draft[0]
        for k in (2, 3):
            if sum(1 for x in q if x > 0) < k:
                continue
            table = HittingFunction.of_token_law(q, k, "without-replacement").table(exact=True)
            formula = min(table[m] + sum(p[t] for t in range(4) if not m >> t & 1) for m in range(16))
            count += 1
            bad += optimum(inst, k, draft_sampling="without-replacement").exact_value != 1 + formula
    check("8.2", f"L=1 without replacement: optimum = 1 + min_B f(B) + p(B^c) ({count} cases)",
          bad == 0, f"{bad} mismatches")


def gbv_law() -> None:
    vocab, depth = 3, 2
    for seed in range(3):
        inst = dirichlet_instance(vocab, depth, alpha=0.6, seed=seed, denominator=12)
        model = inst.model(exact=True)
        paths = [tuple(int(t) for t in x) for x in itertools.product(range(vocab), repeat=depth)]

        def key(path: tuple[int, ...], model=model) -> list[tuple[F, int]]:
            out, prefix = [], ()
            for token in path:
                u = node_index(prefix, vocab)
                p, q = model.target[u, token], model.draft[u, token]
                out.append((p / q if q != 0 else F(0), token))
                prefix += (token,)
            return out

        order = np.array(sorted(range(len(paths)), key=lambda i: key(paths[i]), reverse=True))
        for k in (2, 3):
            law = priority_law(master_data(inst, k), order, exact=True)
            value = node_optimum(model, exact=True, leaf_law=law)[1]
            gbv = exact_result(model, "gbv", paths=k)
            check("9.2", f"GBV = BV against the lexicographic priority law, K={k} ({inst.name})",
                  gbv.block_efficiency == value and gbv.total_variation == 0
                  and optimum(inst, k).exact_value >= value)


def counterexamples() -> None:
    fill = [F(1, 3)] * 3
    p_rows = [[F(1, 20), F(17, 20), F(1, 10)], [F(9, 10), F(1, 20), F(1, 20)], [F(0), F(0), F(1)],
              [F(1, 10), F(3, 10), F(3, 5)]] + [fill] * 9
    q_rows = [[F(1, 10), F(9, 10), F(0)], [F(1, 2), F(1, 2), F(0)], [F(1), F(0), F(0)],
              [F(9, 10), F(0), F(1, 10)]] + [fill] * 9
    inst = rows_instance(p_rows, q_rows, 2)
    model = inst.model(exact=True)
    values = {name: exact_result(model, name, paths=3).block_efficiency
              for name in ("nodeopt", "bv", "gbv")}
    check("10.9", "nodeopt 170329/88000 < BV 779/400 = optimum (GBV 74077/40000)",
          values == {"nodeopt": F(170329, 88000), "bv": F(779, 400), "gbv": F(74077, 40000)}
          and optimum(inst, 3).exact_value == F(779, 400))
    model = bv_toy(2).model(exact=True)
    claim = claimed_expected_accepted(model.node_probabilities("target"),
                                      model.node_probabilities("draft"), node_depths(2, 2), 1)
    rule = exact_result(model, "spectr_gbv", paths=1)
    check("10.10", "SpecTr-GBV on the toy (K=1, L=2): claim 4/3 > optimum 11/9; rule 4/3, TV 1/9",
          claim == F(4, 3) and rule.block_efficiency - 1 == F(4, 3)
          and abs(rule.total_variation - 1 / 9) < 1e-15)
    model = hu_anchor().model(exact=True)
    claim = claimed_expected_accepted(model.node_probabilities("target"),
                                      model.node_probabilities("draft"), node_depths(3, 1), 2)
    rule = exact_result(model, "spectr_gbv", paths=2)
    check("10.10", "SpecTr-GBV on the Hu anchor (K=2): claim 41/50 < 43/50; rule 431561/585225, TV 0.033",
          claim == F(41, 50) and rule.block_efficiency - 1 == F(431561, 585225)
          and abs(rule.total_variation - 0.0331) < 1e-4)
    worst = 0.0
    for seed in range(10):
        model = ties_instance(3, 2, seed=seed).model(exact=True)
        try:
            worst = max(worst, exact_result(model, "gbv_broken", paths=2).total_variation)
        except ValueError:
            continue
    check("9.2", "gbv_broken is lossy (max exact TV 0.25 over 10 ties instances)",
          abs(worst - 0.25) < 1e-12, f"{worst}")
    fine = [(F(1, 2), F(1, 4), F(1, 4)), (F(1, 2), F(1, 2), F(0))]
    low = [(F(2, 5), F(3, 10), F(3, 10)), (F(2, 5), F(1, 10), F(1, 2))]
    results = []
    for p, q in (fine, low):
        full = sum(min(a, b) for a, b in zip(p, q, strict=True))
        kp, kq = p[:2], q[:2]
        renorm = sum(min(a / sum(kp), b / sum(kq)) for a, b in zip(kp, kq, strict=True))
        results.append((full, renorm))
    check("13.2", "renormalised truncation: 3/4 -> 5/6 (above) and 4/5 -> 27/35 (below)",
          results == [(F(3, 4), F(5, 6)), (F(4, 5), F(27, 35))], str(results))
    p, q = [F(1, 2), F(1, 2), F(0)], [F(1, 2), F(0), F(1, 2)]
    inst = rows_instance([p] * 4, [q] * 4, 1)
    coarse, kept = coarsen_instance(inst, 1)
    check("13.2", "lumping is strictly looser: fine optimum 3/2, coarse (M = 1) optimum 2",
          kept.tolist() == [[0]] and optimum(inst, 1).exact_value == F(3, 2)
          and optimum(coarse, 1).exact_value == 2)


def _leaf_law(model, rows: np.ndarray) -> np.ndarray:
    """[V^L] the leaf law of the conditional rows (Section 19.5)."""
    from speclp.verifiers.tree import all_paths, prefix_node_indices

    leaves = all_paths(model.vocab_size, model.depth)
    nodes = prefix_node_indices(leaves, model.vocab_size)
    law = np.array([F(1)] * len(leaves), dtype=object)
    for i in range(model.depth):
        law = law * rows[nodes[:, i], leaves[:, i]]
    return law


def _bv_value(model, law: np.ndarray) -> tuple[F, F]:
    """(BE of BV against the leaf law by the law code, the closed form of Proposition 19.3)."""
    from speclp.verifiers.exact import block_efficiency_from_emit
    from speclp.verifiers.structure import bv_against
    from speclp.verifiers.tree import all_paths, prefix_node_indices

    vocab, depth = model.vocab_size, model.depth
    leaves = all_paths(vocab, depth)
    nodes = prefix_node_indices(leaves, vocab)
    node_mass = np.array([F(0)] * num_nodes(vocab, depth), dtype=object)
    for i in range(depth + 1):
        np.add.at(node_mass, nodes[:, i], law)
    rows = np.empty((num_nodes(vocab, depth), vocab), dtype=object)
    rows[...] = F(0)
    for i in range(depth):
        for leaf, node in enumerate(nodes[:, i]):
            if node_mass[node]:
                rows[node, leaves[leaf, i]] = node_mass[nodes[leaf, i + 1]] / node_mass[node]
    emit, _ = bv_against(model, rows)
    beta = F(1)  # 1 + sum_z min_j r(z_<=j) p(z_>j | z_<=j), node by node
    for z in range(1, num_nodes(vocab, depth)):
        leaf = next(k for k in range(len(leaves)) if z in nodes[k])
        d = list(nodes[leaf]).index(z)
        terms = []
        for j in range(d + 1):
            tail = F(1)
            for t in range(j, d):
                tail *= model.target[nodes[leaf, t], leaves[leaf, t]]
            terms.append(node_mass[nodes[leaf, j]] * tail)
        beta += min(terms)
    return block_efficiency_from_emit(model, emit), beta


def extended_bv() -> None:
    from speclp.verifiers.bv_extended import extended_bv_law, extended_bv_structured
    from speclp.verifiers.registry import get_verifier

    tv, equal, floor = [], [], []
    for seed, (vocab, depth, paths) in enumerate([(2, 2, 2), (2, 2, 3), (3, 2, 2), (2, 3, 2)]):
        model = dirichlet_instance(vocab, depth, 0.5, seed=seed).model(exact=True)
        for fallback in ("specinfer", "optimal"):
            result = exact_result(model, lambda tree, f=fallback: extended_bv_law(tree, fallback=f),
                                  paths=paths, enumeration="ordered")
            tv.append(result.total_variation_exact)
            equal.append(bool((extended_bv_structured(model, paths, fallback) == result.emit).all()))
            floor.append(result.block_efficiency - exact_result(model, "bv", paths).block_efficiency)
    check("19.2", "extended BV is lossless: exact TV 0 on 4 instances x 2 steps", all(t == 0 for t in tv))
    check("19.4", "the fresh-start recursion equals the ordered enumeration exactly", all(equal))
    check("19.3", "extended BV >= BV on the same 8 (instance, step) pairs", min(floor) >= 0,
          f"min margin {float(min(floor)):.3g}")
    fill = [F(1, 3)] * 3
    p_rows = [[F(1, 20), F(17, 20), F(1, 10)], [F(9, 10), F(1, 20), F(1, 20)], [F(0), F(0), F(1)],
              [F(1, 10), F(3, 10), F(3, 5)]] + [fill] * 9
    q_rows = [[F(1, 10), F(9, 10), F(0)], [F(1, 2), F(1, 2), F(0)], [F(1), F(0), F(0)],
              [F(9, 10), F(0), F(1, 10)]] + [fill] * 9
    model = rows_instance(p_rows, q_rows, 2).model(exact=True)
    value = exact_result(model, "bv_extended", paths=3).block_efficiency
    check("19.3", "on nodeopt's counterexample of 10.9 (K = 3): extended BV >= BV = 779/400",
          value >= F(779, 400), f"{value}")
    one = exact_result(model, "bv_extended", paths=1).block_efficiency
    check("19.3", "with K = 1 extended BV is BV", one == exact_result(model, "bv", 1).block_efficiency)
    # Proposition 19.3: BV against a mixture of path laws >= the mixture of the values
    concave, closed = True, True
    for seed in range(3):
        model = dirichlet_instance(3, 2, 0.5, seed=20 + seed).model(exact=True)
        draft_law = _leaf_law(model, model.draft)
        other = _leaf_law(model, get_verifier("nodeopt").selection_rows(model, 3))
        ends = [_bv_value(model, draft_law)[0], _bv_value(model, other)[0]]
        for weight in (F(1, 4), F(1, 2), F(3, 4)):
            mixed, formula = _bv_value(model, weight * draft_law + (1 - weight) * other)
            concave &= mixed >= weight * ends[0] + (1 - weight) * ends[1]
            closed &= mixed == formula
    check("19.5", "BV against a mixture of path laws >= the mixture of values (3 instances x 3 weights)",
          concave)
    check("19.5", "BE(BV_R) = 1 + sum_z min_j r(z_<=j) p(z_>j | z_<=j) (exact)", closed)
    extended_bv_ceiling()


def extended_bv_ceiling() -> None:
    """Lemma 19.4 (i) and Proposition 19.5."""
    from speclp.verifiers.bv_extended import extended_bv_structured, family_ceiling
    from speclp.verifiers.exact import block_efficiency_from_emit
    from speclp.verifiers.single_path import bv_path_law
    from speclp.verifiers.tree import all_paths, depth_offset

    # (i): wherever BV can end at v, its residual at its own drafted child is exactly 0
    zero_at_own, ends = True, 0
    models = [ties_instance(3, 2).model(exact=True), ties_instance(2, 3, seed=1).model(exact=True),
              dirichlet_instance(3, 3, 0.3, seed=40).model(exact=True)]
    for model in models:
        vocab, depth = model.vocab_size, model.depth
        paths = all_paths(vocab, depth)
        codes = [np.zeros(len(paths), dtype=np.int64)]
        for i in range(depth):
            codes.append(codes[-1] * vocab + paths[:, i])
        nodes = np.stack([depth_offset(vocab, i) + codes[i] for i in range(depth + 1)], -1)
        reach = np.ones(len(paths), dtype=bool)
        for i in range(depth):
            reach &= model.draft[nodes[:, i], paths[:, i]] != 0
        stop, rows = bv_path_law(paths[reach], model.target[nodes[reach]], model.draft[nodes[reach, :-1]])
        for i in range(depth):
            own = np.take_along_axis(rows[:, i], paths[reach][:, i : i + 1], -1)[:, 0]
            hit = stop[:, i] != 0
            ends += int(hit.sum())
            zero_at_own &= bool((own[hit] == 0).all())
    check("19.7", "Lemma 19.4 (i): where BV can end at v, res_v(own child) = 0 (3 instances, ties)",
          zero_at_own, f"{ends} (path, depth) pairs with P(tau = i) > 0")
    bounded = []
    for seed, (vocab, depth, paths) in enumerate([(2, 2, 3), (3, 2, 3), (2, 3, 2)]):
        model = dirichlet_instance(vocab, depth, 0.7, seed=50 + seed).model(exact=True)
        ceiling = family_ceiling(model, paths)
        for step in ("optimal", "specinfer"):
            bounded.append(ceiling >= block_efficiency_from_emit(
                model, extended_bv_structured(model, paths, step)))
    check("19.8", "Proposition 19.5: ceiling >= extended BV, 3 instances x 2 steps (exact)", all(bounded))
    model = dirichlet_instance(3, 1, 0.6, seed=53).model(exact=True)
    attained = family_ceiling(model, 3) == block_efficiency_from_emit(
        model, extended_bv_structured(model, 3, "optimal"))
    model = dirichlet_instance(2, 3, 0.6, seed=54).model(exact=True)
    at_one = family_ceiling(model, 1) == exact_result(model, "bv", 1).block_efficiency
    check("19.8", "Proposition 19.5: attained at L = 1 (optimal step), = BV at K = 1 (exact)",
          attained and at_one)


def without_replacement_survey() -> None:
    shapes = ((2, 3, 2), (3, 3, 2), (2, 2, 3), (3, 2, 3))
    for name in ("rrsw", "traversal", "naive_tree", "nss"):
        worst, count = 0.0, 0
        for k, vocab, depth in shapes:
            for ties in (False, True):
                for trial in range(20):
                    model = audit_instance(vocab, depth, trial, ties).model(exact=True)
                    try:
                        result = exact_result(model, name, paths=k,
                                              draft_sampling="without-replacement")
                    except ValueError:  # fewer than K paths with q > 0
                        continue
                    worst, count = max(worst, float(result.total_variation)), count + 1
        check("11", f"{name} without replacement: exact TV <= 1e-15 on {count} instances",
              worst <= 1e-15 and count == 154, f"max TV {worst:.2g}")
    lossy = (("specinfer", 2, 0.3), ("gbv", 2, 0.6), ("spectr", 2, 0.5), ("khisti", 2, 0.5),
             ("nodeopt", 1, 0.35))
    for name, depth, least in lossy:
        worst = 0.0
        for seed in range(6):
            inst = dirichlet_instance(3, depth, alpha=0.5, seed=seed, denominator=8)
            for k in (2, 3):
                try:
                    result = exact_result(inst.model(exact=True), name, paths=k,
                                          draft_sampling="without-replacement")
                except ValueError:  # fewer than K paths with q > 0
                    continue
                worst = max(worst, result.total_variation)
        check("11", f"{name} is lossy without replacement at L={depth} (max TV {worst:.2f})",
              worst > least)


def ragged_coarse_lp() -> None:
    """13.7: the ragged master's exact bound against the padded coarse optimum (certified)."""
    from speclp.lp.coarse_lp import ragged_upper_bound
    from speclp.lp.coarsen import coarsened_instance, mass_kept_edges

    for seed in range(2):
        inst = dirichlet_instance(4, 3, alpha=0.5, seed=60 + seed, denominator=32)
        te, de, _, width, _ = mass_kept_edges(inst, 2, 0.02, 2)
        for below in ("again", "terminal"):
            padded = optimum(coarsened_instance(te, de, width, 3, below_r=below), 2)
            bound, run = ragged_upper_bound(te, de, width, 3, 2, below)
            check("13.7", f"ragged coarse LP = padded optimum (exact bound within 1e-9, {below}, "
                          f"{run.size['leaves']} of {run.size['padded_paths']} paths)",
                  padded.certified and padded.exact_value <= bound < padded.exact_value + F(1, 10**9))


def ragged_laws() -> None:
    """13.7, Lemma 13.10: the verifiers' laws on the drafted nodes of a ragged kept tree give
    exactly the kept values of the padded coarse instance (exact rationals), and the bracket
    computed on the tree alone contains the certified fine optimum."""
    from speclp.experiments.realgap import bracket_bounds
    from speclp.lp.coarsen import (
        coarsened_instance,
        kept_lower_values,
        kept_tree_from_padded,
        mass_kept_edges,
        tree_lower_values,
    )
    from speclp.rationals import parse_fraction

    names = ["bv", "gbv", "nodeopt", "specinfer", "nss"]
    for seed in range(2):
        inst = dirichlet_instance(4, 3, alpha=0.5, seed=70 + seed, denominator=32)
        te, de, _, width, overlap = mass_kept_edges(inst, 2, 0.02, 2)
        tree = kept_tree_from_padded(te, de, width, 3, overlap)
        padded = kept_lower_values(coarsened_instance(te, de, width, 3), width, 2, names,
                                   overlap=overlap)["values"]
        ragged = tree_lower_values(tree, 2, names)["values"]
        check("13.7", f"Lemma 13.10: ragged laws = padded laws exactly ({', '.join(names)}, "
                      f"W = {width}, seed {seed})", ragged == padded)
        opt = optimum(inst, 2, method="colgen")
        found = bracket_bounds(None, None, width, 3, [2], names, tree=tree)
        low, up = (parse_fraction(found[side]["2"]["exact"]) for side in ("lower", "bounds"))
        check("13.7", f"ragged bracket [{float(low):.4f}, {float(up):.4f}] contains the certified "
                      f"optimum {float(opt.exact_value):.4f}",
              opt.certified and low <= opt.exact_value <= up)


CHECKS: list[Callable[[], None]] = [single_path, lp_equalities, node_form_example, antichain_form,
                                    dual_and_coarse,
                                    depth_one, gbv_law, counterexamples, extended_bv,
                                    ragged_coarse_lp, ragged_laws]


def main(argv: list[str]) -> int:
    for run in CHECKS + ([without_replacement_survey] if "--slow" in argv else []):
        run()
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
