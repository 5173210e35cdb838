"""The CEL pipeline on tiny models: cached screener == plain path, planted head found,
resume == uninterrupted, shards merged == one run, mismatches refused."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _support import logprobs, planted_config

from celtk.errors import ConfigError, RunStoreError
from celtk.evaluation.prompts import prepare
from celtk.heads import HeadSet, all_heads
from celtk.run import RunConfig, merge_shards, run_screen, run_select, run_test
from celtk.screening.cached import CachedScreener
from celtk.screening.plain import screen_plain
from celtk.tasks import get_task, make_splits


@pytest.mark.parametrize("share_prefix", [False, True])
def test_cached_screener_equals_plain_for_every_head(tiny_model, share_prefix):
    task = get_task("arithmetic")
    splits = make_splits(task, 14, 0, fewshot=2, seed=2)
    prepared = prepare(tiny_model, task, splits.discovery, splits.shots)
    sets = [HeadSet((h,)) for h in all_heads(tiny_model.n_layers, tiny_model.n_heads)]
    sets += [HeadSet.parse("L0H1,L2H3"), HeadSet.parse("L1H0,L1H3,L2H2")]
    intact_p, plain = screen_plain(tiny_model, prepared, sets, batch_size=5)
    for replay in ("fused", "bridge"):  # the fast replay and the bridge blocks under hook_z hooks
        screener = CachedScreener(tiny_model, prepared, batch_size=5, rows_per_pass=15, share_prefix=share_prefix,
                                  replay=replay)
        assert (screener.prefix_len > 0) == share_prefix and screener.replay == replay
        intact_c, cached = screener.run(sets)
        np.testing.assert_allclose(logprobs(intact_c), logprobs(intact_p), atol=1e-5)
        assert np.array_equal(intact_c.correct, intact_p.correct)
        for s in sets:
            assert np.array_equal(cached[s].correct, plain[s].correct), s
            np.testing.assert_allclose(logprobs(cached[s]), logprobs(plain[s]), atol=1e-5)
        assert any(not np.allclose(logprobs(cached[s]), logprobs(intact_c))
                   for s in sets)


def test_cached_screener_exact_on_gemma3_sliding_window(smol_tokenizer):
    from _support import make_tiny

    model = make_tiny("gemma3", smol_tokenizer)
    task = get_task("arithmetic")
    splits = make_splits(task, 10, 0, fewshot=2)  # prompts longer than the 16-token window
    prepared = prepare(model, task, splits.discovery, splits.shots)
    sets = [HeadSet((h,)) for h in all_heads(model.n_layers, model.n_heads)] + [HeadSet.parse("L0H1,L2H3")]
    _, plain = screen_plain(model, prepared, sets, batch_size=5)
    for share in (False, True):
        _, cached = CachedScreener(model, prepared, batch_size=5, share_prefix=share).run(sets)
        for s in sets:
            assert np.array_equal(cached[s].correct, plain[s].correct)
            np.testing.assert_allclose(logprobs(cached[s]), logprobs(plain[s]), atol=1e-5)


def test_planted_head_is_selected_with_heldout_gain(planted, tmp_path):
    model, task = planted
    run_screen(planted_config(task), tmp_path, model=model)
    selection = run_select(tmp_path, p=4, k=2, model=model)
    assert "L1H2" in selection.heads
    screen = json.loads((tmp_path / "screen.json").read_text())
    assert len(screen["heads"]) == model.n_layers * model.n_heads and screen["discovery_ids"]
    assert selection.n_evaluated_subsets == 6  # C(4, 2)
    # an interrupted select resumes from its per-layer parts and freezes the same selection
    parts = sorted((tmp_path / "select_parts" / "sets").glob("*.json"))
    assert parts
    parts[-1].unlink()
    (tmp_path / "selection.json").unlink()
    assert run_select(tmp_path, p=4, k=2, model=model) == selection
    # the held-out test comes last: once it has run, selecting again is refused without force
    test = run_test(tmp_path, model=model, n_boot=500)
    assert test.gain > 0 and test.ablated_accuracy > test.intact_accuracy
    assert test.gain_ci[0] > 0 and test.mcnemar_p < 0.05
    for name in ("screen.json", "screen.csv", "selection.json", "diagnostics.json", "test.json", "config.json"):
        assert (tmp_path / name).is_file()


def test_resume_equals_uninterrupted_and_mismatch_refused(planted, tmp_path):
    model, task = planted
    full = run_screen(planted_config(task), tmp_path / "full", model=model)
    part = tmp_path / "part"
    run_screen(planted_config(task), part, model=model)
    # simulate an interruption after layer 0: drop later parts and the final files
    for name in ("L1.json", "L2.json"):
        (part / "screen_parts" / name).unlink()
    (part / "screen.json").unlink()
    resumed = run_screen(planted_config(task), part, model=model)
    assert resumed.heads == full.heads
    assert (part / "screen.json").read_text() == (tmp_path / "full" / "screen.json").read_text()
    with pytest.raises(RunStoreError, match="different configuration .*seed"):
        run_screen(planted_config(task, seed=1), part, model=model)


def test_screen_of_some_layers_equals_those_rows_of_the_full_screen(planted, tmp_path):
    model, task = planted
    full = run_screen(planted_config(task), tmp_path / "full", model=model)
    some = run_screen(planted_config(task), tmp_path / "some", model=model, layers=[0, 2])
    assert some.heads == [r for r in full.heads if r.head.layer in (0, 2)] and some.heads
    assert some.intact_correct == full.intact_correct
    assert some.layers == [0, 2] and full.layers is None
    from celtk.run.session import load_screen

    assert len(load_screen(tmp_path / "some")[2]) == 8  # a declared layer subset is complete, not partial
    with pytest.raises(ConfigError, match=r"No layer\(s\) \[7\]"):
        run_screen(planted_config(task), tmp_path / "bad", model=model, layers=[7])


def test_shards_merged_equal_one_run(planted, tmp_path):
    model, task = planted
    one = run_screen(planted_config(task), tmp_path / "one", model=model)
    sharded = tmp_path / "sharded"
    for i in range(3):
        run_screen(planted_config(task), sharded, shard=(i, 3), model=model)
    merged = merge_shards(sharded)
    assert merged.heads == one.heads
    shutil.rmtree(sharded / "shard-1-of-3")
    with pytest.raises(RunStoreError, match="shard\\(s\\) 1/3 missing"):
        merge_shards(sharded)


def test_config_validation():
    with pytest.raises(ConfigError, match="k must be at least 1, got 0"):
        RunConfig(k=0).validated()
    with pytest.raises(ConfigError, match="Unknown key\\(s\\) bogus"):
        RunConfig.from_dict({"bogus": 1})


_CHILD = r"""
import sys, torch
sys.path.insert(0, {tests!r})
from _support import make_tiny
from transformers import AutoTokenizer
from celtk.models import ALIASES, dequantized_dir
from celtk.run import RunConfig, run_screen
tok = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
tok.pad_token = tok.pad_token or tok.eos_token
model = make_tiny("llama", tok, seed=3)
o = model.bridge.blocks[1].attn.o.original_component.weight
with torch.no_grad():
    o[:, 2 * model.d_head:3 * model.d_head] *= 25.0
