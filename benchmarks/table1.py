"""A Table 1 of our own: celtk's whole protocol (screen, select, test) over three split seeds, on real models of
three families, on arithmetic subtasks where each model's intact accuracy leaves room both ways.

Three steps, each resumable (rerun the same command after an interruption: finished work is read, not redone):

    nice .venv/bin/python benchmarks/table1.py sweep   # intact accuracy of every arithmetic subtask, per model
    nice .venv/bin/python benchmarks/table1.py run     # `celtk replicate` per (model, task), one at a time
    .venv/bin/python benchmarks/table1.py write        # docs/table1.json and docs/table1.md from what is finished

``sweep`` scores each model, intact, on the 100 discovery examples of split seed 0 of every arithmetic subtask (3
shots, as the runs use) and keeps, per model, the two subtasks inside the 15–85 % band that lie closest to 50 %:
room for ablation to help and to hurt (for Qwen2.5-Coder-1.5B, the largest model this machine runs, one subtask, run
after every other row: one of its seeds takes two hours or more here). ``run`` then runs ``celtk replicate --seeds
1,2,3`` (discovery 100, held-out 300, 3 shots, zero ablation, p 10, k 3: the demo's settings) for each chosen
(model, task), printing ``celtk plan``'s estimate first and measuring this machine's float32 matmul rate beside each
job; the demo's own (model, task) goes first, outside the band, because the demo runs it. Set ``TABLE1_SHARED="what
else ran"`` when the job shares the machine: the record keeps it and the page marks that job's wall time. Every run
directory sits under ``runs/table1/`` with its own held-out ledger (``runs/table1/ledger.jsonl``), so these runs'
frozen sets are guarded among themselves and do not collide with other work on this machine. ``write`` regenerates
the page: every (model, task) row, finished or not (a pending row says what is still to run), with the sweep it was
chosen from and the machine it ran on, and the plan against measured runs that ``benchmarks/plan_vs_measured.py``
left in ``runs/plan_vs_measured/`` (the scale section: the 1.5B model's memory and stage times beside the plan's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from peers import matmul_gflops  # noqa: E402  (this machine's float32 matmul rate, the yardstick beside every time)

from celtk.run.options import REPLICATE  # noqa: E402
from celtk.store.files import atomic_write_bytes  # noqa: E402

OUT = ROOT / "runs" / "table1"
DOC = ROOT / "docs" / "table1.md"
DATA = ROOT / "docs" / "table1.json"
FIGURE = ROOT / "docs" / "table1.png"
SCALE = ROOT / "runs" / "plan_vs_measured"  # benchmarks/plan_vs_measured.py's results
CELTK = [sys.executable, "-m", "celtk.cli"]

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m")
# the largest model this machine runs (one seed of the demo's settings: 1.7 h by `celtk plan` at the 2048² rate, a
# floor): one subtask, after every row above
LARGE = ("qwen2.5-coder-1.5b",)
SUBTASKS = ("1dc", "2da", "2dm", "2ds", "3da", "3ds", "4da", "4ds", "5da", "5ds")
BAND = (0.15, 0.85)
PER_MODEL = 2  # subtasks per model of MODELS; one per model of LARGE
SEEDS = (1, 2, 3)
SETTINGS = {"discovery": 100, "heldout": 300, "fewshot": 3, "p": 10, "k": 3}
DEMO = ("smollm2-135m", "arithmetic:2da")  # `make demo`: seed 1 of this row must stay L1H2, L14H8, L19H4
SWEEP_EXAMPLES = 100


def ledger_env() -> dict[str, str]:
    OUT.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "CELTK_LEDGER": str(OUT / "ledger.jsonl")}


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def write_atomic(path: Path, data: dict | str) -> None:
    text = data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=True) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return  # a rerun of finished work changes nothing
    atomic_write_bytes(path, data)


# ---------------------------------------------------------------------------------------------------------- sweep
def sweep_model(alias: str) -> dict[str, dict]:
    """Intact accuracy of ``alias`` on every arithmetic subtask (seed 0's discovery examples, 3 shots)."""
    from celtk import evaluate, get_task, load_model, make_splits

    model = load_model(alias)
    found = {}
    for sub in SUBTASKS:
        task = get_task(f"arithmetic:{sub}")
        splits = make_splits(task, SWEEP_EXAMPLES, 1, seed=0, fewshot=SETTINGS["fewshot"])
        start = time.perf_counter()
        result = evaluate(model, task, splits.discovery, splits.shots)
        correct = [bool(r.correct) for r in result.examples]
        found[sub] = {"accuracy": sum(correct) / len(correct), "n": len(correct),
                      "seconds": round(time.perf_counter() - start, 1)}
        print(f"  {alias} {sub}: {found[sub]['accuracy']:.0%} of {len(correct)} ({found[sub]['seconds']} s)",
              flush=True)
    return found


def on_page() -> dict:
    """What ``docs/table1.json`` holds: the record of finished work in a checkout whose ``runs/`` is gone (``runs/``
    is git-ignored, so a fresh clone or a new machine has the page but not the run directories behind it)."""
    return read(DATA)


def swept_so_far() -> dict:
    """``runs/table1/sweep.json``; in a checkout without it, the page's sweep."""
    return read(OUT / "sweep.json") or on_page().get("sweep", {})


def sweep(models: tuple[str, ...] = MODELS + LARGE) -> dict:
    path = OUT / "sweep.json"
    done = swept_so_far()
    for alias in models:
        if alias in done:
            continue
        done[alias] = {"subtasks": sweep_model(alias), "gflops": round(matmul_gflops(), 1)}
        write_atomic(path, done)  # one model at a time: an interruption keeps the models already swept
        print(f"swept {alias}: " + ", ".join(f"{s} {v['accuracy']:.0%}" for s, v in done[alias]["subtasks"].items()),
              flush=True)
    return done


def chosen(swept: dict) -> dict[str, list[str]]:
    """Per model, ``PER_MODEL`` subtasks (one for a model of ``LARGE``): the demo's own for the demo's model, then
    those inside the band closest to 50 % (ties: the subtask order), then, where the band holds too few, those
    outside it closest to the band."""
    picks = {}
    for alias, entry in swept.items():
        accuracy = {f"arithmetic:{s}": v["accuracy"] for s, v in entry["subtasks"].items()}
        inside = sorted((abs(a - 0.5), t) for t, a in accuracy.items() if BAND[0] <= a <= BAND[1])
        outside = sorted((min(abs(a - BAND[0]), abs(a - BAND[1])), t) for t, a in accuracy.items()
                         if not BAND[0] <= a <= BAND[1])
        first = [DEMO[1]] if alias == DEMO[0] else []
        count = 1 if alias in LARGE else PER_MODEL
        picks[alias] = list(dict.fromkeys(first + [t for _, t in inside] + [t for _, t in outside]))[:count]
    return picks


def in_band(swept: dict, alias: str, task: str) -> bool | None:
    sub = swept.get(alias, {}).get("subtasks", {}).get(task.split(":")[1])
    return None if sub is None else BAND[0] <= sub["accuracy"] <= BAND[1]


def jobs(swept: dict) -> list[tuple[str, str]]:
    """The order the replicates run in: the demo's row, then each model's first task, then each model's second, then
    the large models' task."""
    picks = chosen(swept)
    order = [DEMO]
    for rank in range(PER_MODEL):
        order += [(alias, picks[alias][rank]) for alias in MODELS if alias in picks and len(picks[alias]) > rank]
    order += [(alias, picks[alias][0]) for alias in LARGE if picks.get(alias)]
    return list(dict.fromkeys(order))


def job_dir(alias: str, task: str) -> Path:
    return OUT / alias / task.replace(":", "-")


# ------------------------------------------------------------------------------------------------------------ run
def plan(alias: str, task: str, gflops: float) -> str:
    """``celtk plan``'s estimate for one seed of the job, at the matmul rate just measured."""
    command = [*CELTK, "plan", "--model", alias, "--task", task.split(":")[0],
               "--discovery", str(SETTINGS["discovery"]), "--heldout", str(SETTINGS["heldout"]),
               "--p", str(SETTINGS["p"]), "--k", str(SETTINGS["k"]), "--batch-size", "32",
               "--device-flops", str(gflops * 1e9), "--device-memory", str(20 * 2**30)]
    done = subprocess.run(command, capture_output=True, text=True, env={**ledger_env(), "COLUMNS": "120"})
    # the table only: stderr holds progress (a first load dequantizes the GGUF), and errors when it failed
    return (done.stdout if done.returncode == 0 else done.stdout + done.stderr).strip()


def run_job(alias: str, task: str) -> dict:
    directory = job_dir(alias, task)
    record_path = directory / "table1_job.json"
    record = read(record_path)
    if (directory / "replicate.json").exists() and record.get("finished"):
        return record
    done_before = {s["seed"] for s in carried(alias, task).get("seeds", [])}  # on the page, not in this checkout
    todo = [seed for seed in SEEDS if seed not in done_before]
    if not todo:
        return {"finished": True, "from_page": True}  # finished before this checkout: the page keeps its row
    gflops = matmul_gflops()
    estimate = plan(alias, task, gflops)
    print(f"== {alias} {task}: matmul {gflops:.0f} GFLOP/s\n{estimate}", flush=True)
    directory.mkdir(parents=True, exist_ok=True)
    # the plan is kept before the job starts, so a job cut short still shows what was estimated for it
    estimate = record.get("plan") or estimate  # a resumed job keeps the estimate printed before it first started
    write_atomic(record_path, {**record, "model": alias, "task": task, "plan": estimate, "finished": False,
                               "sessions": record.get("sessions", [])})
    start = time.time()
    # one seed more per replicate call (seeds 1; 1, 2; 1, 2, 3; those the page carries left out): the finished seeds
    # are read back, not redone, and replicate.json summarises the seeds finished so far, so a job cut short still
    # shows its finished seeds
    for count in range(1, len(todo) + 1):
        command = [*CELTK, "replicate", "--model", alias, "--task", task,
                   "--seeds", ",".join(map(str, todo[:count])),
                   "--discovery", str(SETTINGS["discovery"]), "--heldout", str(SETTINGS["heldout"]),
                   "--fewshot", str(SETTINGS["fewshot"]), "--p", str(SETTINGS["p"]), "--k", str(SETTINGS["k"]),
                   "--out", str(directory)]
        with open(directory / "table1_job.log", "a", encoding="utf-8") as log:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=ledger_env())
        if done.returncode:
            break
    seconds = time.time() - start
    shared = os.environ.get("TABLE1_SHARED")  # what else ran on the machine meanwhile, said by whoever started it
    sessions = [*record.get("sessions", []), {"seconds": round(seconds, 1), "gflops_before": round(gflops, 1),
                                              **({"shared": shared} if shared else {}),
                                              "gflops_after": round(matmul_gflops(), 1), "rc": done.returncode,
                                              "host": platform.node()}]
    record = {"model": alias, "task": task, "command": " ".join(command[2:]), "plan": estimate, "sessions": sessions,
              "finished": done.returncode == 0 and (directory / "replicate.json").exists()}
    write_atomic(record_path, record)
    status = "finished" if record["finished"] else f"FAILED rc={done.returncode}"
    print(f"   {status} in {seconds:.0f} s "
          f"(log: {directory / 'table1_job.log'})", flush=True)
    return record


