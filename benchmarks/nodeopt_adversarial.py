"""Adversarial search for instances where nodeopt is below BV (issue 20, part 0).

Instances: V in 2..4, L in 1..3, K in 2..4, every row = small integer weights (0..W, zeros
frequent) over their sum, so every instance is exactly rational. Values: the block efficiency
of a select-then-BV verifier is 1 + sum_z beta(z), beta(ux) = min(R(ux), p(x|u) beta(u)),
R the path law of the selected path (docs/theory.md, Theorems 3.3 and Lemma 5.1); nodeopt's
path law r(.|u) at every node of the complete tree is read off nodeopt_selection itself on
the trees whose K paths all equal one path y (its skewed rows depend only on the prefix; the
trick of verifiers.structure.path_selection_rows), BV's is q. Float64, batched over
instances; every instance with nodeopt < BV - 1e-12 is re-evaluated in exact rationals by
enumeration (verifiers.exact.exact_result, an independent method) before it is counted.

Search: random instances, then a local search (mutate one or two integer weights of one row,
keep the instances of smallest margin) from the instances of smallest margin, one population
per node rule. Two node rules are evaluated on every instance: "nested" (the registered
nodeopt) and "closer" (the closer-to-the-draft rule of verifiers.single_step, studied in
issue 20). No rule that attains the single-step optimum at every node is always >= BV
(docs/theory.md, Proposition 10.3), so the search measures how often and by how much, not
whether.

    nice -n 15 python benchmarks/nodeopt_adversarial.py --instances 100000 \\
        --out benchmarks/results/beyond/adversarial

--against bv_extended (issue 31, part 4): the same search with extended BV (verifiers/
bv_extended.py, the registered single-step-optimal step) in place of nodeopt's rules: its exact
value by the fresh-start recursion (extended_bv_structured, float64, one instance at a time)
against BV's; float hits re-evaluated in exact rationals by the same recursion. Theorem 19.2 of
docs/theory.md says it finds none.

    nice -n 15 python benchmarks/nodeopt_adversarial.py --against bv_extended --instances 2700 \\
        --out benchmarks/results/beyond/adversarial_bv_extended

Writes OUT/summary.json (updated after every shape: an interrupted run keeps its counts;
--resume continues with the shapes not in it) and OUT/hits.jsonl (the rational rows of every
confirmed instance below BV). Confirmation in rationals: by enumeration up to ENUMERATED
ordered draft tuples, else by the same construction in exact arithmetic (exact_values).
"""

from __future__ import annotations

import argparse
import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
from speclp.lp.instance import from_rows
from speclp.verifiers.exact import exact_result
from speclp.verifiers.law import DraftTree
from speclp.verifiers.nodeopt import nodeopt_law, nodeopt_selection
from speclp.verifiers.tree import all_paths, depth_offset, num_nodes, prefix_node_indices

BELOW = 1e-12  # float64 values on these sizes are accurate to ~1e-14


def path_rows(target: torch.Tensor, draft: torch.Tensor, depth: int, paths: int,
              rule: str) -> torch.Tensor:
    """[I, N, V] nodeopt's r(.|u) at every node (depth-L rows zero) of I instances."""
    count, nodes, vocab = target.shape
    tokens = torch.as_tensor(all_paths(vocab, depth))  # [P, L]
    index = torch.as_tensor(prefix_node_indices(tokens.numpy(), vocab))  # [P, L+1]
    size = tokens.shape[0]
    tree_target = target[:, index][:, :, None].expand(count, size, paths, depth + 1, vocab)
    tree_draft = draft[:, index[:, :-1]][:, :, None].expand(count, size, paths, depth, vocab)
    drafted = tokens[None, :, None, :].expand(count, size, paths, depth)
    tree = DraftTree(drafted.reshape(-1, paths, depth),
                     tree_target.reshape(-1, paths, depth + 1, vocab),
                     tree_draft.reshape(-1, paths, depth, vocab))
    skewed = nodeopt_selection(tree, support=None, rule=rule)[1][:, 0]
    skewed = skewed.reshape(count, size, depth, vocab)
    out = torch.zeros(count, nodes, vocab, dtype=target.dtype)
    for i in range(depth):
        out[:, index[:, i]] = skewed[:, :, i]
    return out


