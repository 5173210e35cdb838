"""Bad input: every case below raises one CeltkError subclass whose message names what was
wrong and what would be right. The "Bad input" table of docs/reliability.md lists the same case ids
with the message each now gives (checked below; this file's ``__main__`` writes the table)."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from pathlib import Path

import pytest

from celtk import errors as E


def _jsonl(tmp: Path, text: str) -> str:
    path = tmp / "task.jsonl"
    path.write_text(text)
    return f"jsonl:{path}"


def _load_jsonl(tmp: Path, text: str):
    from celtk.tasks import get_task, make_splits

    return make_splits(get_task(_jsonl(tmp, text)), 1, 0)


def _gen_lines(n: int, fewshot: int = 0) -> str:
    rows = [{"prompt": f"{i} plus 1 is", "target": f" {i + 1}"} for i in range(n)]
    rows += [{"prompt": f"{i} plus 2 is", "target": f" {i + 2}", "split": "fewshot"} for i in range(fewshot)]
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture(scope="module")
def run_dir(tiny_llama, tmp_path_factory):
    """A screened and selected tiny run, shared by the run-directory cases (copied per case)."""
    from celtk.run import RunConfig, run_screen, run_select

    out = tmp_path_factory.mktemp("run")
    task = _jsonl(tmp_path_factory.mktemp("data"), _gen_lines(40))
    run_screen(RunConfig(model="tiny", task=task, discovery=12, heldout=12, fewshot=0, batch_size=8), out,
               model=tiny_llama)
    run_select(out, p=3, k=2, model=tiny_llama, force=True)  # a tiny random model gains nothing: freeze it anyway
    return out


def _copy(run_dir: Path, tmp: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run_dir, tmp / "copy"))


def _model_dir(ctx, edit=None, drop=()) -> str:
    """The tiny model saved as an HF directory (config, tokenizer, weights), then broken by ``edit``/``drop``."""
    from celtk import export_ablated
    out = Path(export_ablated(ctx.tiny, "", ctx.tmp / "ckpt"))
    for pattern in drop:
        for path in out.glob(pattern):
            path.unlink()
    if edit:
        config = json.loads((out / "config.json").read_text())
        edit(config)
        (out / "config.json").write_text(json.dumps(config))
    return str(out)


# ---- the cases: id -> (callable taking a context, expected class, message pattern) ----

def c_unknown_model(ctx):
    from celtk import load_model
    load_model("smollm2-13m")


def c_model_path_missing(ctx):
    from celtk import load_model
    load_model(str(ctx.tmp / "no-such-dir"))


def c_gguf_missing(ctx):
    from celtk import load_model
    load_model(str(ctx.tmp / "model.gguf"))


def c_dir_without_config(ctx):
    from celtk import load_model
    load_model(str(ctx.tmp))


def c_corrupted_weights(ctx):
    from celtk import export_ablated, load_model
    out = export_ablated(ctx.tiny, "", ctx.tmp / "ckpt")
    weights = next(Path(out).glob("*.safetensors"))
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    load_model(str(out))


def c_gguf_truncated_header(ctx):
    from celtk import load_model
    from celtk.models import ALIASES
    ctx.monkeypatch.setenv("CELTK_CACHE", str(ctx.tmp / "cache"))
    with open(ALIASES["smollm2-135m"].locate(), "rb") as handle:
        (ctx.tmp / "cut.gguf").write_bytes(handle.read(100))  # magic and version, then the header stops
    load_model(str(ctx.tmp / "cut.gguf"))


def c_model_without_tokenizer(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, drop=["tokenizer*", "special_tokens_map.json", "chat_template*"]))


def c_config_wrong_type(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, lambda c: c.update(num_hidden_layers="two")))


def c_config_impossible_size(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, lambda c: c.update(hidden_size=-64)))


def c_config_without_model_type(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, lambda c: c.pop("model_type")))


def c_unknown_model_type(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, lambda c: c.update(model_type="foo", architectures=["FooForCausalLM"])))


def c_not_a_causal_lm(ctx):
    from celtk import load_model
    load_model(_model_dir(ctx, lambda c: c.update(model_type="t5", architectures=["T5ForConditionalGeneration"])))


def c_architecture_not_screenable(ctx):
    import transformers as tf

    from celtk import load_model
    out = ctx.tmp / "biogpt"
    config = tf.BioGptConfig(vocab_size=len(ctx.tiny.tokenizer), hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=64)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(out)
    ctx.tiny.tokenizer.save_pretrained(out)
    load_model(str(out))


def c_hub_id_invalid(ctx):
    from celtk import load_model
    load_model("a/b/c")


def c_hub_id_with_space(ctx):
    from celtk import load_model
    load_model("owner/my model")


def c_cache_is_a_file(ctx):
    from celtk import load_model
    (ctx.tmp / "cache").write_text("not a directory")
    ctx.monkeypatch.setenv("CELTK_CACHE", str(ctx.tmp / "cache"))
    (ctx.tmp / "m.gguf").write_bytes(b"GGUF")
    load_model(str(ctx.tmp / "m.gguf"))


def c_hub_unreachable(ctx):
    from celtk import load_model
    ctx.monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    load_model("celtk-test/no-such-model")


def c_task_hub_unreachable(ctx):
    from celtk.tasks import get_task, make_splits
    ctx.monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ctx.monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    make_splits(get_task("boolq"), 10, 10)


def c_device_unavailable(ctx):
    from celtk.models import resolve_device
    resolve_device("cuda:3")


def c_device_meta(ctx):
    from celtk.models import resolve_device
    resolve_device("meta")


def c_device_xla(ctx):
    from celtk.models import resolve_device
    resolve_device("xla")


def c_device_cuda_absent(ctx):
    from celtk.models import resolve_device
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    resolve_device("cuda")


def c_device_mps_absent(ctx):
    from celtk.models import resolve_device
    if __import__("torch").backends.mps.is_available():
        pytest.skip("this machine has MPS")
    resolve_device("mps")


def c_device_malformed(ctx):
    from celtk.models import resolve_device
    resolve_device("gpu0")


def c_dtype_unsupported(ctx):
    from celtk.models import resolve_dtype
    resolve_dtype("float8")


def c_unknown_task(ctx):
    from celtk.tasks import get_task
    get_task("arithmatic")


def c_unknown_subtask(ctx):
    from celtk.tasks import get_task
    get_task("arithmetic:2dx")


def c_head_malformed(ctx):
    from celtk.heads import HeadSet
    HeadSet.parse("L3-H2")


def c_head_out_of_range(ctx):
    from celtk.heads import HeadSet
    HeadSet.parse("L3H2,L40H2").validate(30, 9)


def c_head_twice(ctx):
    from celtk.heads import HeadSet
    HeadSet.parse("L1H2,1.2")


def c_ablate_out_of_range(ctx):
    from celtk import ablate
    with ablate(ctx.tiny, "L1H9"):
        pass


def c_k_exceeds_p(ctx):
    from celtk.search.registry import get_strategy
    get_strategy("algorithm1").check(k=4, p=3)


def c_p_exceeds_heads(ctx):
    from celtk.run import run_select
    run_select(_copy(ctx.run_dir, ctx.tmp), p=999, k=2, model=ctx.tiny)


def c_discovery_too_large(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task("arithmetic:2da"), 5000, 0)


def c_both_too_large(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task(_jsonl(ctx.tmp, _gen_lines(30))), 20, 20)


def c_negative_size(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task("arithmetic:2da"), -1, 10)


def c_sets_overlap(ctx):
    from celtk.tasks import get_task, make_splits
    from celtk.tasks._splits import check_disjoint
    splits = make_splits(get_task("arithmetic:2da"), 20, 20)
    check_disjoint(splits.discovery, splits.heldout[:5] + splits.discovery[3:5])


def c_fewshot_pool_too_small(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task(_jsonl(ctx.tmp, _gen_lines(10, fewshot=2))), 4, 4, fewshot=5)


def c_empty_task(ctx):
    _load_jsonl(ctx.tmp, "")


def c_task_file_missing(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task(f"jsonl:{ctx.tmp / 'none.jsonl'}"), 1, 0)


def c_malformed_jsonl(ctx):
    _load_jsonl(ctx.tmp, _gen_lines(3) + '{"prompt": "x", "target": \n')


def c_missing_field(ctx):
    _load_jsonl(ctx.tmp, _gen_lines(2) + '{"target": " 3"}\n')


def c_label_not_integer(ctx):
    _load_jsonl(ctx.tmp, '{"prompt": "Sky?", "choices": [" blue", " red"], "label": "0"}\n')


def c_label_out_of_range(ctx):
    _load_jsonl(ctx.tmp, '{"prompt": "Sky?", "choices": [" blue", " red"], "label": 2}\n')


def c_mixed_kinds(ctx):
    _load_jsonl(ctx.tmp, _gen_lines(2) + '{"prompt": "Sky?", "choices": [" blue", " red"], "label": 0}\n')


def c_repeated_id(ctx):
    _load_jsonl(ctx.tmp, '{"id": "a", "prompt": "1", "target": " 2"}\n{"id": "a", "prompt": "2", "target": " 3"}\n')


def c_hub_data_path_missing(ctx):
    from celtk.tasks import get_task, make_splits
    make_splits(get_task("boolq", data_path=str(ctx.tmp / "boolq-copy")), 10, 10)


def c_unknown_config_key(ctx):
    from celtk.run import RunConfig
    RunConfig.from_dict({"discovry": 50})


def c_shard_malformed(ctx):
    from celtk.run import parse_shard
    parse_shard("2of4")


def c_batch_size_zero(ctx):
    from celtk.evaluation.scoring import make_batches
    make_batches([], 0, pad_id=0)


def c_corrupted_run_file(ctx):
    from celtk.run import run_select
    out = _copy(ctx.run_dir, ctx.tmp)
    (out / "screen.json").write_text((out / "screen.json").read_text()[:200])
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


def c_stage_out_of_order(ctx):
    from celtk.run import run_test
    out = ctx.tmp / "fresh"
    out.mkdir()
    run_test(out, model=ctx.tiny)


def c_selection_from_other_model(ctx):
    from _support import make_tiny

    from celtk.run import run_test
    other = make_tiny("llama", ctx.tiny.tokenizer, seed=11)
    run_test(_copy(ctx.run_dir, ctx.tmp), model=other)


def c_run_dir_other_config(ctx):
    from celtk.run import RunConfig, run_screen
    out = _copy(ctx.run_dir, ctx.tmp)
    config = json.loads((out / "config.json").read_text())
    config = {k: v for k, v in config.items() if k != "celtk_version"} | {"seed": 5}
    run_screen(RunConfig.from_dict(config), out, model=ctx.tiny)


def c_merge_mismatched_shards(ctx):
    from celtk.run import merge_shards
    for name in ("shard-0-of-2", "shard-1-of-3"):
        (ctx.tmp / name).mkdir()
    merge_shards(ctx.tmp)


def c_merge_missing_shard(ctx):
    from celtk.run import merge_shards
    (ctx.tmp / "shard-0-of-2").mkdir()
    merge_shards(ctx.tmp)


def c_directory_in_use(ctx):
    from celtk.store.files import locked
    with locked(ctx.tmp), locked(ctx.tmp):
        pass


def c_output_not_writable(ctx):
    from celtk.store.files import write_json
    (ctx.tmp / "a-file").write_text("x")
    write_json(ctx.tmp / "a-file" / "out" / "screen.json", {})


def c_disk_full(ctx):
    from celtk.store.files import write_json

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ctx.monkeypatch.setattr("celtk.store.files.os.fsync", full)
    write_json(ctx.tmp / "screen.json", {"heads": []})


def c_code_execution_not_opted_in(ctx):
    from celtk.tasks._sandbox import run_untrusted
    ctx.monkeypatch.delenv("CELTK_ALLOW_CODE_EXEC", raising=False)
    run_untrusted("print(1)")


def c_config_string_for_bool(ctx):
    from celtk.run import resolve_config
    (ctx.tmp / "run.toml").write_text('chat = "no"\n')
    resolve_config(ctx.tmp / "run.toml")


def c_config_bool_for_int(ctx):
    from celtk.run import RunConfig
    RunConfig.from_dict({"discovery": True})


def c_config_not_utf8(ctx):
    from celtk.run import resolve_config
    (ctx.tmp / "run.toml").write_bytes(b"model = '\xff\xfe'\n")
    resolve_config(ctx.tmp / "run.toml")


def c_negative_seed(ctx):
    from celtk.run import RunConfig
    RunConfig.from_dict({"seed": -1})


def c_jsonl_not_utf8(ctx):
    from celtk.tasks import get_task, make_splits
    path = ctx.tmp / "task.jsonl"
    path.write_bytes(_gen_lines(2).encode() + b'{"prompt": "caf\xe9", "target": " 1"}\n')
    make_splits(get_task(f"jsonl:{path}"), 1, 0)


def c_data_not_utf8(ctx):
    from celtk.tasks import get_task, make_splits
    path = ctx.tmp / "boolq.jsonl"
    row = {"question": "is it", "passage": "yes", "label": 1}
    path.write_bytes((json.dumps(row) + "\n").encode() + b'{"question": "caf\xe9", "passage": "x", "label": 0}\n')
    make_splits(get_task("boolq", data_path=str(path)), 1, 0)


def c_stored_negative_seed(ctx):
    from _support import edit_document

    from celtk.run import run_test
    out = _copy(ctx.run_dir, ctx.tmp)
    for name in ("screen.json", "selection.json"):  # a negative seed in both documents, their digests recorded
        edit_document(out, name, lambda doc: doc | {"config": doc["config"] | {"seed": -1}})
    run_test(out, model=ctx.tiny)


def c_screen_part_not_celtks(ctx):
    from _support import forget_documents

    from celtk.run import RunConfig, run_screen

    out = _copy(ctx.run_dir, ctx.tmp)
    forget_documents(out, "screen.json")  # an interrupted screen: a finished one is returned as stored
    (out / "screen_parts" / "L1.json").write_text('{"rows": []}')
    config = {k: v for k, v in json.loads((out / "config.json").read_text()).items() if k != "celtk_version"}
    run_screen(RunConfig.from_dict(config), out, model=ctx.tiny)


def c_select_part_not_celtks(ctx):
    from celtk.run import run_select
    out = _copy(ctx.run_dir, ctx.tmp)
    sets = out / "select_parts" / "sets"
    (sets / "notes.json").write_text('["my notes"]')
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


def c_merge_only_odd_names(ctx):
    from celtk.run import merge_shards
    (ctx.tmp / "shard-x-of-y").mkdir()
    (ctx.tmp / "shard-0-of-1").write_text("a file, not a shard directory")
    merge_shards(ctx.tmp)


def c_output_read_only(ctx):
    from celtk.store.files import write_json
    (ctx.tmp / "ro").mkdir()
    _on_read_only(ctx.tmp / "ro", lambda: write_json(ctx.tmp / "ro" / "screen.json", {}))


def c_cache_read_only(ctx):
    from celtk import load_model
    (ctx.tmp / "cache").mkdir()
    ctx.monkeypatch.setenv("CELTK_CACHE", str(ctx.tmp / "cache"))
    (ctx.tmp / "m.gguf").write_bytes(b"GGUF")
    _on_read_only(ctx.tmp / "cache", lambda: load_model(str(ctx.tmp / "m.gguf")))


def _on_read_only(directory: Path, action) -> None:
    """Run ``action`` with ``directory`` read-only: by its mode when not root, else (root writes through any
    mode) in a forked child that mounts it read-only in a private mount namespace. A CeltkError it raises
    is raised again here, of the same class and message."""
    import ctypes
    import pickle

    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            return action()
        finally:
            directory.chmod(0o755)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ms_rdonly, ms_remount, ms_bind, ms_rec, ms_private = 1, 32, 4096, 16384, 1 << 18
            path = str(directory).encode()
            if (libc.unshare(0x00020000) or libc.mount(b"none", b"/", None, ms_rec | ms_private, None)
                    or libc.mount(path, path, None, ms_bind, None)
                    or libc.mount(b"none", path, None, ms_bind | ms_remount | ms_rdonly, None)):
                os.write(write, pickle.dumps(("skip", "no private mount namespace here")))
            else:
                try:
                    action()
                    os.write(write, pickle.dumps(("ok", "")))
                except E.CeltkError as error:
                    os.write(write, pickle.dumps((type(error).__name__, str(error))))
                except BaseException as error:  # noqa: BLE001 - reported to the parent as a failure
                    os.write(write, pickle.dumps(("traceback", repr(error))))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        kind, message = pickle.loads(handle.read())
    os.waitpid(pid, 0)
    if kind == "skip":
        pytest.skip(message)
    assert kind not in ("ok", "traceback"), f"a read-only {directory} gave {kind}: {message}"
    raise getattr(E, kind)(message)


def c_search_too_large(ctx):
    from celtk.search.registry import get_strategy
    get_strategy("algorithm1").check(k=270, p=270)


def c_lasso_no_masks(ctx):
    from celtk.run import run_altscreen
    run_altscreen(ctx.tmp, method="lasso", masks=0)


def c_nan_into_json(ctx):
    from celtk.store.files import write_json
    write_json(ctx.tmp / "test.json", {"gain": 0.1, "relative_error_reduction": float("nan")})


def c_eval_limit_zero(ctx):
    from celtk.run import run_eval
    run_eval(ctx.tmp / "eval", model=ctx.tiny, task="arithmetic:2da", limit=0)


def c_partial_screen(ctx):
    from _support import edit_document

    from celtk.run import run_select
    out = _copy(ctx.run_dir, ctx.tmp)
    edit_document(out, "screen.json", lambda doc: doc | {"heads": doc["heads"][:5]})  # as if celtk had written it
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


def c_screen_of_other_run(ctx):
    from _support import edit_document

    from celtk.run import run_select
    out = _copy(ctx.run_dir, ctx.tmp)
    edit_document(out, "screen.json", lambda doc: doc | {"task": doc["task"] | {"task": "arithmetic:2da"}})
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


def c_result_edited_by_hand(ctx):
    from celtk.run import run_select
    out = _copy(ctx.run_dir, ctx.tmp)
    doc = json.loads((out / "screen.json").read_text())
    (out / "screen.json").write_text(json.dumps(doc | {"heads": doc["heads"][:5]}, indent=1))
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


def c_heldout_without_run(ctx):
    from celtk.run import run_eval
    run_eval(None, model=ctx.tiny, task="arithmetic:2da", split="heldout", limit=3)


def c_heldout_log_edited(ctx):
    from celtk.heads import HeadSet
    from celtk.store.heldout import HeldoutLog
    out = _copy(ctx.run_dir, ctx.tmp)
    log = HeldoutLog(out)
    log.begin("stability", [HeadSet.parse("L0H0")], "0" * 16, 3, frozen=False, exploratory=True)
    log.begin("stability", [HeadSet.parse("L0H1")], "0" * 16, 3, frozen=False, exploratory=True)
    lines = log.path.read_text().splitlines()
    log.path.write_text(lines[1] + "\n")  # the first look removed
    from celtk.run import run_select
    run_select(out, p=3, k=2, model=ctx.tiny, force=True)


# ---- inputs bounded by the model and the machine, plan inputs, the Python API, the sandbox's tools ----

def _long_prompts(tmp: Path, words: int = 10_000) -> str:
    rows = [{"id": f"long-{i}", "prompt": " ".join(["stone"] * words) + f" {i} is", "target": " 1"} for i in range(2)]
    return _jsonl(tmp, "".join(json.dumps(r) + "\n" for r in rows))


def c_prompt_longer_than_context(ctx):
    from celtk.run import RunConfig, run_screen
    config = RunConfig(model="tiny", task=_long_prompts(ctx.tmp), discovery=1, heldout=1, fewshot=0)
    run_screen(config, ctx.tmp / "out", model=ctx.tiny)


def c_max_new_tokens_beyond_context(ctx):
    from celtk.run import RunConfig, run_screen
    config = RunConfig(model="tiny", task=_jsonl(ctx.tmp, _gen_lines(4)), discovery=2, heldout=2, fewshot=0,
                       grading="generate", max_new_tokens=100_000)
    run_screen(config, ctx.tmp / "out", model=ctx.tiny)


def c_stage_beyond_memory(ctx):
    import celtk.evaluation.memory
    from celtk.evaluation.memory import stage_bytes
    from celtk.evaluation.prompts import prepare
    from celtk.run import RunConfig, run_screen
    from celtk.tasks import get_task, make_splits
    task = _jsonl(ctx.tmp, _gen_lines(40))
    splits = make_splits(get_task(task), 12, 12, seed=0, fewshot=0)
    free = int(stage_bytes(ctx.tiny, prepare(ctx.tiny, get_task(task), splits.discovery), 2, cached=False))
    # a machine where batch 2 just fits
    ctx.monkeypatch.setattr(celtk.evaluation.memory, "available_memory", lambda device: free)
    run_screen(RunConfig(model="tiny", task=task, discovery=12, heldout=12, fewshot=0, batch_size=8), ctx.tmp / "out",
               model=ctx.tiny)


def c_calibrate_too_many_draws(ctx):
    from celtk.run.calibrate import run_calibration
    run_calibration(ctx.tmp, null="random-heads", repeats=100_000, n_candidates=100_000)


def c_merge_absurd_shard_count(ctx):
    from celtk.run import merge_shards
    for i in range(2):
        (ctx.tmp / f"shard-{i}-of-100000000000").mkdir()
    merge_shards(ctx.tmp)


def c_shard_count_beyond_heads(ctx):
    from celtk.run import RunConfig, run_screen
    config = RunConfig(model="tiny", task=_jsonl(ctx.tmp, _gen_lines(8)), discovery=4, heldout=4, fewshot=0)
    run_screen(config, ctx.tmp / "out", shard=(0, 1000), model=ctx.tiny)


_PLAN_CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 1000}


def _plan(**config):
    from celtk.planning.plan import PAPER_TASKS, Device, plan_run
    return plan_run(_PLAN_CONFIG | config, PAPER_TASKS["arithmetic"], Device("test", 1e12, 1e9), pool=4, k=2)


def c_plan_negative_layers(ctx):
    _plan(num_hidden_layers=-2)


def c_plan_zero_heads(ctx):
    _plan(num_attention_heads=0)


def c_plan_string_size(ctx):
    _plan(hidden_size="576")


def c_plan_p_exceeds_heads(ctx):
    from celtk.planning.plan import PAPER_TASKS, Device, plan_run
    plan_run(_PLAN_CONFIG, PAPER_TASKS["arithmetic"], Device("test", 1e12, 1e9), pool=999)


def c_plan_mean_prompt_longer(ctx):
    from dataclasses import replace

    from celtk.planning.plan import PAPER_TASKS
    replace(PAPER_TASKS["arithmetic"], prompt_tokens=100, mean_prompt_tokens=500)


def c_api_wrong_type(ctx):
    from _support import as_users_call

    import celtk
    # as a user calls it: the suite's own type hook would refuse the wrong type first
    as_users_call(celtk.run.run_select)(ctx.tmp, p="3", model=ctx.tiny)


def c_api_out_of_range(ctx):
    import numpy as np

    import celtk
    celtk.compare_paired(np.array([True, False]), np.array([True, True]), level=1.5)


def c_api_negative_count(ctx):
    import celtk
    celtk.stats.mcnemar_exact(-1, 3)


def c_api_config_at_construction(ctx):
    import celtk
    celtk.RunConfig(seed=-1)


def c_api_unknown_argument(ctx):
    import celtk
    celtk.run.run_test(ctx.tmp, held_out=3)  # type: ignore[call-arg]  # deliberately a misspelt keyword


def c_sandbox_tools_missing(ctx):
    import functools

    from celtk.tasks import _sandbox as sandbox
    ctx.monkeypatch.setattr(sandbox, "TOOL_DIRS", (str(ctx.tmp),))
    ctx.monkeypatch.setattr(sandbox, "tools", functools.lru_cache(maxsize=None)(sandbox.tools.__wrapped__))
    ctx.monkeypatch.setattr(sandbox, "_probe", functools.lru_cache(maxsize=None)(sandbox._probe.__wrapped__))
    ctx.monkeypatch.delenv("CELTK_ALLOW_WEAK_SANDBOX", raising=False)
    sandbox.run_untrusted("assert True", allow=True)


CASES = {
    "unknown-model": (c_unknown_model, E.ModelSourceError,
                      r"Unknown model 'smollm2-13m'.*Did you mean: 'smollm2-135m'"),
    "model-path-missing": (c_model_path_missing, E.ModelSourceError,
                           r"neither an HF model directory nor a \.gguf file"),
    "gguf-missing": (c_gguf_missing, E.ModelSourceError,
                     r"GGUF file .* does not exist; give the path of a \.gguf file"),
    "dir-without-config": (c_dir_without_config, E.ModelSourceError,
                           r"has no config\.json; give an HF model directory"),
    "corrupted-weights": (c_corrupted_weights, E.ModelSourceError,
                          r"model\.safetensors is corrupted or truncated .*Copy or download"),
    "gguf-truncated-header": (c_gguf_truncated_header, E.ModelSourceError,
                              r"Could not read GGUF file .*cut\.gguf: .*truncated or not a GGUF model; "
                              r"copy or download"),
    "model-without-tokenizer": (c_model_without_tokenizer, E.ModelSourceError,
                                r"has no usable tokenizer in .*copy the same model's tokenizer files"),
    "config-wrong-type": (c_config_wrong_type, E.ModelSourceError,
                          r"config\.json of .* has a wrong value: .*num_hidden_layers.* expected int, got str .*'two'"),
    "config-impossible-size": (c_config_impossible_size, E.ModelSourceError,
                               r"Could not build model .*negative dimension -64.*must describe the same model"),
    "config-without-model-type": (c_config_without_model_type, E.ModelSourceError,
                                  r"has no model_type; an HF config\.json names its model type"),
    "unknown-model-type": (c_unknown_model_type, E.ArchitectureError,
                           r"'FooForCausalLM' cannot be screened: "
                           r"this transformers does not know its model type 'foo'.*tested: "),
    "not-a-causal-lm": (c_not_a_causal_lm, E.ArchitectureError,
                        r"'T5ForConditionalGeneration' cannot be screened: "
                        r"model type 't5' has no causal language model.*tested: "),
    "architecture-not-screenable": (c_architecture_not_screenable, E.ArchitectureError,
                                    r"'BioGptForCausalLM' cannot be screened: .*tested: .*LlamaForCausalLM"),
    "hub-id-invalid": (c_hub_id_invalid, E.ModelSourceError,
                       r"'a/b/c' is not a hub id, a local path or a packaged alias: a hub id is 'owner/name'"),
    "hub-id-with-space": (c_hub_id_with_space, E.ModelSourceError,
                          r"'owner/my model' is not a hub id.*letters, digits"),
    "cache-is-a-file": (c_cache_is_a_file, E.ModelSourceError,
                        r"Cannot use celtk's cache .*: Not a directory\. Set CELTK_CACHE to a writable directory"),
    "hub-unreachable": (c_hub_unreachable, E.HubUnreachableError,
                        r"hub is unreachable .*load_model\(.DIR.\) \(--model DIR\)"),
    "task-hub-unreachable": (c_task_hub_unreachable, E.HubUnreachableError,
                             r"Could not fetch aps/super_glue/boolq .*from the hub"
                             r".*pass its directory as data_path= \(--data PATH\)"),
    "device-unavailable": (c_device_unavailable, E.ConfigError,
                           r"Device 'cuda:3' is not available.*Use device='cpu' \(--device cpu\)"),
    "device-meta": (c_device_meta, E.ConfigError,
                    r"Device 'meta' is a torch device celtk cannot run on .*use 'cpu', 'cuda'"),
    "device-xla": (c_device_xla, E.ConfigError, r"Device 'xla' is a torch device celtk cannot run on"),
    "device-cuda-absent": (c_device_cuda_absent, E.ConfigError,
                           r"Device 'cuda' is not available: this machine has 0 CUDA device\(s\)\. "
                           r"Use device='cpu' \(--device cpu\)"),
    "device-mps-absent": (c_device_mps_absent, E.ConfigError,
                          r"Device 'mps' is not available on this machine\. Use device='cpu' \(--device cpu\)"),
    "device-malformed": (c_device_malformed, E.ConfigError, r"'gpu0' is not a torch device; use 'cpu', 'cuda'"),
    "dtype-unsupported": (c_dtype_unsupported, E.ConfigError, r"dtype 'float8' is not supported; use one of float32"),
    "unknown-task": (c_unknown_task, E.TaskError, r"Unknown task 'arithmatic'\. Did you mean: 'arithmetic'"),
    "unknown-subtask": (c_unknown_subtask, E.TaskError, r"Unknown arithmetic subtask '2dx'.*Did you mean"),
    "head-malformed": (c_head_malformed, E.HeadError, r"Malformed head 'L3-H2': write a head as 'L\{layer\}H\{head\}'"),
    "head-out-of-range": (c_head_out_of_range, E.HeadError,
                          r"L40H2 is out of range .*layers are 0\.\.29, heads are 0\.\.8"),
    "head-twice": (c_head_twice, E.HeadError, r"names L1H2 more than once; list each head once"),
    "ablate-out-of-range": (c_ablate_out_of_range, E.HeadError, r"L1H9 is out of range .* heads are 0\.\.3"),
    "k-exceeds-p": (c_k_exceeds_p, E.ConfigError, r"k = 4 exceeds p = 3.*use k ≤ p"),
    "p-exceeds-heads": (c_p_exceeds_heads, E.ConfigError, r"p = 999 exceeds the 12 screened heads; use p ≤ 12"),
    "discovery-too-large": (c_discovery_too_large, E.SplitError,
                            r"Discovery \(5000\) \+ held-out \(0\) exceed the \d+ distinct examples "
                            r".*ask for at most \d+"),
    "discovery-plus-heldout-too-large": (c_both_too_large, E.SplitError,
                                         r"Discovery \(20\) \+ held-out \(20\) exceed the 30 distinct "
                                         r".*at most 30 together"),
    "negative-size": (c_negative_size, E.SplitError, r"must be non-negative, got -1"),
    "sets-overlap": (c_sets_overlap, E.SplitError, r"share 2 example\(s\).*must be disjoint"),
    "fewshot-pool-too-small": (c_fewshot_pool_too_small, E.TaskError,
                               r"fewshot=5 \(--fewshot 5\) needs 5 shots but the few-shot pool has only 2"),
    "empty-task": (c_empty_task, E.TaskError, r"has no examples"),
    "task-file-missing": (c_task_file_missing, E.TaskError, r"none\.jsonl' does not exist"),
    "malformed-jsonl-line": (c_malformed_jsonl, E.DataFormatError, r"task\.jsonl:4: not valid JSON"),
    "missing-field": (c_missing_field, E.DataFormatError, r"task\.jsonl:3: missing or non-string field 'prompt'"),
    "label-not-integer": (c_label_not_integer, E.DataFormatError,
                          r":1: 'label' must be an integer index into 'choices', got '0'"),
    "label-out-of-range": (c_label_out_of_range, E.DataFormatError, r"label 2 is out of range; it must be 0\.\.1"),
    "mixed-line-kinds": (c_mixed_kinds, E.DataFormatError, r"mixes generative .* use one kind per file"),
    "repeated-id": (c_repeated_id, E.DataFormatError, r":2: id 'a' repeats an earlier line"),
    "hub-data-path-missing": (c_hub_data_path_missing, E.TaskError,
                              r"boolq-copy' does not exist; give a file or a directory"),
    "unknown-config-key": (c_unknown_config_key, E.ConfigError, r"Unknown key\(s\) discovry .*valid keys: .*discovery"),
    "shard-malformed": (c_shard_malformed, E.ConfigError, r"Malformed shard '2of4'; write 'i/N'"),
    "batch-size-zero": (c_batch_size_zero, E.ConfigError, r"Batch size must be at least 1, got 0"),
    "corrupted-run-file": (c_corrupted_run_file, E.RunStoreError, r"screen\.json is corrupted \(invalid JSON"),
    "stage-out-of-order": (c_stage_out_of_order, E.RunStoreError,
                           r"selection\.json does not exist; run the stage that writes it first"),
    "selection-from-other-model": (c_selection_from_other_model, E.RunStoreError,
                                   r"now has weight hash .* but the run used"),
    "run-dir-other-config": (c_run_dir_other_config, E.RunStoreError,
                             r"different configuration .*seed: stored 0, now 5"),
    "result-edited-by-hand": (c_result_edited_by_hand, E.RunStoreError,
                              r"screen\.json was changed after celtk wrote it"),
    "heldout-split-without-run": (c_heldout_without_run, E.ConfigError,
                                  r"held-out split is a run's held-out set.*--run DIR"),
    "heldout-log-edited": (c_heldout_log_edited, E.RunStoreError,
                           r"line 1 does not follow line 0.*append-only and hash-chained"),
    "merge-mismatched-shards": (c_merge_mismatched_shards, E.RunStoreError, r"disagree on N: \[2, 3\]"),
    "merge-missing-shard": (c_merge_missing_shard, E.RunStoreError, r"shard\(s\) 1/2 missing"),
    "directory-in-use": (c_directory_in_use, E.RunStoreError,
                         r"in use by celtk pid \d+; wait for it to finish or use another --out"),
    "output-not-writable": (c_output_not_writable, E.RunStoreError, r"Choose a writable output directory"),
    "disk-full": (c_disk_full, E.RunStoreError,
                  r"the disk is full\. Nothing was half-written; free space .* rerun the same command to resume"),
    "code-execution-not-opted-in": (c_code_execution_not_opted_in, E.SandboxRefusedError,
                                    r"--allow-code-execution or set CELTK_ALLOW_CODE_EXEC=1"),
    "config-string-for-bool": (c_config_string_for_bool, E.ConfigError,
                               r"chat in .*run\.toml must be bool, got 'no' \(str\)"),
    "config-bool-for-int": (c_config_bool_for_int, E.ConfigError,
                            r"discovery in config must be int, got True \(bool\)"),
    "config-not-utf8": (c_config_not_utf8, E.ConfigError, r"run\.toml is not UTF-8 text .*save it as UTF-8"),
    "negative-seed": (c_negative_seed, E.ConfigError, r"seed must be non-negative, got -1"),
    "jsonl-not-utf8": (c_jsonl_not_utf8, E.DataFormatError, r"task\.jsonl:3: not UTF-8 text .*save the file as UTF-8"),
    "data-not-utf8": (c_data_not_utf8, E.DataFormatError,
                      r"boolq\.jsonl:2: not UTF-8 text \(byte 17 of the line\); save the file as UTF-8"),
    "stored-negative-seed": (c_stored_negative_seed, E.ConfigError, r"seed must be non-negative, got -1"),
    "screen-part-not-celtks": (c_screen_part_not_celtks, E.RunStoreError,
                               r"screen_parts/L1\.json is not a screen part celtk wrote "
                               r".*delete it and rerun the screen"),
    "select-part-not-celtks": (c_select_part_not_celtks, E.RunStoreError,
                               r"sets/notes\.json is not a part celtk wrote .*delete it and rerun"),
    "merge-only-odd-names": (c_merge_only_odd_names, E.RunStoreError,
                             r"No shard directories \(shard-i-of-N\) in .*; screen with shard=\(i, N\)"),
    "output-read-only": (c_output_read_only, E.RunStoreError,
                         r"Cannot write in .*/ro: (Read-only file system|Permission denied)\. "
                         r"Choose a writable output directory"),
    "cache-read-only": (c_cache_read_only, E.ModelSourceError,
                        r"Cannot use celtk's cache .*/cache for the dequantized m\.gguf: "
                        r"(Read-only file system|Permission denied)\. Set CELTK_CACHE"),
    "search-too-large": (c_search_too_large, E.ConfigError,
                         r"p = 270, k = 270 means more than 1,000,000 subsets to evaluate, the limit; lower p or k"),
    "lasso-no-masks": (c_lasso_no_masks, E.ConfigError, r"needs masks ≥ 1 .*got masks = 0"),
    "nan-into-json": (c_nan_into_json, E.RunStoreError,
                      r"Refusing to write NaN or infinity into JSON \(in \$\.relative_error_reduction\); "
                      r".*null with a reason"),
    "eval-limit-zero": (c_eval_limit_zero, E.ConfigError,
                        r"limit must be at least 1 \(or None for the whole split\), got 0"),
    "partial-screen": (c_partial_screen, E.RunStoreError,
                       r"screen\.json covers 5 of the model's 12 heads .*must cover every head once"),
    "screen-of-other-run": (c_screen_of_other_run, E.RunStoreError,
                            r"screen\.json does not belong to the run of fingerprint\.json \(task: "
                            r".* in fingerprint\.json, .* in screen\.json\)"),
    "prompt-longer-than-context": (c_prompt_longer_than_context, E.TaskError,
                                   r"Example long-\d: its prompt \(10,0\d\d tokens\) and target \(\d tokens\) "
                                   r"need 10,0\d\d positions, but tiny-llama reads at most 512 "
                                   r"\(max_position_embeddings in its config\)"),
    "max-new-tokens-beyond-context": (c_max_new_tokens_beyond_context, E.ConfigError,
                                      r"max_new_tokens = 100,000 cannot fit in the context of tiny-llama, "
                                      r"which reads at most 512 positions"),
    "stage-beyond-memory": (c_stage_beyond_memory, E.ConfigError,
                            r"Scoring the discovery set on 12 examples needs about .* of activations at batch size 8, "
                            r"more than the .* available on cpu; batch size 2 would fit .*--batch-size 2"),
    "calibrate-too-many-draws": (c_calibrate_too_many_draws, E.ConfigError,
                                 r"100,000 × 100,000 = 10,000,000,000 random head sets, "
                                 r"more than the limit of 1,000,000"),
    "merge-absurd-shard-count": (c_merge_absurd_shard_count, E.RunStoreError,
                                 r"shard\(s\) 2/100000000000, .* \(99,999,999,998 in all\) missing"),
    "shard-count-beyond-heads": (c_shard_count_beyond_heads, E.ConfigError,
                                 r"Shard 0/1000: tiny has 12 heads, so at most 12 shards"),
    "plan-negative-layers": (c_plan_negative_layers, E.ConfigError,
                             r"num_hidden_layers = -2; a size in a config\.json is a positive integer"),
    "plan-zero-heads": (c_plan_zero_heads, E.ConfigError,
                        r"num_attention_heads = 0; a size in a config\.json is a positive integer"),
    "plan-string-size": (c_plan_string_size, E.ConfigError,
                         r"hidden_size = '576'; a size in a config\.json is a positive integer"),
    "plan-p-exceeds-heads": (c_plan_p_exceeds_heads, E.ConfigError,
                             r"p = 999 and set size k = 3 must satisfy 1 ≤ k ≤ p ≤ the model's 8 heads"),
    "plan-mean-prompt-longer": (c_plan_mean_prompt_longer, E.ConfigError,
                                r"mean prompt \(500 tokens\) must lie between 1 and the longest prompt \(100 tokens\)"),
    "api-wrong-type": (c_api_wrong_type, E.ArgumentError,
                       r"run_select\(\) parameter p='3' violates type hint int \| None"),
    "api-out-of-range": (c_api_out_of_range, E.ArgumentError, r"compare_paired: level must be in \(0, 1\), got 1\.5"),
    "api-negative-count": (c_api_negative_count, E.ArgumentError, r"mcnemar_exact: b must be non-negative, got -1"),
    "api-config-at-construction": (c_api_config_at_construction, E.ConfigError, r"seed must be non-negative, got -1"),
    "api-unknown-argument": (c_api_unknown_argument, E.ArgumentError,
                             r"run_test: got an unexpected keyword argument 'held_out'; "
                             r"the signature is run_test\(out, \*, heldout=None, model=None, n_boot=10000, "
                             r"force=False, progress=None, device=None, batch_size=None\)"),
    "sandbox-tools-missing": (c_sandbox_tools_missing, E.SandboxRefusedError,
                              r"no unshare, setpriv, mount, umount, pivot_root, sh, mkdir, ln in DIR"
                              r"|no unshare, setpriv, .* in /"),
}

# The docs' table groups the cases by family (checked below).
FAMILIES = {
    "model source": ["unknown-model", "model-path-missing", "gguf-missing", "dir-without-config", "corrupted-weights",
                     "hub-unreachable"],
    "model directories": ["gguf-truncated-header", "model-without-tokenizer", "config-wrong-type",
                          "config-impossible-size", "config-without-model-type", "unknown-model-type",
                          "not-a-causal-lm", "architecture-not-screenable"],
    "cache directory": ["cache-is-a-file", "cache-read-only"],
    "hub ids": ["hub-id-invalid", "hub-id-with-space"],
    "device and dtype": ["device-unavailable", "device-cuda-absent", "device-mps-absent", "device-meta", "device-xla",
                         "device-malformed", "dtype-unsupported"],
    "task": ["unknown-task", "unknown-subtask", "task-hub-unreachable", "hub-data-path-missing"],
    "heads": ["head-malformed", "head-out-of-range", "head-twice", "ablate-out-of-range"],
    "search options": ["k-exceeds-p", "p-exceeds-heads", "search-too-large", "lasso-no-masks"],
    "splits": ["discovery-too-large", "discovery-plus-heldout-too-large", "negative-size", "sets-overlap",
               "fewshot-pool-too-small", "eval-limit-zero"],
    "data files": ["empty-task", "task-file-missing", "malformed-jsonl-line", "missing-field", "label-not-integer",
                   "label-out-of-range", "mixed-line-kinds", "repeated-id", "jsonl-not-utf8", "data-not-utf8"],
    "settings": ["unknown-config-key", "config-string-for-bool", "config-bool-for-int", "config-not-utf8",
                 "shard-malformed", "batch-size-zero"],
    "seeds": ["negative-seed", "stored-negative-seed"],
    "run directory": ["corrupted-run-file", "stage-out-of-order", "selection-from-other-model", "run-dir-other-config",
                      "result-edited-by-hand", "heldout-split-without-run", "heldout-log-edited",
                      "partial-screen", "screen-of-other-run", "merge-mismatched-shards", "merge-missing-shard",
                      "directory-in-use"],
    "odd files beside shards and parts": ["screen-part-not-celtks", "select-part-not-celtks", "merge-only-odd-names"],
    "output": ["output-not-writable", "output-read-only", "disk-full", "nan-into-json"],
    "sandbox": ["code-execution-not-opted-in", "sandbox-tools-missing"],
    "bounds from the model and the machine": ["prompt-longer-than-context", "max-new-tokens-beyond-context",
                                              "stage-beyond-memory", "calibrate-too-many-draws",
                                              "merge-absurd-shard-count", "shard-count-beyond-heads"],
    "plan inputs": ["plan-negative-layers", "plan-zero-heads", "plan-string-size", "plan-p-exceeds-heads",
                    "plan-mean-prompt-longer"],
    "Python API": ["api-wrong-type", "api-out-of-range", "api-negative-count", "api-config-at-construction",
                   "api-unknown-argument"],
}


class _Ctx:
    def __init__(self, tmp, monkeypatch, tiny, run_dir):
        self.tmp, self.monkeypatch, self.tiny, self.run_dir = tmp, monkeypatch, tiny, run_dir


_NEEDS_RUN = {"p-exceeds-heads", "corrupted-run-file", "result-edited-by-hand", "heldout-log-edited",
              "selection-from-other-model", "run-dir-other-config",
              "partial-screen", "screen-of-other-run", "stored-negative-seed", "screen-part-not-celtks",
              "select-part-not-celtks"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gives_one_clear_error(case, tmp_path, monkeypatch, tiny_llama, request):
    make, expected, pattern = CASES[case]
    run_dir = request.getfixturevalue("run_dir") if case in _NEEDS_RUN else None
    with pytest.raises(expected, match=pattern) as caught:
        make(_Ctx(tmp_path, monkeypatch, tiny_llama, run_dir))
    assert isinstance(caught.value, E.CeltkError)
    assert caught.value.__cause__ is None or case in {"corrupted-weights"}  # no chained library traceback to read
    if case in {"disk-full", "nan-into-json"}:
        assert not list(tmp_path.iterdir())  # nothing half-written left behind
    record = {"case": case, "error": type(caught.value).__name__, "message": _placeholders(str(caught.value), tmp_path)}
    if os.environ.get("CELTK_ERROR_TABLE"):  # collect the messages for the docs' table (see error_table)
        with open(os.environ["CELTK_ERROR_TABLE"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    shown = documented_rows().get(case)
    assert shown is not None, f"{ERROR_PAGE}'s bad-input table lacks {case}; {REGENERATE}"
    if case in MACHINE_DEPENDENT:
        assert re.search(pattern, shown), (f"{ERROR_PAGE} shows for {case}:\n{shown}\n"
                                           f"which no longer matches {pattern!r}")
    else:
        assert shown == _row(record), (f"{ERROR_PAGE} is stale for {case}: it shows\n{shown}\n"
                                       f"celtk gives\n{_row(record)}\n{REGENERATE}")


def test_odd_files_beside_screen_parts_are_ignored(run_dir, tiny_llama, tmp_path):
    """Files celtk did not write beside its layer parts (``Lx.json`` used to end in a ValueError traceback)
    are left alone, and the resumed screen is the same document."""
    from celtk.run import RunConfig, run_screen
    out = _copy(run_dir, tmp_path)
    for name in ("Lx.json", "L1.json.bak", "notes.txt", "L01x.json"):
        (out / "screen_parts" / name).write_text("not celtk's")
    (out / "shard-x-of-y").mkdir()
    config = {k: v for k, v in json.loads((out / "config.json").read_text()).items() if k != "celtk_version"}
    run_screen(RunConfig.from_dict(config), out, model=tiny_llama)
    assert (json.loads((out / "screen.json").read_text())["heads"]
            == json.loads((run_dir / "screen.json").read_text())["heads"])
    assert (out / "screen_parts" / "Lx.json").read_text() == "not celtk's"


def _placeholders(message: str, tmp_path: Path) -> str:
    """A message with temporary paths written DIR and process ids N, as the README shows it."""
    message = message.replace(str(tmp_path), "DIR")
    message = re.sub(re.escape(str(tmp_path.parent)) + r"/[^/\s'\"]+", "DIR", message)
    return re.sub(r"celtk pid \d+", "celtk pid N", message)


ERROR_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
TABLE_BEGIN = ("<!-- bad-input table: written by `python tests/integration/test_errors.py CASES.jsonl`; "
               "do not edit by hand -->")
TABLE_END = "<!-- end of the bad-input table -->"
REGENERATE = ("regenerate the table: CELTK_ERROR_TABLE=/tmp/cases.jsonl pytest tests/integration/test_errors.py, "
              "then python tests/integration/test_errors.py /tmp/cases.jsonl")
# Messages that carry what the machine has; the page shows one machine's, which must still match the case's pattern.
MACHINE_DEPENDENT = {"screen-of-other-run",  # quoted values are cut at a length, so the temporary directory's shows
                     "sandbox-tools-missing"}  # names the isolation tools this machine lacks


def _family(case: str) -> str:
    return next(family for family, cases in FAMILIES.items() if case in cases)


def _row(record: dict) -> str:
    text = f"{record['error']}: {record['message']}".replace("|", "\\|")
    return f"| {_family(record['case'])} | `{record['case']}` | {text} |"


def error_table(records: list[dict]) -> str:
    """The docs' bad-input table, grouped by family in the order of :data:`FAMILIES`."""
    by_case = {r["case"]: r for r in records}
    rows = ["| family | case | what you get |", "|---|---|---|"]
    rows += [_row(by_case[case]) for cases in FAMILIES.values() for case in cases]
    return "\n".join(rows) + "\n"