def run() -> None:
    finish(*DEMO)  # needs no sweep: the demo's row first
    done = [DEMO]
    for models in (MODELS, MODELS + LARGE):  # the large models' sweep waits for every other row
        for job in jobs(sweep(models)):
            if job not in done:
                finish(*job)
                done.append(job)


def finish(alias: str, task: str) -> None:
    record = run_job(alias, task)
    if not record["finished"]:
        raise SystemExit(f"{alias} {task} did not finish; its log says why. Rerun to resume.")
    write()


# ---------------------------------------------------------------------------------------------------------- write
def carried(alias: str, task: str) -> dict:
    """The page's row for (alias, task), finished or partial, cut to the seeds whose run directories this checkout
    lacks (``runs/`` does not travel with the repository): those seeds stand as the page recorded them, and are not
    run again. Empty when the page has no such seed."""
    found = [r for r in on_page().get("rows", []) if (r["model"], r["task"]) == (alias, task)
             and r["status"] != "pending"]
    if not found:
        return {}
    seeds = [s for s in found[0]["seeds"] if not (job_dir(alias, task) / s["run"]).exists()]
    return {**found[0], "seeds": seeds} if seeds else {}


def summarised(alias: str, task: str, seeds: list[dict], alpha: float) -> dict:
    """``celtk replicate``'s summary (``celtk.run.replicate.summarise``: Holm over the tested seeds, the t interval,
    head frequencies) over seeds some of which the page carries and some of which ran here."""
    from celtk.run.config import RunConfig
    from celtk.run.replicate import ReplicateRow, summarise

    rows = [ReplicateRow.from_json({k: v for k, v in s.items() if k != "wall_seconds"}) for s in seeds]
    document = summarise(RunConfig(model=alias, task=task), [s["seed"] for s in seeds], rows, alpha).to_json()
    walls = {s["seed"]: s["wall_seconds"] for s in seeds}
    return {**document, "per_seed": [{**r, "wall_seconds": walls[r["seed"]]} for r in document["per_seed"]]}


