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


def test_plot_attention_draws_the_heads_pattern(tiny_llama):
    import celtk.probe

    prompt = "Question: What is 12 plus 7?\nAnswer:"
    pattern = celtk.probe.attention(tiny_llama, prompt, "L1H2")
    figure = celtk.probe.plot_attention(tiny_llama, prompt, "L1H2")
    drawn = np.asarray(figure.axes[0].images[0].get_array())
    n = len(pattern.tokens)
    assert drawn.shape == (n, n) and np.array_equal(drawn, pattern.pattern)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()][-1] == repr(pattern.tokens[-1])[1:-1]

    tail = celtk.probe.plot_attention(tiny_llama, prompt, "L1H2", last=4).axes[0].images[0].get_array()
    assert np.array_equal(np.asarray(tail), pattern.pattern[-4:, -4:])
    with pytest.raises(celtk.errors.TaskError, match="last must be a positive"):
        celtk.probe.plot_attention(tiny_llama, prompt, "L1H2", last=0)


def test_loads_silence_transformers_progress_bars_and_tqdms_notebook_warning_then_restore_them():
    import warnings

    from tqdm import TqdmWarning
    from transformers.utils import logging as hf_logging

    from celtk.models._load import quiet_transformers

    hf_logging.enable_progress_bar()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_transformers():
            assert not hf_logging.is_progress_bar_enabled()
            warnings.warn("IProgress not found", TqdmWarning, stacklevel=1)
        warnings.warn("kept", UserWarning, stacklevel=1)
    assert hf_logging.is_progress_bar_enabled()  # the caller's setting is back
    assert [str(w.message) for w in caught] == ["kept"]

    hf_logging.disable_progress_bar()
    with quiet_transformers():
        pass
    assert not hf_logging.is_progress_bar_enabled()  # one who turned them off keeps them off
    hf_logging.enable_progress_bar()


def test_each_packaged_model_has_its_attribute_circuit_and_compare_checks_the_model_by_name():
    from celtk.circuits import compare_with_circuit, load_circuit, packaged_circuits
    from celtk.errors import HeadError
    from celtk.heads import Head
    from celtk.models import ALIASES

    for alias in ALIASES.values():
        circuit = load_circuit(f"attributes-{alias.name}")
        assert f"attributes-{alias.name}" in packaged_circuits() and circuit.model == alias.name
        layers, heads = (int(n) for n in alias.shape.split(" (")[0].split(" × "))
        assert (circuit.n_layers, circuit.n_heads) == (layers, heads)
        assert set(circuit.by_role()) <= {"induction", "previous-token"} and circuit.heads
    smol = load_circuit("attributes-smollm2-135m")
    ranking = [Head(layer, head) for layer in range(30) for head in range(9)]
    report = compare_with_circuit(smol, 30, 9, [Head(1, 2)], ranking, model="smollm2-135m")
    assert report["selection"]["shared"] == [{"head": "L1H2", "role": "previous-token"}]
    with pytest.raises(HeadError, match="found on 'smollm2-135m'; this run's model is 'other/model-30x9'"):
        compare_with_circuit(smol, 30, 9, [Head(1, 2)], ranking, model="other/model-30x9")
    # the same model under its hub owner, a local directory or with a description is the same model
    ioi = load_circuit("ioi-gpt2-small")
    for name in ("gpt2", "openai-community/gpt2", "/models/gpt2/", "GPT2"):
        compare_with_circuit(ioi, 12, 12, [], [Head(0, 0)], model=name)


def test_an_attribute_circuit_lists_the_heads_over_each_threshold_with_their_role():
    from celtk.circuits import ATTRIBUTE_THRESHOLDS, attribute_circuit

    induction, previous = np.zeros((3, 2)), np.zeros((3, 2))
    induction[2, 1], induction[1, 0] = 0.9, ATTRIBUTE_THRESHOLDS["induction"] - 0.01
    previous[0, 1], previous[2, 1] = 0.6, 0.95  # L2H1 reaches both: listed once, as induction
    doc = attribute_circuit("tiny", {"induction": induction, "previous_token": previous,
                                     "duplicate_token": np.ones((3, 2))})
    assert [(r["head"], r["role"]) for r in doc["heads"]] == [("L2H1", "induction"), ("L0H1", "previous-token")]
    assert (doc["model"], doc["n_layers"], doc["n_heads"]) == ("tiny", 3, 2)