def _table_section(text: str) -> str:
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    assert 0 <= begin < end, f"{ERROR_PAGE} lacks the bad-input table's markers {TABLE_BEGIN!r} … {TABLE_END!r}"
    return text[begin + len(TABLE_BEGIN):end]


def write_error_table(records: list[dict], page: Path = ERROR_PAGE) -> None:
    """Replace the table between the page's markers (the rest of the page is left as it is)."""
    text = page.read_text(encoding="utf-8")
    old = _table_section(text)
    page.write_text(text.replace(TABLE_BEGIN + old + TABLE_END, TABLE_BEGIN + "\n\n" + error_table(records) + "\n"
                                 + TABLE_END, 1), encoding="utf-8")


def documented_rows() -> dict[str, str]:
    """Each case's row of the page's table, by case id."""
    rows = {}
    for line in _table_section(ERROR_PAGE.read_text(encoding="utf-8")).splitlines():
        found = re.match(r"\| [^|]+ \| `([\w-]+)` \|", line)
        if found:
            rows[found.group(1)] = line
    return rows


def test_the_page_lists_every_case():
    missing = [case for case in CASES if case not in documented_rows()]
    assert not missing, f"{ERROR_PAGE}'s bad-input table lacks {missing}; {REGENERATE}"
    assert len(CASES) >= 25