def row(alias: str, task: str, swept: dict) -> dict:
    band = {"in_band": in_band(swept, alias, task)}
    directory = job_dir(alias, task)
    job, replicate = read(directory / "table1_job.json"), read(directory / "replicate.json")
    kept = carried(alias, task)
    if kept and [s["seed"] for s in kept["seeds"]] == list(SEEDS):
        return kept  # every seed from the page: its row stands as it was written
    seeds = list(kept.get("seeds", []))
    for r in replicate.get("per_seed", []):
        timing = read(directory / r["run"] / "run_timing.json")
        seeds.append({**r, "wall_seconds": timing.get("wall_seconds")})
    if not seeds:  # a job started and cut short before its first seed keeps the plan it printed
        started = {"plan": job["plan"], "running": not job.get("sessions")} if job.get("plan") else {}
        return {"model": alias, "task": task, "status": "pending", **band, **started}
    seeds.sort(key=lambda r: r["seed"])
    summary = summarised(alias, task, seeds, replicate.get("alpha", REPLICATE.alpha)) if kept else replicate
    if kept:
        seeds = summary["per_seed"]
    status = "finished" if [r["seed"] for r in seeds] == list(SEEDS) else "partial"  # seeds finished so far
    tested = [r for r in seeds if r["status"] == "tested"]
    mean = lambda key: sum(r[key] for r in tested) / len(tested) if tested else None  # noqa: E731
    intact, ablated = mean("intact_accuracy"), mean("ablated_accuracy")
    rer = (ablated - intact) / (1 - intact) if tested and intact is not None and intact < 1 else None
    rates = [s[k] for s in job.get("sessions", []) for k in ("gflops_before", "gflops_after")]
    rates += kept.get("gflops") or []
    return {"model": alias, "task": task, "status": status, **band, "seeds": seeds,
            "n_tested": summary["n_tested"],
            "intact_accuracy": intact, "ablated_accuracy": ablated, "mean_gain": summary["mean_gain"],
            "mean_gain_ci": summary["mean_gain_ci"], "relative_error_reduction": rer,
            "n_significant": summary["n_significant"], "head_frequency": summary["head_frequency"],
            # both are lower bounds: a session cut short (the machine restarted) records no time of its own, and a
            # resumed seed's run_timing.json counts its last invocation only; the larger is kept (a carried seed's
            # share: the page's time for the row)
            "wall_seconds": round(max(sum(x["seconds"] for x in job.get("sessions", [])) + kept.get("wall_seconds", 0),
                                      sum(s["wall_seconds"] or 0 for s in seeds)), 1),
            "running": not job.get("finished") and not job.get("sessions"),
            "gflops": [min(rates), max(rates)] if rates else None, "plan": job.get("plan") or kept.get("plan"),
            "shared": kept.get("shared", []) + [x["shared"] for x in job.get("sessions", []) if x.get("shared")]}


