"""The paper's intervention: replace a head's output ``z`` just before the output projection (zero it,
by default; mean, resample and scaled replacements are :mod:`celtk.ablation_kinds`).

``ablate`` does it with TransformerLens hooks on ``blocks.{l}.attn.hook_z``;
``export_ablated`` bakes the same change into a plain HF checkpoint through the head's inputs to the
attention output projection (``blocks.{l}.attn.o``, found through the bridge: columns of an
``nn.Linear``, rows of GPT-2's transposed ``Conv1D``), the same function of the input: zeroed (zero),
scaled by α (scale), or zeroed with ``W_O,h·μ_h`` added to the projection's bias (mean). Resample
ablation depends on each example's reference and has no checkpoint form.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int, Shaped
from torch import Tensor

from celtk.ablation_hooks import ZHook
from celtk.ablation_hooks import hook_z_hooks as hook_z_hooks  # re-exported: importable from here as before
from celtk.ablation_hooks import hook_z_name as hook_z_name
from celtk.ablation_kinds import Ablation, AblationKind, RowSpec
from celtk.boundary import public
from celtk.errors import ConfigError, RunStoreError
from celtk.heads import HeadSet, as_head_set
from celtk.models import Model
from celtk.registry import annotation_names

if TYPE_CHECKING:  # transformers loads where a checkpoint is exported, not with this module
    from transformers import PretrainedConfig

__getattr__ = annotation_names({"PretrainedConfig": "transformers"})  # what the type checks under pytest resolve


def _zero_heads_hook(heads: list[int]) -> ZHook:
    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
             ) -> Float[Tensor, "batch pos head_index d_head"]:
        mask = torch.zeros(z.shape[2], dtype=torch.bool, device=z.device)
        mask[heads] = True
        return z.masked_fill(mask[None, None, :, None], 0.0)

    return hook


def _row_mask_hook(mask: Bool[Tensor, "batch head_index"] | RowSpec) -> ZHook:
    """Replace head ``h`` in row ``b`` where the mask marks it (a boolean mask: zero it): one layer,
    different heads per row."""
    if isinstance(mask, RowSpec):
        spec = mask

        def replace(z: Float[Tensor, "batch pos head_index d_head"], hook: object
                    ) -> Float[Tensor, "batch pos head_index d_head"]:
            if z.shape[0] != spec.mask.shape[0]:
                raise ValueError(f"row mask of shape {tuple(spec.mask.shape)} does not fit hook_z of shape "
                                 f"{tuple(z.shape)}")
            return spec.apply(z)

        return replace

    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
             ) -> Float[Tensor, "batch pos head_index d_head"]:
        if z.shape[0] != mask.shape[0] or z.shape[2] != mask.shape[1]:
            raise ValueError(f"row mask of shape {tuple(mask.shape)} does not fit hook_z of shape {tuple(z.shape)}")
        return z.masked_fill(rearrange(mask, "batch head_index -> batch 1 head_index 1").to(z.device), 0.0)

    return hook


def _spec_hook(ablation: Ablation, layer: int, heads: list[int], n_heads: int,
               references: Int[Tensor, " batch"] | None, boundaries: Int[Tensor, " batch"] | None = None,
               aligns: Int[Tensor, "batch 2"] | None = None) -> ZHook:
    """Replace ``heads`` of one layer in every row by ``ablation``'s kind (resample: row ``b`` reads
    reference ``references[b]`` aligned as ``aligns[b]`` says, :meth:`Ablation.alignment`; ``prefix``/``example``
    positions: only before, or from, row ``b``'s boundary ``boundaries[b]``)."""
    mask = torch.zeros(1, n_heads, dtype=torch.bool)
    mask[0, heads] = True

    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
             ) -> Float[Tensor, "batch pos head_index d_head"]:
        for name, given in (("references", references), ("boundaries", boundaries)):
            if given is not None and len(given) != z.shape[0]:
                raise ValueError(f"{len(given)} row {name} for hook_z of shape {tuple(z.shape)}")
        spec = ablation.spec(layer, mask, references, 0, z.shape[1], boundaries, aligns)
        return spec.apply(z)

    return hook