def test_every_case_has_one_family_and_the_page_shows_it():
    listed = [case for cases in FAMILIES.values() for case in cases]
    assert sorted(listed) == sorted(CASES)  # each case in exactly one family
    shown = documented_rows()
    wrong = [case for case in listed if not shown.get(case, "").startswith(f"| {_family(case)} | `{case}` |")]
    assert not wrong, f"{ERROR_PAGE}'s bad-input table shows these cases without their family: {wrong}"
    assert list(shown) == listed, "the table's rows are not in FAMILIES' order; " + REGENERATE


def test_the_table_writer_replaces_only_the_table(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"before\n\n{TABLE_BEGIN}\n\n| old | table |\n\n{TABLE_END}\n\nafter\n")
    records = [{"case": c, "error": "E", "message": f"m {c} a|b"} for c in CASES]
    write_error_table(records, page)
    text = page.read_text()
    assert text.startswith(f"before\n\n{TABLE_BEGIN}\n\n| family | case |") and text.endswith(f"{TABLE_END}\n\nafter\n")
    assert "| old | table |" not in text and "m unknown-task a\\|b |" in text
    write_error_table(records, page)
    assert page.read_text() == text  # writing the same records again changes nothing


if __name__ == "__main__":
    write_error_table([json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()])
    print(f"wrote the bad-input table of {len(CASES)} cases into {ERROR_PAGE}")
