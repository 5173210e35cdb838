"""Discovery / held-out / few-shot sets: reproducible from a seed, disjoint by construction,
and checked by content hash."""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, fields

from celtk.boundary import public
from celtk.errors import SplitError
from celtk.store.files import JsonObject
from celtk.tasks._base import Example, Task, draw_shots


@dataclass(frozen=True, kw_only=True)
class SplitManifest:
    """What a run records of its splits: where the examples came from, the sizes, order-sensitive hashes of the
    discovery and held-out sets' ids and contents, and the few-shot examples' ids (``Splits.manifest()``)."""

    source: str
    n_discovery: int
    n_heldout: int
    discovery_hash: str
    heldout_hash: str
    shot_ids: list[str]

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> SplitManifest:
        """Read a manifest as a run file holds it; a malformed one raises ``ValueError`` naming what is wrong."""
        names = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or set(data) != set(names):
            shown = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"a split manifest has the keys {', '.join(names)}; got {shown}")
        return cls(**data)


@dataclass(frozen=True)
class Splits:
    discovery: list[Example]
    heldout: list[Example]
    shots: list[Example]
    source: str
    # (id, reason) of the task's rows no draw can contain: its few-shot reserve and repeated content
    held_back: tuple[tuple[str, str], ...] = ()

    def manifest(self) -> SplitManifest:
        return SplitManifest(source=self.source, n_discovery=len(self.discovery), n_heldout=len(self.heldout),
                             discovery_hash=ids_hash(self.discovery), heldout_hash=ids_hash(self.heldout),
                             shot_ids=[s.id for s in self.shots])


def ids_hash(examples: list[Example]) -> str:
    """Order-sensitive hash of example ids and contents."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(f"{e.id}\0{e.content_hash}\n".encode())
    return digest.hexdigest()[:16]


def _dedupe(examples: list[Example], banned: set[str]) -> list[Example]:
    seen, out = set(banned), []
    for e in examples:
        if e.content_hash not in seen:
            seen.add(e.content_hash)
            out.append(e)
    return out


def shared_examples(discovery: dict[str, str], heldout: list[Example]) -> tuple[int, str]:
    """How many held-out examples repeat (by content) a discovery example, given as content
    hash -> id, and a description of the first ten pairs."""
    both = [(discovery[e.content_hash], e.id) for e in heldout if e.content_hash in discovery]
    return len(both), ", ".join(f"{d} (discovery) = {h} (held-out)" for d, h in both[:10])


def check_disjoint(discovery: list[Example], heldout: list[Example]) -> None:
    """Raise :class:`SplitError` naming the examples that appear (by content) in both sets."""
    count, shown = shared_examples({e.content_hash: e.id for e in discovery}, heldout)
    if count:
        raise SplitError(f"Discovery and held-out sets share {count} example(s): {shown}. They must be disjoint.")


FEWSHOT_POOL = "few-shot pool"  # the reason a reserved or shot-equal row is held back


def _held_back(rows: list[Example], kept: list[Example], shot_hashes: set[str], heldout_hashes: set[str]
               ) -> list[tuple[str, str]]:
    """Why each of ``rows`` that :func:`_dedupe` dropped (those not in ``kept``) was dropped."""
    kept_ids = {e.id for e in kept}
    first = {e.content_hash: e.id for e in reversed(kept)}
    out = []
    for e in rows:
        if e.id in kept_ids:
            continue
        if e.content_hash in shot_hashes:
            out.append((e.id, FEWSHOT_POOL))
        elif e.content_hash in heldout_hashes:
            out.append((e.id, "same content as a held-out row"))
        else:
            out.append((e.id, f"same content as {first[e.content_hash]}"))
    return out


def _take(pool: list[Example], n: int | None, what: str, total_hint: str) -> list[Example]:
    if n is None:
        return pool
    if n < 0:
        raise SplitError(f"{what} size must be non-negative, got {n}.")
    if n > len(pool):
        raise SplitError(f"Asked for {n} {what} examples but only {len(pool)} are available ({total_hint}). "
                         f"Use at most {len(pool)}.")
    return pool[:n]


@public
def make_splits(task: Task, n_discovery: int | None, n_heldout: int | None, *, seed: int = 0,
                fewshot: int = 0) -> Splits:
    """Draw the discovery and held-out sets and the few-shot shots.

    With one evaluation pool (arithmetic, jsonl) the pool is shuffled once by ``seed``:
    discovery takes from the front and held-out from the back, so either set is the same
    whatever the other's size. With an official held-out split (BoolQ, HellaSwag, MBPP)
    held-out comes from it (all of it, in split order, or a ``seed``-ed random sample of it in
    split order) and discovery from the training split. Examples whose content
    repeats, or equals a few-shot example, are dropped first.
    """
    pools = task.load_pools()
    shot_pool = _dedupe(pools.fewshot, set())
    if getattr(task, "fewshot_sampler", "random") == "first_n":
        shots = _take(shot_pool, fewshot, "few-shot", "the task's few-shot pool")
    else:
        shots = draw_shots(shot_pool, fewshot, seed)
    banned = {e.content_hash for e in shot_pool}
    held_back = [(e.id, FEWSHOT_POOL) for e in pools.reserved]
    rng = random.Random(f"celtk-splits-{seed}")
    if pools.heldout is None:
        pool = _dedupe(pools.discovery, banned)
        held_back += _held_back(pools.discovery, pool, banned, set())
        rng.shuffle(pool)
        if (n_discovery or 0) + (n_heldout or 0) > len(pool):
            raise SplitError(f"Discovery ({n_discovery}) + held-out ({n_heldout}) exceed the {len(pool)} distinct "
                             f"examples of {task.full_name}; the two sets must be disjoint, so ask for at most "
                             f"{len(pool)} together.")
        discovery = _take(pool, n_discovery, "discovery", f"{task.full_name}")
        heldout = _take(pool[::-1], n_heldout if n_heldout is not None else len(pool) - len(discovery), "held-out",
                        task.full_name)
    else:
        held_pool = _dedupe(pools.heldout, banned)
        held_back += _held_back(pools.heldout, held_pool, banned, set())
        heldout = _take(held_pool, n_heldout, "held-out", f"the official held-out split of {task.full_name}")
        if len(heldout) < len(held_pool):  # a seeded random sample (in split order), not the split's first rows
            keep = sorted(random.Random(f"celtk-heldout-{seed}").sample(range(len(held_pool)), len(heldout)))
            heldout = [held_pool[i] for i in keep]
        disc_pool = _dedupe(pools.discovery, banned | {e.content_hash for e in held_pool})
        held_back += _held_back(pools.discovery, disc_pool, banned, {e.content_hash for e in held_pool})
        rng.shuffle(disc_pool)
        discovery = _take(disc_pool, n_discovery, "discovery", f"the discovery split of {task.full_name}")
    check_disjoint(discovery, heldout)
    return Splits(discovery=discovery, heldout=heldout, shots=shots, source=pools.source, held_back=tuple(held_back))
