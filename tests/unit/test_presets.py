"""Presets (defaults < preset < config file < flags), the chat date setting, and the held-out
sample drawn from an official split."""

import json

import pytest

from celtk.errors import ConfigError
from celtk.run.config import CHAT_DATE, RunConfig, resolve_config
from celtk.run.presets import PAPER
from celtk.tasks import get_task, make_splits
from celtk.tasks._base import Example, Pools, Task
from celtk.tasks.mbpp import MBPP


def test_paper_preset_sets_the_papers_sizes_per_task():
    boolq = resolve_config(None, {"preset": "paper", "task": "boolq"})
    assert ((boolq.task, boolq.discovery, boolq.heldout, boolq.fewshot, boolq.preset)
            == ("boolq", 2000, 3270, 0, "paper"))
    hella = resolve_config(None, {"preset": "paper:hellaswag"})
    assert (hella.task, hella.discovery, hella.heldout) == ("hellaswag", 2000, 10042)
    mbpp = resolve_config(None, {"preset": "paper:mbpp"})
    assert (mbpp.discovery, mbpp.heldout, mbpp.fewshot) == (374, 500, 3)  # lm-eval's mbpp: 3 shots
    arith = resolve_config(None, {"preset": "paper", "task": "arithmetic:2da", "data": "hub"})
    assert (arith.task, arith.discovery, arith.heldout, arith.fewshot) == ("arithmetic:2da", 2000, 1000, 0)


def test_a_paper_preset_on_generated_data_is_refused_unless_said_synthetic():
    """The paper drew arithmetic from the official GPT-3 rows: without them the run would be on celtk's
    generator while config.json said "paper"; --synthetic runs it so, and is recorded."""
    for preset in ("paper", "paper:arithmetic"):
        with pytest.raises(ConfigError, match="official GPT-3 rows.*--synthetic"):
            resolve_config(None, {"preset": preset, "task": "arithmetic:2da"})
    synthetic = resolve_config(None, {"preset": "paper:arithmetic", "synthetic": True})
    assert synthetic.synthetic and synthetic.data is None and synthetic.discovery == 2000
    with pytest.raises(ConfigError, match="synthetic .* but data = 'hub' is given"):
        resolve_config(None, {"preset": "paper:arithmetic", "synthetic": True, "data": "hub"})
    with pytest.raises(ConfigError, match="has no generator"):
        RunConfig.from_dict({"task": "boolq", "synthetic": True})
    assert resolve_config(None, {"preset": "paper:boolq"}).synthetic is False  # the hub's official data by default


def test_precedence_defaults_preset_file_flags(tmp_path):
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"preset": "paper:boolq", "heldout": 1000, "fewshot": 2}))
    config = resolve_config(file, {"fewshot": 5, "discovery": None})
    assert config.discovery == 2000  # preset over default (200)
    assert config.heldout == 1000  # file over preset
    assert config.fewshot == 5  # flag over file
    assert config.seed == RunConfig().seed and config.preset == "paper:boolq"
    assert resolve_config(None, {}).discovery == RunConfig().discovery and resolve_config(None, {}).preset is None


def test_unknown_preset_or_task_refused():
    with pytest.raises(ConfigError, match="Unknown preset 'papr'.*paper:boolq"):
        resolve_config(None, {"preset": "papr"})
    with pytest.raises(ConfigError, match="no settings for task 'humaneval'"):
        resolve_config(None, {"preset": "paper", "task": "humaneval"})
    with pytest.raises(ConfigError, match="Unknown preset"):
        RunConfig.from_dict({"preset": "nope"})


def test_chat_date_validated_and_equal_to_the_evaluators():
    from celtk.evaluation.prompts import CHAT_DATE as EVALUATOR_DATE

    assert CHAT_DATE == EVALUATOR_DATE == RunConfig().chat_date
    assert RunConfig.from_dict({"chat_date": "2025-01-31"}).chat_date == "2025-01-31"
    for bad in ("2025-13-01", "yesterday", "31.01.2025"):
        with pytest.raises(ConfigError, match="chat_date must be an ISO date"):
            RunConfig.from_dict({"chat_date": bad})


def test_cli_flags_reach_the_config():
    from click.testing import CliRunner

    from celtk.cli import main

    result = CliRunner().invoke(main, ["screen", "--help"])
    assert "--preset" in result.output and "--chat-date" in result.output
    assert "--force" in CliRunner().invoke(main, ["select", "--help"]).output
    assert "--synthetic" in result.output


