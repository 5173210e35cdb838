"""The README's commands all run.

Every ``celtk VERB …`` line in a bash block of the README or a docs/ page names a verb whose ``--help``
succeeds and lists every option the line uses; the set-up commands are Makefile targets, and CI runs the
README's test command; every Python block compiles, and the README's Python blocks run end to end on a
tiny random model of SmolLM2-135M's shape (30 layers × 9 heads) wherever they would load the real one."""

from __future__ import annotations

import re

import pytest
import torch
import transformers as tf
from _markdown import README, ROOT, celtk_command_lines, fenced_blocks, pages
from click.testing import CliRunner

import celtk
from celtk.cli import main
from celtk.models import wrap_hf_model

COMMANDS = [(path, words, line) for path in pages() for words, line in celtk_command_lines(path)]


def _split(words: list[str]) -> tuple[list[str], str, list[str]]:
    """(the options before the verb, the verb, the options after it) of one command line."""
    takes_value = {opt for param in main.params if not getattr(param, "is_flag", False) for opt in param.opts}
    before, i = [], 0
    while i < len(words) and words[i].startswith("-"):
        before.append(words[i].split("=")[0])
        i += 2 if words[i] in takes_value else 1
    assert i < len(words), f"no verb in `celtk {' '.join(words)}`"
    after = [w.split("=")[0] for w in words[i + 1:] if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", w)]
    return before, words[i], after


def _listed(option: str, help_text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text) is not None


def test_the_readme_names_the_ten_commands_a_user_needs():
    verbs = {_split(words)[1] for path, words, _ in COMMANDS if path == README}
    needed = {"run", "screen", "select", "test", "transfer", "calibrate", "stability", "ablations", "report", "plan",
              "eval"}
    assert needed <= verbs, f"the README shows no example of: {sorted(needed - verbs)}"


@pytest.mark.parametrize("path, words, line", COMMANDS,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, _, n in COMMANDS])
def test_each_command_names_a_verb_and_options_it_has(path, words, line):
    before, verb, after = _split(words)
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0, top.output
    unknown = [o for o in before if not _listed(o, top.output)]
    assert not unknown, f"{path.name}:{line}: `celtk {' '.join(words)}` uses {unknown}, which `celtk --help` lacks"
    result = runner.invoke(main, [verb, "--help"])
    assert result.exit_code == 0, f"{path.name}:{line}: `celtk {verb} --help` failed:\n{result.output}"
    unknown = [o for o in after if not _listed(o, result.output)]
    assert not unknown, \
        f"{path.name}:{line}: `celtk {' '.join(words)}` uses {unknown}, which `celtk {verb} --help` lacks"


def test_setup_commands_are_make_targets_and_ci_runs_the_test_command():
    setup = next(code for language, code, _ in fenced_blocks(README) if "make demo" in code)
    targets = re.findall(r"^make (\S+)", setup, re.M)
    assert targets == ["demo", "test"], targets
    makefile = (ROOT / "Makefile").read_text()
    mentioned = set(re.findall(r"`make ([\w-]+)`", README.read_text()))
    missing = [t for t in {*targets, *mentioned} if not re.search(rf"^{re.escape(t)}:", makefile, re.M)]
    assert not missing, f"the README names make targets the Makefile lacks: {missing}"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [c.split("#")[0].strip() for c in ci], ".ci/run no longer runs the README's `make test`"
    assert "make docs" in [c.split("#")[0].strip() for c in ci], ".ci/run no longer builds the docs"
    demo = re.search(r"^DEMO_ARGS \?= (.*)$", makefile, re.M)
    assert demo and f"`celtk run {demo.group(1).strip()}`" in README.read_text(), \
        "the README's account of what `make demo` runs differs from the Makefile's DEMO_ARGS"


PYTHON = [(path, code, line) for path in pages() for language, code, line in fenced_blocks(path)
          if language == "python"]


@pytest.mark.parametrize("path, code, line", PYTHON, ids=[f"{p.relative_to(ROOT)}:{n}" for p, _, n in PYTHON])
def test_every_python_block_compiles(path, code, line):
    compile(code, f"{path.name}:{line}", "exec")


def _smollm2_shaped_tiny(tokenizer):
    """A random Llama of SmolLM2-135M's head layout (30 layers × 9 query heads, 3 key/value heads), so every head
    the README names exists; 8-dimensional heads keep it fast."""
    config = tf.LlamaConfig(vocab_size=len(tokenizer), hidden_size=72, intermediate_size=64, num_hidden_layers=30,
                            num_attention_heads=9, num_key_value_heads=3, head_dim=8, max_position_embeddings=512,
                            initializer_range=0.2, tie_word_embeddings=False, pad_token_id=0, bos_token_id=None,
                            eos_token_id=None)
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return wrap_hf_model(hf, tokenizer, name="tiny-smollm2-shaped")


README_PYTHON = [(code, line) for language, code, line in fenced_blocks(README) if language == "python"]


@pytest.mark.parametrize("code, line", README_PYTHON, ids=[f"README.md:{n}" for _, n in README_PYTHON])
def test_readme_python_runs_on_a_tiny_model(code, line, smol_tokenizer, tmp_path, monkeypatch, capsys, request):
    """A block that names heads gets a tiny model of SmolLM2's layout, so they exist; one that runs whole stages
    gets the 3-layer tiny Llama (12 heads, enough for p = 10), so its 165 subsets stay cheap."""
    if "celtk.Run(" in code and not hasattr(celtk, "Run"):
        pytest.skip("celtk.Run (the notebook handle) is not in this tree yet; the block is only compiled")
    names_heads = re.search(r"L\d+H\d+", code)
    tiny = _smollm2_shaped_tiny(smol_tokenizer) if names_heads else request.getfixturevalue("tiny_llama")
    loaded = []

    def load_model(source, *a, **k):
        loaded.append(source)
        return tiny

    monkeypatch.setattr(celtk, "load_model", load_model)
    if hasattr(celtk, "Run"):  # a tiny random model gains nothing, so its search would freeze nothing: freeze anyway
        select = celtk.Run.select
        monkeypatch.setattr(celtk.Run, "select", lambda self, **kw: select(self, **{"force": True, **kw}))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
    assert loaded, "the block never loaded a model, so it ran nothing the test stands in for"
    assert capsys.readouterr().out.strip(), "the block's print wrote nothing"
