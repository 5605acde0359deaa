"""Is an acceptance configuration lossless? Its exact law on the audit's families says.

A configuration (`AcceptanceConfig`) says how the target and the draft are sampled (the
target's temperature and top-k / top-p; the draft's top-k / top-p) and what the verifier does
(its method and thresholds, and the temperature and filters it applies to each side when it
verifies). On an instance, the rows of the model are the RAW rows (softmax of the logits at
temperature 1, before any filter):

    target law  p = top-p(top-k(raw_p ^ (1 / T)))       (renormalised after each step)
    draft law   q = top-p(top-k(raw_q))                   (what the drafts are drawn from)
    verifier    reads p' and q', the same recipes with ITS temperature and filters, and runs
                one draft chain with its method:
      speculative  accept X with min(1, p'(X) / q'(X)); at a rejection (p' - q')^+; bonus p'
      one-hot      draft probabilities not used: accept X with p'(X); at a rejection p' with
                   X removed; bonus p'
      threshold    accept X when p'(X) >= threshold_single, else with min(1, p'(X) /
                   threshold_acc); at a rejection p' with X removed (SGLang's target-only rule)
      typical      accept X when p'(X) > min(epsilon, delta exp(-H(p'))); at a rejection p'
      ensemble     speculative sampling against w p' + (1 - w) q'

`config_report` computes the configuration's exact output law (verifiers.exact, every draft
configuration enumerated) on the instances of the audit's families and its TV from the target
law; the verdict is "lossless" when the configuration satisfies the sufficient conditions
below (a theorem for every instance, not a finding on these) and every exact TV is 0, "lossy"
when some exact TV is positive (a counterexample: the instance is named). Sufficient
conditions: p' = p and q' = q on every row (the verifier's temperature and filters equal the
sampling's), and the method is speculative, one-hot, threshold with both thresholds 1 (= one-hot),
or ensemble with w = 1 (= speculative). Speculative sampling gives law p for any q' = q
(Leviathan et al.); one-hot gives law p for any draft law (accept X with p(X), else p without
X: P(y) = q(y) p(y) + sum_{x != y} q(x) p(y) = p(y)).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..deadline import STOPPED, Deadline
from ..inputs import BadArgument
from ..lp.instance import Instance, from_rows
from ..verifiers.exact import exact_result
from ..verifiers.law import BlockLaw, DraftTree
from ..verifiers.ops import torch
from ..verifiers.tree import prefix_node_indices
from .audit import MIXED, audit_instance

METHODS = ("speculative", "one-hot", "threshold", "typical", "ensemble")
ZERO_TV = 1e-12  # float64 rounding of these laws stays far below it


@dataclass(frozen=True)
class AcceptanceConfig:
    method: str = "speculative"
    temperature: float = 1.0  # the target's sampling temperature
    target_top_k: int | None = None
    target_top_p: float | None = None
    draft_top_k: int | None = None
    draft_top_p: float | None = None
    verify_temperature: float | None = None  # None: the same as the sampling's (each below too)
    verify_target_top_k: int | None = None
    verify_target_top_p: float | None = None
    verify_draft_top_k: int | None = None
    verify_draft_top_p: float | None = None
    threshold_single: float = 1.0
    threshold_acc: float = 1.0
    typical_epsilon: float = 0.09
    typical_delta: float = 0.3
    weight: float = 1.0

    def check(self) -> None:
        """BadArgument naming the field of a bad value."""
        if self.method not in METHODS:
            raise BadArgument("method", f"must be one of {METHODS}, got {self.method!r}")
        for name in ("temperature", "verify_temperature", "threshold_acc", "typical_delta"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < 1e6):
                raise BadArgument(name, f"must be a number > 0, got {value!r}")
        for name in ("target_top_k", "draft_top_k", "verify_target_top_k", "verify_draft_top_k"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise BadArgument(name, f"must be an integer >= 1, got {value!r}")
        for name in ("target_top_p", "draft_top_p", "verify_target_top_p", "verify_draft_top_p"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise BadArgument(name, f"must be in (0, 1], got {value!r}")
        for name in ("threshold_single", "weight", "typical_epsilon"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 1):
                raise BadArgument(name, f"must be in [0, 1], got {value!r}")
        if self.threshold_acc > 1:
            raise BadArgument("threshold_acc", f"must be in (0, 1], got {self.threshold_acc!r}")

    def views(self) -> dict[str, Any]:
        """The verifier's temperature and filters (None filled from the sampling's)."""
        def pick(mine: Any, sampling: Any) -> Any:
            return sampling if mine is None else mine
        return {"temperature": pick(self.verify_temperature, self.temperature),
                "target_top_k": pick(self.verify_target_top_k, self.target_top_k),
                "target_top_p": pick(self.verify_target_top_p, self.target_top_p),
                "draft_top_k": pick(self.verify_draft_top_k, self.draft_top_k),
                "draft_top_p": pick(self.verify_draft_top_p, self.draft_top_p)}

    def lossless_by_theorem(self) -> bool:
        v = self.views()
        same = (v["temperature"] == self.temperature and v["target_top_k"] == self.target_top_k
                and v["target_top_p"] == self.target_top_p
                and v["draft_top_k"] == self.draft_top_k and v["draft_top_p"] == self.draft_top_p)
        method = (self.method in ("speculative", "one-hot")
                  or (self.method == "threshold" and self.threshold_single == 1
                      and self.threshold_acc == 1)
                  or (self.method == "ensemble" and self.weight == 1))
        return same and method


def _filtered(rows: np.ndarray, temperature: float = 1.0, top_k: int | None = None,
              top_p: float | None = None) -> np.ndarray:
    """rows ^ (1 / temperature), then top-k, then top-p, renormalised (numpy, [..., V])."""
    rows = np.clip(np.asarray(rows, dtype=np.float64), 0.0, None)
    with np.errstate(divide="ignore"):
        logs = np.where(rows > 0, np.log(np.where(rows > 0, rows, 1.0)) / temperature, -np.inf)
    out = np.exp(logs - logs.max(-1, keepdims=True))
    order = np.argsort(-out, -1, kind="stable")
    if top_k is not None and top_k < out.shape[-1]:
        keep = np.zeros(out.shape, dtype=bool)
        np.put_along_axis(keep, order[..., :top_k], True, -1)
        out = np.where(keep, out, 0.0)
    out = out / out.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        ordered = np.take_along_axis(out, order, -1)
        keep = np.zeros(out.shape, dtype=bool)
        np.put_along_axis(keep, order, np.cumsum(ordered, -1) - ordered < top_p, -1)
        out = np.where(keep, out, 0.0)
        out = out / out.sum(-1, keepdims=True)
    return out


def chain_law(tree: DraftTree, accept: Any, residual: Any, bonus: Any) -> BlockLaw:
    """The law of one draft chain (path 0), the shape every token-level rule has: accept X_i
    with probability accept[:, i] ([B, L]); at the first rejection (position i) emit a token
    of residual[:, i] ([B, L, V], rows summing to 1); after L acceptances one of bonus
    ([B, V]). Used by config_law, speclp.testing.ensemble_law and the example mutants."""
    batch, depth = accept.shape
    ones = torch.ones(batch, 1, dtype=accept.dtype)
    survive = torch.cumprod(torch.cat([ones, accept], 1), 1)
    stop = torch.zeros(tree.target_rows.shape[:3], dtype=accept.dtype)
    stop[:, 0] = survive * torch.cat([1 - accept, ones], 1)
    correction = torch.zeros(tree.target_rows.shape, dtype=accept.dtype)
    correction[:, 0, :depth] = residual
    correction[:, 0, depth] = bonus
    return BlockLaw(stop, correction)


def config_law(config: AcceptanceConfig, raw_target: np.ndarray, raw_draft: np.ndarray):
    """The law function (DraftTree -> BlockLaw) of `config` on an instance whose RAW rows are
    raw_target / raw_draft (all prefixes, shortlex); it reads the verifier's views of the rows
    at the drafted prefixes."""
    v = config.views()
    p_view = _filtered(raw_target, v["temperature"], v["target_top_k"], v["target_top_p"])
    q_view = _filtered(raw_draft, 1.0, v["draft_top_k"], v["draft_top_p"])
    vocab = raw_target.shape[-1]

    def law(tree: DraftTree) -> BlockLaw:
        x = tree.tokens[:, 0]
        batch, depth = x.shape
        nodes = prefix_node_indices(x.numpy(), vocab)  # [B, L+1]
        big_p = torch.as_tensor(p_view[nodes], dtype=torch.float64)
        q = torch.as_tensor(q_view[nodes[:, :-1]], dtype=torch.float64)
        p = big_p[:, :depth]
        px = p.gather(-1, x[..., None])[..., 0]
        qx = q.gather(-1, x[..., None])[..., 0]
        without = torch.where(torch.nn.functional.one_hot(x, vocab).to(torch.bool),
                              torch.zeros_like(p), p)
        if config.method == "ensemble":
            p = config.weight * p + (1 - config.weight) * q
            px = p.gather(-1, x[..., None])[..., 0]
        if config.method in ("speculative", "ensemble"):
            accept = torch.where(qx > 0, torch.clamp(px / qx.clamp_min(1e-300), max=1.0),
                                 torch.zeros_like(px))
            residual = torch.clamp(p - q, min=0.0)
        elif config.method == "one-hot":
            accept, residual = px, without
        elif config.method == "threshold":
            accept = torch.where(px >= config.threshold_single, torch.ones_like(px),
                                 torch.clamp(px / config.threshold_acc, max=1.0))
            residual = without
        else:  # typical
            entropy = -(torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)),
                                    torch.zeros_like(p))).sum(-1)
            cut = torch.clamp(config.typical_delta * torch.exp(-entropy),
                              max=config.typical_epsilon)
            accept = (px > cut).to(p.dtype)
            residual = p
        mass = residual.sum(-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp_min(1e-300), p)
        return chain_law(tree, accept, residual, big_p[:, depth])

    return law


def sampled_instance(config: AcceptanceConfig, raw: Instance) -> Instance:
    """The instance of the laws the configuration samples from (target and draft laws)."""
    model = raw.model().to_float()
    target = _filtered(np.asarray(model.target, dtype=np.float64), config.temperature,
                       config.target_top_k, config.target_top_p)
    draft = _filtered(np.asarray(model.draft, dtype=np.float64), 1.0, config.draft_top_k,
                      config.draft_top_p)
    return from_rows(target, draft, raw.depth, f"{raw.name}-sampled")


def config_report(config: AcceptanceConfig, vocab: int = 3, depth: int = 2, trials: int = 6,
                  seed: int = 0, family: str = MIXED, deadline: Deadline | None = None) -> dict[str, Any]:
    """The configuration's exact TV from the target law on `trials` instances of the audit's
    family, and the verdict (module docstring). deadline (None: none): checked before each
    instance; once it has passed, the report of the instances done so far, "stopped" (why),
    "status": "stopped: time limit" and "lossless" None (no verdict; _stopped_report)."""
    config.check()
    rows: list[dict[str, Any]] = []
    for trial in range(trials):
        if deadline is not None and deadline.passed:
            return _stopped_report(config, vocab, depth, trials, seed, family, rows, deadline.reason)
        raw = audit_instance(vocab, depth, trial, seed=seed, family=family)
        model = raw.model().to_float()
        law = config_law(config, np.asarray(model.target, dtype=np.float64),
                         np.asarray(model.draft, dtype=np.float64))
        result = exact_result(sampled_instance(config, raw).model(), law, paths=1)
        rows.append({"instance": raw.name, "tv": float(result.total_variation),
                     "block_efficiency": float(result.block_efficiency)})
    max_tv = max(r["tv"] for r in rows)
    theorem = config.lossless_by_theorem()
    if theorem and max_tv > ZERO_TV:
        raise RuntimeError(f"a configuration lossless by theorem has exact TV {max_tv:.3g} "
                           f"on {rows[int(np.argmax([r['tv'] for r in rows]))]['instance']}")
    worst = max(rows, key=lambda r: r["tv"])
    return {"config": asdict(config), "verifier_views": config.views(), "vocab": vocab,
            "depth": depth, "family": family, "seed": seed, "instances": rows,
            "max_tv": max_tv, "worst_instance": worst["instance"],
            "lossless": bool(max_tv <= ZERO_TV), "lossless_by_theorem": theorem,
            "verdict": ("lossless (a theorem for every instance; exact TV 0 on every audited "
                        "instance)" if theorem else
                        f"LOSSY: exact TV {max_tv:.4g} on {worst['instance']}" if max_tv > ZERO_TV
                        else "no counterexample on these instances (exact TV 0), but not "
                             "covered by the lossless conditions")}


def _stopped_report(config: AcceptanceConfig, vocab: int, depth: int, trials: int, seed: int,
                    family: str, rows: list[dict[str, Any]], reason: str) -> dict[str, Any]:
    """config_report's answer when its deadline stopped it before instance len(rows): the rows
    done, no verdict ("lossless" None)."""
    return {"config": asdict(config), "verifier_views": config.views(), "vocab": vocab,
            "depth": depth, "family": family, "seed": seed, "trials": trials,
            "trials_run": len(rows), "instances": rows, "status": STOPPED, "stopped": reason,
            "lossless": None, "lossless_by_theorem": config.lossless_by_theorem(),
            "verdict": f"stopped by the {reason} after {len(rows)} of {trials} instances: no verdict"}
