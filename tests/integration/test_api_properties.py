"""The Python API under generated bad arguments: every public function and
class of ``dir(celtk)`` and ``celtk.run`` ends in success or a :class:`CeltkError` whatever it is
called with, never in another exception, and a wrong argument is named with its value.

Each call starts from arguments that fail (or succeed) cheaply before any model would load: a
missing task file, an empty run directory, the session's tiny model; one argument is then replaced
by a generated value of any type. The tiny model is built once; nothing loads in the loop."""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, chdir
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import celtk
import celtk.run
from celtk.errors import ArgumentError, CeltkError

FAST = settings(max_examples=400, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def public_callables() -> dict[str, Callable[..., Any]]:
    """Every public function and class: ``dir(celtk)`` (submodules aside) and ``celtk.run``'s exports."""
    found: dict[str, Callable[..., Any]] = {}
    for module, names in ((celtk, dir(celtk)), (celtk.run, celtk.run.__all__)):
        for name in names:
            obj = getattr(module, name)
            if (callable(obj) and not inspect.ismodule(obj)
                    and not (inspect.isclass(obj) and issubclass(obj, BaseException))):
                found[f"{module.__name__}.{name}"] = obj
    return found


PUBLIC = public_callables()
MISSING_TASK = "jsonl:/nonexistent/celtk/task.jsonl"


class Ctx:
    """What the starting arguments need: the tiny model, a task, a prepared request list, an empty directory."""

    def __init__(self, tiny, tmp: Path):
        from celtk.evaluation.prompts import prepare
        from celtk.heads import HeadSet
        from celtk.search.scores import HeadScore
        from celtk.tasks import get_task, make_splits

        self.tiny, self.tmp = tiny, tmp
        self.task = get_task("arithmetic:2da")
        splits = make_splits(self.task, 2, 0)
        self.prepared = prepare(tiny, self.task, splits.discovery)
        self.score = HeadScore(HeadSet.parse("L0H0"), 1, 0, 0, 0, np.ones(1, dtype=bool))
        self.config = celtk.run.RunConfig(model="tiny", task=MISSING_TASK, discovery=2, heldout=2, fewshot=0)


def start(name: str, ctx: Ctx) -> dict:
    """Arguments that end quickly: in success, or in a CeltkError before any model loads."""
    short = name.rsplit(".", 1)[1]
    empty, tiny = ctx.tmp / "empty", ctx.tiny
    table = {
        "CachedScreener": dict(model=tiny, prepared=ctx.prepared, batch_size=2),
        "EvalConfig": {}, "EvalResult": dict(examples=[]), "ExampleResult": dict(id="a", correct=True, logprob=None),
        "Head": dict(layer=0, head=0), "HeadSet": dict(heads=()), "HeadScore": dict(
            heads=ctx.score.heads, n_correct=1, gain=0, damage=0, fixes=0, correct=ctx.score.correct),
        "Model": {f: getattr(tiny, f) for f in ("bridge", "tokenizer", "name", "source", "architecture", "n_layers",
                                                "n_heads", "n_kv_heads", "d_head", "d_model", "d_vocab", "arch")},
        "RunConfig": {}, "ablate": dict(model=tiny, heads=""),
        "compare_paired": dict(intact=np.array([True, False]), ablated=np.array([False, True]), n_boot=10),
        "evaluate": dict(model=tiny, task=ctx.task, examples=[]),
        "export_ablated": dict(model=tiny, heads="L99H0", out_dir=ctx.tmp / "export"),
        "ablation_for": dict(model=tiny, kind="scale:0.5", task=ctx.task, reference=[]),
        "run_ablation_kinds": dict(out=empty, model=tiny),
        "run_transfer": dict(out=empty, model=tiny), "run_calibration": dict(out=empty, model=tiny),
        "run_attributes": dict(out=empty, model=tiny), "run_compare": dict(out=empty, circuit="no-such-circuit"),
        "variant_grid": dict(task="arithmetic:2da"), "Run": dict(out=empty, config=ctx.config, model=tiny),
        "get_task": dict(spec="arithmetic:2da"), "load_model": dict(source=ctx.tmp / "no-model"),
        "make_splits": dict(task=ctx.task, n_discovery=2, n_heldout=2), "mcnemar_exact": dict(b=1, c=2),
        "merge_shards": dict(out=empty), "open_run": dict(out=empty, model=tiny), "rank": dict(scores=[ctx.score]),
        "ranking_key": dict(score=ctx.score), "resolve_config": {}, "task_names": {},
        "run_all": dict(config=ctx.config, out=empty, model=tiny), "run_altscreen": dict(out=empty, model=tiny),
        "run_eval": dict(out=None, model=tiny, task=MISSING_TASK),
        "run_screen": dict(config=ctx.config, out=empty, model=tiny),
        "run_select": dict(out=empty, model=tiny), "run_stability": dict(out=empty, model=tiny),
        "run_test": dict(out=empty, model=tiny),
        "select": dict(single=[ctx.score], intact=np.ones(1, dtype=bool),
                       evaluate_set=lambda heads: np.ones(1, dtype=bool),
                       p=1, k=1),
        "load_config_file": dict(path=None), "load_screen": dict(out=empty), "parse_shard": dict(text="0/2"),
        "session_for": dict(document=None, model=tiny),
        "SetMemo": dict(directory=ctx.tmp / "memo", intact=np.ones(1, dtype=bool), screener=lambda: None),
    }
    if short in table:
        return dict(table[short])
    obj = PUBLIC[name]  # documents, Session, ScreenedRun, RunResult: every field given, none checked for sense
    return {p.name: None for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.binary(max_size=3),
    st.lists(st.integers(-2, 2), max_size=2), st.tuples(st.integers(-2, 2), st.integers(-2, 2)),
    st.dictionaries(st.text(max_size=2), st.integers(-1, 1), max_size=1), st.just(object()),
    st.just(Path("/nonexistent/celtk")), st.just(np.zeros(2)), st.just(lambda *a: None))


def call(obj, kwargs: dict):
    result = obj(**kwargs)
    if isinstance(result, AbstractContextManager):  # ablate: the work is done on entering
        with result:
            pass
    return result


@pytest.fixture(scope="module")
def ctx(tiny_llama, tmp_path_factory):
    return Ctx(tiny_llama, tmp_path_factory.mktemp("api"))


# Under the test suite's own type checker (``--jaxtyping-packages``, beartype on every celtk function) a
# wrong type is caught by beartype before celtk's validator: the properties are about what users get,
# so they run in a pytest without that checker (``test_properties_hold_as_users_call_the_api``).
UNCHECKED = os.environ.get("CELTK_API_PROPERTIES") == "1"
as_users_call_it = pytest.mark.skipif(not UNCHECKED, reason="runs in a pytest without the beartype hook (see below)")


def test_properties_hold_as_users_call_the_api():
    if UNCHECKED:
        pytest.skip("this is the run it starts")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CELTK_API_PROPERTIES": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q",
                          "--hypothesis-show-statistics", __file__], cwd=root, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]


