"""`speclp prove` as data: a frozen ProveSpec whose construction is the validation, run() the
proof and its files (issue 29: a spec in, the result out).

The claim and shape are those of speclp.proofs.symbolic.prove.prove (its validate is the one
rule of which claim / shape combinations are defined); out is where the proof goes (the strict
JSON the checker reads, export.strict_document, and the Markdown of the full document),
save_dir where a refuted claim's counterexample instance goes (the CLI checks that both
folders can be written). A wrong field raises speclp.inputs.BadArgument naming it: the claim
and shape first (prove.validate's order), then seed and time_limit. run() returns a ProveResult
(status a ProveStatus, the ProofRun itself; to_json() what `speclp prove --json` prints).
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ... import inputs
from .export import strict_document
from .markdown import render
from .prove import ProofRun, proof_stem, prove, validate

PROVE = inspect.signature(prove).parameters
DEFAULT_VOCAB, DEFAULT_DEPTH = 2, 1  # the smallest shape (every claim is defined on it)
DEFAULT_OUT = "symbolic-proofs"
DEFAULT_SAVE_DIR = "counterexamples"
DEFAULT_TIME_LIMIT_S = 3600.0
SINGLE_PATH_CLAIMS = ("bv-optimal", "token-optimal", "gbv-k1-is-bv")  # K = 1: no `paths` to give
CLAIMS_NO_SAMPLING = SINGLE_PATH_CLAIMS + ("gbv-l1-closed-form",)  # stated for i.i.d. drafts only


class ProveStatus(StrEnum):
    """The outcome of a proof run (a StrEnum: equal to its word, the JSON's "status")."""

    PROVED = "proved"  # the claim holds on every cell of the shape: the proof is written
    REFUTED = "refuted"  # it fails on a cell: a counterexample, its instance saved
    INCOMPLETE = "incomplete"  # unresolved cells (no witness, no emptiness certificate)
    STOPPED = "stopped: time limit"  # neither proved nor refuted; nothing written


@dataclass(frozen=True)
class ProveResult:
    """The result of a ProveSpec, inspectable without the CLI. status: a ProveStatus;
    proof: the ProofRun (prove.prove: its document, counts, counterexample); cells: the
    counts of kept, empty, excluded, failing and unresolved cells; json_file, markdown_file:
    the files written (the JSON's "json", "markdown"; None when stopped); counterexample and
    counterexample_saved: a refutation's (else None). record: the summary, what `speclp prove
    --json` prints, read-only; to_json() gives a copy."""

    status: ProveStatus
    proof: ProofRun
    cells: Mapping[str, int]
    json_file: str | None
    markdown_file: str | None
    counterexample: Mapping[str, Any] | None
    counterexample_saved: str | None
    record: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_summary(cls, proof: ProofRun, summary: Mapping[str, Any]) -> ProveResult:
        record = MappingProxyType(copy.deepcopy(dict(summary)))
        return cls(ProveStatus(record["status"]), proof, MappingProxyType(record["cells"]),
                   record.get("json"), record.get("markdown"), record.get("counterexample"),
                   record.get("counterexample_saved"), record)

    @property
    def proved(self) -> bool:
        return self.status is ProveStatus.PROVED

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.record))


@dataclass(frozen=True)
class ProveSpec:
    """One `speclp prove` run as data: the claim and shape of prove(), where the proof and a
    counterexample go, the witness search's seed, whether a failure stops the run (all_cells
    False) or every failing cell is mapped, and the time limit in seconds (> 0)."""

    claim: str
    vocab: int = DEFAULT_VOCAB
    depth: int = DEFAULT_DEPTH
    paths: int = PROVE["paths"].default
    draft_sampling: str = PROVE["draft_sampling"].default
    out: str = DEFAULT_OUT
    save_dir: str = DEFAULT_SAVE_DIR
    seed: int = PROVE["seed"].default
    all_cells: bool = False
    time_limit: float = DEFAULT_TIME_LIMIT_S

    def __post_init__(self) -> None:
        for name in ("vocab", "depth", "paths"):
            inputs.integer(name, getattr(self, name))
        validate(self.claim, self.vocab, self.depth, self.paths, self.draft_sampling)
        inputs.seed("seed", self.seed)
        inputs.number("time_limit", self.time_limit, 0, low_open=True)

    @property
    def stem(self) -> str:
        """The proof's file stem (prove.proof_stem)."""
        return proof_stem(self.claim, self.vocab, self.depth, self.paths, self.draft_sampling)

    def run(self, progress: Callable[[float], None] | None = None) -> ProveResult:
        """The proof (prove.prove; progress(share) as there) as a ProveResult, its to_json()
        the summary with "status": "stopped: time limit" (nothing written, "stopped" says why,
        "proved" False), else "refuted" (the counterexample under "counterexample", its
        instance saved in save_dir, path under "counterexample_saved"), "incomplete"
        (unresolved cells) or "proved"; the proof (JSON + Markdown) is written to out unless
        stopped, paths under "json" and "markdown"."""
        result = prove(self.claim, self.vocab, self.depth, self.paths, self.draft_sampling,
                       seed=self.seed, progress=progress, stop_at_first_failure=not self.all_cells,
                       time_limit=self.time_limit)
        summary = result.summary()
        if result.stopped.startswith("time limit"):
            summary.update({"stopped": result.stopped, "status": "stopped: time limit",
                            "proved": False})
            return ProveResult.from_summary(result, summary)
        summary["status"] = ("refuted" if result.counterexample is not None
                             else "incomplete" if not result.complete else "proved")
        summary.update(self.write_proof(result.document))
        if result.counterexample is not None:
            summary["counterexample"] = result.counterexample
            summary["counterexample_saved"] = str(self.save_instance(result.counterexample["instance"]))
        return ProveResult.from_summary(result, summary)

    def write_proof(self, document: dict[str, Any]) -> dict[str, str]:
        """The strict JSON (what the checker reads) and the Markdown of the full document, in
        out; returns their paths under "json" and "markdown"."""
        directory = Path(self.out)
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{self.stem}.json"
        json_path.write_text(json.dumps(strict_document(document), indent=0, separators=(",", ":")))
        md_path = directory / f"{self.stem}.md"
        md_path.write_text(render(document))
        return {"json": str(json_path), "markdown": str(md_path)}

    def save_instance(self, instance: dict[str, Any]) -> Path:
        """A counterexample's instance, in save_dir (prove-STEM.json)."""
        save = Path(self.save_dir)
        save.mkdir(parents=True, exist_ok=True)
        instance_path = save / f"prove-{self.stem}.json"
        instance_path.write_text(json.dumps(instance, indent=1))
        return instance_path
