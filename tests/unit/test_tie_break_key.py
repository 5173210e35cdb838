"""The ranking key's tie-break of head ids: ``numeric`` (celtk's default, L2H0 before L10H0) or ``paper`` (the ids as
strings, L10H0 before L2H0). Hand-made scores where the two keys pick different pools and different selections, the
exact racing screen's pool equal to the exhaustive one under either key, and the default unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.run.config import RunConfig
from celtk.screening.racing import exhaustive_pool, race
from celtk.search.registry import TIE_BREAKS, get_strategy
from celtk.search.scores import HeadScore, head_ids, rank
from celtk.search.selection import candidate_pool

N = 10
INTACT = np.arange(N) < 5  # the intact model gets examples 0..4 right


def outcome(right: list[int]) -> np.ndarray:
    correct = INTACT.copy()
    correct[right] = True
    return correct


def tied_singles() -> list[HeadScore]:
    """Four heads that each fix example 5 and break nothing: tied in gain, damage, accuracy and size."""
    return [HeadScore.compare(HeadSet.parse(h), outcome([5]), INTACT) for h in ("L2H0", "L3H0", "L10H0", "L11H0")]


def evaluate(sets: list[HeadSet]) -> dict[HeadSet, np.ndarray]:
    """Every pair fixes example 5 only, except L2H0 with L10H0, which fixes 5, 6 and 7."""
    return {s: outcome([5, 6, 7] if s == HeadSet.parse("L2H0,L10H0") else [5]) for s in sets}


def test_the_two_keys_order_ids_as_numbers_and_as_strings():
    sets = [HeadSet.parse(h) for h in ("L2H0", "L10H0", "L1H10", "L1H2")]
    assert sorted(sets, key=lambda s: head_ids(s, "numeric")) == [HeadSet.parse(h) for h in
                                                                   ("L1H2", "L1H10", "L2H0", "L10H0")]
    assert sorted(sets, key=lambda s: head_ids(s, "paper")) == [HeadSet.parse(h) for h in
                                                                 ("L10H0", "L1H10", "L1H2", "L2H0")]
    assert head_ids(HeadSet.parse("L2H0,L10H0"), "paper") == ("L10H0", "L2H0")  # a set's ids sorted as strings
    with pytest.raises(ConfigError, match="tie-break 'alphabetic'.*'numeric'.*'paper'"):
        head_ids(sets[0], "alphabetic")


def test_paper_pools_and_selects_other_heads_than_numeric():
    singles = tied_singles()
    assert [str(s.heads) for s in candidate_pool(singles, 2)] == ["L2H0", "L3H0"]
    assert [str(s.heads) for s in candidate_pool(singles, 2, "paper")] == ["L10H0", "L11H0"]
    assert [str(s.heads) for s in candidate_pool(singles, 3, "paper")] == ["L10H0", "L11H0", "L2H0"]
    algorithm1 = get_strategy("algorithm1")
    numeric = algorithm1(singles, INTACT, evaluate, p=3, k=2)
    paper = algorithm1(singles, INTACT, evaluate, p=3, k=2, tie_break="paper")
    # with p = 3 both pools hold L2H0 and L10H0, the pair that fixes three examples; with p = 2 numeric's pool
    # (L2H0, L3H0) misses L10H0 and paper's (L10H0, L11H0) misses L2H0, so each freezes its own first head
    assert numeric.best.heads == paper.best.heads == HeadSet.parse("L2H0,L10H0")
    numeric2 = algorithm1(singles, INTACT, evaluate, p=2, k=2)
    paper2 = algorithm1(singles, INTACT, evaluate, p=2, k=2, tie_break="paper")
    assert numeric2.best.heads == HeadSet.parse("L2H0") and paper2.best.heads == HeadSet.parse("L10H0")
    assert numeric2.options == {"p": 2} and paper2.options == {"p": 2, "tie_break": "paper"}
    greedy = get_strategy("greedy")
    assert greedy(singles, INTACT, evaluate, k=1).best.heads == HeadSet.parse("L2H0")
    assert greedy(singles, INTACT, evaluate, k=1, tie_break="paper").best.heads == HeadSet.parse("L10H0")
    assert greedy(singles, INTACT, evaluate, k=1, tie_break="paper").options == {"width": 1, "tie_break": "paper"}


@pytest.mark.parametrize("seed", range(6))
def test_exact_racing_returns_the_exhaustive_pool_under_either_key(seed):
    """Heads with ids that order differently as numbers and as strings, and few distinct outcomes: many ties."""
    rng = np.random.default_rng(seed)
    n, p = 24, 3
    intact = rng.random(n) < 0.5
    patterns = [rng.random(n) < 0.5 for _ in range(3)]
    outcomes = {HeadSet.parse(f"L{layer}H{head}"): patterns[rng.integers(3)].copy()
                for layer in (1, 2, 10, 11) for head in (0, 3)}

    def table(heads, indices):
        return {h: outcomes[h][indices] for h in heads}

    pools = {}
    for tie_break in TIE_BREAKS:
        result = race(table, list(outcomes), n, intact, p, tie_break=tie_break)
        pools[tie_break] = result.pool
        assert result.pool == exhaustive_pool(outcomes, intact, p, tie_break)
        assert result.pool == [s.heads for s in rank([HeadScore.compare(h, c, intact) for h, c in outcomes.items()],
                                                     tie_break)][:p]
    assert pools["numeric"] != pools["paper"]  # the ties decide the pool here
    assert race(table, list(outcomes), n, intact, p).pool == pools["numeric"]  # the default is numeric


def test_the_default_is_numeric_and_leaves_records_as_they_were():
    rng = np.random.default_rng(0)
    scores = [HeadScore.compare(HeadSet.parse(f"L{layer}H{head}"), rng.random(N) < 0.5, INTACT)
              for layer in (1, 2, 10) for head in (0, 1, 10)]
    assert [s.heads for s in rank(scores)] == [s.heads for s in rank(scores, "numeric")]
    default = get_strategy("algorithm1")(scores, INTACT, evaluate, p=4, k=2)
    numeric = get_strategy("algorithm1")(scores, INTACT, evaluate, p=4, k=2, tie_break="numeric")
    assert default.best.heads == numeric.best.heads and default.options == numeric.options == {"p": 4}
    assert [s.heads for s in default.scored] == [s.heads for s in numeric.scored]
    assert RunConfig().tie_break == "numeric" and "tie_break" not in RunConfig().recorded()
    assert RunConfig(tie_break="paper").recorded()["tie_break"] == "paper"
    with pytest.raises(ConfigError, match="tie_break must be 'numeric'.*or 'paper'"):
        RunConfig(tie_break="strings")
