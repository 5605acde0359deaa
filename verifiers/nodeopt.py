"""Node-optimal selection, then block verification ("nodeopt"), law first.

A member of the "select one path, then BV" class (docs/theory.md sections 5.1, 10.9) whose
selection uses, at every node of the drafted tree, the single-step-optimal rule of
verifiers.single_step.

Selection (lexicographic). From the root, at the current node u with n drafted paths
through it, run the nested-partition rule for n i.i.d. draws with target a = p(.|u) and draft
q(.|u) on the n child tokens of those paths; move to the returned child; repeat down to a
leaf y* = y*_1..y*_L. For i.i.d. drafting the n children at u are i.i.d. q(.|u), so the rule
returns child x with the law r_n(x|u) of the rule. At L = 1 this is the single-step optimum:
its acceptance is alpha* = min_H [p(H) + 1 - q(H)^K] (single_step.single_step_optimum).

Skewed rows. BV needs r(x|u) = P(y*_{i+1} = x | y*_1..i = u), the law of the selected path;
the rule used at u depends on the number N_u of paths through u, which is random given
that u was selected. Its law pi_u(n) = P(N_u = n | u selected) is tracked along the path
(docs/theory.md Lemma 10.2):
    pi_root = [N = K],   r(.|u) = sum_n pi_u(n) r_n(.|u),
    pi_{u x}(m) = sum_n pi_u(n) rho_n[m, x|u] / r(x|u),
with rho_n[m, x|u] = P(the rule on n draws returns x and m of them equal x)
(NestedPartitions.count_law). Then BV runs on y* with r in place of q
(single_path.bv_path_law): lossless by Lemma 5.1.

Not always at least BV, and no rule of this kind can be (docs/theory.md Proposition 10.3):
on V = 2, L = 3, K = 2 (root p = (1/3, 2/3), q = (0, 1); node (1): p = (1/4, 3/4),
q = (1/2, 1/2); node (1, 0): p = (0, 1), q = (2/3, 1/3)) BV = 3 is the certified optimum and
EVERY selection rule that attains the single-step optimum at every node it visits, whatever
its choices among optimal rules and its count law, gives at most 3 - 1/36 (tests/test_nodeopt
.py). The issue-20 instance (V = 3, L = 2, K = 3; nodeopt 1051/88000 below BV) is fixed by the
"closer" node rule (single_step.closer_to_draft), but on the recorded sweep both "closer" and
"merged" raise the mean gap to the optimum (benchmarks/results/beyond/rules_sweep.json) and an
adversarial search still finds instances below BV for them (benchmarks/nodeopt_adversarial.py):
the registered rule stays "nested"; the others are options (rule=...) for study.

Law. Path k of the tree is selected with probability prod_i P(the rule at path k's depth-i
node returns path k's child | the children drafted there) divided by the number of paths
equal to path k; its output mass is P(select k) times BV's law on path k, put on path k.

Options: support (verifiers.single_step): vocabularies larger than support pool the tail
tokens of each node into ratio cells (still lossless; exactly the single-step optimum when
V <= support); rule: "nested" (registered), "merged", "closer" (node_rules). Lossless for
i.i.d. drafting only (the rule's law assumes i.i.d. children).

Cost per step: the pooled cells of the K L node rows (a top-k and a few in-place elementwise
passes and two scatter sums per row), the node rules for n = 1..K on the cells in one batched
build, a selection loop on [B K, C]-sized arrays, the skewed rows in one pass, and BV on each
distinct path (the selected path is random, so the law covers all K); no host synchronisation
on torch (no bool() of a tensor; no torch.unique off the CPU).

Every (K', L') cell of a tree at once (verifiers.grid.nodeopt_grid, for decode.scoring): the
rules are built once on the whole tree's node rows (node_rule_tables) and the selection on the
first K' paths (selection_pass) reads depths <= i at depth i, so one pass per K' serves every L'.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from typing import Any

from . import ops
from .law import BlockLaw, DraftTree, register
from .single_path import bv_path_law
from .single_step import Cells, closer_to_draft, nested_partitions_for, ratio_cells

Array = Any

DEFAULT_SUPPORT = 64


def _needed(mask: Array) -> bool:
    """True when any entry of a bool array is set; always True on torch (asking would be a
    host synchronisation; the work it could skip is small)."""
    return True if ops.is_torch(mask) else bool(mask.any())


MIN_DEDUPLICATED = 16  # below this many rows every row is kept (comparing costs more)
MAX_DEDUPLICATED_VOCAB = 4096  # wider node rows are not compared (as costly as the rules)


def _distinct(*parts: Array) -> tuple[Array, Array]:
    """(distinct rows, inverse) of the rows concat(parts, -1), as ops.distinct_rows; with
    fewer than MIN_DEDUPLICATED rows every row is kept (inverse = identity)."""
    count = parts[0].shape[0]
    if count < MIN_DEDUPLICATED or (ops.is_torch(parts[0]) and parts[0].device.type != "cpu"):
        # few rows, or an accelerator (torch.unique there waits for the device): keep all
        rows = parts[0] if len(parts) == 1 else ops.concat(list(parts), -1)
        return rows, ops.arange(count, parts[0])
    return ops.distinct_rows(ops.concat(list(parts), -1) if len(parts) > 1 else parts[0])


RULES = ("nested", "merged", "closer")  # the node rule: registered "nested"; the others for study


def node_rules(target: Array, draft: Array, paths: int, cells: Cells, rule: str = "nested"
               ) -> list[Any]:
    """The node rule for n = 1..paths draws on node rows [R, V] (one batched build per n):
    "nested" the nested partitions (registered), "merged" nested partitions with the merged
    low-ratio tail, "closer" closer_to_draft (module docstring, "Other node rules")."""
    if rule == "closer":
        return [closer_to_draft(target, draft, n, cells=cells) for n in range(1, paths + 1)]
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    return nested_partitions_for(target, draft, list(range(1, paths + 1)), cells=cells,
                                 merge_tail=rule == "merged")


def nodeopt_selection(tree: DraftTree, support: int | None = DEFAULT_SUPPORT,
                      rule: str = "nested") -> tuple[Array, Array]:
    """(P(select path k) [B, K], skewed rows r [B, K, L, V] along every path).

    Path k's rows are the law of the selected path given that its prefix is path k's
    prefix; identical paths share the selection probability equally. The rules are built
    once per distinct node row of the whole tree and per n (one batched call each);
    count laws and selections once per distinct query."""
    tables = node_rule_tables(tree, support, rule)
    pass_ = selection_pass(tree, tables, tree.paths)
    return pass_.chosen(tree.depth), pass_.skewed


class NodeRuleTables:
    """The node rows of a tree, deduplicated, with their ratio cells and the node rules for
    n = 1..K (nodeopt_selection's first half; shared by the selection passes of every first-K'
    subtree of the tree, whose node rows are among these)."""

    def __init__(self, node_draft: Array, inverse: Array, identity: bool, cells: Cells,
                 rules: list[Any]):
        self.node_draft = node_draft  # [B K L, V] draft row of node (b, k, i)
        self.inverse = inverse  # [B, K, L] rule row of path k's depth-i node
        self.identity = identity  # rule rows are the node rows themselves (not deduplicated)
        self.cells = cells
        self.rules = rules  # rules[n - 1]: the rule for n draws


def node_rule_tables(tree: DraftTree, support: int | None = DEFAULT_SUPPORT,
                     rule: str = "nested") -> NodeRuleTables:
    """NodeRuleTables of the whole tree: every node row (row (b, k, i) = path k's depth-i
    node), deduplicated unless wide or few, its ratio cells, and the rules for n = 1..K."""
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)  # [B, K, L]
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    rows = batch * paths
    node_target = target[:, :, :depth].reshape(rows * depth, vocab)
    node_draft = draft.reshape(rows * depth, vocab)
    identity = rows * depth < MIN_DEDUPLICATED or vocab > MAX_DEDUPLICATED_VOCAB
    if ops.is_torch(tokens) and tokens.device.type != "cpu":
        identity = True  # no torch.unique (a host synchronisation) on an accelerator
    if identity:
        a_distinct, q_distinct, inverse = node_target, node_draft, ops.arange(rows * depth, tokens)
    else:
        distinct, inverse = _distinct(node_target, node_draft)
        a_distinct, q_distinct = distinct[:, :vocab], distinct[:, vocab:]
    cells = ratio_cells(a_distinct, q_distinct, support)
    return NodeRuleTables(node_draft, inverse.reshape(batch, paths, depth), identity, cells,
                          node_rules(a_distinct, q_distinct, paths, cells, rule))


class SelectionPass:
    """The selection of nodeopt on the first K' paths of a tree, every depth at once: the
    selection at depth i reads the tokens and rows up to depth i only, so the first L' depths
    of this pass are the pass on the tree cut to depth L' (decode.scoring's (K', L') cells)."""

    def __init__(self, selected: list[Array], multiplicity: list[Array], skewed: Array):
        self.selected = selected  # selected[l] [B, K']: prod over depths < l of P(choose)
        self.multiplicity = multiplicity  # [l] [B, K']: paths equal to path k on l tokens
        self.skewed = skewed  # [B, K', L, V]

    def chosen(self, length: int) -> Array:
        """P(select path k) [B, K'] on the tree cut to depth `length`."""
        selected = self.selected[length]
        return ops.safe_div(selected, self.multiplicity[length] * (selected[:, :1] * 0 + 1))


def selection_pass(tree: DraftTree, tables: NodeRuleTables, paths: int) -> SelectionPass:
    """nodeopt's selection on the first `paths` paths of `tree` (tables: node_rule_tables of
    the whole tree), every depth; count laws and selections once per distinct query."""
    tokens = ops.index_like(tree.target_rows, tree.tokens)[:, :paths]  # [B, K', L]
    batch, depth, vocab = tree.batch, tree.depth, tree.vocab_size
    full = tree.paths
    rows = batch * paths
    cells, rules = tables.cells, tables.rules[:paths]
    inverse = tables.inverse[:, :paths]  # [B, K', L]
    node_draft = tables.node_draft.reshape(batch, full, depth, vocab)[:, :paths]
    same = tokens[:, :, None, :] == tokens[:, None, :, :]  # [B, K, K, L]
    through = same[..., 0] | True  # [B, K, K]: path j passes through path k's depth-i node
    count_shape = (batch, paths, paths + 1)
    counts = ops.zeros(count_shape, like=tree.target_rows)  # law of N at path k's node
    counts[:, :, paths] = 1
    selected = ops.ones((batch, paths), like=tree.target_rows)
    selections = [selected]
    multiplicity = [ops.total(ops.where(through, 1, 0), -1)]
    rates = []
    for i in range(depth):
        q = node_draft[:, :, i].reshape(rows, vocab)
        node = inverse[:, :, i].reshape(rows)  # rule row of path k's depth-i node
        own = tokens[:, :, i].reshape(rows)  # path k's child there
        children = ops.ones((batch, paths, paths), like=tokens[:, :, 0]) * tokens[:, None, :, i]
        drafted = ops.where(through, children, -1).reshape(rows, paths)  # -1: not through
        weights = counts.reshape(rows, paths + 1)
        rate = ops.zeros((rows, cells.count), like=q)  # the mixed law per unit q of each cell
        count_law = ops.zeros((rows, paths + 1), like=q)
        choose = ops.zeros((rows,), like=q)
        # count laws need (node, own child); selections (node, own child, drafted children)
        count_keys, count_inverse = _distinct(node[:, None], own[:, None])
        select_keys, select_inverse = _distinct(node[:, None], own[:, None], drafted)
        select_drafts = select_keys[:, 2:]
        select_present = select_drafts >= 0
        select_observed = ops.total(ops.where(select_present, 1, 0), -1)
        for n, node_rule in enumerate(rules, 1):
            weight = weights[:, n]
            used = select_observed == n
            if not (_needed(weight != 0) or _needed(used)):
                continue
            rate = rate + weight[:, None] * node_rule.rate[node]
            rho = node_rule.count_law(count_keys[:, 1], rows=count_keys[:, 0])  # [U, n+1]
            count_law[:, : n + 1] = count_law[:, : n + 1] + weight[:, None] * rho[count_inverse]
            if _needed(used):
                draw = node_rule.select(ops.maximum(select_drafts, 0),
                                        select_present & used[:, None], rows=select_keys[:, 0])
                mine = ops.total(ops.where(select_drafts == select_keys[:, 1:2], draw, 0), -1)
                choose = ops.where(used[select_inverse], mine[select_inverse], choose)
        rates.append(rate)
        # r(y|u) = q(y|u) rate[cell of y] for the own child only (the full rows come after)
        law_own = ops.take_rows(q, own[:, None]) * ops.take_rows(
            rate, cells.cell_at(own[:, None], node))  # [R, 1]
        counts = ops.safe_div(count_law, law_own).reshape(count_shape)
        selected = selected * choose.reshape(batch, paths)
        through = through & same[..., i]
        selections.append(selected)
        multiplicity.append(ops.total(ops.where(through, 1, 0), -1))  # equal on i + 1 tokens
    # r(.|u) at every node of every path in one pass: q times the cell rates read per token
    every = ops.stack(rates, 1).reshape(rows * depth, cells.count)  # row (b, k, i)
    nodes = inverse.reshape(rows * depth)
    if tables.identity and paths == full:
        per_token = cells.per_token(every)
    else:
        per_token = cells.per_token(every, nodes)
    skewed = (node_draft.reshape(rows * depth, vocab) * per_token).reshape(batch, paths, depth,
                                                                           vocab)
    return SelectionPass(selections, multiplicity, skewed)


@register("nodeopt", "node-optimal selection (the single-step optimum at every node, "
          "lexicographic), then BV on the selected path", multipath=True,
          draft_sampling=("iid",), support=DEFAULT_SUPPORT)
def nodeopt_law(tree: DraftTree, support: int | None = DEFAULT_SUPPORT,
                rule: str = "nested") -> BlockLaw:
    """Exact law (module docstring); BV runs once per distinct drafted path."""
    chosen, skewed = nodeopt_selection(tree, support, rule)
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    tokens = ops.index_like(tree.target_rows, tree.tokens).reshape(batch * paths, depth)
    owner = ops.arange(batch * paths, tokens) // paths  # batch row of every path
    keys, inverse = _distinct(owner[:, None], tokens)
    target = tree.target_rows.reshape(batch * paths, depth + 1, vocab)
    skewed = skewed.reshape(batch * paths, depth, vocab)
    if keys.shape[0] == batch * paths:  # every path distinct: no copies of the rows
        stop, correction = bv_path_law(tokens, target, skewed)
        stop = stop.reshape(batch, paths, depth + 1) * chosen[:, :, None]
        return BlockLaw(stop, correction.reshape(batch, paths, depth + 1, vocab))
    first = ops.zeros((keys.shape[0],), like=inverse)
    first[inverse] = ops.arange(batch * paths, tokens)  # one path per distinct key
    stop, correction = bv_path_law(tokens[first], target[first], skewed[first])
    stop = stop[inverse].reshape(batch, paths, depth + 1) * chosen[:, :, None]
    return BlockLaw(stop, correction[inverse].reshape(batch, paths, depth + 1, vocab))

