"""The Section 4 model: closed form == literal attention; the theorems at small sizes."""

import numpy as np
import pytest
import torch

from celtk.theory import Setting, coefficients, delete_head, event_e, grad_joint, init, literal_risks, risks, train, winners
from celtk.theory._experiments import alpha_sweep, run_setting, wilson


@pytest.mark.parametrize("setting", [Setting(), Setting(1.5, 1.0, 0.5), Setting(1.0, 2.0, 0.3, n_heads=5)])
def test_closed_form_equals_literal_attention(setting):
    rng = np.random.default_rng(1)
    for _ in range(3):
        theta = rng.normal(scale=0.8, size=(4, setting.n_heads, 3))
        r_a, r_b = risks(coefficients(theta).sum(0), setting)
        t = torch.tensor(theta, requires_grad=True)
        l_a, l_b = literal_risks(t, setting)
        ((l_a + l_b) / 4).backward()
        assert abs(l_a.item() - r_a) < 1e-10 and abs(l_b.item() - r_b) < 1e-10
        assert np.abs(t.grad.numpy() - grad_joint(theta, setting)).max() < 1e-10


def test_gradient_descent_reaches_optimum():
    s = Setting(1.5, 1.0, 0.5)
    r = train(init(64, s, 0.1, 0), s, 0.2)
    assert r.converged.mean() > 0.95 and not r.diverged.any()
    assert np.abs(r.w[r.converged] - s.optimum).max() < 1e-5


def test_divergence_detected():
    s = Setting()
    r = train(init(16, s, 0.1, 0), s, 6.0, max_steps=5000)
    assert r.diverged.all() and not r.converged.any()


def test_event_e_and_deletion_small():
    s = Setting()
    report, (_, c, win, e, d) = run_setting(s, 400, 0.06, 0.2)
    assert report.pr_e["ci"][0] <= 4 / 9 <= report.pr_e["ci"][1]
    t2 = s.t ** 2
    clear = winners(c[e])[1].min(axis=1) > 0.99  # the theorem's regime: losers negligible
    np.testing.assert_allclose(d.delta_a[clear], -t2, atol=0.01)
    np.testing.assert_allclose(d.delta_b[clear], 3 * t2, atol=0.02)
    np.testing.assert_allclose(d.delta_joint[clear], t2 / 2, atol=0.01)


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


def test_losers_scale_as_alpha_to_the_fourth():
    sweep = alpha_sweep(Setting(), [0.05, 0.1, 0.2], 0.2, 60, n_boot=200)
    assert 3.5 < sweep.slope < 4.5
    assert sweep.residual_a[0] < sweep.residual_a[-1]


def test_wilson_interval():
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
