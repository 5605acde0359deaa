"""Independent brute-force walks of the multi-path rules, enumerated exactly.

Each rule is a plain Python simulation of the published procedure (written from the
papers / released code, NOT from speclp's law functions): it draws the K paths and
every coin or token through a `Chooser`, and `enumerate_outcomes` runs it along every
branch of those random choices, multiplying exact probabilities. The result is the
exact law of the emitted block (accepted prefix + correction token) as
{block tuple: Fraction}, to be compared with the law functions' output.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from speclp.verifiers.tree import node_index, node_prefix


class _Branch(Exception):
    def __init__(self, count: int):
        self.count = count


class Chooser:
    """Replays a script of option indices; past its end it asks for a new branch."""

    def __init__(self, script: tuple[int, ...]):
        self.script = script
        self.position = 0
        self.probability = Fraction(1)

    def choice(self, options: list[tuple[object, Fraction]]):
        options = [(value, prob) for value, prob in options if prob > 0]
        if self.position == len(self.script):
            raise _Branch(len(options))
        value, prob = options[self.script[self.position]]
        self.position += 1
        self.probability *= prob
        return value

    def bernoulli(self, prob: Fraction) -> bool:
        prob = min(max(prob, Fraction(0)), Fraction(1))
        return self.choice([(True, prob), (False, 1 - prob)])

    def token(self, row: list[Fraction]) -> int:
        return self.choice(list(enumerate(row)))


def enumerate_outcomes(procedure: Callable[[Chooser], tuple]) -> dict[tuple, Fraction]:
    """Exact law of procedure's result over all branches of its random choices."""
    law: dict[tuple, Fraction] = defaultdict(Fraction)
    stack: list[tuple[int, ...]] = [()]
    while stack:
        script = stack.pop()
        chooser = Chooser(script)
        try:
            result = procedure(chooser)
        except _Branch as branch:
            stack.extend(script + (i,) for i in range(branch.count))
            continue
        law[result] += chooser.probability
    return dict(law)


class Rows:
    """Exact target/draft rows of an instance by prefix tuple."""

    def __init__(self, instance):
        model = instance.model(exact=True)
        self.vocab, self.depth = model.vocab_size, model.depth
        self._p, self._q = model.target, model.draft

    def p(self, prefix: tuple) -> list[Fraction]:
        return [Fraction(x) for x in self._p[node_index(prefix, self.vocab)]]

    def q(self, prefix: tuple) -> list[Fraction]:
        return [Fraction(x) for x in self._q[node_index(prefix, self.vocab)]]

    def draw_paths(self, chooser: Chooser, paths: int) -> list[tuple]:
        out = []
        for _ in range(paths):
            path: tuple = ()
            for _ in range(self.depth):
                path = path + (chooser.token(self.q(path)),)
            out.append(path)
        return out

    def path_p(self, path: tuple) -> Fraction:
        out = Fraction(1)
        for i, t in enumerate(path):
            out *= self.p(path[:i])[t]
        return out

    def path_q(self, path: tuple) -> Fraction:
        out = Fraction(1)
        for i, t in enumerate(path):
            out *= self.q(path[:i])[t]
        return out


def _normalised(row: list[Fraction]) -> list[Fraction]:
    total = sum(row)
    return [x / total for x in row] if total else [Fraction(0)] * len(row)


def _residual(p: list[Fraction], q: list[Fraction]) -> list[Fraction]:
    return _normalised([max(a - b, Fraction(0)) for a, b in zip(p, q, strict=True)])


def _children(paths: list[tuple], node: tuple) -> list[int]:
    """Distinct children of node in order of first appearance."""
    out: list[int] = []
    for path in paths:
        if path[: len(node)] == node and path[len(node)] not in out:
            out.append(path[len(node)])
    return out


# --- the rules -----------------------------------------------------------------

def _tree_walk(rows: Rows, paths: int, step) -> Callable[[Chooser], tuple]:
    """The walk down the drafted tree that NSS, NaiveTree, RRSw and Khisti share: draw the
    K paths, then at each node above depth L let the rule's step(ch, p, q, drafts, node)
    give (token, descend): descend moves to that child, otherwise the block ends with that
    token as the correction. At depth L the bonus token is drawn from the target row."""
    def run(ch: Chooser) -> tuple:
        drafts = rows.draw_paths(ch, paths)
        node: tuple = ()
        while len(node) < rows.depth:
            token, descend = step(ch, rows.p(node), rows.q(node), drafts, node)
            if not descend:
                return node + (token,)
            node = node + (token,)
        return node + (ch.token(rows.p(node)),)
    return run


def nss_walk(rows: Rows, paths: int) -> Callable[[Chooser], tuple]:
    def step(ch, p, q, drafts, node):
        y = ch.token(p)
        return y, y in _children(drafts, node)
    return _tree_walk(rows, paths, step)


def naive_tree_walk(rows: Rows, paths: int) -> Callable[[Chooser], tuple]:
    def step(ch, p, q, drafts, node):
        children = _children(drafts, node)
        first = children[0]
        if ch.bernoulli(min(Fraction(1), p[first] / q[first])):
            return first, True
        y = ch.token(_residual(p, q))
        return y, y in children
    return _tree_walk(rows, paths, step)


