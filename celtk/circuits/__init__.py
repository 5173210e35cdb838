"""Compare CEL heads with what circuit work names: head attribute scores (previous-token,
duplicate-token, induction), task-critical vs enhancing heads from a screen, circuit files and
their overlap with a selection or a screen ranking (with the overlap chance would give).

Circuit file (JSON)::

    {"name": "...", "model": "gpt2 (GPT-2 small)", "n_layers": 12, "n_heads": 12,
     "source": "paper / URL", "heads": [{"head": "L9H9", "role": "name mover"}, ...]}

``model`` names the model the circuit was found on as celtk names it (an alias, a hub id, a directory; a
description may follow in parentheses): a run of another model is refused (:func:`check_circuit_model`), as is one
of another shape. Packaged circuits (:func:`packaged_circuits`): ``ioi-gpt2-small`` (Wang et al. 2022) and, for each
packaged model alias, ``attributes-ALIAS``: its induction and previous-token heads as celtk's own detectors
(:func:`head_attribute_scores`, ``celtk attributes``) find them (:func:`attribute_circuit` wrote them).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Float, Int

from celtk.errors import ConfigError, DataFormatError, HeadError, suggest
from celtk.heads import Head, RankKey
from celtk.search.scores import HeadScore, head_order

if TYPE_CHECKING:  # annotations only: the attribute probe takes a loaded model
    from celtk.models import Model

_PACKAGED = {"ioi-gpt2-small": "ioi_gpt2_small.json"}
ATTRIBUTE_ALIASES = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
_PACKAGED |= {f"attributes-{alias}": f"attributes_{alias.replace('-', '_').replace('.', '_')}.json"
              for alias in ATTRIBUTE_ALIASES}
# a head is an induction (previous-token) head when at least this share of its attention goes where the role says
ATTRIBUTE_THRESHOLDS = {"induction": 0.4, "previous_token": 0.4}

# the fields of a file these functions lay out (a circuit file, a compare document), before a document holds them:
# their values differ by key, and readers index them as written (a name for that, not a narrowing)
Fields = dict[str, Any]


@dataclass(frozen=True)
class Circuit:
    name: str
    model: str
    n_layers: int
    n_heads: int
    source: str
    roles: dict[Head, str]

    @property
    def heads(self) -> list[Head]:
        return sorted(self.roles)

    def by_role(self) -> dict[str, list[Head]]:
        out: dict[str, list[Head]] = {}
        for head, role in sorted(self.roles.items()):
            out.setdefault(role, []).append(head)
        return out


def packaged_circuits() -> list[str]:
    return sorted(_PACKAGED)


def load_circuit(source: str | Path) -> Circuit:
    """Read a circuit file (a path, or a packaged name such as ``ioi-gpt2-small``)."""
    if str(source) in _PACKAGED:
        text = resources.files("celtk.circuits").joinpath(_PACKAGED[str(source)]).read_text()
        where = f"packaged circuit {source}"
    else:
        path = Path(source)
        if not path.is_file():
            raise DataFormatError(f"Circuit file {str(source)!r} does not exist; give a JSON circuit file or a "
                                  f"packaged circuit.{suggest(str(source), _PACKAGED)}")
        text, where = path.read_text(), str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFormatError(f"{where}: not valid JSON ({error.msg} at line {error.lineno}).") from None
    missing = [k for k in ("name", "n_layers", "n_heads", "heads") if k not in doc]
    if missing:
        raise DataFormatError(f"{where}: missing field(s) {', '.join(missing)}; a circuit file needs name, model, "
                              "n_layers, n_heads, source and heads "
                              "(a list of {\"head\": \"L9H9\", \"role\": \"...\"}).")
    roles: dict[Head, str] = {}
    for i, row in enumerate(doc["heads"]):
        if not isinstance(row, dict) or "head" not in row:
            raise DataFormatError(f"{where}: heads[{i}] must be an object with 'head' (and 'role').")
        head = Head.parse(str(row["head"])).validate(doc["n_layers"], doc["n_heads"])
        if head in roles:
            raise DataFormatError(f"{where}: head {head} is listed twice.")
        roles[head] = str(row.get("role", "unspecified"))
    return Circuit(doc["name"], doc.get("model", "?"), int(doc["n_layers"]), int(doc["n_heads"]),
                   doc.get("source", ""), roles)


def model_key(name: str) -> str:
    """How a model is compared: its name without a description in parentheses, a hub owner or directory, or a
    ``.gguf`` suffix, lower case (``openai-community/gpt2`` and ``gpt2 (GPT-2 small)`` are both ``gpt2``)."""
    bare = name.split(" (", 1)[0].strip().rstrip("/")
    return Path(bare).name.removesuffix(".gguf").lower()


def check_circuit_model(circuit: Circuit, model: str) -> None:
    """Refuse a circuit found on another model than the run's ``model`` (a circuit file without ``model`` is checked
    by shape only). A circuit is a claim about one model's heads: the same places in another model are other heads."""
    if circuit.model in ("", "?") or model_key(circuit.model) == model_key(model):
        return
    raise HeadError(f"Circuit {circuit.name!r} was found on {circuit.model!r}; this run's model is {model!r}. Heads "
                    "at the same places in another model are other heads: compare with a circuit of this model "
                    f"(packaged: {', '.join(packaged_circuits())}), or pass any_model=True (`--any-model`) to "
                    "compare anyway (a fine-tune or a copy of the same model under another name).")


