"""findings.md is Markdown: run-provided text is inert for a Markdown viewer, and comparisons stay readable."""

from mdbench.audit.core import _md


def test_comparisons_stay_readable():
    assert _md("95 % half-width 0.3 <= 0.2? no; 1 < 2 & 3 > 2") == "95 % half-width 0.3 <= 0.2? no; 1 < 2 & 3 > 2"


def test_tags_entities_pipes_and_newlines_are_made_inert():
    out = _md("<img src=x onerror=alert(1)>|</script>\n<!-- x --> &amp; &#60;")
    assert "<img" not in out and "</script" not in out and "<!--" not in out
    assert "&lt;img" in out and "&amp;amp;" in out and "&amp;#60;" in out
    assert "\\|" in out and "\n" not in out
