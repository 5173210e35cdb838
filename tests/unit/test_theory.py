"""The Section 4 model: closed form == literal attention; the theorems at small sizes; theory.json as a
document that round-trips."""

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from _support import not_none
from jaxtyping import TypeCheckError

from celtk.store.files import dumps
from celtk.theory import (
    CheckVerdicts,
    Setting,
    TheoryConfig,
    TheoryDocument,
    TrajectoryRow,
    Verdicts,
    alpha_sweep,
    coefficients,
    delete_head,
    deletion,
    deletion_trajectory,
    event_e,
    grad_joint,
    init,
    literal_risks,
    localisation,
    null_controls,
    risks,
    run_setting,
    run_theory,
    symmetry,
    train,
    verdicts,
    wilson,
    winners,
)
from celtk.theory._checks import MIN_SEEDS
from celtk.theory._plots import deletion_along_training

CHECKPOINTS = (0, 250, 500, 1000, 1500, 2000, 3000, 5000, 20_000)


@pytest.fixture(scope="module")
def trained():
    """300 seeds of the symmetric setting at α = 0.1, step 0.2, with checkpoints: shared by the slow-ish tests."""
    s = Setting()
    report, (result, c, win, e, d) = run_setting(s, 300, 0.1, 0.2, seed=0, checkpoints=CHECKPOINTS)
    return s, report, result, c, win, e, d


@pytest.mark.parametrize("setting", [Setting(), Setting(1.5, 1.0, 0.5), Setting(1.0, 2.0, 0.3, n_heads=5)])
def test_closed_form_equals_literal_attention(setting):
    rng = np.random.default_rng(1)
    for _ in range(3):
        theta = rng.normal(scale=0.8, size=(4, setting.n_heads, 3))
        r_a, r_b = risks(coefficients(theta).sum(0), setting)
        assert isinstance(r_a, float) and isinstance(r_b, float)  # one aggregate w: the risks are numbers
        t = torch.tensor(theta, requires_grad=True)
        l_a, l_b = literal_risks(t, setting)
        ((l_a + l_b) / 4).backward()
        assert abs(l_a.item() - r_a) < 1e-10 and abs(l_b.item() - r_b) < 1e-10
        assert t.grad is not None
        assert np.abs(t.grad.numpy() - grad_joint(theta, setting)).max() < 1e-10


def test_gradient_descent_reaches_optimum(trained):
    s, _, r, _, _, _, _ = trained
    assert r.converged.mean() > 0.95 and not r.diverged.any()
    assert np.abs(r.w[r.converged] - s.optimum).max() < 1e-5


def test_divergence_detected():
    s = Setting()
    r = train(init(16, s, 0.1, 0), s, 6.0, max_steps=5000)
    assert r.diverged.all() and not r.converged.any()


def test_event_e_and_deletion_small(trained):
    s, report, _, c, _, e, d = trained
    assert report.pr_e.n_seeds >= 250 and report.pr_e.ci[0] <= 4 / 9 <= report.pr_e.ci[1]
    t2 = s.t ** 2
    clear = winners(c[e])[1].min(axis=1) > 0.99  # the theorem's regime: losers negligible
    assert clear.sum() >= 50  # enough seeds qualify: no pass on an empty selection
    np.testing.assert_allclose(d.delta_a[clear], -t2, atol=0.01)
    np.testing.assert_allclose(d.delta_b[clear], 3 * t2, atol=0.02)
    np.testing.assert_allclose(d.delta_joint[clear], t2 / 2, atol=0.01)


def test_null_controls_fail_discriminating_checks_and_pass_the_symmetric_one(trained):
    s, _, _, c, _, _, _ = trained
    checks = null_controls(s, c, coefficients(init(300, s, 0.1, 0)), seed=0)
    for population in checks.populations().values():  # every verdict rests on enough seeds
        assert population.localisation.n_seeds >= 250 and population.deletion.n_on_e >= MIN_SEEDS
    assert verdicts(checks) == Verdicts(
        trained=CheckVerdicts(localisation=True, deletion=True, symmetry=True),
        untrained=CheckVerdicts(localisation=False, deletion=False, symmetry=True),
        shared=CheckVerdicts(localisation=False, deletion=False, symmetry=True),
    )
    assert checks.untrained.localisation.localised_fraction == 0.0
    assert abs(not_none(checks.untrained.deletion.delta_a_mean)) < 0.01 * s.t ** 2  # deleting a tiny head does nothing
    # shared: deleting one of three equal heads moves R_A by (4t² + b²)/9 − t², not −t²
    assert checks.shared.deletion.delta_a_mean == pytest.approx((4 * s.t ** 2 + s.b ** 2) / 9 - s.t ** 2, abs=1e-4)