def attribute_circuit(alias: str, scores: dict[str, Float[np.ndarray, "layer head"]], length: int = 40,
                      batch: int = 8, seed: int = 0) -> Fields:
    """A circuit file's content from a model's attribute scores (:func:`head_attribute_scores` on ``alias``): every
    head whose induction or previous-token score reaches :data:`ATTRIBUTE_THRESHOLDS`, with that role (induction
    first, should a head reach both), strongest first within a role."""
    n_layers, n_heads = scores["induction"].shape
    rows: dict[Head, tuple[str, float]] = {}
    for role in ("induction", "previous_token"):
        grid = scores[role]
        for layer, head in zip(*np.nonzero(grid >= ATTRIBUTE_THRESHOLDS[role]), strict=True):
            rows.setdefault(Head(int(layer), int(head)), (role.replace("_", "-"), float(grid[layer, head])))
    ordered = sorted(rows.items(), key=lambda item: (item[1][0], -item[1][1]))
    thresholds = ", ".join(f"{role.replace('_', '-')} ≥ {value}" for role, value in ATTRIBUTE_THRESHOLDS.items())
    return {"name": f"Induction and previous-token heads of {alias}", "model": alias, "n_layers": int(n_layers),
            "n_heads": int(n_heads),
            "source": f"celtk's attribute detectors (celtk.circuits.head_attribute_scores; `celtk attributes`) on "
                      f"{alias}: {batch} sequences of {length} random tokens repeated once, seed {seed}; a head is "
                      f"listed where its mean attention score reaches {thresholds}",
            "heads": [{"head": str(head), "role": role, "score": round(score, 3)} for head, (role, score) in ordered]}


def hypergeom_tail(overlap: int, population: int, drawn: int, marked: int) -> float:
    """P(X ≥ overlap) for X ~ Hypergeometric(population, marked, drawn): drawing ``drawn`` heads at
    random, how often would at least ``overlap`` of them be circuit heads."""
    from scipy.stats import hypergeom

    return float(hypergeom.sf(overlap - 1, population, marked, drawn))


def compare_with_circuit(circuit: Circuit, n_layers: int, n_heads: int, selection: Sequence[Head],
                         ranking: Sequence[Head], top: int = 10, model: str | None = None) -> Fields:
    """Overlap of a CEL selection and of the screen's top-``top`` heads (``ranking``, best first) with the
    circuit, each beside the overlap expected by chance (hypergeometric), and the circuit heads' ranks in the
    screen. ``model``: the run's model, refused unless the circuit was found on it (:func:`check_circuit_model`;
    ``None``: the shape alone is checked). Returns the fields of :class:`celtk.analysis.CompareDocument` as its
    file writes them."""
    if (circuit.n_layers, circuit.n_heads) != (n_layers, n_heads):
        raise HeadError(f"Circuit {circuit.name!r} is for a {circuit.n_layers} × {circuit.n_heads} model "
                        f"({circuit.model}); this run's model is {n_layers} × {n_heads}. Compare with a circuit "
                        "found on a model of the same shape.")
    if model is not None:
        check_circuit_model(circuit, model)
    strays = [h for h in [*selection, *ranking] if not isinstance(h, Head)]
    if strays:
        raise HeadError(f"compare_with_circuit takes heads (celtk.heads.Head), got {strays[0]!r}; parse names "
                        "with Head.parse.")
    population = n_layers * n_heads
    marked = set(circuit.roles)

    def overlap(heads: list[Head]) -> dict[str, object]:
        shared = [h for h in heads if h in marked]
        return {"n": len(heads), "overlap": len(shared), "expected_by_chance": len(heads) * len(marked) / population,
                "p_at_least": hypergeom_tail(len(shared), population, len(heads), len(marked)),
                "shared": [{"head": str(h), "role": circuit.roles[h]} for h in shared]}

    sel, ranked = list(selection), list(ranking)
    position = {h: i + 1 for i, h in enumerate(ranked)}
    circuit_ranks = {str(h): position.get(h) for h in circuit.heads}
    known = [r for r in circuit_ranks.values() if r is not None]
    return {
        "circuit": circuit.name, "circuit_model": circuit.model, "source": circuit.source,
        "n_circuit_heads": len(marked), "population": population,
        "selection": overlap(sel), f"screen_top{top}": overlap(ranked[:top]),
        "circuit_head_ranks": circuit_ranks,
        "mean_rank_of_circuit_heads": float(np.mean(known)) if known else None,
        "mean_rank_by_chance": (len(ranked) + 1) / 2,
        "by_role": {role: {"heads": [str(h) for h in heads], "ranks": [position.get(h) for h in heads]}
                    for role, heads in circuit.by_role().items()},
    }