def class_values(target: torch.Tensor, rows: torch.Tensor, depth: int) -> torch.Tensor:
    """[I] 1 + sum_z beta(z) for path-law rows r [I, N, V] (docstring)."""
    count, _, vocab = target.shape
    reach = torch.ones(count, 1, dtype=target.dtype)
    beta = torch.ones(count, 1, dtype=target.dtype)
    total = torch.ones(count, dtype=target.dtype)
    for d in range(depth):
        start, width = depth_offset(vocab, d), vocab ** d
        r = rows[:, start:start + width]  # [I, V^d, V]
        p = target[:, start:start + width]
        reach = (reach[:, :, None] * r).reshape(count, -1)
        beta = torch.minimum(reach, (p * beta[:, :, None]).reshape(count, -1))
        total = total + beta.sum(-1)
    return total


def margins(weights_t: np.ndarray, weights_q: np.ndarray, depth: int, paths: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """(nodeopt - BV with the rule "nested", with "closer") [I] from integer weights."""
    target = torch.as_tensor(weights_t / weights_t.sum(-1, keepdims=True), dtype=torch.float64)
    draft = torch.as_tensor(weights_q / weights_q.sum(-1, keepdims=True), dtype=torch.float64)
    bv = class_values(target, draft, depth)
    nested = class_values(target, path_rows(target, draft, depth, paths, "nested"), depth) - bv
    closer = class_values(target, path_rows(target, draft, depth, paths, "closer"), depth) - bv
    return nested.numpy(), closer.numpy()


def random_weights(rng: np.random.Generator, count: int, nodes: int, vocab: int, top: int
                   ) -> np.ndarray:
    """[I, N, V] integer weights 0..top with zeros frequent; no all-zero row."""
    weights = rng.integers(0, top + 1, size=(count, nodes, vocab))
    weights = weights * (rng.random((count, nodes, vocab)) > rng.random((count, 1, 1)) * 0.6)
    empty = weights.sum(-1) == 0
    pick = rng.integers(0, vocab, size=empty.shape)
    weights[empty, pick[empty]] = 1
    return weights


ENUMERATED = 20_000  # above this many ordered draft tuples a hit is confirmed by exact_values


def exact_values(target: np.ndarray, draft: np.ndarray, depth: int, paths: int, rule: str
                 ) -> Fraction:
    """nodeopt - BV in exact rationals by the same construction as margins (path_rows,
    class_values) on numpy object rows: rules out float rounding as the cause of a hit."""
    vocab = target.shape[-1]
    tokens = all_paths(vocab, depth)
    index = prefix_node_indices(tokens, vocab)
    drafted = np.repeat(tokens[:, None, :], paths, axis=1)
    tree = DraftTree(drafted, np.repeat(target[index][:, None], paths, axis=1),
                     np.repeat(draft[index[:, :-1]][:, None], paths, axis=1))
    skewed = nodeopt_selection(tree, support=None, rule=rule)[1][:, 0]
    rows = np.empty_like(target)
    rows[...] = Fraction(0)
    for i in range(depth):
        rows[index[:, i]] = skewed[:, i]

    def value(r: np.ndarray) -> Fraction:
        reach, beta, total = np.array([Fraction(1)], dtype=object), None, Fraction(1)
        beta = reach.copy()
        for d in range(depth):
            start, width = depth_offset(vocab, d), vocab ** d
            reach = (reach[:, None] * r[start:start + width]).reshape(-1)
            step = (beta[:, None] * target[start:start + width]).reshape(-1)
            beta = np.array([min(x, y) for x, y in zip(reach, step, strict=True)], dtype=object)
            total += sum(beta)
        return total

    return value(rows) - value(draft)


def extended_margins(weights_t: np.ndarray, weights_q: np.ndarray, depth: int, paths: int
                     ) -> tuple[np.ndarray]:
    """(extended BV - BV) [I] in float64, one instance at a time (the fresh-start recursion)."""
    from speclp.verifiers.bv_extended import extended_bv_structured
    from speclp.verifiers.exact import block_efficiency_from_emit

    out = np.empty(weights_t.shape[0])
    for i in range(weights_t.shape[0]):
        target = weights_t[i] / weights_t[i].sum(-1, keepdims=True)
        draft = weights_q[i] / weights_q[i].sum(-1, keepdims=True)
        model = from_rows(target, draft, depth).model()
        out[i] = (block_efficiency_from_emit(model, extended_bv_structured(model, paths))
                  - exact_result(model, "bv", paths=paths).block_efficiency)
    return (out,)


def confirm(weights_t: np.ndarray, weights_q: np.ndarray, depth: int, paths: int,
            rule: str) -> Fraction:
    """nodeopt - BV in exact rationals: by enumeration (exact_result, an independent method)
    up to ENUMERATED ordered draft tuples, else by exact_values. rule "bv_extended": extended
    BV - BV in exact rationals (the fresh-start recursion)."""
    rows = [np.array([[Fraction(int(w), int(row.sum())) for w in row] for row in weights],
                     dtype=object) for weights in (weights_t, weights_q)]
    if rule == "bv_extended":
        from speclp.verifiers.bv_extended import extended_bv_structured
        from speclp.verifiers.exact import block_efficiency_from_emit

        model = from_rows(rows[0], rows[1], depth).model(exact=True)
        value = block_efficiency_from_emit(model, extended_bv_structured(model, paths))
        return value - exact_result(model, "bv", paths=paths).block_efficiency
    if (weights_t.shape[-1] ** depth) ** paths > ENUMERATED:
        return exact_values(rows[0], rows[1], depth, paths, rule)
    model = from_rows(rows[0], rows[1], depth).model(exact=True)

    def law(tree: DraftTree):
        return nodeopt_law(tree, support=None, rule=rule)

    value = exact_result(model, law, paths=paths).block_efficiency
    return value - exact_result(model, "bv", paths=paths).block_efficiency


def mutate(rng: np.random.Generator, weights: np.ndarray, top: int) -> np.ndarray:
    out = weights.copy()
    count, nodes, vocab = out.shape
    rows, node, token = np.arange(count), rng.integers(0, nodes, count), rng.integers(0, vocab, count)
    out[rows, node, token] = rng.integers(0, top + 1, count)
    empty = out.sum(-1) == 0
    out[empty] = 1
    return out


SHAPES = [(v, d, k) for v in (2, 3, 4) for d in (1, 2, 3) for k in (2, 3, 4)]


def search_shape(rng: np.random.Generator, shape: tuple[int, int, int], budget: int, block: int,
                 top: int, record: dict, sink, rules: tuple[str, ...] = ("nested", "closer"),
                 evaluate=margins) -> None:
    """A quarter of `budget` fresh random instances, then mutations (one or two integer
    weights) of the instances of smallest margin so far, one population per rule (the
    previous rule's population shows the search finds its known failures)."""
    vocab, depth, paths = shape
    nodes = num_nodes(vocab, depth)
    done = 0
    pools: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    keep = max(16, block // 8)
    while done < budget:
        size = min(block, budget - done)
        if done < budget // 4 or not pools:
            wt = random_weights(rng, size, nodes, vocab, top)
            wq = random_weights(rng, size, nodes, vocab, top)
        else:
            parts_t, parts_q = [], []
            for pt, pq, _ in pools.values():
                pick = rng.integers(0, pt.shape[0], size // len(pools) + 1)
                mt, mq = mutate(rng, pt[pick], top), mutate(rng, pq[pick], top)
                twice = rng.random(len(pick)) < 0.5
                mt = np.where(twice[:, None, None], mutate(rng, mt, top), mt)
                side = rng.random(len(pick)) < 0.5
                parts_t.append(np.where(side[:, None, None], mt, pt[pick]))
                parts_q.append(np.where(side[:, None, None], pq[pick], mq))
            wt, wq = np.concatenate(parts_t)[:size], np.concatenate(parts_q)[:size]
        values_all = evaluate(wt, wq, depth, paths)
        done += size
        record["instances"] += size
        for name, values in zip(rules, values_all, strict=True):
            tally(record[name], name, values, wt, wq, shape, sink)
            if name in pools:
                pt, pq, pm = pools[name]
                wt_all, wq_all = np.concatenate([pt, wt]), np.concatenate([pq, wq])
                m_all = np.concatenate([pm, values])
            else:
                wt_all, wq_all, m_all = wt, wq, values
            # rank by margin; exact ties (|margin| ~ 0: p = q below, deterministic rows) are a
            # plateau the search must leave, so they rank last
            rank = np.where(np.abs(m_all) < 1e-13, np.inf, m_all)
            best = np.argsort(rank, kind="stable")[:keep]
            pools[name] = (wt_all[best], wq_all[best], m_all[best])
    for name in pools:
        record[name]["smallest_margin"][f"V{vocab}_L{depth}_K{paths}"] = float(pools[name][2].min())


def tally(part: dict, name: str, values: np.ndarray, wt: np.ndarray, wq: np.ndarray,
          shape: tuple[int, int, int], sink) -> None:
    """Count float hits; confirm up to 3 per block in exact rationals and record them."""
    vocab, depth, paths = shape
    part["float_below"] += int((values < -BELOW).sum())
    part["worst_float"] = min(part["worst_float"], float(values.min()))
    for i in np.nonzero(values < -BELOW)[0][:3]:
        gap = confirm(wt[i], wq[i], depth, paths, name)
        if gap >= 0:
            continue
        part["confirmed"] += 1
        part["worst_exact"] = str(min(Fraction(part["worst_exact"]), gap))
        sink.write(json.dumps({"rule": name, "vocab": vocab, "depth": depth, "paths": paths,
                               "margin": str(gap), "target_weights": wt[i].tolist(),
                               "draft_weights": wq[i].tolist()}) + "\n")
        sink.flush()


def random_counts(rng: np.random.Generator, per_shape: int, block: int, top: int) -> dict:
    """Fresh random instances only (no search): per shape, how many are below BV (float64,
    margin < -1e-12) for each rule, and the smallest margin."""
    out = {}
    for vocab, depth, paths in SHAPES:
        nodes, counts, worst, done = num_nodes(vocab, depth), [0, 0], [0.0, 0.0], 0
        while done < per_shape:
            size = min(block, per_shape - done)
            wt = random_weights(rng, size, nodes, vocab, top)
            wq = random_weights(rng, size, nodes, vocab, top)
            for j, values in enumerate(margins(wt, wq, depth, paths)):
                counts[j] += int((values < -BELOW).sum())
                worst[j] = min(worst[j], float(values.min()))
            done += size
        out[f"V{vocab}_L{depth}_K{paths}"] = {"instances": per_shape, "nested_below": counts[0],
                                              "closer_below": counts[1],
                                              "nested_worst": worst[0], "closer_worst": worst[1]}
        print(vocab, depth, paths, out[f"V{vocab}_L{depth}_K{paths}"], flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100_000, help="total, over all shapes")
    parser.add_argument("--block", type=int, default=400)
    parser.add_argument("--top", type=int, default=6, help="integer weights 0..top")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="speclp-results/nodeopt_adversarial")
    parser.add_argument("--resume", action="store_true", help="skip the shapes in OUT's summary")
    parser.add_argument("--against", choices=("nodeopt", "bv_extended"), default="nodeopt",
                        help="the verifier searched against BV (module docstring)")
    parser.add_argument("--random-only", type=int, default=None, metavar="N",
                        help="no search: N fresh random instances per shape, counts to "
                             "OUT/random.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    if args.random_only:
        counts = random_counts(rng, args.random_only, args.block, args.top)
        record = {"benchmark": "fresh random instances (no search): nodeopt - BV",
                  "weights": f"integers 0..{args.top}", "seed": args.seed,
                  "total": sum(v["instances"] for v in counts.values()),
                  "nested_below": sum(v["nested_below"] for v in counts.values()),
                  "closer_below": sum(v["closer_below"] for v in counts.values()),
                  "per_shape": counts}
        (out / "random.json").write_text(json.dumps(record, indent=1) + "\n")
        return record
    record = {"benchmark": "adversarial search: nodeopt - BV (issue 20, part 0)",
              "shapes": "V in 2..4, L in 1..3, K in 2..4", "weights": f"integers 0..{args.top}",
              "instances": 0, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "confirmation": "at most 3 float hits per block and rule re-evaluated in exact "
                              "rationals by enumeration; 'confirmed' counts those"}
    rules, evaluate = ("nested", "closer"), margins
    if args.against == "bv_extended":
        rules, evaluate = ("bv_extended",), extended_margins
        record["benchmark"] = "adversarial search: extended BV - BV (issue 31, part 4)"
    for name in rules:
        record[name] = {"float_below": 0, "confirmed": 0, "worst_float": 0.0, "worst_exact": "0",
                        "smallest_margin": {}}
    if args.against == "nodeopt":
        record["nested"]["rule"] = "nested partitions (the registered nodeopt)"
        record["closer"]["rule"] = "closer to the draft (verifiers.single_step.closer_to_draft)"
    else:
        record["bv_extended"]["rule"] = "extended BV, single-step-optimal step (registered)"
    per_shape = -(-args.instances // len(SHAPES))
    start = time.perf_counter()
    done: set[str] = set()
    if args.resume and (out / "summary.json").exists():  # keep the shapes already searched
        record = json.loads((out / "summary.json").read_text())
        done = set(record[rules[0]]["smallest_margin"])
        start -= record.get("seconds", 0)
    with (out / "hits.jsonl").open("a" if args.resume else "w") as sink:
        for shape in SHAPES:
            if f"V{shape[0]}_L{shape[1]}_K{shape[2]}" in done:
                continue
            search_shape(rng, shape, per_shape, args.block, args.top, record, sink, rules, evaluate)
            record["seconds"] = round(time.perf_counter() - start, 1)
            (out / "summary.json").write_text(json.dumps(record, indent=1) + "\n")
            print(shape, record["instances"], {k: record[k]["float_below"] for k in rules},
                  flush=True)
    return record


if __name__ == "__main__":
    main()