def as_ablation(ablation: Ablation | AblationKind | str | None) -> Ablation:
    """``None`` is zeroing; a kind needing no reference values (zero, ``scale:α``) may be given by name."""
    if isinstance(ablation, Ablation):
        return ablation
    return Ablation(AblationKind.parse(ablation or "zero"))


@contextmanager
@public
def ablate(model: Model, heads: HeadSet | str, ablation: Ablation | AblationKind | str | None = None, *,
           references: Int[Tensor, " batch"] | None = None,
           boundaries: Int[Tensor, " batch"] | None = None,
           contexts: Sequence[Sequence[int]] | None = None) -> Iterator[Model]:
    """Replace the output of every head in ``heads`` at every position while the block runs: zero it
    (default), or as ``ablation`` says (``"scale:0.5"``, or an :class:`Ablation` with mean or
    resampled values; resample needs ``references``, each batch row's reference example, and ``contexts``, each
    row's prompt token ids: a row reads its reference at the positions it shares with the reference's prompt,
    and its own positions aligned on the last prompt token (:meth:`Ablation.alignment`), so the batch must be
    right-padded from position 0). An
    :class:`Ablation` at ``prefix`` or ``example`` positions replaces only the positions before, or from,
    each row's boundary: pass ``boundaries`` (:meth:`Ablation.boundaries` of the rows' contexts).

    Composes with other hooks (it adds and removes only its own) and restores the intact
    model on exit, also when the body raises. Under grouped-query attention only the
    query head's output is replaced; the shared key/value heads are untouched.

    Example:
        >>> with ablate(model, "L5H3,L10H0"):  # doctest: +SKIP
        ...     logits = model.bridge(tokens)
    """
    heads = as_head_set(heads)
    model.validate_heads(heads)
    kind = as_ablation(ablation)
    if kind.per_row and references is None and len(heads):
        raise ConfigError("Resample ablation replaces each row's z with its own reference example's: pass "
                          "references= (each batch row's reference, Ablation.assign) or score with "
                          "celtk.evaluate(..., ablation=...), which passes them per batch.")
    if kind.per_row and contexts is None and len(heads):
        raise ConfigError("Resample ablation aligns each row's own positions on its last prompt token: pass "
                          "contexts= (each batch row's prompt token ids) or score with celtk.evaluate(..., "
                          "ablation=...), which passes them per batch.")
    if not kind.everywhere and boundaries is None and len(heads):
        raise ConfigError(f"Ablation at {kind.positions} positions replaces z only "
                          f"{'before' if kind.positions == 'prefix' else 'from'} each row's prefix boundary: pass "
                          "boundaries= (Ablation.boundaries of the rows' contexts) or score with "
                          "celtk.evaluate(..., ablation=...), which passes them per batch.")
    if kind.is_zero and kind.everywhere:
        hooks = {layer: _zero_heads_hook(hs) for layer, hs in heads.by_layer().items()}
    else:
        refs = _references(references, len(kind.reference_hashes)) if kind.per_row else None
        aligns = kind.alignment(refs, list(contexts or ())) if refs is not None and len(heads) else None
        bounds = None if kind.everywhere else torch.as_tensor(boundaries, dtype=torch.long)
        hooks = {layer: _spec_hook(kind, layer, hs, model.n_heads, refs, bounds, aligns)
                 for layer, hs in heads.by_layer().items()}
    with hook_z_hooks(model, hooks):
        yield model


def _references(references: object, n: int) -> Int[Tensor, " batch"]:
    """Each row's reference as a long tensor, every one an index into the ``n`` reference examples."""
    try:
        refs = torch.as_tensor(references, dtype=torch.long)
    except (TypeError, ValueError, RuntimeError):
        refs = None
    if refs is None or refs.ndim != 1 or (len(refs) and not bool(((refs >= 0) & (refs < n)).all())):
        raise ConfigError(f"references must give each batch row's reference example, an index in 0..{n - 1} "
                          f"(Ablation.assign), got {references!r}.")
    return refs