def test_shapes_are_checked_where_arrays_cross_modules():
    """Under the tests every annotated array is checked (jaxtyping with beartype): initial coefficients with
    other heads than the trained ones are refused, and winners need [seed, head_index, feature]."""
    with pytest.raises(TypeCheckError, match="initial"):
        null_controls(Setting(), np.ones((25, 3, 3)), np.ones((25, 5, 3)))
    with pytest.raises(TypeCheckError, match="parameter 'c'"):
        winners(np.ones((3, 3)))


def test_symmetric_check_can_fail():
    s = Setting()
    c = coefficients(init(300, s, 0.1, 3))
    c[:, 0] *= 10  # head 0 wins nearly every feature: not exchangeable
    sym = symmetry(c, s)
    assert not sym.passes and not_none(sym.holm_min_p) < 1e-6 and not sym.pr_e.ci_contains_predicted


def test_checks_refuse_too_few_seeds():
    s = Setting()
    c = np.zeros((5, 3, 3))
    c[:, 0] = [s.a / 2, 0, 0]  # an ideal trained split, but only 5 seeds
    c[:, 1] = [0, s.b, 0]
    c[:, 2] = [0, 0, s.c]
    d = deletion(c, s)
    assert d.n_on_e == 5 and not d.passes and "insufficient" in not_none(d.reason)
    assert localisation(c, s).localised_fraction == 1.0 and not localisation(c, s).passes
    assert not symmetry(c, s).passes and "insufficient" in not_none(symmetry(c, s).reason)
    assert symmetry(c[:0], s).uniform_p is None and not symmetry(c[:0], s).passes


def test_deletion_effect_settles_after_a_checkpoint(trained):
    s, _, result, _, _, _, _ = trained
    traj = deletion_trajectory(result.snapshots, s, result.converged)
    rows = traj.rows
    assert [r.step for r in rows] == list(CHECKPOINTS)
    assert all(r.n_on_e >= MIN_SEEDS for r in rows)
    t2 = s.t ** 2
    assert abs(not_none(rows[0].delta_a_mean)) < 0.01 * t2 and not rows[0].passes  # at initialisation: no effect
    settled = not_none(traj.settled_step)
    assert 0 < settled < CHECKPOINTS[-1]
    assert all(r.passes == (r.step >= settled) for r in rows)
    effect = [not_none(r.delta_a_mean) for r in rows]
    # neighbouring checkpoints: zipped with the list shifted by one, which is one shorter
    assert all(later <= earlier + 1e-3 for earlier, later in zip(effect, effect[1:], strict=False))  # grows towards −t²
    assert rows[-1].delta_a_mean == pytest.approx(-t2, rel=0.02)
    assert rows[-1].delta_b_mean == pytest.approx(3 * t2, rel=0.02)


def test_checkpoints_equal_a_run_stopped_there():
    s = Setting()
    theta0 = init(6, s, 0.1, 7)
    long = train(theta0, s, 0.2, max_steps=600, checkpoints=(0, 300))
    short = train(theta0, s, 0.2, max_steps=300)
    assert long.snapshots is not None
    np.testing.assert_array_equal(long.snapshots[300], short.c)
    np.testing.assert_array_equal(long.snapshots[0], coefficients(theta0))


def test_head_tied_descent_keeps_heads_equal():
    s = Setting()
    tied = np.repeat(init(4, Setting(n_heads=1), 0.3, 2), 3, axis=2)
    c = train(tied, s, 0.2, max_steps=400).c
    np.testing.assert_array_equal(c[:, 0], c[:, 1])
    np.testing.assert_array_equal(c[:, 0], c[:, 2])