config = RunConfig(model="tiny-planted", task={task!r}, discovery=40, heldout=40, fewshot=0, batch_size=2, p=4, k=2)
print("ready", flush=True)
run_screen(config, {out!r}, model=model)
"""


def _child(code):
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.fixture(scope="module")
def uninterrupted(planted, tmp_path_factory):
    import time

    model, task = planted
    config = RunConfig(model="tiny-planted", task=task, discovery=40, heldout=40, fewshot=0, batch_size=2, p=4, k=2)
    out = tmp_path_factory.mktemp("full")
    start = time.perf_counter()
    result = run_screen(config, out, model=model)
    return config, result, (out / "screen.json").read_text(), time.perf_counter() - start


_KILL_FRACTIONS = np.random.default_rng(20261202).uniform(0.0, 1.3, size=10)


@pytest.mark.parametrize("fraction", _KILL_FRACTIONS, ids=[f"{f:.2f}" for f in _KILL_FRACTIONS])
def test_sigkill_at_random_point_then_resume_equals_uninterrupted(planted, uninterrupted, tmp_path, fraction):
    """SIGKILL the screen at a random moment (a fraction of an uninterrupted run's time, ten fixed
    random draws); whatever it left is either absent or whole, and the resumed run equals the
    uninterrupted one: no head lost or counted twice."""
    import os
    import signal
    import time
    from pathlib import Path

    model, task = planted
    config, full, full_text, seconds = uninterrupted
    out = tmp_path / "killed"
    child = _child(_CHILD.format(tests=str(Path(__file__).parent.parent), task=task, out=str(out)))
    time.sleep(fraction * seconds)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    for part in out.rglob("*.json"):  # every visible result file is complete JSON
        json.loads(part.read_text())
    resumed = run_screen(config, out, model=model)
    assert [h.head for h in resumed.heads] == [h.head for h in full.heads]  # none lost, none twice
    assert resumed.heads == full.heads
    assert (out / "screen.json").read_text() == full_text
    assert not list(out.rglob(".*.partial"))


@pytest.mark.parametrize("dies_in", ["_write_screen_csv", "write_json"])
def test_a_screen_killed_after_scoring_leaves_no_finished_looking_screen(planted, uninterrupted, tmp_path,
                                                                       monkeypatch, dies_in):
    """Killed while writing screen.csv or timing.json (after every head is scored): screen.json, which marks the
    stage finished, is not there yet, so the rerun takes the lock, sweeps the killed writer's temporary files and
    writes every file; it does not return a stored screen with its csv missing."""
    import celtk.run.screen as stage

    model, _ = planted
    config, full, full_text, _ = uninterrupted
    out = tmp_path / "killed"
    real = getattr(stage, dies_in)

    def killed(path, *args, **kwargs):
        if Path(path).name in ("screen.csv", "timing.json"):
            (Path(path).parent / f".{Path(path).name}.x.partial").write_text("half")  # what a kill mid-write leaves
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)
    monkeypatch.setattr(stage, dies_in, killed)
    with pytest.raises(KeyboardInterrupt):
        run_screen(config, out, model=model)
    assert not (out / "screen.json").exists()
    monkeypatch.setattr(stage, dies_in, real)
    assert run_screen(config, out, model=model).heads == full.heads
    assert (out / "screen.json").read_text() == full_text
    assert (out / "screen.csv").exists() and (out / "timing.json").exists()
    assert not list(out.rglob(".*.partial"))


def test_a_screen_killed_recording_its_digest_is_read_back_and_leaves_no_temporary_file(planted, uninterrupted,
                                                                                         tmp_path, monkeypatch):
    """Killed after screen.json was replaced, while digests.json was rewritten to record it: the rerun reads the
    screen by the digest its save announced, and sweeps the killed write's temporary file though it takes no lock."""
    from celtk.store import files
    from celtk.store.documents import digests

    model, _ = planted
    config, full, full_text, _ = uninterrupted
    out = tmp_path / "killed"

    def killed(path, obj):
        if Path(path).name == "digests.json" and (Path(path).parent / "screen.json").exists():
            (Path(path).parent / ".digests.json.x.partial").write_text("{half")
            raise KeyboardInterrupt
        return files.write_json(path, obj)
    monkeypatch.setattr(digests, "write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        run_screen(config, out, model=model)
    monkeypatch.undo()
    assert (out / "screen.json").read_text() == full_text
    assert run_screen(config, out, model=model).heads == full.heads
    assert not list(out.rglob(".*.partial"))


def test_second_process_on_same_directory_is_refused(planted, uninterrupted, tmp_path):
    import os
    import signal

    model, _ = planted
    config = uninterrupted[0]
    holder = _child("from celtk.store.files import locked\nimport time\n"
                    f"with locked(__import__('pathlib').Path({str(tmp_path)!r})):\n"
                    f"    print('ready', flush=True)\n    time.sleep(120)\n")
    try:
        with pytest.raises(RunStoreError, match=rf"in use by celtk pid {holder.pid}"):
            run_screen(config, tmp_path, model=model)
        assert not (tmp_path / "screen.json").exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert run_screen(config, tmp_path, model=model).heads == uninterrupted[1].heads  # the lock died with it


def test_same_command_twice_gives_byte_identical_results(planted, tmp_path):
    """Two separate `celtk run` processes (separate hash seeds) write byte-identical JSON;
    only the timing files may differ."""
    import os
    import subprocess
    import sys

    from celtk.ablation import export_ablated

    model, task = planted
    model_dir = export_ablated(model, HeadSet(()), tmp_path / "model")
    outs = []
    for i, hash_seed in enumerate(("1", "2")):
        out = tmp_path / f"run{i}"
        command = [sys.executable, "-m", "celtk.cli", "run", "--model", str(model_dir), "--task", task,
                   "--discovery", "30", "--heldout", "30", "--fewshot", "0", "--batch-size", "8", "--p", "3",
                   "--k", "2", "--out", str(out)]
        # one held-out set tested twice: each process under its own ledger, as two machines would be
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "CELTK_LEDGER": str(tmp_path / f"ledger{i}.jsonl")}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(out)
    names = sorted(p.name for p in outs[0].glob("*.json"))
    assert {"screen.json", "selection.json", "diagnostics.json", "test.json", "timing.json"} <= set(names)
    assert names == sorted(p.name for p in outs[1].glob("*.json"))
    for name in names:
        if not name.endswith("timing.json"):  # timing.json (stages), run_timing.json (the CLI's wall time)
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert (outs[0] / "screen.csv").read_bytes() == (outs[1] / "screen.csv").read_bytes()
    assert json.loads((outs[0] / "timing.json").read_text())["replay"] == "fused"  # a Llama: the fused replay ran


