"""The leaderboard page for people: executed with papermill, exported without code cells, figures first, budgets
and horizon in the header, did-not-finish systems listed but never plotted — and rendered in headless
Chromium to a PNG (the page a person sees)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from sdl_helpers import KEYS, SMALL_ROLES

from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments
from mdbench.sdl.policies import KernelPolicy, make_policy
from mdbench.sdl.report import render_leaderboard_html
from mdbench.sdl.runner import run_system

CHROMIUM = Path("/usr/bin/chromium")


class Crashes(KernelPolicy):
    """An in-process coordinator that fails on its first action (did not finish)."""

    def act(self, state):
        raise RuntimeError("boom\nwith a second line")


@pytest.fixture(scope="module")
def page(tmp_path_factory, vapdiff):
    tmp = tmp_path_factory.mktemp("page")
    spec = CompileSpec(rotations=3, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 0), seed=7)
    compiled = load_compiled(write_compiled(tmp / "asg", vapdiff, compile_assignments(vapdiff, spec, KEYS), KEYS))
    res = tmp / "res"
    for name in ("kernel", "uniform"):
        run_system(compiled, compiled.assignments, lambda n=name: make_policy(n, 0), name, res)
    run_system(compiled, compiled.assignments, lambda: Crashes(0), "crasher", res, random_draws=1)
    html = render_leaderboard_html(res, tmp / "report" / "leaderboard.html", assignments_dirs=[compiled.root])
    return html, html.read_text(encoding="utf-8")


def test_page_has_every_figure_first_and_no_code(page):
    html, text = page
    # no code cell, no input prompt: nbconvert exclude_input
    assert "hl-ipython3" not in text and not re.search(r'class="[^"]*(jp-InputPrompt|jp-CodeMirrorEditor)', text)
    n_md = len(re.findall(r'class="jp-Cell jp-MarkdownCell', text))
    assert n_md == 2 and len(re.findall(r'class="jp-InputArea ', text)) == n_md    # inputs: markdown prose only
    assert "build_leaderboards(" not in text and "import matplotlib" not in text
    images = [m.start() for m in re.finditer(r'<img[^>]*src="data:image/png;base64', text)]
    assert len(images) == 4                              # AUC per system, sign glyphs, enhancement, learning curves
    table = text.index("adaptive AUC [nats]</th>")
    assert max(images) < table                           # figures first, then the compact table
    assert "horizon 2 experiments" in text and "budgets: evidence 4, experiments 2, reviews 0" in text
    assert "random-control draws per assignment: 1, 3" in text
    assert "did not finish" in text and "boom with a second line" in text    # one line, listed, not plotted
    assert "Traceback" not in text


def test_page_renders_in_headless_chromium(page, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent (scripts/ensure_tools.sh installs it)")
    html, _ = page
    png = html.with_suffix(".png")
    proc = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--disable-dev-shm-usage", "--window-size=1280,3600", f"--screenshot={png}",
                           html.as_uri()], capture_output=True, text=True, timeout=180)
    assert png.exists(), proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    from matplotlib import image

    img = image.imread(str(png))
    assert img.shape[0] >= 3000 and img.shape[1] >= 1200
    assert float(img[..., :3].std()) > 0.05               # not a blank page
    shutil.copy(png, tmp_path / "sdl_leaderboard.png")
    print(f"\nleaderboard page screenshot: {png}")
