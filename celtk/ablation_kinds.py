"""What replaces an ablated head's output ``z`` before the output projection: the paper's zeroing and
the controls the activation-patching literature asks for (Zhang & Nanda 2023; Heimersheim & Nanda 2024),
because zeroing can push later layers off their training distribution.

Kinds (:class:`AblationKind`, spelled ``zero``, ``mean``, ``resample``, ``scale:α``):

* ``zero`` (the paper's, the default): ``z_h ← 0`` at every position.
* ``scale:α``: ``z_h ← α·z_h`` at every position (α = 1 is the intact model, α = 0 is ``zero``, α < 0
  flips the head), for −10 ≤ α ≤ 10 (:data:`SCALE_LIMIT`).
* ``mean``: ``z_h ← μ_h``, one ``d_head`` vector per head: the intact model's ``z_h`` averaged over
  every position of every reference sequence, each position weighted equally (pads excluded).
* ``resample``: an example's ``z_h`` at position ``p`` ← the intact model's ``z_h`` at position ``a(p)`` of its
  reference sequence, aligned on the last prompt token (:meth:`Ablation.alignment`, :meth:`ReferenceZ.gather`).
  With ``s`` the tokens the example's prompt shares with the reference's from the start (the few-shot prefix
  under fixed shots, capped to leave each prompt's last token its own), ``m`` and ``k`` the example's and the
  reference's prompt lengths and ``n`` the reference sequence's length: ``a(p) = p`` for ``p < s``; else
  ``a(p) = min(max(p + k − m, s), n − 1)``. So the example's last prompt token reads the reference's last prompt
  token, its earlier own positions count back from there and its answer tokens forward, clamped into the
  reference's own part (never into what it shares, never past its end). Where the two prompts have one length
  (``k = m``) this is ``min(p, n − 1)``, the left rule resample had before, bit for bit; on prompts of different
  lengths (BoolQ passages, operands of different digit counts) the left rule would have had an example's
  ``Answer:`` read a mid-passage token of a longer reference. Each example's reference is drawn from the
  reference examples other than itself (by content), seeded by ``(seed, the example's content hash)``,
  so the draw does not depend on batching, order or which other examples are scored.

A *reference sequence* is a reference example's prompt followed by its correct answer, as teacher
forcing reads them (the answer's last token is predicted, never read); for a generation-graded task,
the prompt. In a run the reference examples are the discovery set (disjoint from held-out by
construction), for screening and for held-out looks alike. Its prompt carries the examples' own shots
(``reference_shots="fixed"``, the default) or, with ``"redraw"``, its own shots drawn from the task's few-shot
pool (seeded by the reference's content; never the reference itself or a held-out example): then the references
share only the chat template's opening with an example, and resample replaces the shot positions too.

Reading shared positions unmoved keeps a shared few-shot prefix exact: at a position inside the prefix every
reference shares with the example, the reference's ``z`` *is* the example's intact ``z`` (causal attention reads
only earlier tokens), so resample ablation changes nothing there and the cached screener and the shared-prefix
held-out passes still run the prefix once (they shorten it to what the references share and every example's
prompt shares with its reference's: the chat template's opening under redrawn shots).

Positions (:data:`POSITIONS`) are a second dimension of every kind: ``all`` (the default, the paper's) replaces
``z_h`` at every position; ``prefix`` only at the positions of the shared few-shot prefix, the prompt text
before the example's own (the chat template's opening, the shots and their delimiters); ``example`` only at the
example's own positions (its prompt and the answer tokens read). An example's *boundary* is the number of leading
tokens its context shares with the prefix text's tokens (:attr:`Ablation.prefix`, :meth:`Ablation.boundaries`):
a property of the example and the shots, not of batching or of which other examples are scored. Under fixed
shots, ``resample`` at ``prefix`` positions changes nothing (every reference shares them, read unmoved), so
``zero``/``mean`` at ``example`` positions are what ``resample`` compares with like for like; under redrawn
reference shots ``resample`` at ``all`` compares with ``zero``/``mean`` at ``all``.

Per-layer, per-row replacement (:class:`RowSpec`) is what every engine applies: the hook path
(:func:`celtk.ablation.ablate`, which takes each row's prompt to align resample), the cached screener's bridge and
fused replays walking the prefix tree, the shared-prefix held-out passes and the generation screener (which refuses
resample: a generated token has no reference position).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor

from celtk.ablation_hooks import ZHook, hook_z_hooks
from celtk.errors import ConfigError, suggest
from celtk.models import Model

KINDS = ("zero", "mean", "resample", "scale")
# |α| ≤ 10: a dose of the head, from flipped (−1) through removed (0) to amplified; far past it the head swamps
# the residual stream (scale:-1e30 overflowed every logit, so all choices tied) and 1e300 is no number a dtype holds
SCALE_LIMIT = 10.0
REFERENCE_BATCH = 16  # fixed, so the reference values never depend on a run's batch size
# where a kind replaces z: every position (the paper's), the shared few-shot prefix only, the example's own only
POSITIONS = ("all", "prefix", "example")


# the reference sequences' few-shot shots: the examples' own (every reference shares them), or redrawn per reference
REFERENCE_SHOTS = {
    "fixed": "the examples' own shots",
    "redraw": "redrawn per reference from the task's few-shot pool (seeded by the reference's content), never the "
              "reference itself or a held-out example",
}
LEFT_RULE = "left (first token); past a reference's end its last position"
LAST_TOKEN_RULE = ("on the last prompt token: tokens an example's prompt shares with its reference's read the same "
                   "position; its own positions read the reference's at the same distance from the last prompt "
                   "token, clamped into the reference's own part (never before it, never past its end)")


def check_reference_shots(reference_shots: str) -> str:
    """``reference_shots`` when it is one of :data:`REFERENCE_SHOTS`, else a :class:`ConfigError` naming them."""
    if reference_shots not in REFERENCE_SHOTS:
        raise ConfigError(f"Unknown reference shots {reference_shots!r}; choose fixed (the reference sequences carry "
                          "the examples' own few-shot shots) or redraw (each reference its own shots, drawn from the "
                          "task's few-shot pool)." + suggest(str(reference_shots), tuple(REFERENCE_SHOTS)))
    return reference_shots


def check_positions(positions: str) -> str:
    """``positions`` when it is one of :data:`POSITIONS`, else a :class:`ConfigError` naming them."""
    if positions not in POSITIONS:
        raise ConfigError(f"Unknown positions {positions!r}; choose all (every position, the paper's), prefix (the "
                          "shared few-shot prefix only) or example (the example's own positions only)."
                          + suggest(str(positions), POSITIONS))
    return positions


@dataclass(frozen=True)
class AblationKind:
    """One ablation kind, parsed once from ``zero``, ``mean``, ``resample`` or ``scale:α``."""

    name: str = "zero"
    alpha: float | None = None  # scale only

    @classmethod
    def parse(cls, text: str | AblationKind) -> AblationKind:
        if isinstance(text, AblationKind):
            return text
        name, _, arg = str(text).strip().partition(":")
        if name not in KINDS:
            raise ConfigError(f"Unknown ablation kind {text!r}; write zero, mean, resample or scale:α (e.g. scale:0.5)."
                              + suggest(name, KINDS))
        if name != "scale":
            if arg:
                raise ConfigError(f"Ablation kind {name!r} takes no argument (got {text!r}); only scale does, "
                                  "as scale:α.")
            return cls(name)
        try:
            alpha = float(arg)
        except ValueError:
            raise ConfigError(f"Ablation kind {text!r}: scale needs a finite number α after the colon, e.g. scale:0.5 "
                              "or scale:-1.") from None
        if not math.isfinite(alpha):
            raise ConfigError(f"Ablation kind {text!r}: α must be finite, e.g. scale:0.5.")
        if abs(alpha) > SCALE_LIMIT:
            raise ConfigError(f"Ablation kind {text!r}: α = {alpha:g} is outside −{SCALE_LIMIT:g} ≤ α ≤ "
                              f"{SCALE_LIMIT:g}; past it the head's output swamps the residual stream (logits overflow "
                              "and tie). Use e.g. scale:-1 (flipped), scale:0.5 or scale:2.")
        return cls("scale", alpha)

    def __str__(self) -> str:
        return f"scale:{self.alpha!r}" if self.name == "scale" else self.name

    @property
    def needs_reference(self) -> bool:
        """Mean and resample replace ``z`` with values measured on reference examples."""
        return self.name in ("mean", "resample")


ZERO = AblationKind()


@dataclass(frozen=True, eq=False)
class RowSpec:
    """What replaces ``z`` in one layer: heads ``mask[r, h]`` of row ``r`` take the kind's value.

    ``value`` is ``None`` (zero: ``alpha`` 0 and no scaling; scale: ``α·z``), one ``[head_index, d_head]``
    vector per head (mean), or ``[rows, pos, head_index, d_head]`` (resample: each row's reference,
    aligned to the positions the layer sees). ``mask`` may have one row, broadcast over every row.
    ``positions`` (``None``: every position) marks, per row, the positions replaced (``prefix``/``example``)."""

    mask: Bool[Tensor, "mask_rows head_index"]
    scale: float | None = None
    value: Tensor | None = None
    positions: Bool[Tensor, "pos_rows pos"] | None = None

    def apply(self, z: Float[Tensor, "rows pos head_index d_head"]) -> Float[Tensor, "rows pos head_index d_head"]:
        if self.mask.shape[0] not in (1, z.shape[0]) or self.mask.shape[1] != z.shape[2]:
            raise ValueError(f"row mask of shape {tuple(self.mask.shape)} does not fit z of shape {tuple(z.shape)}")
        where = rearrange(self.mask, "rows head_index -> rows 1 head_index 1").to(z.device)
        if self.positions is not None:
            if self.positions.shape[0] not in (1, z.shape[0]) or self.positions.shape[1] != z.shape[1]:
                raise ValueError(f"position mask of shape {tuple(self.positions.shape)} does not fit z of shape "
                                 f"{tuple(z.shape)}")
            where = where & rearrange(self.positions, "rows pos -> rows pos 1 1").to(z.device)
        if self.value is not None:
            value = self.value.to(device=z.device, dtype=z.dtype)
            if value.ndim == 2:
                value = value[None, None]
            elif tuple(value.shape) != tuple(z.shape):
                raise ValueError(f"resampled z of shape {tuple(value.shape)} does not fit z of shape {tuple(z.shape)}")
            return torch.where(where, value, z)
        if self.scale is not None:
            return torch.where(where, z * self.scale, z)
        return z.masked_fill(where, 0.0)


def as_spec(mask: RowSpec | Bool[Tensor, "mask_rows head_index"]) -> RowSpec:
    """A bare boolean mask is zeroing (the paper's kind)."""
    return mask if isinstance(mask, RowSpec) else RowSpec(mask)


@dataclass(frozen=True, eq=False)
class ReferenceZ:
    """The intact model's ``z`` on the reference sequences, every layer and head, for resample ablation.

    Positions the references all share from the start (``common`` tokens, e.g. few-shot shots) are
    stored once (``shared[layer]``: ``[common, head_index, d_head]``); the rest per reference
    (``own[layer]``: ``[reference, width − common, head_index, d_head]``, right-padded). ``sequences`` are
    the reference sequences' tokens and ``prompts`` each one's prompt length (its last prompt token is at
    ``prompts[r] − 1``): what :meth:`Ablation.alignment` aligns an example's positions on."""

    tokens: tuple[int, ...]  # the common leading tokens
    shared: list[Tensor]
    own: list[Tensor]
    lengths: Int[Tensor, " reference"]
    prompts: Int[Tensor, " reference"] | None = None  # each reference's prompt length (None: its whole length)
    sequences: tuple[tuple[int, ...], ...] = ()

    @property
    def common(self) -> int:
        return len(self.tokens)

    @property
    def prompt_lengths(self) -> Int[Tensor, " reference"]:
        return self.lengths if self.prompts is None else self.prompts

    def gather(self, layer: int, references: Int[Tensor, " rows"], start: int, pos: int,
               aligns: Int[Tensor, "rows 2"] | None = None) -> Float[Tensor, "rows pos head_index d_head"]:
        """Row ``r``'s values at absolute positions ``start … start + pos − 1`` of reference ``references[r]``,
        aligned as ``aligns[r] = (shared, shift)`` says (:meth:`Ablation.alignment`): a position ``p < shared``
        reads position ``p``; a later one reads ``p + shift`` clamped into ``shared … n − 1`` (``n``: the
        reference's length). ``aligns=None`` is ``(0, 0)``: ``min(p, n − 1)``, the left rule, which the
        alignment on the last prompt token is wherever the example's prompt and the reference's have one length."""
        at = torch.arange(start, start + pos)[None, :].expand(len(references), pos)
        last = (self.lengths[references] - 1)[:, None]
        if aligns is not None:
            shared, shift = aligns[:, :1], aligns[:, 1:]
            at = torch.where(at < shared, at, torch.maximum(at + shift, shared))
        at = torch.minimum(at, last)
        shared_z, own = self.shared[layer], self.own[layer]
        out = own.new_empty(len(references), pos, *own.shape[2:])
        in_shared = at < self.common
        if in_shared.any():
            out[in_shared] = shared_z[at[in_shared]]
        rows = references[:, None].expand_as(at)
        out[~in_shared] = own[rows[~in_shared], at[~in_shared] - self.common]
        return out


@dataclass(frozen=True, eq=False)
class Ablation:
    """An ablation kind with the values it needs: per-head means (``mean``), the reference
    examples' ``z`` and how examples draw their reference (``resample``). Build one with
    :func:`celtk.evaluation.scoring.ablation_for` (or :meth:`celtk.run.Session.ablation` in a run); zero and
    scale need nothing: ``Ablation(AblationKind.parse("scale:0.5"))``."""

    kind: AblationKind = ZERO
    means: Float[Tensor, "layer head_index d_head"] | None = None
    reference: ReferenceZ | None = None
    reference_hashes: tuple[str, ...] = ()  # content hashes of the reference examples, in reference order
    seed: int = 0
    reference_positions: int = 0  # positions averaged (mean) or stored (resample)
    positions: str = "all"  # where z is replaced (POSITIONS)
    prefix: tuple[int, ...] = ()  # the shared few-shot prefix's tokens: each example's boundary (prefix/example)
    reference_shots: str = "fixed"  # the reference sequences' shots: the examples' own (fixed) or redrawn per reference

    def __post_init__(self) -> None:
        check_positions(self.positions)
        check_reference_shots(self.reference_shots)
        if self.kind.name == "mean" and self.means is None:
            raise ConfigError("Mean ablation needs each head's mean z over reference examples; build it with "
                              "celtk.evaluation.scoring.ablation_for(model, 'mean', task, reference_examples, shots).")
        if self.kind.name == "resample" and self.reference is None:
            raise ConfigError("Resample ablation needs the reference examples' z; build it with "
                              "celtk.evaluation.scoring.ablation_for(model, 'resample', task, reference_examples, "
                              "shots).")

    @property
    def is_zero(self) -> bool:
        return self.kind.name == "zero"

    @property
    def per_row(self) -> bool:
        """Whether the replacement differs per example (resample), so hooks must know each row's reference."""
        return self.kind.name == "resample"

    def describe(self) -> dict[str, object]:
        """What the values were measured on, for result documents."""
        out: dict[str, object] = {"kind": str(self.kind)}
        if self.positions != "all":  # every-position ablations keep the record they always had
            out |= {"positions": self.positions, "prefix_tokens": len(self.prefix)}
        if self.kind.needs_reference:
            out |= {"n_reference": len(self.reference_hashes), "reference_positions": self.reference_positions}
        if self.kind.name == "resample":
            out |= {"seed": self.seed, "alignment": self.alignment_rule()}
        if self.reference_shots != "fixed":  # fixed shots keep the record they always had
            out |= {"reference_shots": REFERENCE_SHOTS[self.reference_shots]}
        return out

    def alignment_rule(self) -> str:
        """How resample aligns an example's positions on its reference's, in words for result documents: the
        words the left rule always had where every reference prompt has one length (examples of that length
        read exactly what the left rule reads), the alignment on the last prompt token where they differ."""
        if self.reference is not None and len(set(self.reference.prompt_lengths.tolist())) > 1:
            return LAST_TOKEN_RULE
        return LEFT_RULE

    def alignment(self, references: Int[Tensor, " rows"], contexts: Sequence[Sequence[int]]
                  ) -> Int[Tensor, "rows 2"]:
        """Each row's resample alignment ``(shared, shift)`` (:meth:`ReferenceZ.gather`), for rows whose prompts
        (context token ids) are ``contexts`` reading references ``references``: ``shared`` is how many leading
        tokens the row's prompt shares with its reference's (the few-shot prefix under fixed shots; at least the
        chat template's opening under redrawn ones), capped to leave each prompt's last token its own, and
        ``shift`` the reference's prompt length minus the row's, so that the row's last prompt token reads the
        reference's last prompt token."""
        if self.reference is None:
            raise ConfigError("Only resample ablation aligns rows on reference sequences; this ablation is "
                              f"{self.kind}.")
        if len(references) != len(contexts):
            raise ConfigError(f"Resample alignment needs one prompt per row: {len(contexts)} contexts for "
                              f"{len(references)} row references.")
        prompts = self.reference.prompt_lengths
        out = []
        for r, context in zip(references.tolist(), contexts, strict=True):
            n_ref, n_own = int(prompts[r]), len(context)
            ref = self.reference.sequences[r][:n_ref] if self.reference.sequences else ()
            shared = min(common_prefix([tuple(context), tuple(ref)]), n_own - 1, n_ref - 1)
            out.append((max(shared, 0), n_ref - n_own))
        return torch.tensor(out, dtype=torch.long).reshape(len(out), 2)

    def assign(self, hashes: Sequence[str]) -> Int[Tensor, " example"]:
        """Each example's reference (an index into the reference examples), by content hash: a seeded
        draw among the references whose content differs from the example's."""
        refs = np.array(self.reference_hashes)
        out = []
        for text in hashes:
            allowed = np.flatnonzero(refs != text)
            if not len(allowed):
                raise ConfigError("Resample ablation has no reference example other than the example itself; give "
                                  "at least two reference examples (a run's discovery set).")
            rng = np.random.default_rng([self.seed, int(text, 16)])
            out.append(int(allowed[rng.integers(len(allowed))]))
        return torch.tensor(out, dtype=torch.long)

    @property
    def everywhere(self) -> bool:
        """Whether ``z`` is replaced at every position (``positions="all"``)."""
        return self.positions == "all"

    def boundaries(self, contexts: Sequence[Sequence[int]]) -> Int[Tensor, " rows"]:
        """Each context's boundary: how many of its leading tokens are the shared prefix's (:attr:`prefix`);
        positions before it are the prefix's, the rest the example's own."""
        return torch.tensor([common_prefix([tuple(c), self.prefix]) for c in contexts], dtype=torch.long)

    def position_mask(self, boundaries: Int[Tensor, " rows"] | None, start: int, pos: int
                      ) -> Bool[Tensor, "rows pos"] | None:
        """Which of the absolute positions ``start … start + pos − 1`` each row replaces (``None``: all of them)."""
        if self.everywhere:
            return None
        if boundaries is None:
            raise ConfigError(f"Ablation at {self.positions} positions needs each row's prefix boundary "
                              "(Ablation.boundaries of the rows' contexts; celtk.evaluation.evaluate passes them per "
                              "batch).")
        before = torch.arange(start, start + pos)[None, :] < boundaries[:, None]
        return before if self.positions == "prefix" else ~before

    def spec(self, layer: int, mask: Bool[Tensor, "mask_rows head_index"],
             references: Int[Tensor, " rows"] | None = None, start: int = 0, pos: int = 0,
             boundaries: Int[Tensor, " rows"] | None = None, aligns: Int[Tensor, "rows 2"] | None = None) -> RowSpec:
        """Layer ``layer``'s replacement for heads ``mask`` marks (one mask row: the same heads in every row);
        resample needs each row's reference, its alignment (:meth:`alignment`) and the absolute positions the
        layer sees (``start … start + pos − 1``), and ``prefix``/``example`` positions each row's boundary
        (:meth:`boundaries`)."""
        where = self.position_mask(boundaries, start, pos)
        if self.kind.name == "scale":
            return RowSpec(mask, scale=self.kind.alpha, positions=where)
        if self.kind.name == "mean":
            assert self.means is not None  # checked in __post_init__
            return RowSpec(mask, value=self.means[layer], positions=where)
        if self.kind.name == "resample":
            assert self.reference is not None
            if references is None:
                raise ConfigError("Resample ablation replaces each row's z with its own reference example's; the rows' "
                                  "references are needed (celtk.evaluation.evaluate passes them per batch).")
            if aligns is None:
                raise ConfigError("Resample ablation aligns each row's own positions on its last prompt token; the "
                                  "rows' alignments are needed (Ablation.alignment of the rows' references and "
                                  "prompts; celtk.evaluation.evaluate passes them per batch).")
            return RowSpec(mask, value=self.reference.gather(layer, references, start, pos, aligns), positions=where)
        return RowSpec(mask, positions=where)


ZERO_ABLATION = Ablation()


def refuse_positions_generation(ablation: Ablation | AblationKind) -> None:
    """Ablation at ``prefix`` or ``example`` positions is defined on teacher-forced rows, right-padded from
    position 0; a generation-graded task's left-padded, growing rows are refused."""
    if isinstance(ablation, Ablation) and not ablation.everywhere:
        raise ConfigError(f"Ablation at {ablation.positions} positions is not offered for generation-graded tasks: "
                          "their left-padded batches move every position and the generated tokens have no prefix "
                          "boundary. Use positions all.")


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence shares from the start."""
    if not sequences:
        return 0
    first, n = sequences[0], min(len(s) for s in sequences)
    k = 0
    while k < n and all(s[k] == first[k] for s in sequences):
        k += 1
    return k


def reference_values(model: Model, sequences: Sequence[Sequence[int]], keep: bool,
                     prompts: Sequence[int] | None = None
                     ) -> tuple[Float[Tensor, "layer head_index d_head"], ReferenceZ | None, int]:
    """The intact model's ``z`` on ``sequences`` (token ids, right-padded batches of
    :data:`REFERENCE_BATCH`): the per-head mean over every real position, and with ``keep`` every
    position's values (:class:`ReferenceZ`, each sequence's prompt ``prompts`` tokens long: its whole length when
    not given); and the number of positions."""
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ConfigError("Mean and resample ablation need at least one reference example, each with at least "
                          "one token.")
    common = common_prefix(sequences)
    width = max(len(s) for s in sequences)
    n_layers = model.n_layers
    total = torch.zeros(n_layers, model.n_heads, model.d_head, dtype=torch.float64)
    seen: dict[int, Tensor] = {}
    shared: list[Tensor] = []
    own = [torch.zeros(len(sequences), width - common, model.n_heads, model.d_head, dtype=model.dtype)
           for _ in range(n_layers)] if keep else []
    pad = model.tokenizer.pad_token_id or 0

    def recorder(layer: int) -> ZHook:
        def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
                 ) -> Float[Tensor, "batch pos head_index d_head"]:
            seen[layer] = z.detach()
            return z
        return hook

    with torch.no_grad(), hook_z_hooks(model, {layer: recorder(layer) for layer in range(n_layers)}):
        for start in range(0, len(sequences), REFERENCE_BATCH):
            batch = sequences[start:start + REFERENCE_BATCH]
            ids = torch.tensor([list(s) + [pad] * (width - len(s)) for s in batch])
            real = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
            model.arch.decoder(input_ids=ids.to(model.device), attention_mask=real.to(model.device), use_cache=False)
            weight = real.to(torch.float64)[:, :, None, None]
            for layer in range(n_layers):
                z = seen[layer].cpu()
                total[layer] += (z.double() * weight).sum(dim=(0, 1))
                if keep:
                    if start == 0:
                        shared.append(z[0, :common].clone())
                    own[layer][start:start + len(batch)] = z[:, common:]
    count = sum(len(s) for s in sequences)
    means = (total / count).to(model.dtype)
    lengths = [len(s) for s in sequences]
    if prompts is not None and (len(prompts) != len(sequences)
                                or any(not 0 < p <= n for p, n in zip(prompts, lengths, strict=False))):
        raise ConfigError("Each reference sequence needs its prompt length, at least 1 and at most the sequence's "
                          f"length; got {list(prompts)} for sequences of {lengths} tokens.")
    stored = ReferenceZ(tuple(sequences[0][:common]), shared, own, torch.tensor(lengths, dtype=torch.long),
                        torch.tensor(list(prompts if prompts is not None else lengths), dtype=torch.long),
                        tuple(tuple(s) for s in sequences)) if keep else None
    return means, stored, count
