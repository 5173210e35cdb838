"""Exactness on real weights: celtk's ablations against a plain transformers model.

The tiny random models of the tests prove the code paths; this proves the numbers on real checkpoints (Qwen2 with
q/k/v biases and 7:1 grouped KV heads; Gemma-3 with 4:1, its own norms and query scaling):

    python benchmarks/real_weights_parity.py                          # qwen2.5-coder-0.5b and gemma3-270m
    python benchmarks/real_weights_parity.py --model gemma3-270m --n 10 --json out.json

For each model it draws ``--n`` arithmetic prompts (``--task``, ``--fewshot`` shots) and a sample of head sets: the
intact model, one head in each of several layers spread from the first to the last (a seeded head index), and one
set of three heads across layers. Then, per set and example:

(a) ``celtk.evaluate(..., heads=set)`` (a TransformerLens bridge with ``hook_z`` zeroed) against the plain HF model
    celtk dequantized into its cache, loaded afresh with ``AutoModelForCausalLM`` and given a forward pre-hook on
    each ablated layer's ``self_attn.o_proj`` that zeroes the head's slice of its input, one unpadded prompt at a
    time, scored by hand (summed log-probability of the answer tokens; correct when every one is the argmax);
(b) the cached screener (``CachedScreener``: the fused replay where the architecture has it, and the bridge replay)
    against the plain path (``screen_plain``: a full forward under ``ablate`` per set).

Both sides read the same token ids (celtk's ``prepare``), so the comparison is of the model arithmetic only. It
prints, per comparison, the largest |Δ log-prob| over all sets and examples and the number of verdicts that differ,
and exits 1 if any verdict differs or a Δ exceeds ``--tol``. Needs the aliases' packages (``celtk models``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("qwen2.5-coder-0.5b", "gemma3-270m")


def sample_sets(n_layers: int, n_heads: int, *, layers: int = 6, seed: int = 0) -> list[Any]:
    """The intact set, one head in each of ``layers`` layers spread over the depth, and three heads across layers."""
    from celtk.heads import Head, HeadSet

    rng = random.Random(seed)
    picks = sorted({round(i * (n_layers - 1) / (layers - 1)) for i in range(layers)})
    singles = [HeadSet((Head(layer, rng.randrange(n_heads)),)) for layer in picks]
    trio = HeadSet.of([Head(picks[0], rng.randrange(n_heads)), Head(picks[len(picks) // 2], rng.randrange(n_heads)),
                       Head(picks[-1], rng.randrange(n_heads))])
    return [HeadSet(), *singles, trio]


def hf_hooked_scores(hf: Any, prepared: Any, heads: Any, d_head: int) -> tuple[list[float], list[bool]]:
    """Per example: the answer's summed log-probability and whether every answer token is the argmax, from the plain
    HF model with a pre-hook on each ablated layer's ``o_proj`` zeroing the heads' slices of its input."""
    import torch

    by_layer: dict[int, list[int]] = {}
    for head in heads.heads:
        by_layer.setdefault(head.layer, []).append(head.head)

    def zeroing(indices: list[int]):
        def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            z = args[0].clone()
            for h in indices:
                z[..., h * d_head:(h + 1) * d_head] = 0
            return (z, *args[1:])
        return hook

    handles = [hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zeroing(indices))
               for layer, indices in by_layer.items()]
    logprobs: list[float] = []
    verdicts: list[bool] = []
    try:
        with torch.no_grad():
            for request in prepared.requests:  # the arithmetic task: one request per example, in order
                ids = torch.tensor([list(request.context) + list(request.continuation)])
                logits = hf(input_ids=ids).logits[0].float()
                start, targets = len(request.context), torch.tensor(request.continuation)
                scores = torch.log_softmax(logits[start - 1:start - 1 + len(targets)], dim=-1)
                logprobs.append(float(scores[torch.arange(len(targets)), targets].sum()))
                verdicts.append(bool((scores.argmax(dim=-1) == targets).all()))
    finally:
        for handle in handles:
            handle.remove()
    return logprobs, verdicts


def _compare(name: str, pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """``pairs``: (set, (logprobs_a, verdicts_a, logprobs_b, verdicts_b)) → the largest |Δ| and verdicts differing."""
    worst, differ, n = 0.0, 0, 0
    for _, (lp_a, ok_a, lp_b, ok_b) in pairs:
        worst = max([worst, *(abs(a - b) for a, b in zip(lp_a, lp_b, strict=True))])
        differ += sum(a != b for a, b in zip(ok_a, ok_b, strict=True))
        n += len(lp_a)
    return {"comparison": name, "max_abs_dlogprob": worst, "verdicts_differing": differ, "scores": n}


def _columns(result: Any) -> tuple[list[float], list[bool]]:
    return [float(e.logprob) for e in result.examples], [bool(e.correct) for e in result.examples]


def parity(alias: str, **options: Any) -> dict[str, Any]:
    """:func:`_parity` with autograd off, and the caller's autograd setting back afterwards (a test runs it)."""
    import torch

    with torch.no_grad():
        return _parity(alias, **options)