def rrsw_walk(rows: Rows, paths: int) -> Callable[[Chooser], tuple]:
    def step(ch, p, q, drafts, node):
        for c in _children(drafts, node):
            if ch.bernoulli(min(Fraction(1), p[c] / q[c]) if q[c] else Fraction(0)):
                return c, True
            p = _residual(p, q)
            q = _normalised([Fraction(0) if t == c else x for t, x in enumerate(q)])
        return ch.token(p), False
    return _tree_walk(rows, paths, step)


def importance_selection_law(p: list[Fraction], q: list[Fraction], n: int) -> list[Fraction]:
    """Law of the token picked w.p. proportional to p/q among n i.i.d. q-draws
    (uniformly when every weight is 0), by enumerating all n-tuples."""
    vocab = len(p)
    weight = [p[t] / q[t] if q[t] else Fraction(0) for t in range(vocab)]
    law = [Fraction(0)] * vocab
    for draws in itertools.product(range(vocab), repeat=n):
        prob = Fraction(1)
        for t in draws:
            prob *= q[t]
        if prob == 0:
            continue
        total = sum(weight[t] for t in draws)
        for t in draws:
            law[t] += prob * (weight[t] / total if total else Fraction(1, n))
    return law


def khisti_walk(rows: Rows, paths: int) -> Callable[[Chooser], tuple]:
    def step(ch, p, q, drafts, node):
        through = [path for path in drafts if path[: len(node)] == node]
        kids = [path[len(node)] for path in through]
        weight = [p[c] / q[c] for c in kids]
        total = sum(weight)
        options = [(c, w / total if total else Fraction(1, len(kids)))
                   for c, w in zip(kids, weight, strict=True)]
        c = ch.choice(options)
        r = importance_selection_law(p, q, len(kids))
        if ch.bernoulli(min(Fraction(1), p[c] / r[c])):
            return c, True
        return ch.token(_residual(p, r)), False
    return _tree_walk(rows, paths, step)


def spectr_gbv_walk(rows: Rows, paths: int) -> Callable[[Chooser], tuple]:
    """A transcription of the released SpecTr-GBV loop (junemily/SpecTr-GBV src/engine.py),
    in exact arithmetic: m_s/m_b = draft/target path probability of the candidate's prefix."""
    depth, big_k = rows.depth, paths

    def exp_term(x: Fraction) -> Fraction:  # (1 - x)^K
        return (1 - x) ** big_k

    def capped(small: Fraction, big: Fraction) -> Fraction:  # min(q/(p + eps), 1), eps -> 0
        if big == 0:
            return Fraction(1) if small > 0 else Fraction(0)
        return min(small / big, Fraction(1))

    def run(ch: Chooser) -> tuple:
        x = rows.draw_paths(ch, paths)
        accepted: tuple = ()
        selected = 0
        seen: set[tuple] = set()
        done = False
        for j in range(big_k):
            start = len(accepted)
            for i in range(start, depth - 1):
                prefix = x[j][: i + 1]
                m_s, m_b = rows.path_q(prefix), rows.path_p(prefix)
                next_b, next_s = rows.p(prefix), rows.q(prefix)
                numerator = (sum(m_b * next_b[t] * exp_term(capped(m_s * next_s[t], m_b * next_b[t]))
                                 for t in range(rows.vocab))
                             - m_b * exp_term(capped(m_s, m_b)))
                denominator = (1 - exp_term(m_s)
                               - sum(m_b * next_b[t] * (1 - exp_term(capped(m_s * next_s[t],
                                                                            m_b * next_b[t])))
                                     for t in range(rows.vocab)))
                if denominator > 0:
                    h = numerator / denominator
                else:
                    h = Fraction(1) if numerator > 0 else Fraction(0)
                if prefix in seen:
                    continue
                if ch.bernoulli(h):
                    accepted, selected = prefix, j
                else:
                    seen.add(prefix)
            m_s, m_b = rows.path_q(x[j]), rows.path_p(x[j])
            h_full = m_b * (1 - exp_term(capped(m_s, m_b))) / (1 - exp_term(m_s))
            if ch.bernoulli(h_full):
                accepted, selected, done = x[j], j, True
                break
        if done:
            return accepted + (ch.token(rows.p(accepted)),)
        m_s, m_b = rows.path_q(accepted), rows.path_p(accepted)
        p, q = rows.p(accepted), rows.q(accepted)
        residual = [m_b * p[t] * (1 - capped(m_s * q[t], m_b * p[t]) ** big_k) for t in range(rows.vocab)]
        del selected
        return accepted + (ch.token(_normalised(residual)),)
    return run


WALKS = {"nss": nss_walk, "naive_tree": naive_tree_walk, "rrsw": rrsw_walk,
         "khisti": khisti_walk, "spectr_gbv": spectr_gbv_walk}


def walk_law(name: str, instance, paths: int) -> dict[tuple, Fraction]:
    return enumerate_outcomes(WALKS[name](Rows(instance), paths))


def law_blocks(emit: np.ndarray, vocab: int) -> dict[tuple, Fraction]:
    """{block: probability} from an exact emit table [N, V] (verifiers.exact)."""
    out = {}
    for node in range(emit.shape[0]):
        for token in range(vocab):
            if emit[node, token] != 0:
                out[node_prefix(node, vocab) + (token,)] = Fraction(emit[node, token])
    return out