def pct(x: float | None, sign: bool = False) -> str:
    return "–" if x is None else (f"{x * 100:+.1f}" if sign else f"{x * 100:.1f}")


def markdown(data: dict) -> str:
    lines = ["# Table 1, our own: three families, three split seeds", "",
             "Generated by `benchmarks/table1.py write` from the runs `benchmarks/table1.py run` made (do not edit by "
             "hand; the numbers are also in `docs/table1.json`). Each row is `celtk replicate` over split seeds "
             f"{', '.join(map(str, SEEDS))}: discovery {SETTINGS['discovery']}, held-out {SETTINGS['heldout']}, "
             f"{SETTINGS['fewshot']} shots, zero ablation, p {SETTINGS['p']}, k {SETTINGS['k']} (the demo's settings), "
             "float32 on CPU. Accuracies are held-out, in %, means over the tested seeds; the gain's interval is a t "
             "interval over seeds; *significant* counts seeds whose McNemar p, Holm-adjusted over the seeds, is "
             "below 0.05; *relative error reduction* is (ablated − intact) / (1 − intact). *Wall time* is the larger "
             "of the job's recorded sessions and its seeds' own `run_timing.json`: both miss a session cut short by "
             "a machine restart (the job resumes where its files stop), so a resumed job's time is a lower bound.", "",
             "## Results", "",
             "| model | task | intact → ablated | gain (95 % CI over seeds) | rel. error red. | significant | "
             "most frequent heads | wall time | matmul GFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        task = r["task"] + (" (outside the band)" if r.get("in_band") is False else "")
        if r["status"] == "pending":
            what = "running, no seed finished yet" if r.get("running") else "pending"
            lines.append(f"| {r['model']} | {task} | {what} | | | | | | |")
            continue
        if r["status"] == "partial":  # a job cut short: its finished seeds only, said in the row
            task += f" (seeds {', '.join(str(x['seed']) for x in r['seeds'])} of {', '.join(map(str, SEEDS))} so far)"
        ci = r["mean_gain_ci"]
        gain = pct(r["mean_gain"], True) + (f" [{pct(ci[0], True)}, {pct(ci[1], True)}]" if ci else "")
        top = sorted(r["head_frequency"].items(), key=lambda hv: (-hv[1], hv[0]))[:3]  # the JSON keeps no order
        heads = ", ".join(f"{h} ({v:.0%})" for h, v in top) or "–"
        rate = f"{r['gflops'][0]:.0f}–{r['gflops'][1]:.0f}" if r["gflops"] else "–"
        lines.append(f"| {r['model']} | {task} | {pct(r['intact_accuracy'])} → {pct(r['ablated_accuracy'])} | "
                     f"{gain} | {pct(r['relative_error_reduction'], True)} | {r['n_significant']}/{r['n_tested']} | "
                     f"{heads} | {r['wall_seconds'] / 60:.0f} min{' so far (running)' if r.get('running') else ''}"
                     f"{' (shared)' if r.get('shared') else ''} | {rate} |")
    lines += ["", "![Held-out gain per seed and per row](table1.png)", "",
              "*The figure* (`docs/table1.png`, drawn by the same command): each row's held-out gain in points, "
              "every tested seed as a dot with its paired bootstrap 95 % interval, and the mean over seeds as a "
              "diamond with its t interval; the vertical line is no gain."]
    lines += ["", "## Every seed", "",
              "| model | task | seed | selection | discovery gain | held-out intact → ablated | gain [95 % CI] | "
              "McNemar p | Holm p | wall |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        for s in r.get("seeds", []):
            if s["status"] != "tested":
                lines.append(f"| {r['model']} | {r['task']} | {s['seed']} | nothing frozen ({s['status']}: no set "
                             f"gains on discovery; intact {pct(s.get('intact_discovery_accuracy'))}) | | | | | | |")
                continue
            wall = f"{s['wall_seconds'] / 60:.1f} min" if s.get("wall_seconds") else "–"
            lines.append(f"| {r['model']} | {r['task']} | {s['seed']} | {s['heads']} | "
                         f"{pct(s['discovery_gain'], True)} | "
                         f"{pct(s['intact_accuracy'])} → {pct(s['ablated_accuracy'])} | "
                         f"{pct(s['gain'], True)} [{pct(s['gain_ci'][0], True)}, {pct(s['gain_ci'][1], True)}] | "
                         f"{s['mcnemar_p']:.3g} | {s['holm_p']:.3g} | {wall} |")
    lines += ["", "## How the tasks were chosen", "",
              f"Intact accuracy on the {SWEEP_EXAMPLES} discovery examples of split seed 0, 3 shots "
              f"(`benchmarks/table1.py sweep`). Per model {PER_MODEL} subtasks are chosen ({', '.join(LARGE)}: "
              f"one, run after every other row, as one seed of it takes hours here): for {DEMO[0]} the demo's own "
              f"({DEMO[1]}) first; then those inside {BAND[0]:.0%}–{BAND[1]:.0%} closest to 50 % (room for ablation to "
              "help and to hurt); where the band holds too few, those outside it closest to the band, marked "
              "*outside the band* in the results.", "",
              "| model | " + " | ".join(SUBTASKS) + " | chosen |", "|---|" + "---|" * (len(SUBTASKS) + 1)]
    for alias, entry in data["sweep"].items():
        cells = [pct(entry["subtasks"][s]["accuracy"]) for s in SUBTASKS]
        lines.append(f"| {alias} | " + " | ".join(cells) + f" | {', '.join(data['chosen'].get(alias, [])) or '–'} |")
    plans = [(r["model"], r["task"], r["plan"]) for r in data["rows"] if r.get("plan")]
    if plans:
        lines += ["", "## `celtk plan` before each job", "",
                  "The estimate `celtk plan` printed before the job (one seed, at the matmul rate measured then), "
                  "beside the measured wall time per seed in the table above.", ""]
        for alias, task, text in plans:
            lines += [f"### {alias}, {task}", "", "```", text, "```", ""]
    if data.get("scale"):
        lines += scale_section(data["scale"])
    if data.get("humaneval_plan"):
        lines += humaneval_section(data["humaneval_plan"])
    shared = [(r["model"], r["task"], x) for r in data["rows"] for x in r.get("shared") or []]
    if shared:
        lines += ["", "## Jobs that shared the machine", "",
                  "Their wall times (marked *(shared)*) include waiting for the cores, so they are no measure of "
                  "celtk's speed or of the plan's accuracy; the accuracies and selections do not depend on it.", ""]
        lines += [f"- {alias}, {task}: {what}" for alias, task, what in shared]
    lines += ["", f"Machine: {data['machine']}.", ""]
    return "\n".join(lines)


def scale() -> list[dict]:
    """The finished measurements of ``benchmarks/plan_vs_measured.py`` (``runs/plan_vs_measured``), smallest model
    first."""
    found = [read(path) for path in sorted(SCALE.glob("*.json"))]
    if not found:  # runs/plan_vs_measured is not in this checkout: the page's measurements stand
        return list(on_page().get("scale", []))
    return sorted(found, key=lambda r: r["measured"]["screen"]["gflop"] / r["heads"])


def scale_section(results: list[dict]) -> list[str]:
    from plan_vs_measured import report

    first = results[0]
    return ["", "## Scale: `celtk plan` against a measured run", "",
            f"One `celtk run` per model ({first['task']}, discovery {first['discovery']}, held-out "
            f"{first['heldout']}, seed {first['seed']}, otherwise the settings above), each beside `celtk plan --json` "
            "for the same settings at the matmul rate measured just before it, by `benchmarks/plan_vs_measured.py` "
            "(`runs/plan_vs_measured/`). *plan (task estimates)* is what a user sees before the run (the task "
            "family's token lengths); *plan (measured lengths)* is given the prompts' real lengths, so its ratio to "
            "the measured time is the cost model's own error. *Share of bound* is the stage's FLOPs counted from its "
            "real tokens (`benchmarks/stage_bounds.py`) at the measured matmul rate, over its wall time. The peak is "
            "the run process's `ru_maxrss`; *floor* is that of a process that only imports torch, transformers, "
            "TransformerLens and celtk (the plan counts weights and activations only).", "",
            report(results), "", *scale_reading(results), "",
            "What shared the machine: " + "; ".join(sorted({r["shared"] or "nothing" for r in results})) + ".", ""]


HUMANEVAL = {"model": "qwen2.5-coder-0.5b", "task": "humaneval", "fewshot": 0, "discovery": 64, "heldout": 100}


def humaneval_plans(gflops: float | None) -> dict:
    """`celtk plan` for HumanEval on Qwen2.5-Coder-0.5B (164 problems: 64 discovery, 100 held-out, 0-shot): on this
    machine at ``gflops`` (float32) and on one H100 (bfloat16, the plan's assumed sustained rate)."""
    from plan_vs_measured import plan, plan_json

    flags = [f"--{key}={value}" for key, value in HUMANEVAL.items()]
    # the machine's total memory, not what is free at write time, floored to 256 MiB (two machines of one kind differ
    # by a few pages): a rewrite of finished work changes nothing
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**28 * 2**28
    plans = {"cpu": plan([*flags, f"--device-memory={total}"], gflops)} if gflops else {}
    return plans | {"h100": plan_json(*flags, "--device", "cuda", "--gpu", "h100", "--dtype", "bfloat16")}


def humaneval_section(plans: dict) -> list[str]:
    def hours(stages: list[dict]) -> str:
        return ", ".join(f"{s['stage']} {s['seconds'] / 3600:.2f} h" for s in stages)

    lines = ["", "## HumanEval on Qwen2.5-Coder-0.5B: the plan only", "",
             f"HumanEval (164 problems: discovery {HUMANEVAL['discovery']}, held-out {HUMANEVAL['heldout']}, 0-shot, "
             "pass@1, generation priced at lm-eval's cap of 1,024 new tokens) does not fit this machine's time, so "
             f"it was not run; `celtk plan --model {HUMANEVAL['model']} --task humaneval --fewshot 0 --discovery "
             f"{HUMANEVAL['discovery']} --heldout {HUMANEVAL['heldout']} --json` gives:", ""]
    if "cpu" in plans:
        cpu = plans["cpu"]
        total = sum(s["seconds"] for s in cpu["stages"]) / 3600
        lines.append(f"- this machine, float32 at {cpu['device']['flops_per_second'] / 1e9:.0f} GFLOP/s (the rate "
                     f"measured beside the Qwen2.5-Coder-0.5B scale run above): {hours(cpu['stages'])}; "
                     f"**{total:.1f} h** in all, peak {max(s['peak_bytes'] for s in cpu['stages']) / 1e9:.1f} GB;")
    h100 = plans["h100"]
    minutes = sum(s["seconds"] for s in h100["stages"]) / 60
    lines += [f"- one H100, bfloat16 at the plan's assumed sustained {h100['device']['flops_per_second'] / 1e12:.0f} "
              f"TFLOP/s: **{minutes:.1f} min** of arithmetic in all, peak "
              f"{max(s['peak_bytes'] for s in h100['stages']) / 1e9:.1f} GB. Token-by-token generation at batch 32 "
              "is bound by memory bandwidth on a GPU, not by arithmetic, so this is a floor, not an estimate of the "
              "wall time.", ""]
    return lines


def scale_reading(results: list[dict]) -> list[str]:
    """What the scale table says about the largest model, in numbers read from it."""
    big = results[-1]
    fitted = {s["stage"]: s for s in big["plan_with_measured_lengths"]["stages"]}
    ratio = {s: big["measured"][s]["wall_s"] / fitted[s]["seconds"] for s in ("screen", "select", "test")}
    peak = (big["peak_rss_bytes"] - big["floor_rss_bytes"]) / max(s["peak_bytes"] for s in fitted.values())
    low, high = sorted((big["gflop_per_s_before"], big["gflop_per_s_after"]))
    return [f"For {big['model']}: the measured peak above the import floor is {peak:.2f}× the plan's peak (weights "
            f"and activations). The plan's times are FLOPs at the given rate, here the 2048² matmul rate measured "
            f"before the run ({big['gflop_per_s_before']:.0f} GFLOP/s): the screen took {ratio['screen']:.2f}×, select "
            f"{ratio['select']:.2f}× and the test {ratio['test']:.2f}× the plan's time, so at that rate the plan is a "
            f"floor, and an estimate wants `--device-flops` at the share of the matmul rate the stages reach (the "
            f"table's last column). The matmul rate itself moved from {low:.0f} to {high:.0f} GFLOP/s between the "
            f"two measurements around the run: at {min(big['gflop_per_s_before'], big['gflop_per_s_after']):.0f} the "
            f"screen's ratio would be {ratio['screen'] * low / big['gflop_per_s_before']:.2f}×. The screen's seconds "
            "per head grow more slowly than its FLOPs per head (last table): the cached screener's share of the "
            "bound rises with the model's size rather than falling."]


def figure(data: dict) -> bytes:
    """The forest plot of the results: per row (model × task), each tested seed's held-out gain with its bootstrap
    interval and the mean over seeds with its t interval, as PNG bytes (no date or version stamped in them, so a
    rerun on the same data writes the same file)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["rows"] if r["status"] != "pending" and r["n_tested"]]
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.75 * max(len(rows), 1)))
    labels = []
    for y, r in enumerate(reversed(rows)):
        tested = [s for s in r["seeds"] if s["status"] == "tested"]
        for i, s in enumerate(tested):
            dy = (i - (len(tested) - 1) / 2) * 0.12
            low, high = s["gain_ci"]
            # a percentile interval may miss its point estimate: a side that would be negative is drawn as zero
            xerr = [[max(s["gain"] - low, 0) * 100], [max(high - s["gain"], 0) * 100]]
            ax.errorbar([s["gain"] * 100], [y + 0.18 + dy], xerr=xerr, fmt="o", color="0.55", markersize=4,
                        capsize=2, linewidth=1)
        ci = r["mean_gain_ci"]
        xerr = [[max(r["mean_gain"] - ci[0], 0) * 100], [max(ci[1] - r["mean_gain"], 0) * 100]] if ci else None
        ax.errorbar([r["mean_gain"] * 100], [y - 0.18], xerr=xerr, fmt="D", color="black", markersize=6, capsize=3)
        labels.append(f"{r['model']}\n{r['task']} ({r['n_tested']} seed{'s' if r['n_tested'] != 1 else ''})")
    ax.axvline(0, color="0.3", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("held-out gain, points (ablated − intact accuracy)")
    ax.set_title("Held-out gain of the selected heads: seeds (dots) and their mean (diamonds)", fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write() -> dict:
    swept = swept_so_far()
    order = jobs(swept) if swept else [DEMO]
    data = {"settings": SETTINGS, "seeds": list(SEEDS), "band": list(BAND), "sweep": swept,
            "chosen": chosen(swept) if swept else {}, "rows": [row(a, t, swept) for a, t in order],
            "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, torch CPU float32",
            "scale": scale()}
    qwen = [r for r in data["scale"] if r["model"] == HUMANEVAL["model"]]
    data["humaneval_plan"] = humaneval_plans(qwen[0]["gflop_per_s_before"] if qwen else None)
    write_atomic(DATA, data)
    write_atomic(DOC, markdown(data))
    write_bytes_atomic(FIGURE, figure(data))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["sweep", "run", "write"])
    args = parser.parse_args()
    if args.step == "sweep":
        sweep()
    elif args.step == "run":
        run()
    data = write()
    for r in data["rows"]:
        print(f"{r['model']:>20} {r['task']:<16} {r['status']}"
              + (f"  {pct(r['intact_accuracy'])} → {pct(r['ablated_accuracy'])}, gain {pct(r['mean_gain'], True)}, "
                 f"{r['n_significant']}/{r['n_tested']} significant" if r["status"] != "pending" else ""))


if __name__ == "__main__":
    main()