@as_users_call_it
def test_every_public_name_is_covered(ctx):
    """A new public function needs starting arguments here (or gets all-None ones, if it is a document)."""
    for name in PUBLIC:
        start(name, ctx)
    assert len(PUBLIC) >= 45


@as_users_call_it
@FAST
@given(data=st.data())
def test_public_functions_give_a_celtk_error_or_succeed(ctx, data):
    name = data.draw(st.sampled_from(sorted(PUBLIC)), label="function")
    obj = PUBLIC[name]
    kwargs = start(name, ctx)
    parameters = [p.name for p in inspect.signature(obj).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    target = data.draw(st.sampled_from([*parameters, "no_such_argument"]), label="argument")
    kwargs[target] = data.draw(values, label="value")
    with tempfile.TemporaryDirectory() as tmp, chdir(tmp):  # a relative path drawn as text lands here
        os.environ["HF_HUB_OFFLINE"] = "1"  # a drawn model name never reaches the hub
        try:
            call(obj, kwargs)
        except CeltkError:
            pass
        except TypeError as error:  # a class's constructor: Python's own refusal of a keyword it does not take
            if not (inspect.isclass(obj) and target == "no_such_argument" and "unexpected keyword" in str(error)):
                pytest.fail(f"{name}({target}={kwargs[target]!r}) raised TypeError: {error}")
        except Exception as error:  # noqa: BLE001 - the property: nothing but a CeltkError escapes
            pytest.fail(f"{name}({target}={kwargs[target]!r}) raised {type(error).__name__}: {error}")


# ---- bad arguments the property generalises, each a case of its own ----

@as_users_call_it
def test_mcnemar_refuses_negative_counts_instead_of_returning_zero():
    with pytest.raises(ArgumentError, match=r"mcnemar_exact: b must be non-negative, got -1"):
        celtk.stats.mcnemar_exact(-1, 3)
    assert celtk.stats.mcnemar_exact(0, 0) == 1.0


@as_users_call_it
def test_run_config_is_validated_at_construction():
    with pytest.raises(CeltkError, match="seed must be non-negative, got -1"):
        celtk.RunConfig(seed=-1)
    with pytest.raises(CeltkError, match=r"RunConfig: discovery must be int, got '3' \(str\)"):
        celtk.RunConfig(discovery="3")  # type: ignore[arg-type]  # deliberately the wrong type: the check under test
    with pytest.raises(CeltkError, match=r"stop must be list\[str\] or None, got \[1\]"):
        celtk.RunConfig(stop=[1], grading="generate")  # type: ignore[list-item]  # deliberately wrong, as above
    with pytest.raises(CeltkError, match=r"stop must be list\[str\] or None, got \['a', 1\]"):
        celtk.RunConfig(stop=["a", 1], grading="generate")  # type: ignore[list-item]  # every element, not one drawn
    # a Path is a path, kept as the file holds it
    config = celtk.RunConfig(data=Path("/x/y.jsonl"))  # type: ignore[arg-type]  # typed str | None, takes a Path too
    assert config.data == "/x/y.jsonl"


@as_users_call_it
def test_a_wrong_argument_is_named_with_its_value_and_what_is_expected(ctx):
    from celtk.screening.cached import CachedScreener  # the wing's package imports nothing heavy itself
    with pytest.raises(ArgumentError, match=r"run_select\(\) parameter p='3' violates type hint int \| None"):
        celtk.run.run_select(ctx.tmp, p="3", model=ctx.tiny)  # type: ignore[arg-type]  # deliberately wrong
    with pytest.raises(ArgumentError, match=r"compare_paired: level must be in \(0, 1\), got 1\.5"):
        celtk.compare_paired(np.array([True]), np.array([True]), level=1.5)
    with pytest.raises(ArgumentError, match=r"get_task\(\) parameter spec=5 violates type hint <class 'str'>"):
        celtk.get_task(5)  # type: ignore[arg-type]  # deliberately the wrong type
    with pytest.raises(ArgumentError, match=r"run_test: unexpected keyword argument|got an unexpected keyword"):
        celtk.run.run_test(ctx.tmp, held_out=3)  # type: ignore[call-arg]  # deliberately a misspelt keyword
    with pytest.raises(ArgumentError, match=r"HeadScore: correct must be np\.ndarray, got \[True\] \(list\)"):
        celtk.search.scores.HeadScore(ctx.score.heads, 1, 0, 0, 0, [True])
    with pytest.raises(ArgumentError, match=r"CachedScreener: batch_size must be at least 1, got 0"):
        CachedScreener(ctx.tiny, ctx.prepared, batch_size=0)


@as_users_call_it
def test_every_element_of_a_collection_is_checked_and_a_string_is_not_a_collection_of_strings():
    """beartype checks one element of a container, drawn at random; the boundary checks them all, and refuses a
    string where a collection of strings belongs (it would be read as its characters)."""
    with pytest.raises(ArgumentError, match=r"variant_grid: subtasks must be Iterable\[str\], got '2ds' \(str\)"):
        celtk.run.variant_grid("arithmetic:2da", subtasks="2ds")
    for _ in range(20):  # the bad element is last of many: a sampled check would pass it most of the time
        with pytest.raises(ArgumentError, match=r"variant_grid: subtasks must be Iterable\[str\]"):
            celtk.run.variant_grid("arithmetic:2da", subtasks=[*["2ds"] * 30, 3])  # type: ignore[list-item]
    assert len(celtk.run.variant_grid("arithmetic:2da", subtasks=("2ds",))) == len(
        celtk.run.variant_grid("arithmetic:2da", subtasks=["2ds"]))


@as_users_call_it
def test_a_path_holding_a_nul_byte_is_refused_naming_the_argument(ctx):
    """No file name holds a NUL byte, and the call that would open one raises ValueError: every public function
    refuses such a path at the boundary, naming the argument, before any work."""
    checked = 0
    for name, obj in PUBLIC.items():
        written = getattr(obj, "__celtk_annotations__", {})  # the public boundary's functions, as annotated
        for target in (p for p, annotation in written.items() if p != "return" and "Path" in annotation):
            kwargs = start(name, ctx) | {target: "runs/a\x00b"}
            with pytest.raises(ArgumentError, match=rf"{target} cannot hold a NUL byte \(\\x00\)"):
                call(obj, kwargs)
            checked += 1
    assert checked >= 10  # load_screen, load_config_file, the run_* stages, …


@as_users_call_it
def test_paths_are_accepted_wherever_a_path_is(ctx, tmp_path):
    from celtk import export_ablated, load_model

    out = export_ablated(ctx.tiny, "", tmp_path / "ckpt")
    model = load_model(Path(out))
    assert model.n_layers == ctx.tiny.n_layers and model.weight_hash == ctx.tiny.weight_hash
    boolq = Path(__file__).resolve().parents[1] / "fixtures" / "boolq"
    task = celtk.get_task("boolq", data_path=boolq)
    assert task.config()["data_path"] == str(boolq)  # recorded as text, as a string path would be
    assert celtk.run.resolve_config(overrides={"data": boolq}).data == str(boolq)
    document = celtk.run.run_eval(tmp_path / "eval", model=Path(out), task="boolq", data=boolq, limit=2)
    assert document.config["data"] == str(boolq) and document.n == 2


def test_every_public_annotation_resolves():
    """beartype resolves a name an annotation uses from the function's module (its ``__getattr__`` for
    names imported only for type checking); one it cannot resolve would fail at call time (or, in a method, be
    matched by its bare class name). Read from the annotations as written, which ``public`` keeps (beartype
    replaces a decorated function's own)."""
    from celtk.boundary import _ModuleNames

    missing: dict[str, list[str]] = {}
    walked = 0
    for name, obj in PUBLIC.items():
        targets = [obj.__init__] if inspect.isclass(obj) else [obj]
        if inspect.isclass(obj):
            targets += [m for m in vars(obj).values()
                        if inspect.isfunction(m) and hasattr(m, "__celtk_annotations__")]
        for target in targets:
            written = getattr(target, "__celtk_annotations__", None)
            walked += written is not None
            plain = inspect.unwrap(target)
            names = _ModuleNames(plain.__module__)
            for annotation in (written if written is not None else plain.__annotations__).values():
                tree = ast.parse(annotation, mode="eval") if isinstance(annotation, str) else None
                for node in ast.walk(tree) if tree else ():
                    if isinstance(node, ast.Name) and node.id not in names and not hasattr(builtins, node.id):
                        missing.setdefault(f"{name}.{plain.__name__}", []).append(node.id)
    assert not missing
    assert walked >= 45  # the public functions and Run's methods, by the annotations public() kept


def test_a_constructor_refuses_an_unknown_keyword_the_same_way_however_it_was_imported():
    """No class is changed when it is first read from the package: a misspelt keyword is Python's own
    TypeError, in a fresh interpreter and after ``celtk.RunConfig`` was touched alike."""
    script = ("import sys, celtk\n"
              "from celtk.run.config import RunConfig\n"
              "def refusal():\n"
              "    try: RunConfig(bogus=1)\n"
              "    except Exception as e: return f'{type(e).__module__}.{type(e).__name__}: {e}'\n"
              "first = refusal(); celtk.RunConfig; celtk.run.RunConfig; second = refusal()\n"
              "print(first); print(second)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    first, second = run.stdout.splitlines()
    assert first == second
    assert first.startswith("builtins.TypeError:") and "'bogus'" in first
    assert celtk.RunConfig is celtk.run.RunConfig is __import__("celtk.run.config").run.config.RunConfig


@as_users_call_it
def test_the_validator_refuses_nan_and_bools_for_numbers():
    with pytest.raises(ArgumentError, match="n_boot must be int, got True"):
        celtk.compare_paired(np.array([True]), np.array([True]), n_boot=True)
    with pytest.raises(ArgumentError, match=r"level must be in \(0, 1\), got nan"):
        celtk.compare_paired(np.array([True]), np.array([True]), level=math.nan)
