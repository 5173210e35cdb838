"""The cached screener's two replays side by side in one process: the fused Llama-family layer
(celtk.screening.fused, the default where it applies) and the TransformerLens bridge blocks under hook_z
hooks (the replay every screen used before it). Same model (SmolLM2-135M, float32), same
three-shot arithmetic:2da discovery examples, same heads; the two are timed in alternation
(bridge, fused, bridge, fused, ...) after a warm-up of each, and their per-example verdicts must be
identical on every head. Reports seconds per head, the speedup, and each replay's FLOP rate
(celtk.planning.flops) as a fraction of this machine's dense fp32 matmul rate measured in the same run
(2048³), and as a fraction of a tighter limit: the time the screen's own matrix products take
alone, each product timed at the shape the screen runs it (rows × positions by d_model by the
projection's width, the unembedding at the scored positions of one batch). ``--profile`` adds each
replay's operator time by class (torch.profiler).

    .venv/bin/python benchmarks/replay_speed.py --n 100 --layers 0,10,20,29 --repeats 2 --out runs/bench_replay.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import numpy as np
import torch
from peers import matmul_gflops  # benchmarks/peers.py: the same matmul rate

OP_CLASSES = {  # operator -> class, for the profile's summary
    "aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "attention", "aten::baddbmm": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention", "aten::_softmax": "attention",
    "aten::copy_": "copies", "aten::cat": "copies", "aten::index": "copies", "aten::clone": "copies",
    "aten::mul": "element-wise", "aten::add": "element-wise", "aten::silu": "element-wise", "aten::pow": "element-wise",
    "aten::mean": "element-wise", "aten::rsqrt": "element-wise", "aten::neg": "element-wise",
    "aten::masked_fill": "element-wise",
    "aten::_log_softmax": "scoring", "aten::argmax": "scoring", "aten::gather": "scoring",
}


def gemm_rate(m: int, k: int, n: int, repeats: int = 10) -> float:
    """GFLOP/s of ``linear(x [m, k], w [n, k])``, best of ``repeats``."""
    x, w = torch.randn(m, k), torch.randn(n, k)
    torch.nn.functional.linear(x, w)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.nn.functional.linear(x, w)
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


def gemm_bound(model, flops: float, unembed_flops: float, tokens_per_pass: int, scored_per_batch: int) -> dict:
    """Seconds the screen's matrix products take alone at their own shapes' measured rates: the
    decoder's products (q, k, v, o, gate, up, down; attention's small products counted at the
    layer's rate) at ``tokens_per_pass`` rows, the unembedding at ``scored_per_batch`` rows."""
    d, q, kv, ff = model.d_model, model.n_heads * model.d_head, model.n_kv_heads * model.d_head, model.arch.d_mlp
    shapes = [(d, q), (d, kv), (d, kv), (q, d), (d, ff), (d, ff), (ff, d)]  # (k, n) per product
    seconds_per_flop = sum(2 * k * n / (gemm_rate(tokens_per_pass, k, n) * 1e9) for k, n in shapes)
    layer_rate = sum(2 * k * n for k, n in shapes) / seconds_per_flop / 1e9
    unembed_rate = gemm_rate(scored_per_batch, d, model.d_vocab, repeats=5)
    seconds = (flops - unembed_flops) / (layer_rate * 1e9) + unembed_flops / (unembed_rate * 1e9)
    return {"layer_gflops": layer_rate, "unembed_gflops": unembed_rate, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--layers", default="0,10,20,29")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rows-per-pass", type=int, default=288)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--allocator", choices=("keep", "glibc"), default="keep",
                        help="keep: the celtk executable's allocator setting (celtk.cli.allocator); glibc: the default")
    parser.add_argument("--out", default="runs/bench_replay.json")
    args = parser.parse_args()
    if args.allocator == "keep":
        from celtk.cli.allocator import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("the allocator setting did not take effect here; run with --allocator glibc")

    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.evaluation.prompts import prepare
    from celtk.planning.flops import Shape, screen_flops
    from celtk.screening.cached import CachedScreener, shared_prefix_length

    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, args.n, 0, seed=args.seed, fewshot=3)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    requests = prepared.requests
    sets = [HeadSet((Head(int(layer), h),)) for layer in args.layers.split(",") for h in range(model.n_heads)]
    prefix = shared_prefix_length(requests)
    flops = screen_flops(Shape.of(model), prefix, [len(r.context) + len(r.continuation) - 1 - prefix for r in requests],
                         sum(len(r.continuation) for r in requests), [s.heads[0].layer for s in sets])["cached"]

    def screen(replay):
        screener = CachedScreener(model, prepared, batch_size=args.batch_size, rows_per_pass=args.rows_per_pass,
                                  replay=replay)
        start = time.perf_counter()
        intact, results = screener.run(sets)
        return time.perf_counter() - start, intact, results

    scored = sum(len(r.continuation) for r in requests)
    unembed_flops = (1 + len(sets)) * 2 * scored * model.d_model * model.d_vocab
    mean_pos = float(np.mean([len(r.context) + len(r.continuation) - 1 - prefix for r in requests]))
    rows = max(args.batch_size, args.rows_per_pass // args.batch_size * args.batch_size)
    bound = gemm_bound(model, flops, unembed_flops, int(rows * mean_pos), int(args.batch_size * scored / len(requests)))
    replays = ("bridge", "fused")
    for replay in replays:  # warm-up: first-touch page faults and lazy initialisation
        CachedScreener(model, prepared, batch_size=args.batch_size, rows_per_pass=args.rows_per_pass,
                       replay=replay).run(sets[:1])
    peak = matmul_gflops()
    times: dict[str, list[float]] = {r: [] for r in replays}
    outcomes = {}
    for _ in range(args.repeats):
        for replay in replays:
            seconds, intact, results = screen(replay)
            times[replay].append(seconds)
            outcomes[replay] = (intact, results)
    (intact_b, bridge), (intact_f, fused) = outcomes["bridge"], outcomes["fused"]
    identical = sum(np.array_equal(bridge[s].correct, fused[s].correct) for s in sets)
    lp_diff = max(float(np.max(np.abs(np.array([e.logprob for e in bridge[s].examples])
                                      - np.array([e.logprob for e in fused[s].examples])))) for s in sets)
    best = {r: min(t) for r, t in times.items()}
    result = {
        "n_examples": len(requests), "n_heads": len(sets), "layers": args.layers, "shared_prefix_tokens": prefix,
        "allocator": args.allocator, "batch_size": args.batch_size, "rows_per_pass": args.rows_per_pass,
        "threads": torch.get_num_threads(),
        "seconds": times, "seconds_per_head": {r: best[r] / len(sets) for r in replays},
        "speedup_fused_vs_bridge": best["bridge"] / best["fused"],
        "screen_gflop": flops / 1e9, "matmul_gflops": peak,
        "fraction_of_matmul_rate": {r: flops / 1e9 / best[r] / peak for r in replays},
        "gemm_bound": bound, "fraction_of_gemm_bound": {r: bound["seconds"] / best[r] for r in replays},
        "heads_with_identical_verdicts": int(identical),
        "intact_identical": bool(np.array_equal(intact_b.correct, intact_f.correct)),
        "max_abs_logprob_diff": lp_diff,
    }
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        result["profile_seconds_by_class"] = {}
        for replay in replays:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                wall, _, _ = screen(replay)
            classes: Counter[str] = Counter()
            for event in prof.key_averages():
                classes[OP_CLASSES.get(event.key, "other operators")] += event.self_cpu_time_total / 1e6
            classes["outside operators (Python)"] = max(0.0, wall - sum(classes.values()))
            result["profile_seconds_by_class"][replay] = ({k: round(v, 2) for k, v in classes.most_common()}
                                                          | {"wall": round(wall, 2)})
    print(json.dumps(result, indent=1))
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
