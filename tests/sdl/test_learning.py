"""A real learning signal on vapdiff: after its budget the learning baseline forecasts the held-out panel
better than the class prior (numbers printed; run with -s to see them)."""

from __future__ import annotations

import math

import numpy as np
from sdl_helpers import KEYS

from mdbench.sdl.campaign import run_adaptive
from mdbench.sdl.compiler import compile_assignments, select_panel
from mdbench.sdl.metrics import checkpoint_scores
from mdbench.sdl.policies import make_policy


def _losses(ledger, asgs, name):
    pre, post = [], []
    for a in asgs:
        env, _ = run_adaptive(ledger, a, lambda: make_policy(name, 0))
        scores, n_bad = checkpoint_scores(env.trace(), ledger, a)
        assert n_bad == 0 and len(scores) == a.budgets.experiments + 1
        pre.append(-scores[0])
        post.append(-scores[-1])
    return np.array(pre), np.array(post)


def test_learning_baseline_beats_class_prior_after_its_budget(vapdiff):
    asgs = select_panel(compile_assignments(vapdiff, keys=KEYS), "full")   # the six full-length assignments
    _, prior_post = _losses(vapdiff, asgs, "class_prior")
    kpre, kpost = _losses(vapdiff, asgs, "kernel")
    print(f"\nheld-out joint log loss [nats], 6 assignments of vapdiff (uniform = ln 4 = {math.log(4):.4f}):")
    print(f"  class prior (context only)          : {prior_post.mean():.4f}  per assignment {np.round(prior_post, 3)}")
    print(f"  kernel baseline, pre-campaign       : {kpre.mean():.4f}  per assignment {np.round(kpre, 3)}")
    print(f"  kernel baseline, after 12 experiments: {kpost.mean():.4f}  per assignment {np.round(kpost, 3)}")
    assert kpost.mean() < prior_post.mean()
    assert prior_post.mean() < math.log(4)
    # the baseline also improves on its own pre-campaign forecast by learning from revealed outcomes
    assert kpost.mean() < kpre.mean()
