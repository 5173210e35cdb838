"""celtk where the paper ran it: one command on a CUDA machine, no network, about 8 minutes on one H200.

It builds random-weight models from configs written below (the paper's three 3 B models: Llama-3.2-3B,
Qwen2.5-3B, SmolLM3-3B, with examples/configs' shapes; and the test suite's tiny architectures) and
synthetic prompts of the paper's lengths (token ids drawn at random; an offline word-level tokenizer),
then measures, side by side in the one run:

* exactness on the device: the cached screener against the plain ``ablate()`` path on sampled heads,
  float32 and bfloat16 (verdict agreement, largest log-probability difference); the fused replay against
  the bridge replay; one head's verdicts at two batch sizes; the prefix tree against each set alone;
* speed at the paper's shapes (zero-shot arithmetic-length prompts, BoolQ-length prompts with two
  choices; heads sampled across the layers): seconds per head for the cached screener (fused, bridge),
  the naive hook loop (a full forward under ``ablate()`` per head) and reload-per-head (every weight
  copied back from host memory, the head's columns zeroed, a plain forward: a lower bound on reloading
  a checkpoint); the screener's FLOP rate (celtk.planning.flops) against the matrix-product rate measured here
  (bfloat16; float32 with and without TF32);
* memory: ``celtk plan``'s prediction (weights + celtk.planning.plan.cached_stage_bytes) against
  ``torch.cuda.max_memory_allocated`` for three configurations, and what ``--batch-size auto`` chose;
* hours for the paper's full screens (every head × 2,000 examples, per task and model) from the
  measured per-head rates.

Each section is timed against ``--budget`` and skipped (recorded as such) when too little is left; a
section that fails records its error and the rest still run. The JSON is rewritten after every
section, and a markdown table is written beside it.

    python benchmarks/gpu_check.py --out gpu_check.json            # CUDA (README: "On a GPU")
    python benchmarks/gpu_check.py --smoke --out /tmp/smoke.json   # CPU, tiny sizes (tests/unit/test_gpu_check.py)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # a checkout, no install needed

import numpy as np  # noqa: E402
import torch  # noqa: E402

# The paper's models: config.json values of examples/configs (shapes, norms, rotary, tying). No weights.
PAPER_MODELS: dict[str, dict[str, Any]] = {
    "llama-3.2-3b": dict(model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                         num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                         rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
                         tie_word_embeddings=True,
                         rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936, rms_norm_eps=1e-6,
                       rope_theta=1000000.0, max_position_embeddings=32768, tie_word_embeddings=True,
                       use_sliding_window=False),
    "smollm3-3b": dict(model_type="smollm3", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=4, vocab_size=128256, rms_norm_eps=1e-6,
                       rope_theta=5000000.0, max_position_embeddings=65536, tie_word_embeddings=True,
                       no_rope_layers=[0 if (i + 1) % 4 == 0 else 1 for i in range(36)]),
}
# The test suite's tiny architectures (tests/_support.py: TINY_ARCHS + MORE_ARCHS), 3 layers × 4 heads.
_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, max_position_embeddings=512, initializer_range=0.2, tie_word_embeddings=False)
TINY_MODELS: dict[str, dict[str, Any]] = {
    "llama": dict(model_type="llama", **_TINY),
    "qwen2": dict(model_type="qwen2", **_TINY),
    "smollm3": dict(model_type="smollm3", **_TINY, no_rope_layers=[1, 0, 1]),
    "mistral": dict(model_type="mistral", **_TINY, sliding_window=16),
    "qwen3": dict(model_type="qwen3", **_TINY),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=3, n_head=4, n_inner=128, n_positions=512,
                 initializer_range=0.2),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=512, rotary_pct=0.25, use_parallel_residual=True,
                     tie_word_embeddings=False, initializer_range=0.2),
}
VOCAB = 4096  # the offline tokenizer's words; prompts draw ids from 3 .. VOCAB-1


def smoke_shape(config: dict[str, Any]) -> dict[str, Any]:
    """A paper config at tiny size (same architecture, 3 layers of 4 heads) for ``--smoke``."""
    small = dict(config, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, max_position_embeddings=1024)
    if "no_rope_layers" in small:
        small["no_rope_layers"] = [1, 1, 0]
    small.pop("rope_scaling", None)
    return small


# ------------------------------------------------------------------------------------------------------
# Building models and prompts offline


def offline_tokenizer(directory: Path):
    """A word-level tokenizer of ``VOCAB`` words (``<pad>``, ``<eos>``, ``w2`` ...), built in memory and saved to
    ``directory``, then read back from there (the bridge reloads a tokenizer by its path to set up BOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


def build_model(name: str, config: dict[str, Any], dtype: torch.dtype, device: str, tokenizer: Any, seed: int = 0):
    """A celtk Model around a random-weight HF model of ``config``, created on ``device``."""
    import transformers

    from celtk.models import wrap_hf_model

    fields = dict(config)
    model_type = fields.pop("model_type")
    fields.setdefault("vocab_size", VOCAB)
    hf_config = transformers.AutoConfig.for_model(model_type, pad_token_id=0, bos_token_id=None, eos_token_id=None,
                                                  **fields)
    torch.manual_seed(seed)
    with torch.device(device):
        hf = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    return wrap_hf_model(hf.eval(), tokenizer, name=name, device=device)


def synthetic(model, n: int, context: tuple[int, int], kind: str, continuation: int = 1, greedy: bool = False,
              seed: int = 0):
    """A :class:`celtk.evaluation.prompts.Prepared` of ``n`` random prompts with ``context`` = (shortest, longest)
    tokens. ``target``: ``continuation`` tokens each (``greedy``: the intact model's own next token, so the
    intact model is right on every example and an ablation's verdicts can change); ``choice``: two
    one-token choices, label 0."""
    from celtk.evaluation.prompts import Prepared, Request
    from celtk.evaluation.scoring import decoder_hidden, make_batches
    from celtk.tasks import Example

    rng = np.random.default_rng(seed)
    contexts = [tuple(int(t) for t in rng.integers(3, VOCAB, size=int(rng.integers(context[0], context[1] + 1))))
                for _ in range(n)]
    if kind == "choice":
        requests = [Request(i, c, (int(t),)) for i, c in enumerate(contexts) for t in rng.integers(3, VOCAB, size=2)]
        examples = [Example(f"s{i}", "", choices=("a", "b"), label=0) for i in range(n)]
        return Prepared(examples, requests, [""] * n, "choice", False)
    conts = [tuple(int(t) for t in rng.integers(3, VOCAB, size=continuation)) for _ in range(n)]
    if greedy:  # one intact forward picks each prompt's next token
        with torch.no_grad():
            for batch in make_batches([Request(i, c, (3,)) for i, c in enumerate(contexts)], 16, 0):
                hidden = decoder_hidden(model, batch.input_ids, batch.attention_mask)
                nxt = model.arch.logits(hidden[batch.rows, batch.positions]).argmax(-1).cpu()
                for j, owner in enumerate(batch.owner.tolist()):
                    conts[batch.request_ids[owner]] = (int(nxt[j]),)
    examples = [Example(f"s{i}", "", target="x") for i in range(n)]
    return Prepared(examples, [Request(i, c, t) for i, (c, t) in enumerate(zip(contexts, conts, strict=True))],
                    [""] * n, "target", False)


def sampled_heads(model, count: int) -> list:
    """``count`` heads spread over the layers (different head indices)."""
    from celtk.heads import Head

    return [Head(min(model.n_layers - 1, int((i + 0.5) * model.n_layers / count)), (7 * i) % model.n_heads)
            for i in range(count)]


# ------------------------------------------------------------------------------------------------------
# Measurements


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn: Callable[[], Any]) -> tuple[float, Any]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def matmul_rate(device: str, dtype: torch.dtype, size: int, tf32: bool = False, repeats: int = 5) -> float:
    """Sustained TFLOP/s of one ``size``³ matrix product (best of ``repeats`` after a warm-up)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        a @ b
        best = min(timed(device, lambda: a @ b)[0] for _ in range(repeats))
        return 2 * size ** 3 / best / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def logprobs(result) -> np.ndarray:
    return np.array([x for e in result.examples for x in (e.logprob if isinstance(e.logprob, list) else [e.logprob])])


def agreement(a: dict, b: dict, sets: list) -> dict[str, Any]:
    """Verdict agreement and the largest log-probability difference between two screens of ``sets``."""
    same = sum(int(np.array_equal(a[s].correct, b[s].correct)) for s in sets)
    verdicts = sum(int((a[s].correct == b[s].correct).sum()) for s in sets)
    total = sum(len(a[s].correct) for s in sets)
    diff = max(float(np.abs(logprobs(a[s]) - logprobs(b[s])).max()) for s in sets)
    return {"sets_identical": same, "sets": len(sets), "verdicts_agreeing": verdicts, "verdicts": total,
            "max_abs_logprob_diff": diff}


def exactness(model, prepared, heads: list, batch_size: int, rows: int) -> dict[str, Any]:
    """Cached (auto replay) against plain ablate(); fused against bridge; two batch sizes; the tree
    against each set alone (some multi-head sets among ``heads``)."""
    from celtk.heads import HeadSet
    from celtk.screening.cached import CachedScreener, screen_plain
    from celtk.screening.fused import fused_layers

    singles = [HeadSet((h,)) for h in heads]
    # neighbouring heads: zipped with the list shifted by one, which is one shorter
    pairs = [HeadSet((a, b)) for a, b in zip(heads, heads[1:], strict=False) if a.layer != b.layer][:3]
    sets = singles + pairs
    out: dict[str, Any] = {}
    intact_p, plain = screen_plain(model, prepared, sets, batch_size=batch_size)
    screener = CachedScreener(model, prepared, batch_size=batch_size, rows_per_pass=rows)
    intact_c, cached = screener.run(sets)
    out["replay"] = screener.replay
    out["cached_vs_plain"] = agreement(cached, plain, sets)
    out["cached_vs_plain"]["intact_max_abs_logprob_diff"] = float(np.abs(logprobs(intact_c) - logprobs(intact_p)).max())
    out["intact_accuracy"] = float(intact_c.correct.mean())
    out["ablations_changing_a_verdict"] = sum(int((cached[s].correct != intact_c.correct).any()) for s in sets)
    if fused_layers(model) is not None:
        _, bridge = CachedScreener(model, prepared, batch_size=batch_size, rows_per_pass=rows,
                                   replay="bridge").run(sets)
        out["fused_vs_bridge"] = agreement(cached, bridge, sets)
    _, small = CachedScreener(model, prepared, batch_size=max(1, batch_size // 4), rows_per_pass=rows).run(singles[:1])
    out["batch_size_invariance"] = dict(agreement(cached, small, singles[:1]),
                                        batch_sizes=[batch_size, max(1, batch_size // 4)])
    alone = {}
    for s in pairs:
        alone.update(CachedScreener(model, prepared, batch_size=batch_size, rows_per_pass=rows).run([s])[1])
    if pairs:
        out["tree_vs_alone"] = agreement(cached, alone, pairs)
    return out


def speed(model, prepared, heads: list, batch_size: int, rows: int, device: str, with_reload: bool) -> dict[str, Any]:
    """Seconds per head (per example, too) of each path on ``prepared``, and the cached screener's FLOP rate."""
    from celtk.ablation import ablate
    from celtk.evaluation.scoring import make_batches, score_requests
    from celtk.heads import HeadSet
    from celtk.planning.flops import Shape, screen_flops
    from celtk.screening.cached import CachedScreener
    from celtk.screening.fused import fused_layers

    sets = [HeadSet((h,)) for h in heads]
    n = len(prepared.examples)
    requests = prepared.requests
    suffixes = [len(r.context) + len(r.continuation) - 1 for r in requests]
    scored = sum(len(r.continuation) for r in requests)
    shape = Shape.of(model)
    flops = screen_flops(shape, 0, suffixes, scored, [h.layer for h in heads])["cached"] - \
        screen_flops(shape, 0, suffixes, scored, [])["cached"]
    out: dict[str, Any] = {"examples": n, "requests": len(requests), "heads": len(heads),
                           "tokens_per_request": float(np.mean([len(r.context) + len(r.continuation)
                                                                for r in requests])),
                           "batch_size": batch_size, "rows_per_pass": rows}
    replays = ("fused", "bridge") if fused_layers(model) is not None else ("bridge",)
    for replay in replays:
        screener = CachedScreener(model, prepared, batch_size=batch_size, rows_per_pass=rows, replay=replay)
        screener.run(sets[:1])  # warm-up
        t_intact, _ = timed(device, lambda: screener.run([]))
        t_all, _ = timed(device, lambda: screener.run(sets))
        per_head = max(t_all - t_intact, 1e-9) / len(sets)
        out[f"cached_{replay}"] = {"seconds_per_head": per_head, "seconds_intact": t_intact,
                                    "tflops_per_second": flops / max(t_all - t_intact, 1e-9) / 1e12}
    batches = make_batches(requests, batch_size, model.tokenizer.pad_token_id)
    with torch.no_grad():
        score_requests(model, prepared, batches[:1])  # warm-up
        t_hook, _ = timed(device, lambda: [_ablated(model, s, prepared, batches, ablate, score_requests) for s in sets])
    out["naive_hook_loop"] = {"seconds_per_head": t_hook / len(sets)}
    if with_reload:
        out["reload_per_head"] = {"seconds_per_head": reload_per_head(model, prepared, batches, heads[:2], device)}
    best = out[f"cached_{replays[0]}"]["seconds_per_head"]
    out["speedup_cached_vs_hook_loop"] = out["naive_hook_loop"]["seconds_per_head"] / best
    if with_reload:
        out["speedup_cached_vs_reload"] = out["reload_per_head"]["seconds_per_head"] / best
    return out


