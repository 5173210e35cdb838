"""Which of a decoder layer's element-wise steps a compiler can fuse without changing a bit: torch.compile (inductor,
the CPU fuser torch ships) against eager torch on SmolLM2-135M's own modules, at the screen's sizes.

    .venv/bin/python benchmarks/fusion_exactness.py --out runs/bench_fusion.json

Each piece is compiled with ``dynamic=True`` and run on the same random inputs as eager torch: printed and written,
whether its output is the same to the bit (``torch.equal``), the largest difference, and eager time over compiled
time (best of ``--repeats`` each, eager first; the speeds are a side note). The pieces: SiLU(gate)·up (the MLP's
element-wise step), the RMSNorm, the rotary embedding of queries and keys (transformers' ``apply_rotary_pos_emb``),
the attention scores' scale, additive causal mask and float32 softmax, and the whole MLP (norm, the three
projections, the residual add). A piece that changes bits cannot go into the screen: its stage files would no longer
be the ones eager torch writes (``benchmarks/stage_parity.py``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from peers import best_of  # benchmarks/peers.py: warm, best of N


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=int, default=10)
    parser.add_argument("--rows", default="288x13,64x79", help="examples x positions per pass, comma-separated")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F

    from celtk import load_model
    from celtk.cli.allocator import keep_freed_memory
    from celtk.screening.fused import fused_layers

    keep_freed_memory()  # as the celtk executable allocates
    model = load_model("smollm2-135m")
    layers = fused_layers(model)
    if layers is None:
        raise SystemExit("smollm2-135m's layers are not fused here: nothing to compare")
    m = layers[args.layer].modules
    norm = m["post_attention_layernorm"]

    def silu_up(gate: Any, up: Any) -> Any:
        return F.silu(gate) * up

    def rms(hidden: Any) -> Any:
        return norm(hidden)

    def mlp(hidden: Any) -> Any:
        x = norm(hidden)
        return hidden + m["down_proj"](m["act_fn"](m["gate_proj"](x)) * m["up_proj"](x))

    def rotary(q: Any, k: Any, cos: Any, sin: Any) -> Any:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return torch.cat(apply_rotary_pos_emb(q, k, cos, sin), dim=1)

    def scores_softmax(scores: Any, mask: Any) -> Any:  # the fused layer's scale, additive mask and softmax
        return torch.softmax(scores * 0.125 + mask, dim=-1, dtype=torch.float32)

    pieces = {"silu(gate)·up": silu_up, "rmsnorm": rms, "rotary": rotary, "softmax": scores_softmax, "mlp": mlp}
    compiled = {name: torch.compile(fn, dynamic=True) for name, fn in pieces.items()}
    gen = torch.Generator().manual_seed(0)
    rows = []
    with torch.no_grad():
        for size in args.rows.split(","):
            examples, positions = (int(v) for v in size.split("x"))
            hidden = torch.randn(examples, positions, model.d_model, generator=gen) * 3
            gate = torch.randn(examples, positions, m["gate_proj"].out_features, generator=gen) * 3
            up = torch.randn(examples, positions, m["up_proj"].out_features, generator=gen)
            heads, kv_heads, d_head = model.n_heads, model.n_kv_heads, model.d_head
            q = torch.randn(examples, heads, positions, d_head, generator=gen)
            k = torch.randn(examples, kv_heads, positions, d_head, generator=gen)
            angles = torch.arange(positions)[:, None] * torch.rand(d_head // 2, generator=gen).repeat(2)[None]
            cos, sin = angles.cos()[None].expand(examples, -1, -1), angles.sin()[None].expand(examples, -1, -1)
            scores = torch.randn(examples, kv_heads, heads // kv_heads * positions, positions, generator=gen) * 4
            causal = torch.ones(positions, positions, dtype=torch.bool).tril()
            mask = torch.zeros(positions, positions).masked_fill(~causal, torch.finfo(torch.float32).min)
            mask = mask.repeat(heads // kv_heads, 1)
            inputs = {"silu(gate)·up": (gate, up), "rmsnorm": (hidden,), "rotary": (q, k, cos, sin),
                      "softmax": (scores, mask), "mlp": (hidden,)}
            for name, fn in pieces.items():
                given = inputs[name]
                eager, fused = fn(*given), compiled[name](*given)
                eager_s = best_of(lambda fn=fn, given=given: fn(*given), args.repeats)
                compiled_s = best_of(lambda name=name, given=given: compiled[name](*given), args.repeats)
                row = {"piece": name, "rows": size, "bit_identical": bool(torch.equal(eager, fused)),
                       "max_abs_difference": float((eager - fused).abs().max()), "eager_over_compiled":
                       eager_s / compiled_s}
                rows.append(row)
                print(f"{name:15} {size:>7}: bit-identical {row['bit_identical']!s:5}  max |Δ| "
                      f"{row['max_abs_difference']:.2e}  eager / compiled {row['eager_over_compiled']:.2f}×")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"layer": args.layer, "threads": torch.get_num_threads(), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