@contextmanager
def ablate_rows(model: Model, layer: int, mask: Bool[Tensor, "batch head_index"] | RowSpec) -> Iterator[Model]:
    """Ablate different heads of one layer in different batch rows (the screener's batching): a
    boolean mask zeroes, a :class:`RowSpec` replaces as its kind says."""
    with hook_z_hooks(model, {layer: _row_mask_hook(mask)}):
        yield model


def zero_output_columns(model: Model, state: dict[str, Shaped[Tensor, " ..."]], heads: HeadSet
                        ) -> dict[str, Shaped[Tensor, " ..."]]:
    """Copy of ``state`` (HF names) with each head's inputs ``h·d_head:(h+1)·d_head`` of its layer's
    attention output projection zeroed (the projection and its layout are ``model.arch``'s)."""
    out = dict(state)
    for layer, hs in heads.by_layer().items():
        name = model.arch.output_weights[layer]
        out[name] = model.arch.zero_head_outputs(out[name], hs, model.d_head)
    return out


def _head_inputs(model: Model, weight: Float[Tensor, "dim0 dim1"], head: int) -> Float[Tensor, "d_model d_head"]:
    """Head ``head``'s slice of an output projection's weight, as ``[d_model, d_head]`` in either layout."""
    d = model.d_head
    return weight[head * d:(head + 1) * d].T if model.arch.output_transposed else weight[:, head * d:(head + 1) * d]


def ablated_state(model: Model, state: dict[str, Shaped[Tensor, " ..."]], heads: HeadSet, ablation: Ablation
                  ) -> dict[str, Shaped[Tensor, " ..."]]:
    """Copy of ``state`` (a state dict: tensors of every shape and dtype) with ``heads`` removed as ``ablation``
    says, in the output projection: inputs zeroed (zero), scaled by α (scale), or zeroed with ``W_O,h·μ_h`` added
    to the projection's bias, which must be in ``state`` (mean). Resample has no weight form."""
    kind = ablation.kind
    if not ablation.everywhere:
        raise ConfigError(f"An ablation at {ablation.positions} positions cannot be exported: which positions are "
                          "replaced depends on each prompt's few-shot prefix, which no fixed weights see. Export "
                          "positions=all, or keep the model hooked (celtk.ablate).")
    if kind.name == "resample":
        raise ConfigError("Resample ablation cannot be exported: each example reads its own reference example's z, "
                          "which no fixed weights reproduce. Export zero, mean or scale:α, or keep the model hooked "
                          "(celtk.ablate).")
    if kind.name == "zero":
        return zero_output_columns(model, state, heads)
    out = dict(state)
    for layer, hs in heads.by_layer().items():
        name = model.arch.output_weights[layer]
        weight = out[name]
        if kind.name == "mean":
            assert ablation.means is not None  # an Ablation of kind mean always has them
            bias = _bias_name(name)
            shift = sum(_head_inputs(model, weight, h).double() @ ablation.means[layer, h].double() for h in hs)
            out[bias] = (out[bias].double() + shift).to(out[bias].dtype)
            out[name] = model.arch.zero_head_outputs(weight, hs, model.d_head)
        else:
            n_inputs = weight.shape[0] if model.arch.output_transposed else weight.shape[1]
            factor = torch.ones(n_inputs, dtype=weight.dtype, device=weight.device)
            for h in hs:
                factor[h * model.d_head:(h + 1) * model.d_head] = float(kind.alpha or 0.0)
            out[name] = weight * (factor[:, None] if model.arch.output_transposed else factor[None, :])
    return out


def _bias_name(weight_name: str) -> str:
    return weight_name.removesuffix("weight") + "bias"