def test_auto_batch_fits_memory_and_changes_no_result(tiny_llama):
    from celtk.evaluation.memory import auto_batch

    task = get_task("arithmetic")
    splits = make_splits(task, 12, 0, fewshot=2, seed=4)
    prepared = prepare(tiny_llama, task, splits.discovery, splits.shots)
    sizes = [auto_batch(tiny_llama, prepared, free_bytes=b)[1] for b in (1 << 16, 1 << 22, 1 << 26, 1 << 40)]
    assert sizes == sorted(sizes) and sizes[0] == 1 and sizes[-1] == 512
    sets = [HeadSet((h,)) for h in all_heads(tiny_llama.n_layers, tiny_llama.n_heads)]
    _, reference = CachedScreener(tiny_llama, prepared, batch_size=4).run(sets)
    for free in (1 << 22, 1 << 26):
        batch, rows = auto_batch(tiny_llama, prepared, free_bytes=free)
        _, results = CachedScreener(tiny_llama, prepared, batch_size=batch, rows_per_pass=rows).run(sets)
        for s in sets:
            assert np.array_equal(results[s].correct, reference[s].correct)
            np.testing.assert_allclose(logprobs(results[s]), logprobs(reference[s]), atol=1e-5)
    with pytest.raises(ConfigError, match="positive integer or 'auto'"):
        RunConfig(batch_size="big").validated()
    assert RunConfig(batch_size="auto").validated().batch_size == "auto"


_SHARD_CHILD = _CHILD.replace("print(\"ready\", flush=True)\nrun_screen(config, {out!r}, model=model)",
                              "print(\"ready\", flush=True)\n"
                              "run_screen(config, {out!r}, shard=({i}, {n}), model=model)")


def test_shards_in_parallel_processes_merge_to_one_run(planted, uninterrupted, tmp_path):
    """The one-node multi-GPU layout on CPU: N processes, one shard each, at the same time; then merge."""
    import subprocess
    import sys
    from pathlib import Path

    model, task = planted
    config, full, full_text, _ = uninterrupted
    out = tmp_path / "parallel"
    n = 3
    code = [_SHARD_CHILD.format(tests=str(Path(__file__).parent.parent), task=task, out=str(out), i=i, n=n)
            for i in range(n)]
    assert "shard=(0, 3)" in code[0]
    children = [subprocess.Popen([sys.executable, "-c", c], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for c in code]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
    merged = merge_shards(out)
    assert merged.heads == full.heads
