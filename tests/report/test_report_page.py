"""The rendered report as a reader gets it (issue 38): an audit called with a RELATIVE run path (what
`make demo` does) still shows the run's science, the cross-system figure comes first, every result has one
state wherever it appears, NVT constants read "fixed by ensemble", item codes carry their criterion names, no
executed notebook is left beside the page — and the page renders in headless Chromium to a PNG."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def page(audits, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Audit the report fixtures' run by a relative path from its parent folder and render the report from
    there, as `make demo` does from the checkout."""
    from mdbench.audit import audit_run
    from mdbench.report import render_report

    base = audits[0].parent
    out = tmp_path_factory.mktemp("page")
    old = os.getcwd()
    os.chdir(base)
    try:
        audit_run(Path("run"), Path("bundle"), Path("audit_relative"), reanalysis=False)
        render_report([Path("audit_relative")], out / "report.html")
    finally:
        os.chdir(old)
    return out / "report.html"


def _cells(html: str) -> list[list[str]]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    return [[td.get_text(" ", strip=True) for td in tr.find_all("td")] for tr in soup.find_all("tr")]


def test_relative_run_path_report_shows_the_science(page: Path) -> None:
    html = page.read_text()
    assert "no analysis results" not in html
    assert "cross-system comparison" in html and "side by side" in html   # table and figure
    assert html.index("side by side") < html.index("cross-system comparison")  # figure first
    assert html.index(">SAEO audit report<") < html.index("Scores of one or more audited")  # title first
    assert sorted(p.name for p in page.parent.iterdir()) == ["report.html"]  # no stray .ipynb


def test_one_state_per_value_in_the_page(page: Path) -> None:
    """A value's state is the same in every table of the page that shows it; NVT constants are not C."""
    rows = _cells(page.read_text())
    per_case = {}  # value text -> states, from the results tables (result, value, unit, state, reason)
    for r in rows:
        if len(r) == 5 and r[3] in ("C", "SI", "not_estimable", "fixed by ensemble", "F", "M"):
            per_case.setdefault(r[1], set()).add(r[3])
            if re.search(r"(density|volume)", r[0]) and re.search(r"± 0$", r[1]):
                assert r[3] == "fixed by ensemble", r
    for r in rows:
        for cell in r[1:]:
            m = re.fullmatch(r"(.+) \((C|SI|not_estimable|fixed by ensemble|F|M)\)", cell)
            if m and m.group(1) in per_case:
                assert per_case[m.group(1)] == {m.group(2)}, (cell, per_case[m.group(1)])
    html = page.read_text()
    assert "group state (audit)" in html and "group state</th>" in html  # group states are labelled as such


def test_one_state_per_value_across_tables_and_figure(tmp_path: Path) -> None:
    """Pipeline-format results: the cross-system table, the per-case table and the cross-system figure give
    every result the same state; a zero-width NVT density is "fixed by ensemble"; the figure is a PNG."""
    import json

    from mdbench.analysis.observables import CONDUCTIVITY, TRANSFERENCE, VISCOSITY
    from mdbench.report import figures, science

    def entry(v, hw, state):
        return {"value": v, "unit": "u", "state": state, "reason": "r " * 80,
                "uncertainty": {"half_width_95": hw}}

    for case, shift in (("DE", 0.0), ("HCE", 0.1), ("LHCE", 0.2)):
        obs = {"coordination/LI-O_DMC@first_min": entry(2.1 + shift, 0.1, "C"),
               "coordination/LI-O_FSI@first_min": entry(1.9 - shift, 0.6, "SI"),
               "association/AGG": entry(0.3 + shift, 0.02, "C"),
               "self_diffusion/LI": entry(1e-10, 4e-11, "SI"),
               VISCOSITY.key(): entry(3.1, 0.4, "C"), CONDUCTIVITY.key("sigma"): entry(0.5, 0.3, "SI"),
               CONDUCTIVITY.key("sigma_NE"): entry(0.9, 0.1, "C"),
               TRANSFERENCE.key("barycentric", "unweighted_L"): entry(0.4, 0.05, "C"),
               "thermo/density": entry(1200.0, 0.0, "C")}
        folder = tmp_path / "run" / "analysis" / case
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({"observables": obs}))
    cases = science.load_case_results(tmp_path / "run", "run")
    cross = science.cross_system(cases)
    points = figures.cross_system_points(cases)
    # one panel per registry member of a required family that has a finite value in some case
    expected = {title for title, _unit, pick, _target in figures._cross_panels()
                if any(pick(n) for c in cases for n in c.observables)}
    assert len(expected) >= 6 and set(points["panel"]) == expected
    for c in cases:
        table = science.results_table(c).set_index("result")
        assert table.loc["thermo/density", "state"] == "fixed by ensemble"
        assert len(table.loc["coordination/LI-O_DMC@first_min", "reason"]) == len("r " * 80)  # not cut
        for name, state in table["state"].items():
            text = table.loc[name, "value ± 95 % CI"]
            for cell in cross[c.case]:
                if cell.startswith(text + " ("):
                    assert cell == f"{text} ({state})"
        for _, p in points[points["case"] == c.case].iterrows():
            assert p["state"] in set(table["state"])
    png = figures.as_image(figures.cross_system(points)).data
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_item_codes_carry_criterion_names(page: Path) -> None:
    html = page.read_text()
    assert "Regime / plateau" in html and "Canonical lineage" in html


def test_page_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    exe = chromium()
    if exe is None:
        pytest.skip("no chromium: `make test` installs it (bash scripts/ensure_tools.sh chromium)")
    png = tmp_path / "page.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                               "--window-size=1280,3000", "--virtual-time-budget=5000", page.as_uri()],
                              capture_output=True, text=True, timeout=180)
    assert png.is_file(), proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
