"""Instance format, validation errors (one line naming the field), generators, bv-toy."""

import json
from fractions import Fraction

import numpy as np
import pytest
from speclp.lp.instance import (
    InstanceError,
    bv_toy,
    dirichlet_instance,
    instance_from_json,
    load_instance,
    temperature_instance,
    ties_instance,
)
from speclp.verifiers.tree import node_index, node_prefix, num_nodes, prefix_node_indices


def toy_json(**over):
    data = {"vocab_size": 2, "depth": 1,
            "target": [["1/3", "2/3"], ["1/2", "1/2"], ["1/4", "3/4"]],
            "draft": [["2/3", "1/3"], [0.5, 0.5], [0.25, 0.75]]}
    data.update(over)
    return data


def test_shortlex_index_matches_formula():
    V = 3
    for idx in range(num_nodes(V, 3)):
        prefix = node_prefix(idx, V)
        d = len(prefix)
        expected = (V**d - 1) // (V - 1) + sum(x * V ** (d - 1 - i) for i, x in enumerate(prefix))
        assert node_index(prefix, V) == expected == idx
    tokens = np.array([[2, 0, 1]])
    assert prefix_node_indices(tokens, V).tolist() == [[0, 3, 10, 32]]  # 0, 1+2, 4+6, 13+19


def test_fractions_and_floats():
    inst = instance_from_json(toy_json())
    assert not inst.rational  # the draft has float entries
    rational = instance_from_json(toy_json(draft=[["2/3", "1/3"], ["1/2", "1/2"], ["1/4", "3/4"]]))
    assert rational.rational
    assert rational.target_exact[0, 0] == Fraction(1, 3)
    again = instance_from_json(json.loads(json.dumps(rational.to_json())))
    assert (again.target_exact == rational.target_exact).all()


BAD = [
    (toy_json(vocab_size=1), "vocab_size"),
    (toy_json(depth=0), "depth"),
    (toy_json(vocab_size="2"), "vocab_size"),
    ({k: v for k, v in toy_json().items() if k != "draft"}, "draft: missing"),
    (toy_json(target=[["1/3", "2/3"], ["1/2", "1/2"]]), "target: expected 3 rows"),
    (toy_json(target=[["1/3", "2/3"], ["1/2", "1/2", "0"], ["1/4", "3/4"]]), "target[1]"),
    (toy_json(draft=[[0.7, 0.31], [0.5, 0.5], [0.25, 0.75]]), "draft[0]: row sums to 1.01"),
    (toy_json(target=[["1/3", "1/3"], ["1/2", "1/2"], ["1/4", "3/4"]],
              draft=[["2/3", "1/3"], ["1/2", "1/2"], ["1/4", "3/4"]]), "target[0]: exact row sums to 2/3"),
    (toy_json(draft=[[1.5, -0.5], [0.5, 0.5], [0.25, 0.75]]), "draft[0][1]: negative"),
    (toy_json(draft=[[float("nan"), 1.0], [0.5, 0.5], [0.25, 0.75]]), "draft[0][0]"),
    (toy_json(draft=[["nan", "1"], [0.5, 0.5], [0.25, 0.75]]), "draft[0][0]"),
    (toy_json(target=[["a", "1"], ["1/2", "1/2"], ["1/4", "3/4"]]), "target[0][0]: cannot read"),
    ([1, 2], "instance: expected a JSON object"),
]


@pytest.mark.parametrize("data,field", BAD, ids=[b[1] for b in BAD])
def test_bad_input_names_field(data, field):
    with pytest.raises(InstanceError) as err:
        instance_from_json(data)
    message = str(err.value)
    assert field in message
    assert "\n" not in message


def test_files(tmp_path):
    with pytest.raises(InstanceError, match="no such file"):
        load_instance(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InstanceError, match="malformed JSON"):
        load_instance(bad)
    good = bv_toy(2).save(tmp_path / "toy.json")
    assert load_instance(good).rational


def test_generators_are_valid_and_seeded():
    a = dirichlet_instance(3, 2, alpha=0.5, seed=3)
    b = dirichlet_instance(3, 2, alpha=0.5, seed=3)
    assert np.array_equal(a.target, b.target)
    assert np.allclose(a.target.sum(1), 1) and np.allclose(a.draft.sum(1), 1)
    r = dirichlet_instance(3, 2, seed=1, denominator=12)
    assert r.rational and all(sum(row) == 1 for row in r.draft_exact)
    assert all(x.denominator in (1, 2, 3, 4, 6, 12) for x in r.target_exact.reshape(-1))
    t = temperature_instance(4, 2, temperature=2.0, seed=0)
    assert t.target.shape == (num_nodes(4, 2), 4)
    ties = ties_instance(3, 2, seed=0)
    assert ties.rational


def test_bv_toy_rows():
    inst = bv_toy(3)
    assert inst.rational and inst.depth == 3 and inst.vocab_size == 2
    assert all(list(row) == [Fraction(1, 3), Fraction(2, 3)] for row in inst.target_exact)
    assert all(list(row) == [Fraction(2, 3), Fraction(1, 3)] for row in inst.draft_exact)