class _Official(Task):
    """An official held-out split of 50 rows in source order, and a separate discovery pool."""

    name = "official"
    kind = "target"

    def load_pools(self):
        held = [Example(f"v{i}", f"Q: held {i}", f" {i}") for i in range(50)]
        train = [Example(f"t{i}", f"Q: train {i}", f" {i}") for i in range(40)]
        return Pools(discovery=train, heldout=held, fewshot=[], source="fixture")


def test_smaller_heldout_is_a_seeded_random_sample_of_the_official_split():
    task = _Official()
    order = {f"v{i}": i for i in range(50)}
    a = [e.id for e in make_splits(task, 5, 10, seed=0).heldout]
    assert a != [f"v{i}" for i in range(10)]  # not the split's first rows
    assert a == [e.id for e in make_splits(task, 5, 10, seed=0).heldout]  # reproducible
    assert a != [e.id for e in make_splits(task, 5, 10, seed=1).heldout]  # the seed draws it
    assert [order[i] for i in a] == sorted(order[i] for i in a) and len(set(a)) == 10  # split order, no repeats
    full = [e.id for e in make_splits(task, 5, 50, seed=3).heldout]
    assert full == [f"v{i}" for i in range(50)]  # the whole split: unchanged, in source order


def test_paper_sizes_match_the_paper():
    assert {f: (v["discovery"], v["heldout"]) for f, v in PAPER.items()} == {
        "arithmetic": (2000, 1000), "boolq": (2000, 3270), "hellaswag": (2000, 10042), "mbpp": (374, 500)}
    mbpp = get_task("mbpp")
    assert isinstance(mbpp, MBPP) and mbpp.fewshot_sampler == "first_n"


def test_a_preset_given_to_runconfig_is_applied_as_the_cli_applies_it(tmp_path, monkeypatch):
    """RunConfig(preset=...) fills what its arguments leave out (defaults < preset < arguments), so the library, a
    config file and the CLI's flags resolve one preset to one config; a recorded config is never filled again."""
    from dataclasses import replace

    from click.testing import CliRunner

    import celtk.run.config
    from celtk.cli import main

    direct = RunConfig(preset="paper", task="boolq", discovery=50)
    assert (direct.task, direct.discovery, direct.heldout, direct.fewshot) == ("boolq", 50, 3270, 0)
    assert direct == resolve_config(None, {"preset": "paper", "task": "boolq", "discovery": 50})
    assert direct == RunConfig.from_dict({"preset": "paper", "task": "boolq", "discovery": 50})
    mbpp = RunConfig(preset="paper:mbpp")
    assert (mbpp.task, mbpp.discovery, mbpp.heldout, mbpp.fewshot) == ("mbpp", 374, 500, 3)
    assert mbpp == resolve_config(None, {"preset": "paper:mbpp"})
    # an argument equal to the default is still an argument: it wins over the preset
    assert RunConfig(preset="paper:mbpp", fewshot=RunConfig().fewshot, discovery=200).discovery == 200
    # a copy or a recorded config keeps its values
    assert replace(mbpp, seed=4).discovery == 374 and replace(direct, seed=4).discovery == 50
    assert RunConfig.from_dict({k: v for k, v in direct.recorded().items()}) == direct
    with pytest.raises(ConfigError, match="official GPT-3 rows"):
        RunConfig(preset="paper")  # arithmetic on generated data: refused as on the CLI
    with pytest.raises(ConfigError, match="no settings for task 'humaneval'"):
        RunConfig(preset="paper", task="humaneval")
    with pytest.raises(ConfigError, match="Unknown preset 'papr'"):
        RunConfig(preset="papr")

    # the CLI's own resolution (a file and flags), caught where the screen would start
    seen = []

    def caught(config, out, **kwargs):
        seen.append(config)
        raise ConfigError("caught")

    monkeypatch.setattr(celtk.run.config, "preflight", caught)
    file = tmp_path / "run.toml"
    file.write_text('preset = "paper:boolq"\nheldout = 1000\n')
    result = CliRunner().invoke(main, ["screen", "--config", str(file), "--fewshot", "2", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "caught" in result.output + result.stderr, result.output
    assert seen == [RunConfig(preset="paper:boolq", heldout=1000, fewshot=2)]
    assert (seen[0].task, seen[0].discovery, seen[0].heldout, seen[0].fewshot) == ("boolq", 2000, 1000, 2)
