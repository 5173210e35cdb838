"""Expected GPU hours for the paper's full screens (every head × 2,000 discovery examples), from
celtk's FLOP count (celtk.planning.flops) at a stated sustained throughput.

    python examples/slurm/estimate_gpu_hours.py [--tflops 150]

Assumptions, stated so they can be changed: model shapes from the models' published configs;
tokens per example as below (zero-shot arithmetic ≈ 15 tokens; BoolQ ≈ 150 tokens with its passage;
HellaSwag 4 endings ≈ 4 × 80 tokens, scored as 4 requests); no shared few-shot prefix (zero-shot);
150 TFLOP/s sustained, a round figure for bf16 on one L40S/A100-class GPU at about 40–50 % of
its dense peak. Measured efficiency on this project's CPU machine: see README "Performance".
"""

from __future__ import annotations

import argparse

from celtk.planning.flops import Shape, gpu_hours

MODELS = {  # n_layers, n_heads, n_kv_heads, d_head, d_model, d_ff, d_vocab
    "Llama-3.2-3B-Instruct": Shape(28, 24, 8, 128, 3072, 8192, 128256),
    "Qwen2.5-3B-Instruct": Shape(36, 16, 2, 128, 2048, 11008, 151936),
    "SmolLM3-3B": Shape(36, 16, 4, 128, 2048, 11008, 128256),
}
TASKS = {"arithmetic (0-shot)": (2000, 15), "boolq": (2000, 150), "hellaswag (4 endings)": (8000, 80)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tflops", type=float, default=150.0, help="sustained throughput per GPU, TFLOP/s")
    args = parser.parse_args()
    print(f"{'model':24} {'task':22} {'cached GPU-h':>12} {'plain GPU-h':>12}")
    for name, shape in MODELS.items():
        for task, (requests, tokens) in TASKS.items():
            hours = gpu_hours(shape, requests, tokens, 0, flops_per_second=args.tflops * 1e12)
            print(f"{name:24} {task:22} {hours['cached']:12.2f} {hours['plain']:12.2f}")


if __name__ == "__main__":
    main()
