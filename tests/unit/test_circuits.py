"""Circuit files, overlap statistics, head attribute scoring and critical/enhancing lists, on
constructed inputs with known answers."""

import json
from math import comb

import numpy as np
import pytest
from _support import single_head_score

from celtk.circuits import (
    compare_with_circuit,
    critical_and_enhancing,
    hypergeom_tail,
    load_circuit,
    packaged_circuits,
    scores_from_patterns,
)
from celtk.errors import DataFormatError, HeadError
from celtk.heads import Head


def test_packaged_ioi_circuit():
    assert "ioi-gpt2-small" in packaged_circuits()
    ioi = load_circuit("ioi-gpt2-small")
    assert (ioi.n_layers, ioi.n_heads, len(ioi.roles)) == (12, 12, 26)
    roles = ioi.by_role()
    assert roles["name mover"] == [Head(9, 6), Head(9, 9), Head(10, 0)]
    assert set(roles) == {"name mover", "backup name mover", "negative name mover", "S-inhibition", "induction",
                          "duplicate token", "previous token"}


@pytest.mark.parametrize("doc,message", [
    ({"name": "x", "n_layers": 2, "n_heads": 2}, "missing field\\(s\\) heads"),
    ({"name": "x", "n_layers": 2, "n_heads": 2, "heads": [{"head": "L2H0"}]}, "L2H0 is out of range"),
    ({"name": "x", "n_layers": 2, "n_heads": 2, "heads": [{"head": "L1H0"}, {"head": "1.0"}]}, "listed twice"),
    ({"name": "x", "n_layers": 2, "n_heads": 2, "heads": ["L1H0"]}, "must be an object"),
])
def test_bad_circuit_files(tmp_path, doc, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises((DataFormatError, HeadError), match=message):
        load_circuit(path)


def test_missing_circuit_suggests_packaged():
    with pytest.raises(DataFormatError, match="Did you mean: 'ioi-gpt2-small'"):
        load_circuit("ioi-gpt2")


def test_hypergeometric_tail_matches_counting():
    population, marked, drawn = 20, 5, 4
    for k in range(5):
        exact = sum(comb(marked, j) * comb(population - marked, drawn - j)
                    for j in range(k, drawn + 1)) / comb(population, drawn)
        assert hypergeom_tail(k, population, drawn, marked) == pytest.approx(exact)


def heads(*names: str) -> list[Head]:
    return [Head.parse(name) for name in names]


def test_compare_counts_overlap_and_ranks():
    ioi = load_circuit("ioi-gpt2-small")
    ranking = ["L9H9", "L0H0", "L10H7", "L1H1"] + [f"L{l}H{h}" for l in range(12) for h in range(12)
                                                    if f"L{l}H{h}" not in ("L9H9", "L0H0", "L10H7", "L1H1")]
    report = compare_with_circuit(ioi, 12, 12, heads("L9H9", "L3H3"), heads(*ranking), top=4)
    assert (report["selection"]["overlap"] == 1
            and report["selection"]["shared"] == [{"head": "L9H9", "role": "name mover"}])
    assert report["selection"]["expected_by_chance"] == pytest.approx(2 * 26 / 144)
    assert report["screen_top4"]["overlap"] == 2
    assert report["circuit_head_ranks"]["L9H9"] == 1 and report["circuit_head_ranks"]["L10H7"] == 3
    assert report["mean_rank_by_chance"] == 72.5
    with pytest.raises(HeadError, match="12 × 12 model .* this run's model is 30 × 9"):
        compare_with_circuit(ioi, 30, 9, [], heads(*ranking))
    # head names instead of heads would silently overlap nothing: refused (by jaxtyping's checker under pytest)
    with pytest.raises((TypeError, HeadError)):
        compare_with_circuit(ioi, 12, 12, ["L9H9"], heads(*ranking))  # type: ignore[list-item]  # deliberately names


def test_scores_from_exact_patterns():
    length, n = 5, 10
    prev = np.zeros((n, n))
    prev[0, 0] = 1
    prev[np.arange(1, n), np.arange(n - 1)] = 1
    induction = np.eye(n)
    induction[np.arange(length, n), np.arange(length, n) - length + 1] = 1
    induction[np.arange(length, n), np.arange(length, n)] = 0
    dup = np.eye(n)
    dup[np.arange(length, n), np.arange(length, n) - length] = 1
    dup[np.arange(length, n), np.arange(length, n)] = 0
    patterns = np.stack([prev, induction, dup])[None, None]  # [layer=1, batch=1, head=3, q, k]
    scores = scores_from_patterns(patterns, length)
    assert scores["previous_token"][0].tolist() == [1.0, 0.0, 0.0]
    assert scores["induction"][0, 1] == 1.0 and scores["induction"][0, 0] == 0.0
    assert scores["duplicate_token"][0].tolist() == [0.0, 0.0, 1.0]


def test_critical_and_enhancing():
    rows = [single_head_score("L0H0", -9, 9, 0), single_head_score("L0H1", 4, 1, 5),
            single_head_score("L1H0", -2, 3, 1), single_head_score("L1H1", 0, 0, 0), single_head_score("L2H0", 7, 0, 7)]
    out = critical_and_enhancing(rows, n=2)
    assert [r["head"] for r in out["critical"]] == ["L0H0", "L1H0"]
    assert [r["head"] for r in out["enhancing"]] == ["L2H0", "L0H1"]
    assert out["critical_layers"] == {0: 1, 1: 1} and out["enhancing_layers"] == {0: 1, 2: 1}
    assert out["overlap"] == [] and out["both_fix_and_damage"][0] in ("L0H1", "L1H0")


def test_critical_and_enhancing_order_heads_by_number_not_text():
    """Ties (same gain, damage) are broken by the one ranking key, which compares head ids as numbers: L2H0 before
    L10H0 in both lists (string order put L10H0 before L2H0 among critical heads and L3H0 before L2H0 among
    enhancing ones)."""
    rows = [single_head_score(h, g, d, 0)
            for h, g, d in [("L10H0", -3, 3), ("L2H0", -3, 3), ("L1H5", -7, 7),
                            ("L10H1", 2, 0), ("L3H0", 2, 0), ("L2H1", 2, 0), ("L0H0", 5, 0)]]
    out = critical_and_enhancing(rows, n=5)
    assert [r["head"] for r in out["critical"]] == ["L1H5", "L2H0", "L10H0"]
    assert [r["head"] for r in out["enhancing"]] == ["L0H0", "L2H1", "L3H0", "L10H1"]


def test_every_head_ordering_is_the_one_ranking_key():
    """The screen table, the racing key and the racing pool's check order rows as head_order does."""
    import numpy as np

    from celtk.heads import HeadSet
    from celtk.screening.racing import exhaustive_pool, race_key
    from celtk.search.scores import HeadScore, head_order, ranking_key

    intact = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    outcomes = {HeadSet.parse(h): np.array(c, dtype=bool) for h, c in
                [("L10H0", [1, 1, 1, 0, 1, 0]), ("L2H0", [1, 1, 1, 0, 1, 0]), ("L1H1", [0, 1, 1, 1, 1, 0]),
                 ("L0H3", [1, 1, 0, 0, 0, 0])]}
    scores = [HeadScore.compare(h, c, intact) for h, c in outcomes.items()]
    by_score = [str(s.heads) for s in sorted(scores, key=ranking_key)]
    assert by_score == ["L2H0", "L10H0", "L1H1", "L0H3"]  # gain 1, 1 (damage 0), 1 (damage 1), -1
    assert [str(h) for h in exhaustive_pool(outcomes, intact, 4)] == by_score
    for s in scores:
        assert race_key(s.heads, s.n_correct, s.damage, int(intact.sum())) == ranking_key(s) == \
            head_order(s.heads, s.gain, s.damage, s.n_correct)


@pytest.mark.parametrize("length, batch, name", [(0, 8, "length"), (-3, 8, "length"), (40, 0, "batch"),
                                                 ])
def test_an_attribute_probe_of_no_tokens_is_refused_before_the_model_loads(tmp_path, length, batch, name):
    """``Run.attributes(length=0)`` ended in torch's RuntimeError on an empty tensor."""
    from celtk.errors import ConfigError
    from celtk.run.analyses import run_attributes

    with pytest.raises(ConfigError, match=rf"probe's {name} must be a positive integer .*--length, default 40"):
        run_attributes(tmp_path / "no-run", length=length, batch=batch)
    assert not (tmp_path / "no-run").exists()  # refused before the run directory was touched
