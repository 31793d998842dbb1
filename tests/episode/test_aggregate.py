"""Aggregating configurations × repeats into one self-contained HTML page with every figure of the seed."""

from __future__ import annotations

import json
import re


import pytest
import scrapbook as sb

from mdbench.episode import aggregate as agg

from _episode_helpers import AGENT_PY, ORACLE_TIMEOUT_MIN, copy_episode, mdbench, needs_namespaces, prepare, run

SECTIONS = ("Fig. 2", "Fig. 3", "Fig. S1", "Fig. S2a", "Fig. S2b", "Fig. S3", "Fig. S4", "Fig. 5", "Cost (deliverable 9)")
#: Fig. 2, Fig. 3, S1, S2a, S2b (+ the state matrix), S3, S4, Fig. 5
N_FIGURES = 9
HOSTILE = "<script>alert(1)</script>"


def _render(dirs, out):
    executed = out.with_name("kept") / "episodes.ipynb"
    res = mdbench("episode", "aggregate", *map(str, dirs), "--out", str(out), "--title", f"Episodes {HOSTILE}",
                  "--keep-notebook", str(executed), timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    page = out.read_text()
    assert sorted(p.name for p in out.parent.glob(out.stem + ".*")) == [out.name], "only the page beside itself"
    errors = [o for c in json.loads(executed.read_text())["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    for title in SECTIONS:
        assert title in page, title
    imgs = re.findall(r"<img[^>]*src=\"data:image/png;base64,", page)
    assert len(imgs) == N_FIGURES
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"<script[^>]+src=\"https?://", page), "the page must work offline"
    return page, sb.read_notebook(str(executed)).scraps


@pytest.mark.slow
@pytest.mark.gromacs
@pytest.mark.timeout(ORACLE_TIMEOUT_MIN * 60 + 2400)
def test_four_configurations_times_two_repeats_render_every_figure(oracle_episode, buggy_episodes, tmp_path):
    dirs = [oracle_episode, copy_episode(oracle_episode, tmp_path / "oracle-r2", repeat=2)]
    for kind in ("tplus_convention", "clean_claim"):
        dirs += [buggy_episodes[kind], copy_episode(buggy_episodes[kind], tmp_path / f"{kind}-r2", repeat=2)]
    for k in (1, 2):
        ep = prepare(tmp_path / f"null-{k}", "harness=reference", "model=null", f"repeat={k}")
        run(ep, "null", "--no-reanalysis")
        dirs.append(ep)
    eps = agg.load_episodes(dirs)
    summary = agg.configuration_summary(agg.scores(eps)).set_index("configuration")
    assert len(summary) == 4 and set(summary["repeats"]) == {2}
    oracle_score = json.loads((oracle_episode / "result.json").read_text())["score"]
    assert summary.loc["reference / oracle", "mean"] == pytest.approx(oracle_score, abs=1e-3)
    assert summary["mean"].idxmax() == "reference / oracle"  # every defect costs points
    page, scraps = _render(dirs, tmp_path / "report.html")
    assert scraps["composite_by_configuration"].data == pytest.approx(summary["mean"].round(3).to_dict())
    values = agg.repeat_table(eps, agg.repeat_configuration(eps))
    assert set(values["audit"]) == {"R1", "R2"} and set(values["panel"]) >= {"density [kg/m^3]"}
    assert len(scraps["cost_table"].data) == len(dirs)


@needs_namespaces
def test_short_episodes_render_with_unscored_and_hostile_entries(tmp_path):
    """Three configurations × two repeats of seconds-long episodes, plus an infrastructure-blocked one."""
    dirs = []
    agents = {"null": "null", "crash": f"{AGENT_PY} -c 'raise SystemExit(2)'",
              HOSTILE: f"{AGENT_PY} -c 'print(1)'"}
    for model, agent in agents.items():
        for k in (1, 2):
            ep = prepare(tmp_path / f"{len(dirs)}", "harness=short", f"model={model}", f"repeat={k}")
            run(ep, agent, "--no-reanalysis")
            dirs.append(ep)
    dirs.append(prepare(tmp_path / "not-run", "harness=short", "model=pending"))
    eps = agg.load_episodes(dirs)
    assert [e.status for e in eps].count("agent_error") == 2 and eps[-1].status == "not_run"
    assert any("prepared but not run" in n for n in agg.notes(eps))
    page, scraps = _render(dirs, tmp_path / "report.html")
    assert len(scraps["composite_by_configuration"].data) == 3
    assert "No configuration has two scored repeats" not in page  # each has two