def _with_output_bias(model: Model, state: dict[str, Shaped[Tensor, " ..."]], layers: list[int]
                      ) -> tuple[PretrainedConfig, dict[str, Shaped[Tensor, " ..."]], bool]:
    """The HF config and state to export a mean ablation from: unchanged when the output projections of
    ``layers`` have a bias; else, where the config has ``attention_bias``, that setting turned on, every
    bias it adds zero (the same function), so that the fold has a bias to go into. Returns whether it added them."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    from_config: Callable[..., PreTrainedModel] = AutoModelForCausalLM.from_config  # transformers leaves it unannotated
    config = model.hf_model.config
    wanted = {_bias_name(model.arch.output_weights[layer]) for layer in layers}
    if wanted <= set(state):
        return config, state, False
    refusal = ConfigError(
        "Exporting a mean ablation adds W_O·μ to the bias of the attention output projection, and "
        f"{model.architecture}'s has none and no setting that gives it one (attention_bias). Export zero or "
        "scale:α, or keep the model hooked (celtk.ablate).")
    if getattr(config, "attention_bias", None) is not False:
        raise refusal
    config = copy.deepcopy(config)
    config.attention_bias = True
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in from_config(config).state_dict().items()}
    added = set(shapes) - set(state)
    if not wanted <= set(shapes) or any(not k.endswith(".bias") for k in added) or set(state) - set(shapes):
        raise refusal
    reference = next(iter(state.values()))
    state = dict(state) | {k: torch.zeros(shapes[k], dtype=reference.dtype, device=reference.device) for k in added}
    return config, state, True


@public
def export_ablated(model: Model, heads: HeadSet | str, out_dir: str | Path,
                   ablation: Ablation | AblationKind | str | None = None) -> Path:
    """Write a standard HF checkpoint of ``model`` with ``heads`` removed in the weights: zeroed (default),
    scaled (``scale:α``) or mean-ablated (an :class:`Ablation` of kind mean: the slice zeroed and
    ``W_O,h·μ_h`` added to the output projection's bias; an architecture whose projection has no bias
    gets one through its ``attention_bias`` setting, every added bias zero but that one, and one
    without that setting is refused). Resample ablation is refused: it has no weight form.

    The directory holds safetensors weights, the config, the tokenizer and
    ``celtk_ablation.json`` naming the heads and the kind; any HF-compatible tool runs it without hooks.
    It is written under a temporary name and renamed into place.
    """
    from transformers import AutoModelForCausalLM, PreTrainedModel

    from_config: Callable[..., PreTrainedModel] = AutoModelForCausalLM.from_config  # transformers leaves it unannotated
    heads = as_head_set(heads)
    model.validate_heads(heads)
    kind = as_ablation(ablation)
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise RunStoreError(f"Export directory {out_dir} already exists; choose a new directory.")
    config, state, added = model.hf_model.config, model.hf_state_dict(), False
    if kind.kind.name == "mean":
        config, state, added = _with_output_bias(model, state, sorted(heads.by_layer()))
    state = ablated_state(model, state, heads, kind)
    fresh = from_config(config, dtype=model.dtype)
    fresh.load_state_dict(state, strict=True)
    fresh.config.architectures = [model.architecture]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=out_dir.parent))
    try:
        fresh.save_pretrained(scratch, safe_serialization=True)
        model.tokenizer.save_pretrained(scratch)
        note: dict[str, object] = {"base_model": model.name, "weight_hash": model.weight_hash,
                                   "ablated_heads": heads.names(), "method": _method(model, kind, added)}
        if not kind.is_zero:  # zero exports keep the note they always had
            note["ablation"] = kind.describe()
        (scratch / "celtk_ablation.json").write_text(json.dumps(note, indent=2) + "\n")
        os.chmod(scratch, 0o755)
        os.replace(scratch, out_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return out_dir


def _method(model: Model, ablation: Ablation, added_biases: bool) -> str:
    where = "rows" if model.arch.output_transposed else "columns"
    inputs = "inputs h*d_head:(h+1)*d_head of each layer's attention output projection"
    if ablation.kind.name == "scale":
        return f"{inputs} multiplied by {ablation.kind.alpha!r} ({where}; = hook_z scaling)"
    if ablation.kind.name == "mean":
        return (f"{inputs} set to zero ({where}) and W_O,h·mean(z_h) added to its bias (= hook_z mean ablation)"
                + ("; attention_bias turned on to give it one, every other added bias zero" if added_biases else ""))
    return f"{inputs} set to zero ({where}; = hook_z zeroing)"