def critical_and_enhancing(scores: Sequence[HeadScore], n: int = 10) -> Fields:
    """From single heads' screen scores: the ``n`` heads whose removal hurts most (task-critical, Bair et al. 2026)
    and the ``n`` whose removal helps most (enhancing), each in the one ranking key's order, their layer
    histograms, and their overlap. Returns the fields as :class:`celtk.analysis.CompareDocument`'s file writes them."""
    def order(s: HeadScore, sign: int = 1) -> RankKey:  # the ranking key; sign -1: worst first
        return head_order(s.heads, sign * s.gain, sign * s.damage, sign * s.n_correct)

    def head(s: HeadScore) -> Head:
        (only,) = s.heads.heads
        return only

    critical = sorted((s for s in scores if s.gain < 0), key=lambda s: order(s, -1))[:n]
    enhancing = sorted((s for s in scores if s.gain > 0), key=order)[:n]

    def layers(group: list[HeadScore]) -> dict[int, int]:
        return dict(sorted(Counter(head(s).layer for s in group).items()))

    c, e = {head(s) for s in critical}, {head(s) for s in enhancing}
    # heads both critical for some examples and enhancing for others: many fixes and many damages
    mixed = sorted((s for s in scores if s.fixes > 0 and s.damage > 0), key=lambda s: -(min(s.fixes, s.damage)))[:n]
    return {
        "critical": [{"head": str(head(s)), "gain_count": s.gain, "damage": s.damage} for s in critical],
        "enhancing": [{"head": str(head(s)), "gain_count": s.gain, "fixes": s.fixes} for s in enhancing],
        "critical_layers": layers(critical), "enhancing_layers": layers(enhancing),
        "overlap": [str(h) for h in sorted(c & e)], "both_fix_and_damage": [str(head(s)) for s in mixed],
    }


# ---------------------------------------------------------------------------------------------
# Head attribute scores on the model being studied


def _repeated_random_tokens(vocab: int, length: int, batch: int, seed: int, avoid: set[int]
                            ) -> Int[np.ndarray, "batch pos"]:
    rng = np.random.default_rng(seed)
    usable = np.array([t for t in range(min(vocab, 20_000)) if t not in avoid])
    first = np.stack([rng.choice(usable, size=length, replace=False) for _ in range(batch)])
    return np.concatenate([first, first], axis=1)


def check_probe(length: object, batch: object) -> None:
    """Refuse probe sizes no sequence can be built from (``length`` tokens repeated once, ``batch`` sequences)."""
    for name, value in (("length", length), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"The attribute probe's {name} must be a positive integer (random tokens repeated "
                              f"once; celtk attributes --length, default 40), got {value!r}.")


def head_attribute_scores(model: Model, length: int = 40, batch: int = 8, seed: int = 0
                          ) -> dict[str, Float[np.ndarray, "layer head"]]:
    """Previous-token, duplicate-token and induction scores of every head, ``[layer, head]``, on
    random token sequences repeated once (the usual probe, as TransformerLens's head detector):

    * previous-token: mean attention from position i to i−1;
    * duplicate-token: from a token in the second copy to the same token in the first;
    * induction: from a token in the second copy to the token after its first occurrence.

    Tokens are drawn without repetition inside a copy, so each score is an average attention
    weight in [0, 1]."""
    import torch

    check_probe(length, batch)
    if model.n_ctx is not None and 2 * length > model.n_ctx:
        raise ConfigError(f"The attribute probe of length {length} runs {2 * length} tokens (the sequence repeated "
                          f"once), more than {model.name}'s context of {model.n_ctx} ({model.n_ctx_source}); give "
                          f"length ≤ {model.n_ctx // 2}.")
    special = set(model.tokenizer.all_special_ids)
    usable = min(model.d_vocab, 20_000) - len(special)
    if length > usable:
        raise ConfigError(f"The attribute probe draws {length} distinct tokens per copy, but the vocabulary offers "
                          f"{usable}; give length ≤ {usable}.")
    tokens = _repeated_random_tokens(model.d_vocab, length, batch, seed, special)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.n_layers)]
    wanted = set(names)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(torch.tensor(tokens, device=model.device),
                                               names_filter=lambda n: n in wanted)
    patterns = np.stack([cache[name].float().cpu().numpy() for name in names])
    return scores_from_patterns(patterns, length)


def scores_from_patterns(patterns: Float[np.ndarray, "layer batch head pos pos"], length: int
                         ) -> dict[str, Float[np.ndarray, "layer head"]]:
    """The three scores from attention patterns (query position, then key position) on sequences made of
    one random copy of ``length`` tokens followed by the same copy."""
    n = 2 * length
    q_all, q_second = np.arange(1, n), np.arange(length, n)
    prev = patterns[..., q_all, q_all - 1].mean(axis=(1, 3))
    dup = patterns[..., q_second, q_second - length].mean(axis=(1, 3))
    ind = patterns[..., q_second, q_second - length + 1].mean(axis=(1, 3))
    return {"previous_token": prev, "duplicate_token": dup, "induction": ind}
