"""Each stage of a finished run beside its bound: the float32 work it must do (the model's FLOPs per token × the
tokens each stage computes, the shared few-shot prefix counted once per pass) at the machine's matmul rate.

    .venv/bin/python benchmarks/stage_bounds.py runs/demo                  # measures the matmul rate first
    .venv/bin/python benchmarks/stage_bounds.py runs/demo --rate 315 --markdown
    .venv/bin/python benchmarks/stage_bounds.py runs/demo --write docs/performance.md   # the page's stage table

FLOPs (a multiply-add is 2): per token and decoder layer, 2 × the layer's matrix weights plus causal attention,
4 × n_heads × d_head × (keys attended: the position + 1); the unembedding, 2 × d_model × vocab, only at scored
positions (celtk unembeds nothing else). Per stage:

* **screen**: the intact pass (every layer) and, per head of layer ``l`` (and the null ablation from layer 0),
  layers ``l … L−1`` over the discovery set's tokens (the screener replays from cached layer inputs).
* **select**: Algorithm 1's subsets of the pool (sizes 2 … k) through the prefix tree
  (:func:`celtk.screening.prefix_tree.layer_evaluations`: sets sharing their lower heads share those layers), and
  the intact pass that feeds them; another strategy's sets are not recorded, so its bound is left out.
* **test**: two streamed passes (intact, ablated) over the held-out set; ``plain_gflop`` is the same work with
  every prompt run whole (the path before the shared prefix).

Wall times: ``timing.json``'s ``screen_seconds``; select and test from the files each stage writes last, one
after the other in one ``celtk run`` (``screen.csv``/``timing.json`` → ``selection.json`` → ``test.json``); what
is left of ``run_timing.json``'s wall time is model load and setup. ``--seconds select=70`` overrides any of them
(a log's stage lines, a separate invocation). ``share`` is the bound's time over the wall time: 1 is the ceiling
of an exact float32 computation at the measured rate.

The matmul rate is measured here (``--rate`` skips it): float32 products of the model's own shapes (a batch of
rows × d_model into the MLP width), the best of a few repeats, with torch's thread setting as the run had it
(set ``OMP_NUM_THREADS`` to match). Measure on an otherwise idle machine, as the run was.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (screen.json, selection.json, test.json)")
    parser.add_argument("--rate", type=float, default=None, help="the matmul rate in GFLOP/s (default: measure it)")
    parser.add_argument("--seconds", action="append", default=[], metavar="STAGE=S",
                        help="a stage's wall time in seconds, overriding what the run directory records")
    parser.add_argument("--markdown", action="store_true", help="print docs/performance.md's stage table")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here too")
    parser.add_argument("--write", type=Path, default=None, metavar="PAGE",
                        help="write the stage table into PAGE between its stage-table markers")
    args = parser.parse_args()
    report = stage_bounds(args.run, rate=args.rate, seconds=_overrides(args.seconds))
    print(markdown(report) if args.markdown or args.write else json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.write:
        from page_markers import write_between

        write_between(args.write, MARKERS[0], MARKERS[1], markdown(report), "stage table")


MARKERS = ("<!-- stage table: benchmarks/stage_bounds.py RUN --write PAGE -->", "<!-- /stage table -->")


def _overrides(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        stage, _, value = item.partition("=")
        if stage not in ("load", "screen", "select", "test") or not value:
            raise SystemExit(f"--seconds takes STAGE=SECONDS, STAGE one of load, screen, select, test; got {item!r}")
        out[stage] = float(value)
    return out


def stage_bounds(run: Path, rate: float | None = None, seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """The report: per stage its wall time (and where it came from), FLOPs, the bound's time at ``rate`` GFLOP/s
    (measured when ``None``) and the share of the bound reached."""
    from celtk.run.session import session_for
    from celtk.screening.prefix_tree import layer_evaluations
    from celtk.store.documents import ScreenDocument, SelectionDocument

    selection = SelectionDocument.load(run) if (run / SelectionDocument.FILE).is_file() else None
    screen = ScreenDocument.load(run)
    session = session_for(selection or screen)
    model = session.model
    cost = _TokenCost(model)
    discovery = cost.pass_cost(session.prepared("discovery").requests)
    n_layers = model.n_layers

    stages: dict[str, dict[str, Any]] = {}
    heads = [row.head for row in screen.complete_rows()]
    replay_layers = sum(n_layers - h.layer for h in heads) + n_layers  # each head, and the null ablation
    stages["screen"] = {"gflop": (discovery.layers(n_layers) + discovery.layers(replay_layers)
                                  + discovery.unembed * (len(heads) + 2)) / 1e9}
    if selection is not None:
        stages["select"] = {"gflop": None, "note": f"strategy {selection.strategy}: its sets are not recorded"}
        if selection.strategy == "algorithm1" and selection.pool is not None:
            from celtk.heads import HeadSet

            sets = [HeadSet(tuple(c)) for size in range(2, selection.k + 1)
                    for c in itertools.combinations(sorted(selection.pool), size)]
            tree = layer_evaluations(sets, n_layers)
            stages["select"] = {"gflop": (discovery.layers(n_layers + tree) + discovery.unembed * len(sets)) / 1e9,
                                "sets": len(sets), "tree_layer_evaluations": tree,
                                "flat_layer_evaluations": sum(n_layers - s.heads[0].layer for s in sets)}
    if (run / "test.json").is_file():
        heldout = session.prepared("heldout").requests
        shared, whole = cost.pass_cost(heldout), cost.pass_cost(heldout, share=False)
        stages["test"] = {"gflop": 2 * (shared.layers(n_layers) + shared.unembed) / 1e9,
                          "plain_gflop": 2 * (whole.layers(n_layers) + whole.unembed) / 1e9,
                          "prefix_tokens": shared.prefix}

    walls = _wall_times(run, set(stages))
    walls.update({stage: (value, "--seconds") for stage, value in (seconds or {}).items()})
    measured = rate is None
    rate = _matmul_rate(model) if rate is None else rate
    for stage, row in stages.items():
        wall, source = walls.get(stage, (None, "not recorded"))
        bound = None if row["gflop"] is None else row["gflop"] / rate
        row |= {"wall_s": wall, "wall_source": source, "bound_s": bound,
                "share": None if bound is None or not wall else bound / wall}
    if "load" in walls:
        stages["load"] = {"wall_s": walls["load"][0], "wall_source": walls["load"][1], "gflop": None}
    return {"run": str(run), "model": model.name, "gflop_per_s": rate, "rate_measured": measured,
            "threads": _threads(), "stages": stages}


class _TokenCost:
    """FLOPs of one model: per token and layer (matrix weights), attention by position, unembedding."""

    def __init__(self, model: Any) -> None:
        block = model.arch.blocks[0]
        self.matrix = 2 * sum(p.numel() for p in block.parameters() if p.ndim == 2)
        self.attention = 4 * model.n_heads * model.d_head  # per key attended
        self.unembed = 2 * model.d_model * model.d_vocab

    def pass_cost(self, requests: list[Any], share: bool = True) -> _Pass:
        """One pass over ``requests``: the shared prefix once (``share``), each request's own tokens after it."""
        from celtk.evaluation.shared_prefix import shared_prefix_length

        prefix = shared_prefix_length(requests) if share else 0
        tokens = prefix + sum(len(r.context) + len(r.continuation) - 1 - prefix for r in requests)
        keys = sum(range(1, prefix + 1)) + sum(sum(range(prefix + 1, len(r.context) + len(r.continuation)))
                                               for r in requests)
        scored = sum(len(r.continuation) for r in requests)
        return _Pass(prefix, self.matrix * tokens + self.attention * keys, self.unembed * scored)