def test_run_theory_small_has_every_field_and_no_nan(tmp_path):
    config = replace(TheoryConfig(), n_seeds=100, sweep_alphas=(0.12, 0.24), sweep_seeds=30, lr_grid=(1.0,),
                     lr_seeds=20, settings=((1.0, 1.0, 1.0),), checkpoints=(0, 1000, 20_000))
    doc = run_theory(config, tmp_path)
    text = json.dumps(doc.to_json(), allow_nan=False)  # raises on NaN or infinity anywhere
    assert doc.null_controls == doc.settings[0].verdicts and doc.null_controls.untrained.symmetry in (True, False)
    assert doc.loser_growth.alphas == [0.12, 0.24] and len(doc.loser_growth.median_ratio) == 2
    assert doc.deletion_settled_step in (1000, 20_000)
    assert doc.settings[0].checks.trained.deletion.n_on_e >= MIN_SEEDS
    assert [(tmp_path / name).read_bytes()[:4] for name in not_none(doc.settings[0].figures)] == [b"\x89PNG"] * 5
    # the document round-trips through its file: the same record back, and the same bytes again
    again = TheoryDocument.from_json(json.loads(text))
    assert again == doc and dumps(again.to_json()) == dumps(doc.to_json())
    assert again.config == config and isinstance(again.config.settings[0], tuple)
    # theory.json keeps the keys and order it had before it was a document
    assert list(json.loads(text)) == ["config", "settings", "pr_e", "deletion", "loser_slope", "loser_growth",
                                      "null_controls", "deletion_settled_step"]
    assert list(json.loads(text)["settings"][0]) == ["name", "main", "alpha_sweep", "step_size", "checks", "verdicts",
                                                     "deletion_trajectory", "figures"]
    assert "loser_samples" not in text and "schema_version" not in text


def test_event_e_definition():
    win = np.array([[0, 1, 2], [0, 0, 1], [1, 2, 1], [2, 0, 1]])
    assert event_e(win).tolist() == [True, False, False, True]


def test_delete_head_removes_only_that_head():
    s = Setting()
    c = np.zeros((1, 3, 3))
    c[0, 0] = [0.5, 0, 0]
    c[0, 1] = [0, 1, 0]
    c[0, 2] = [0, 0, 1]
    d = delete_head(c, np.array([0]), s)
    assert d.before_a[0] == pytest.approx(0.25) and d.after_a[0] == pytest.approx(0.0)
    assert d.before_b[0] == pytest.approx(0.25) and d.after_b[0] == pytest.approx(1.0)


def _row(step: int, delta_a: float | None, delta_b: float | None) -> TrajectoryRow:
    return TrajectoryRow(step=step, n_on_e=0 if delta_a is None else 30, t2=0.25, delta_a_predicted=-0.25,
                         delta_b_predicted=0.75, delta_a_mean=delta_a, delta_b_mean=delta_b, passes=False,
                         winners_final_fraction=None, w_error_mean=None)


def test_deletion_trajectory_figure(tmp_path):
    rows = [_row(0, 0.0, 0.0), _row(10, None, None), _row(100, -0.25, 0.75)]
    path = deletion_along_training(rows, 0.25, tmp_path / "d.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_losers_grow_by_an_alpha_independent_factor():
    sweep = alpha_sweep(Setting(), [0.06, 0.12, 0.24], 0.2, 60, n_boot=200)
    assert min(sweep.converged) >= 0.95  # ≥ 57 seeds qualify at each α
    assert 3.5 < sweep.slope < 4.5
    assert sweep.init_slope == pytest.approx(4.0, abs=0.01)  # why the slope alone says little: losers start ∝ α⁴
    # what does not follow by construction: each loser's growth |c_T| / |c_0| does not depend on α …
    assert abs(sweep.growth_slope) < 0.25
    # … and is not 1: losers do not stay at their initial size, they change by an α-independent factor
    assert all(m > 1.5 for m in sweep.growth_median)
    assert all(q[0] < 1 < 5 < q[1] for q in sweep.growth_quartiles)
    assert not_none(sweep.residual_a[0]) < not_none(sweep.residual_a[-1])


def test_theory_runs_without_torch_and_loads_the_literal_form_on_use():
    """Only the literal attention form needs torch: it loads on first use of ``literal_risks``."""
    code = ("import sys\n"
            "import celtk.theory as t\n"
            "doc = t.all_checks(t.coefficients(t.init(25, t.Setting(), 0.1, 0)), t.Setting())\n"
            "print(doc.symmetry.n_seeds, 'torch' in sys.modules)\n"
            "t.literal_risks\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["25", "False", "True"]


def test_wilson_interval():
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
