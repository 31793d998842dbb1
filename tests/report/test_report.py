"""Report room: tables escape run text, figures build, and one self-contained HTML page is rendered."""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from matplotlib.figure import Figure

from _report_payloads import IMG_PAYLOAD, PAYLOAD
from mdbench.errors import InputError
from mdbench.paths import NOTEBOOKS_DIR
from mdbench.report import data, figures, tables

pytestmark = pytest.mark.gromacs


def test_tables_escape_everything():
    df = data.pd.DataFrame([{"<th>": PAYLOAD, "x": IMG_PAYLOAD}])
    html = tables.html_table(df, caption=PAYLOAD).data
    assert PAYLOAD not in html and IMG_PAYLOAD not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html and "&lt;th&gt;" in html
    assert PAYLOAD not in tables.heading(PAYLOAD).data


def test_data_and_figures_from_real_audits(audits):
    loaded = data.load_audits(list(audits))
    assert [a.label for a in loaded] == ["audit_honest", "audit_hostile"]
    sc = data.scores(loaded)
    assert list(sc["composite_final"]) == [a.doc["composite"]["final"] for a in loaded]
    assert data.items(loaded).shape == (2, 21)
    ch = data.changed_items(loaded)
    assert list(ch["item"]) == ["E5 Consistency"] and list(ch["audit"]) == ["audit_hostile"]
    vals = data.repeat_values(loaded)
    assert set(vals["panel"]) >= {"density [kg/m^3]", "coordination number", "aggregates (AGG fraction)"}
    assert vals["value"].notna().all()
    states = data.observable_states(loaded)
    assert (states["group state (audit)"].isin(["C", "SI", "F", "M", "invalid_upstream", "not_reached"])).all()
    for fig in (figures.overall_scores(sc), figures.item_heatmap(data.items(loaded)),
                figures.case_matrices(data.case_items(loaded, "Sim")), figures.repeat_consistency(vals)):
        assert isinstance(fig, Figure)
        assert figures.as_image(fig).data[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InputError, match="no saeo.json"):
        data.load_audits([audits[0].parent])


def test_notebooks_are_thin_and_clean():
    for name in ("aggregate", "audit_run"):
        nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
        assert nb.metadata["kernelspec"] == {"name": "mdbench", "display_name": "Python (mdbench)",
                                             "language": "python"}
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert "parameters" in code[0].metadata.get("tags", [])
        for line in code[0].source.splitlines():
            assert re.match(r"^\w+: \w+ = .+  # .+", line), line
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
        src = "\n".join(c.source for c in code)
        assert not re.search(r"^\s*(def|class) ", src, re.M)
        assert len(src.splitlines()) < 150


def test_render_one_self_contained_page_with_escaped_run_text(audits, tmp_path):
    from click.testing import CliRunner

    from mdbench.cli import cli

    out = tmp_path / "report.html"
    kept = tmp_path / "kept" / "executed.ipynb"
    r = CliRunner().invoke(cli, ["report", str(audits[0]), str(audits[1]), "--out", str(out),
                                 "--keep-notebook", str(kept)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "report.html"]  # no stray .ipynb beside it
    page = out.read_text()
    assert PAYLOAD not in page and IMG_PAYLOAD not in page          # hostile text never becomes markup
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page or "&lt;script&gt;alert(" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("data:image/png;base64,") >= 5                # figures embedded
    assert "<script src=" not in page and "cdnjs" not in page        # no external resources
    assert "audit_hostile" in page and "E5" in page
    # the science section (issue 24): cross-system comparison and per-case results; the title once
    assert "cross-system comparison" in page and "value ± 95 % CI" in page and "sigma_NE (Nernst-Einstein" in page
    assert page.count(">SAEO audit report<") == 1
    scraps = json.dumps([c.get("outputs", []) for c in nbformat.read(kept, as_version=4).cells])
    assert "composite_final" in scraps


@pytest.mark.slow
def test_render_per_run_page(audits, tmp_path):
    from mdbench.report import render_report

    out = render_report([audits[1]], tmp_path / "run.html", notebook="audit_run")
    page = out.read_text()
    assert PAYLOAD not in page and "&lt;script&gt;" in page
    assert page.count("data:image/png;base64,") >= 3
    with pytest.raises(InputError, match="exactly one"):
        render_report(list(audits), tmp_path / "x.html", notebook="audit_run")


def test_science_tables_from_the_audited_run(audits):
    """Issue 24: the report's science comes from the run's own results.json: every result with value ± 95 % CI,
    unit, state and reason; the cross-system rows; only PNG evidence inside the case folder."""
    import json as _json

    from mdbench.report import science

    run_dir = _json.loads((audits[0] / "saeo.json").read_text())["run_dir"]
    cases = science.load_case_results(run_dir)
    assert cases
    table = science.results_table(cases[0])
    assert list(table.columns) == ["result", "value ± 95 % CI", "unit", "state", "reason"] and len(table)
    cross = science.cross_system(cases)
    assert any("t+ (barycentric" in q for q in cross["quantity"]) and any("eta" in q for q in cross["quantity"])
    assert science.value_text({"state": "not_estimable", "value": None}) == "withheld"
    assert science.value_text({"value": 1.234, "uncertainty": {"half_width_95": 0.5}}) == "1.23 ± 0.5"
    for _caption, png in science.evidence_figures(cases[0]):
        assert png.startswith(b"\x89PNG")
