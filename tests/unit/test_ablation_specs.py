"""Ablation kinds parsed once, in one spelling; a run config records a non-zero kind and leaves zero runs'
files as they were; the per-row replacement (RowSpec) does exactly what each kind says on a tensor."""

from __future__ import annotations

import pytest
import torch

from celtk.ablation_kinds import AblationKind, ReferenceZ, RowSpec
from celtk.errors import ConfigError
from celtk.run.config import RunConfig, resolve_config


@pytest.mark.parametrize("text, name, alpha, spelled", [
    ("zero", "zero", None, "zero"), ("mean", "mean", None, "mean"), ("resample", "resample", None, "resample"),
    ("scale:0.50", "scale", 0.5, "scale:0.5"), ("scale:1", "scale", 1.0, "scale:1.0"),
    ("scale:-0.5", "scale", -0.5, "scale:-0.5"), (" scale:1e-1 ", "scale", 0.1, "scale:0.1"),
    ("scale:10", "scale", 10.0, "scale:10.0"), ("scale:-10", "scale", -10.0, "scale:-10.0")])
def test_kinds_parse_to_one_spelling(text, name, alpha, spelled):
    kind = AblationKind.parse(text)
    assert (kind.name, kind.alpha, str(kind)) == (name, alpha, spelled)
    assert AblationKind.parse(str(kind)) == kind
    assert kind.needs_reference == (name in ("mean", "resample"))


@pytest.mark.parametrize("text, message", [
    ("means", "Unknown ablation kind 'means'.*Did you mean: 'mean'"),
    ("scale", "scale needs a finite number α after the colon"),
    ("scale:half", "scale needs a finite number α"),
    ("scale:nan", "α must be finite"), ("scale:inf", "α must be finite"),
    ("mean:3", "takes no argument.*only scale does"),
    # far past |α| = 10 every logit overflowed: scale:-1e30 tied every choice and reported it as accuracy,
    # 1e300 ended in an internal "Refusing to write NaN"
    ("scale:-1e30", r"α = -1e\+30 is outside −10 ≤ α ≤ 10; .* scale:-1 \(flipped\)"),
    ("scale:1e300", r"α = 1e\+300 is outside −10 ≤ α ≤ 10"), ("scale:10.5", "outside −10 ≤ α ≤ 10")])
def test_bad_kinds_are_refused_naming_the_right_spelling(text, message):
    with pytest.raises(ConfigError, match=message):
        AblationKind.parse(text)


def test_a_scale_sweep_past_the_range_is_refused_before_the_run_is_touched(tmp_path):
    from celtk.run.ablations import run_ablation_kinds

    with pytest.raises(ConfigError, match=r"'scale:1e\+308': α = 1e\+308 is outside"):
        run_ablation_kinds(tmp_path / "no-run", alphas=[1.0, 1e308])
    assert not (tmp_path / "no-run").exists()


def test_a_run_config_records_a_kind_in_one_spelling_and_zero_not_at_all():
    assert RunConfig.from_dict({"ablation": "scale:0.50"}).ablation == "scale:0.5"
    assert resolve_config(None, {"ablation": "mean"}).recorded()["ablation"] == "mean"
    assert "ablation" not in RunConfig().recorded()  # zero runs' config.json / screen.json as before the setting
    # like the kind, the tie-break and the positions are recorded only when they are not the default
    assert set(RunConfig().recorded()) == set(RunConfig.keys()) - {"ablation", "tie_break", "positions"}
    with pytest.raises(ConfigError, match="Unknown ablation kind 'halve'"):
        resolve_config(None, {"ablation": "halve"})


def test_row_specs_replace_only_the_marked_heads_of_each_row():
    z = torch.randn(2, 5, 3, 4)
    mask = torch.tensor([[True, False, False], [False, False, True]])
    zeroed = RowSpec(mask).apply(z)
    assert torch.equal(zeroed, z.masked_fill(mask[:, None, :, None], 0.0))
    scaled = RowSpec(mask, scale=-0.5).apply(z)
    assert torch.equal(scaled[0, :, 0], -0.5 * z[0, :, 0]) and torch.equal(scaled[0, :, 1:], z[0, :, 1:])
    means = torch.randn(3, 4)
    meaned = RowSpec(mask, value=means).apply(z)
    assert torch.equal(meaned[1, :, 2], means[2].expand(5, 4)) and torch.equal(meaned[1, :, :2], z[1, :, :2])
    other = torch.randn(2, 5, 3, 4)
    resampled = RowSpec(mask, value=other).apply(z)
    assert torch.equal(resampled[0, :, 0], other[0, :, 0]) and torch.equal(resampled[0, :, 1:], z[0, :, 1:])
    one_row = RowSpec(mask[:1], scale=0.0).apply(z)  # one mask row: the same heads in every row
    assert torch.equal(one_row[:, :, 0], torch.zeros(2, 5, 4)) and torch.equal(one_row[:, :, 1:], z[:, :, 1:])
    with pytest.raises(ValueError, match="does not fit z"):
        RowSpec(mask, value=torch.randn(2, 4, 3, 4)).apply(z)


def test_reference_z_gathers_left_aligned_with_the_last_position_past_the_end():
    shared = [torch.arange(2 * 1 * 1, dtype=torch.float).view(2, 1, 1)]  # positions 0, 1 shared by both references
    own = [torch.tensor([[10.0, 11.0, 12.0],
                         [20.0, 21.0, 0.0]]).view(2, 3, 1, 1)]  # then 3 and 2 positions of their own
    ref = ReferenceZ((7, 8), shared, own, torch.tensor([5, 4]))
    got = ref.gather(0, torch.tensor([0, 1]), start=1, pos=6)[..., 0, 0]
    assert got.tolist() == [[1, 10, 11, 12, 12, 12], [1, 20, 21, 21, 21, 21]]