class _Pass:
    def __init__(self, prefix: int, per_layer: float, unembed: float) -> None:
        self.prefix, self.per_layer, self.unembed = prefix, per_layer, unembed

    def layers(self, count: int) -> float:
        """FLOPs of ``count`` decoder-layer evaluations over every token of the pass."""
        return self.per_layer * count


def _wall_times(run: Path, stages: set[str]) -> dict[str, tuple[float, str]]:
    """``stage -> (seconds, where it came from)``, from what the run directory records."""
    out: dict[str, tuple[float, str]] = {}
    timing = run / "timing.json"
    if timing.is_file():
        out["screen"] = (float(json.loads(timing.read_text())["screen_seconds"]), "timing.json")
    done = {name: (run / name).stat().st_mtime for name in ("timing.json", "selection.json", "test.json")
            if (run / name).is_file()}
    if "select" in stages and {"timing.json", "selection.json"} <= set(done):
        out["select"] = (done["selection.json"] - done["timing.json"], "mtime selection.json − timing.json")
    if "test" in stages and {"selection.json", "test.json"} <= set(done):
        out["test"] = (done["test.json"] - done["selection.json"], "mtime test.json − selection.json")
    whole = run / "run_timing.json"
    if whole.is_file() and {"screen", "select", "test"} <= set(out):
        rest = float(json.loads(whole.read_text())["wall_seconds"]) - sum(out[s][0] for s in ("screen", "select",
                                                                                              "test"))
        out["load"] = (rest, "run_timing.json − the stages")
    return out


def _matmul_rate(model: Any, rows: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of float32 products of the model's MLP shape, the best of ``repeats``."""
    import torch

    width = model.arch.d_mlp
    a = torch.randn(rows, model.d_model, dtype=torch.float32)
    b = torch.randn(model.d_model, width, dtype=torch.float32)
    torch.matmul(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - start) / 10)
    return 2 * rows * model.d_model * width / best / 1e9


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def markdown(report: dict[str, Any]) -> str:
    """The stage table of docs/performance.md."""
    def number(value: Any, digits: int = 1) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    lines = [f"{report['model']}, {report['gflop_per_s']:.0f} GFLOP/s float32 "
             f"({'measured' if report['rate_measured'] else 'given'}, {report['threads']} threads)", "",
             "| stage | wall s | GFLOP | bound s | share of bound | wall time from |",
             "|---|---:|---:|---:|---:|---|"]
    for stage in ("load", "screen", "select", "test"):
        row = report["stages"].get(stage)
        if row is not None:
            lines.append(f"| {stage} | {number(row['wall_s'])} | {number(row['gflop'])} | "
                         f"{number(row.get('bound_s'), 2)} | {number(row.get('share'), 2)} | {row['wall_source']} |")
    timed = [row for row in report["stages"].values() if row.get("wall_s") is not None]
    if len(timed) > 1:
        wall, bound = sum(r["wall_s"] for r in timed), sum(r.get("bound_s") or 0.0 for r in timed)
        lines.append(f"| all | {number(wall)} | {number(sum(r['gflop'] or 0.0 for r in timed))} | "
                     f"{number(bound, 2)} | {number(bound / wall, 2)} | the rows above (a stage without a bound adds "
                     "its wall time only) |")
    test = report["stages"].get("test")
    if test is not None:
        lines += ["", f"The test's plain path (every prompt whole) would compute {test['plain_gflop']:,.1f} GFLOP; "
                  f"the shared prefix ({test['prefix_tokens']} tokens) is run once per pass."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