def _ablated(model, heads, prepared, batches, ablate, score_requests):
    with ablate(model, heads):
        return score_requests(model, prepared, batches)


def reload_per_head(model, prepared, batches, heads: list, device: str) -> float:
    """Seconds per head: every weight copied back from host memory, the head's output columns zeroed, one
    plain scoring pass (no hooks). Restores the weights afterwards."""
    from celtk.evaluation.scoring import score_requests

    params = dict(model.hf_model.named_parameters())
    host = {name: p.detach().to("cpu", copy=True) for name, p in params.items()}
    clean = {name.replace("._original_component", "").replace("_original_component.", ""): name for name in params}
    total = 0.0
    try:
        for head in heads:
            def once(head=head):
                with torch.no_grad():
                    for name, p in params.items():
                        p.data.copy_(host[name])
                    o = params[clean[model.arch.output_weights[head.layer]]]
                    o.data.copy_(model.arch.zero_head_outputs(o.data, [head.head], model.d_head))
                    return score_requests(model, prepared, batches)
            total += timed(device, once)[0]
    finally:
        with torch.no_grad():
            for name, p in params.items():
                p.data.copy_(host[name])
    return total / len(heads)


def memory(model, prepared, batch_size: int | str, device: str) -> dict[str, Any]:
    """``celtk plan``'s peak (weights + activations) against the device's measured peak for one screen of
    as many layer-0 heads as fill a pass (the plan's widest pass: every layer replayed, ``rows`` rows)."""
    from celtk.heads import Head, HeadSet
    from celtk.planning.flops import Shape
    from celtk.planning.plan import DTYPE_BYTES, cached_stage_bytes, n_parameters, task_size_of
    from celtk.screening.cached import CachedScreener, auto_batch

    chosen = auto_batch(model, prepared)
    batch, rows = chosen if batch_size == "auto" else (int(batch_size), int(batch_size) * 4)
    shape = Shape.of(model)
    dtype = str(model.dtype).removeprefix("torch.")
    task = task_size_of(prepared)
    weights = (n_parameters(shape, bool(getattr(model.hf_model.config, "tie_word_embeddings", False)))
               * DTYPE_BYTES[dtype])
    predicted = weights + cached_stage_bytes(shape, task, task.n_discovery, batch, rows, DTYPE_BYTES[dtype])
    out: dict[str, Any] = {"batch_size": batch, "rows_per_pass": rows, "auto_batch_chose": list(chosen),
                           "predicted_peak_gib": predicted / 2**30, "predicted_weights_gib": weights / 2**30,
                           "parameter_bytes_gib": sum(p.numel() * p.element_size()
                                                      for p in model.hf_model.parameters()) / 2**30}
    if device.startswith("cuda"):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        heads = [HeadSet((Head(0, h),)) for h in range(min(max(1, rows // batch), model.n_heads))]
        CachedScreener(model, prepared, batch_size=batch, rows_per_pass=rows).run(heads)
        measured = torch.cuda.max_memory_allocated()
        out["measured_peak_gib"] = measured / 2**30
        out["predicted_over_measured"] = predicted / measured
    return out


def paper_hours(shape, per_example_seconds: float, intact_per_example: float, n_examples: int = 2000) -> float:
    """Hours of a full screen: every head on ``n_examples`` examples, at the measured per-head rate."""
    heads = shape.n_layers * shape.n_heads
    return (heads * per_example_seconds + intact_per_example) * n_examples / 3600


# ------------------------------------------------------------------------------------------------------


class Report:
    """The results so far, written (JSON and markdown) after every section."""

    def __init__(self, path: Path, budget: float) -> None:
        self.path, self.budget, self.start = path, budget, time.perf_counter()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"sections": {}, "errors": {}, "skipped": []}

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def section(self, name: str, needs: float, fn: Callable[[], Any]) -> Any:
        if self.left() < needs:
            self.data["skipped"].append(f"{name} (needs ~{needs:.0f} s, {self.left():.0f} s left)")
            self.write()
            return None
        begin = time.perf_counter()
        try:
            value = fn()
            self.data["sections"][name] = value
            return value
        except Exception as error:  # one failing section must not lose the others
            self.data["errors"][name] = f"{type(error).__name__}: {error}\n" + traceback.format_exc(limit=6)
            return None
        finally:
            gc.collect()  # the section's models are unreferenced now
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.data.setdefault("section_seconds", {})[name] = round(time.perf_counter() - begin, 1)
            self.data["elapsed_seconds"] = round(time.perf_counter() - self.start, 1)
            self.write()

    def attempt(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or ``None`` with its error recorded under ``name`` (a part of a section)."""
        try:
            return fn()
        except Exception as error:
            self.data["errors"][name] = f"{type(error).__name__}: {error}\n" + traceback.format_exc(limit=6)
            return None

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)
        self.path.with_suffix(".md").write_text(markdown(self.data))


def markdown(data: dict[str, Any]) -> str:
    lines = [f"# celtk GPU check ({data.get('environment', {}).get('device', '?')})", ""]
    rows = []
    for name, value in data["sections"].items():
        if not isinstance(value, dict) or "speed" not in value:
            continue
        for shape_name, s in value["speed"].items():
            fused = s.get("cached_fused", s.get("cached_bridge", {}))
            rows.append(f"| {name} | {shape_name} | {fused.get('seconds_per_head', float('nan')):.4f} | "
                        f"{s.get('cached_bridge', {}).get('seconds_per_head', float('nan')):.4f} | "
                        f"{s['naive_hook_loop']['seconds_per_head']:.4f} | "
                        f"{s.get('reload_per_head', {}).get('seconds_per_head', float('nan')):.3f} | "
                        f"{s['speedup_cached_vs_hook_loop']:.1f}x | "
                        f"{fused.get('tflops_per_second', float('nan')):.0f} | "
                        f"{value.get('hours', {}).get(shape_name, float('nan')):.2f} |")
    if rows:
        lines += ["| model | shape | cached fused s/head | cached bridge s/head | hook loop s/head | reload s/head | "
                  "speedup vs hook loop | TFLOP/s | hours, full screen |", "|---|---|---|---|---|---|---|---|---|",
                  *rows, ""]
    rates = data["sections"].get("matmul", {})
    if rates:
        lines += ["Matrix-product rate (TFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()), ""]
    for name, value in data["sections"].items():
        if isinstance(value, dict) and value.get("memory"):
            m = value["memory"]
            lines.append(f"- memory {name}: plan {m['predicted_peak_gib']:.2f} GiB, measured "
                         f"{m.get('measured_peak_gib', float('nan')):.2f} GiB (batch {m['batch_size']}, rows "
                         f"{m['rows_per_pass']}; auto chose {m['auto_batch_chose']})")
    if data["errors"]:
        lines += ["", "Errors: " + ", ".join(data["errors"])]
    if data["skipped"]:
        lines += ["", "Skipped: " + "; ".join(data["skipped"])]
    return "\n".join(lines) + "\n"


def environment(device: str) -> dict[str, Any]:
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "device": device}
    try:
        import transformer_lens

        env["transformer_lens"] = getattr(transformer_lens, "__version__", "?")
    except ImportError as error:
        env["transformer_lens"] = f"missing: {error}"
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env |= {"device": props.name, "memory_gib": props.total_memory / 2**30,
                "capability": list(torch.cuda.get_device_capability(0)),
                "cuda": torch.version.cuda}
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, tiny sizes: checks the script, measures nothing useful")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all sections (default 450; smoke 600)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if not args.smoke and not device.startswith("cuda"):
        parser.error("no CUDA device: run with --smoke to check the script on CPU")
    smoke = args.smoke
    report = Report(args.out, args.budget or (600.0 if smoke else 450.0))
    report.data["environment"] = environment(device)
    report.data["smoke"] = smoke
    report.write()
    tokenizer = offline_tokenizer(args.out.with_suffix(".tokenizer"))
    from celtk.planning.flops import Shape

    # sizes: (examples, context range) per shape; heads sampled; batch and rows
    arith = dict(n=24 if smoke else 256, context=(12, 18), continuation=4, kind="target")
    boolq = dict(n=8 if smoke else 48, context=(60, 100) if smoke else (120, 180), kind="choice")
    n_heads = 3 if smoke else 8
    big = 256 if smoke else 8192

    report.section("matmul", 5 if smoke else 20, lambda: {
        "bfloat16": matmul_rate(device, torch.bfloat16, big),
        "float32_tf32": matmul_rate(device, torch.float32, big, tf32=True),
        "float32": matmul_rate(device, torch.float32, big, tf32=False)})

    def tiny(dtype: torch.dtype) -> dict[str, Any]:
        out = {}
        for arch, config in TINY_MODELS.items():
            model = build_model(f"tiny-{arch}", config, dtype, device, tokenizer)
            prepared = synthetic(model, 12, (20, 30), "target", greedy=True)
            out[arch] = exactness(model, prepared, sampled_heads(model, 4) + [sampled_heads(model, 2)[1]], 4, 12)
        return out

    report.section("tiny_exactness_float32", 30, lambda: tiny(torch.float32))
    report.section("tiny_exactness_bfloat16", 30, lambda: tiny(torch.bfloat16))

    memory_configs = {"llama-3.2-3b": 32, "qwen2.5-3b": 8, "smollm3-3b": "auto"}
    for name, config in PAPER_MODELS.items():
        config = smoke_shape(config) if smoke else config

        def paper(name=name, config=config) -> dict[str, Any]:
            model = build_model(f"random-{name}", config, torch.bfloat16, device, tokenizer)
            # the section's models are freed when it returns (Report.section)
            heads = sampled_heads(model, n_heads)
            out: dict[str, Any] = {"n_layers": model.n_layers, "n_heads": model.n_heads}
            exact = synthetic(model, arith["n"] // 2, arith["context"], "target", greedy=True, seed=1)
            out["exactness_bfloat16"] = report.attempt(f"{name}/exactness",
                                                       lambda: exactness(model, exact, heads, 16, 64))
            out["speed"] = {}
            for shape_name, spec, batch, rows in (("arithmetic", arith, 64, 256), ("boolq", boolq, 8, 32)):
                prepared = synthetic(model, spec["n"], spec["context"], spec["kind"], spec.get("continuation", 1))
                measured = report.attempt(f"{name}/speed/{shape_name}",
                                          lambda prepared=prepared, batch=batch, rows=rows:
                                          speed(model, prepared, heads, batch, rows, device, with_reload=True))
                if measured:
                    out["speed"][shape_name] = measured
            shape = Shape.of(model)
            out["hours"] = {}
            for shape_name, s in out["speed"].items():
                best = s.get("cached_fused", s["cached_bridge"])
                out["hours"][shape_name] = paper_hours(shape, best["seconds_per_head"] / s["examples"],
                                                       best["seconds_intact"] / s["examples"])
            prepared = synthetic(model, boolq["n"], boolq["context"], "choice")
            out["memory"] = report.attempt(f"{name}/memory",
                                           lambda: memory(model, prepared, memory_configs[name], device))
            return out

        report.section(name, 20 if smoke else 90, paper)

    def llama_float32() -> dict[str, Any]:
        config = smoke_shape(PAPER_MODELS["llama-3.2-3b"]) if smoke else PAPER_MODELS["llama-3.2-3b"]
        model = build_model("random-llama-3.2-3b-fp32", config, torch.float32, device, tokenizer)
        # the section's models are freed when it returns (Report.section)
        heads = sampled_heads(model, n_heads)
        exact = synthetic(model, arith["n"] // 2, arith["context"], "target", greedy=True, seed=1)
        prepared = synthetic(model, arith["n"], arith["context"], "target", arith["continuation"])
        return {"exactness_float32": report.attempt("float32/exactness",
                                                    lambda: exactness(model, exact, heads, 16, 64)),
                "speed_arithmetic": report.attempt("float32/speed",
                                                   lambda: speed(model, prepared, heads, 64, 256, device,
                                                                   with_reload=False))}

    report.section("llama-3.2-3b-float32", 20 if smoke else 60, llama_float32)
    report.data["goals"] = goals(report.data)
    report.write()
    print(markdown(report.data))
    return 1 if report.data["errors"] else 0


def goals(data: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals for the GPU run, read off the measurements (``None``: not measured)."""
    sections, rates = data["sections"], data["sections"].get("matmul", {})
    speedups, fractions, plans, fused_exact = [], [], [], []
    for name in PAPER_MODELS:
        value = sections.get(name) or {}
        for s in (value.get("speed") or {}).values():
            speedups.append(s["speedup_cached_vs_hook_loop"])
            if "cached_fused" in s and rates.get("bfloat16"):
                fractions.append(s["cached_fused"]["tflops_per_second"] / rates["bfloat16"])
        if (value.get("memory") or {}).get("predicted_over_measured"):
            plans.append(value["memory"]["predicted_over_measured"])
    fp32_section = sections.get("llama-3.2-3b-float32") or {}
    fp32 = fp32_section.get("exactness_float32") or {}
    fp32_rate = (fp32_section.get("speed_arithmetic") or {}).get("cached_fused", {}).get("tflops_per_second")
    tiny = sections.get("tiny_exactness_float32") or {}
    for result in [fp32, *tiny.values()]:
        if "fused_vs_bridge" in result:
            f = result["fused_vs_bridge"]
            fused_exact.append(f["verdicts_agreeing"] == f["verdicts"])
    return {
        "cached_at_least_20x_hook_loop": min(speedups) >= 20 if speedups else None,
        "speedups": speedups,
        "bfloat16_at_least_40pct_of_matmul": min(fractions) >= 0.4 if fractions else None,
        "fractions_of_bfloat16_matmul": fractions,
        "float32_fraction_of_float32_matmul": (fp32_rate / rates["float32"] if fp32_rate and rates.get("float32")
                                               else None),
        "float32_fraction_of_tf32_matmul": (fp32_rate / rates["float32_tf32"]
                                            if fp32_rate and rates.get("float32_tf32") else None),
        "plan_within_25pct": all(0.75 <= p <= 1.25 for p in plans) if plans else None,
        "plan_over_measured": plans,
        "fused_equals_bridge_float32": all(fused_exact) if fused_exact else None,
    }


if __name__ == "__main__":
    sys.exit(main())