def _parity(alias: str, *, n: int = 20, task_spec: str = "arithmetic:2dm", fewshot: int = 3, seed: int = 0,
           layers: int = 6, batch_size: int = 8) -> dict[str, Any]:
    """The figures for one model: see the module's docstring."""
    import torch
    from transformers import AutoModelForCausalLM

    import celtk
    from celtk.evaluation import EvalConfig, prepare
    from celtk.models import load_model
    from celtk.screening.cached import CachedScreener, screen_plain
    from celtk.screening.fused import fused_layers
    from celtk.tasks import get_task, make_splits

    started = time.perf_counter()
    model = load_model(alias)
    loaded = time.perf_counter() - started
    task = get_task(task_spec)
    splits = make_splits(task, n, 0, fewshot=fewshot, seed=seed)
    examples, shots = splits.discovery, splits.shots
    prepared = prepare(model, task, examples, shots)
    sets = sample_sets(model.n_layers, model.n_heads, layers=layers, seed=seed)
    # the HF model celtk reads, loaded again on its own: eager attention, the textbook softmax(QKᵀ)V
    assert model.local_dir is not None
    hf = AutoModelForCausalLM.from_pretrained(model.local_dir, dtype=torch.float32, attn_implementation="eager").eval()

    hf_scores = {heads: hf_hooked_scores(hf, prepared, heads, model.d_head) for heads in sets}
    config = EvalConfig(batch_size=batch_size)
    evaluated = {heads: _columns(celtk.evaluate(model, task, examples, shots, heads=heads, config=config))
                 for heads in sets}
    intact_plain, plain = screen_plain(model, prepared, sets, batch_size=batch_size)
    replays = ["fused", "bridge"] if fused_layers(model) is not None else ["bridge"]
    cached = {replay: CachedScreener(model, prepared, batch_size=batch_size, replay=replay).run(sets)
              for replay in replays}

    comparisons = [_compare("evaluate vs HF o_proj hook", [(s, (*evaluated[s], *hf_scores[s])) for s in sets])]
    for replay, (intact, results) in cached.items():
        comparisons.append(_compare(f"cached ({replay}) vs plain",
                                    [(s, (*_columns(results[s]), *_columns(plain[s]))) for s in sets]
                                    + [("intact", (*_columns(intact), *_columns(intact_plain)))]))
        comparisons.append(_compare(f"cached ({replay}) vs HF o_proj hook",
                                    [(s, (*_columns(results[s]), *hf_scores[s])) for s in sets]))
    bites = max(max(abs(a - b) for a, b in zip(evaluated[s][0], evaluated[sets[0]][0], strict=True))
                for s in sets[1:])
    return {
        "model": alias, "architecture": model.architecture, "shape": f"{model.n_layers} × {model.n_heads} "
        f"({model.n_kv_heads} KV heads, d_head {model.d_head})", "task": task_spec, "fewshot": fewshot,
        "examples": len(examples), "sets": [str(s) or "intact" for s in sets],
        "intact_accuracy": sum(evaluated[sets[0]][1]) / len(examples),
        "largest_ablation_effect": bites,  # the ablations bite: Δ log-prob they cause, beside the parity Δ
        "comparisons": comparisons, "seconds": round(time.perf_counter() - started, 1),
        "load_seconds": round(loaded, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help=f"an alias or model source (repeatable; default {MODELS})")
    parser.add_argument("--n", type=int, default=20, help="arithmetic prompts per model")
    parser.add_argument("--task", default="arithmetic:2dm")
    parser.add_argument("--fewshot", type=int, default=3)
    parser.add_argument("--layers", type=int, default=6, help="layers sampled, one head each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tol", type=float, default=1e-3, help="largest |Δ log-prob| accepted (float32 rounding)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from celtk.cli._common import quiet_libraries

    quiet_libraries()
    figures = []
    failed = False
    for alias in args.model or MODELS:
        found = parity(alias, n=args.n, task_spec=args.task, fewshot=args.fewshot, seed=args.seed, layers=args.layers)
        figures.append(found)
        print(f"\n{found['model']} ({found['architecture']}, {found['shape']}): {found['examples']} × "
              f"{found['task']} {found['fewshot']}-shot, intact accuracy {found['intact_accuracy']:.1%}, "
              f"{found['seconds']} s; sets {', '.join(found['sets'])}")
        print(f"  the ablations move log-probs by up to {found['largest_ablation_effect']:.3f}")
        for row in found["comparisons"]:
            bad = row["verdicts_differing"] > 0 or row["max_abs_dlogprob"] > args.tol
            failed |= bad
            print(f"  {row['comparison']:<36} max |Δ log-prob| {row['max_abs_dlogprob']:.2e}   verdicts differing "
                  f"{row['verdicts_differing']} of {row['scores']}{'   FAIL' if bad else ''}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
