"""The documents as a notebook wants them: a screen's layer × head grid and tables (pandas) of the screen, the
search's ranking and the test's examples, each equal to the document's own fields."""

import numpy as np
import pytest
from _support import planted_config

from celtk.errors import ConfigError
from celtk.run import run_screen, run_select, run_test


@pytest.fixture(scope="module")
def documents(planted, tmp_path_factory):
    model, task = planted
    out = tmp_path_factory.mktemp("run")
    return (run_screen(planted_config(task), out, model=model), run_select(out, p=4, k=2, model=model),
            run_test(out, model=model, n_boot=50))


def test_the_screen_grid_holds_each_heads_figure_at_its_place(documents):
    screen, _, _ = documents
    gain, damage = screen.grid("gain"), screen.grid("damage")
    assert gain.shape == (screen.n_layers, screen.n_heads)
    for row in screen.heads:
        assert gain[row.head.layer, row.head.head] == row.gain and damage[row.head.layer, row.head.head] == row.damage
    assert np.nanargmax(gain) == np.ravel_multi_index((1, 2), gain.shape)  # the planted harmful head gains most
    with pytest.raises(ConfigError, match="Unknown screen metric 'gains'.*gain_count"):
        screen.grid("gains")


def test_the_tables_are_the_documents_rows(documents):
    screen, selection, test = documents
    heads = screen.to_pandas()
    assert list(heads["head"]) == [str(r.head) for r in screen.heads] and list(heads["gain"]) == [
        r.gain for r in screen.heads]
    ranking = selection.to_pandas()
    assert ranking.iloc[0]["heads"] == str(selection.ranking[0].heads) and len(ranking) == len(selection.ranking)
    examples = test.to_pandas()
    assert len(examples) == test.n and (examples["outcome"] == "fix").sum() == test.fixes
    assert (examples["outcome"] == "damage").sum() == test.damage
