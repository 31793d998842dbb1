"""Settings flow from params/analysis/ into the registrations and into every estimator, from one object."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml

from mdbench.analysis import settings as settings_module
from mdbench.analysis.pipeline import analyze_files, load_or_analyze_case
from mdbench.analysis.definitions import registration_definitions
from mdbench.analysis.settings import AnalysisSettings
from mdbench.errors import InputError
from mdbench.record import RunRecord

CN = "coordination/SOL:O@first_min"  # Na+-O(water): a CN of about 6 whose blocks always differ a little


@pytest.fixture()
def params_copy(tmp_path, monkeypatch):
    """A copy of params/analysis/ that the settings read instead of the project's (edit its default.yaml)."""
    folder = tmp_path / "params_analysis"
    shutil.copytree(settings_module.settings_dir(), folder)
    monkeypatch.setattr(settings_module, "settings_dir", lambda: folder)
    settings_module._default_values.cache_clear()
    yield folder
    settings_module._default_values.cache_clear()


def _set(path: Path, section: str, key: str, value) -> None:
    doc = yaml.safe_load(path.read_text())
    doc[section][key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_the_default_file_is_the_dataclass_default():
    assert AnalysisSettings() == AnalysisSettings.from_yaml() == AnalysisSettings.for_preset("tiny")
    s = AnalysisSettings(structure_max_frames=75)
    assert s.structure_max_frames == 75 and s.diffusion_beta_range == (0.9, 1.1)  # YAML lists → tuples
    assert s.digest() != AnalysisSettings().digest() and s.digest() == AnalysisSettings(structure_max_frames=75).digest()
    sections = AnalysisSettings.sections()
    assert set(sections) == {"species", "guard_and_blocks", "rdf_and_coordination", "contacts", "diffusion", "transport",
                             "green_kubo", "shell_dynamics", "adequacy"}


def test_a_preset_overlay_changes_only_what_it_names(params_copy):
    (params_copy / "paper.yaml").write_text("adequacy:\n  cn_max_rel_half_width: 0.1\n")
    paper, default = AnalysisSettings.for_preset("paper"), AnalysisSettings.for_preset("tiny")
    assert paper.cn_max_rel_half_width == 0.1 and default.cn_max_rel_half_width == 0.20
    assert paper.replace(cn_max_rel_half_width=0.20) == default


@pytest.mark.parametrize("text, message", [
    ("adequacy:\n  cn_max_rel_halfwidth: 0.1\n", "unknown analysis setting 'cn_max_rel_halfwidth'"),
    ("rdf_and_coordination:\n  cn_max_rel_half_width: 0.1\n", "belongs in section 'adequacy'"),
    ("adequacy:\n  cn_max_rel_half_width: tight\n", "has the wrong type"),
    ("guard_and_blocks:\n  n_blocks: 5\n", "four blocks"),
    ("- a list\n", "mapping of sections"),
])
def test_bad_settings_files_name_the_file_and_the_fix(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        AnalysisSettings.from_yaml(bad)
    assert "bad.yaml" in str(err.value)


def test_a_threshold_in_default_yaml_changes_registration_state_and_cache(params_copy, w_run):
    """Editing default.yaml: the registered thresholds change, the estimator's verdict flips (a zero CN
    tolerance cannot pass a CN whose blocks differ; an enormous one cannot fail it), and a results.json
    made with the other settings is not reused."""
    run = w_run
    rec = RunRecord(run)
    default = params_copy / "default.yaml"
    _set(default, "adequacy", "cn_max_rel_half_width", 1.0e9)
    loose = load_or_analyze_case(run, "W", guard_ps=5.0)
    assert loose["observables"][CN]["state"] == "C", loose["observables"][CN]["reason"]
    reg = [r for r in rec.registrations() if r["kind"] == "analysis_adequacy_and_stopping"]
    assert reg[-1]["definition"]["thresholds"]["cn_max_rel_half_width"] == 1.0e9
    assert load_or_analyze_case(run, "W", guard_ps=5.0)["settings_sha256"] == loose["settings_sha256"]
    n_events = len(rec.events())
    assert load_or_analyze_case(run, "W", guard_ps=5.0) == loose and len(rec.events()) == n_events  # cached

    _set(default, "adequacy", "cn_max_rel_half_width", 0.0)
    _set(default, "adequacy", "cn_abs_half_width_ok", 0.0)
    settings_module._default_values.cache_clear()
    strict = load_or_analyze_case(run, "W", guard_ps=5.0)
    assert strict["settings_sha256"] != loose["settings_sha256"]   # not the cached document
    assert strict["observables"][CN]["state"] == "SI"
    assert "block_precision" in strict["observables"][CN]["reason"] and "accepted <= 0% of |value|" in \
        strict["observables"][CN]["reason"]
    revised = [r for r in rec.registrations() if r["kind"] == "analysis_adequacy_and_stopping"][-1]
    assert revised["revises"] == reg[-1]["id"] and revised["definition"]["thresholds"]["cn_max_rel_half_width"] == 0.0
    assert rec.observable_states()["W"][CN]["state"] == "SI"  # the record follows the results in force
    # the results made under the first settings are kept beside the new ones
    assert strict["superseded_results"]


def test_every_estimator_receives_the_registered_values(water_nacl, tmp_path):
    """Unusual values for every setting an estimator takes: each call receives exactly the settings' value."""
    from mdbench.analysis import association, coordination, diffusion, onsager, rdf, thermo, viscosity

    s = AnalysisSettings(diffusion_beta_range=(0.85, 1.15), diffusion_min_decades=0.7, diffusion_max_lag_fraction=0.4,
                         diffusion_max_rel_half_width=0.45, onsager_fit_window_fraction=(0.06, 0.24),
                         onsager_beta_range=(0.75, 1.25), sigma_t_plus_max_rel_half_width=0.44,
                         viscosity_max_rel_half_width=0.43, viscosity_max_component_spread=0.42,
                         viscosity_plateau_rel_tol=0.031, viscosity_plateau_width_tau=4.1,
                         viscosity_plateau_start_tau=2.1, viscosity_plateau_min_width_fraction=0.021,
                         thermo_min_effective_samples=19.0, thermo_drift_sigma=3.1, cn_max_rel_half_width=0.24,
                         cn_abs_half_width_ok=0.049, rdf_block_first_min_tolerance_nm=0.051,
                         rdf_first_min_max_nm=0.59, association_fraction_max_half_width=0.11,
                         contact_cutoffs_nm={"CL:ion": 0.33}, contact_channels={"CL": ["ion"]},
                         block_trend_alpha=0.049, t_plus_max_abs_half_width=0.099, ionicity_max_abs_half_width=0.098)
    spies = {}

    def spy(module, name):
        real = getattr(module, name)
        calls = spies.setdefault(name, [])

        def wrapper(*args, **kwargs):
            calls.append(kwargs)
            return real(*args, **kwargs)
        return mock.patch.object(module, name, wrapper)

    patches = [spy(thermo, "thermo_analysis"), spy(rdf, "rdf_analysis"), spy(coordination, "coordination"),
               spy(association, "association"), spy(diffusion, "self_diffusion"), spy(onsager, "onsager_transport"),
               spy(viscosity, "green_kubo_viscosity")]
    for p in patches:
        p.start()
    try:
        doc = analyze_files(water_nacl["tpr"], water_nacl["xtc"], water_nacl["edr"], tmp_path / "o", guard_ps=5.0,
                            settings=s, figures=False)
    finally:
        for p in patches:
            p.stop()
    assert doc["settings"] == s.replace(guard_ps=5.0).to_dict()
    want = {
        "thermo_analysis": {"min_effective_samples": 19.0, "drift_sigma": 3.1, "n_blocks": 4, "guard_ps": 5.0},
        "rdf_analysis": {"first_min_max_nm": 0.59, "tolerance_nm": 0.051},
        "coordination": {"max_rel_half_width": 0.24, "abs_half_width_ok": 0.049, "trend_alpha": 0.049},
        "association": {"fraction_max_half_width": 0.11, "trend_alpha": 0.049},
        "self_diffusion": {"beta_range": (0.85, 1.15), "min_window_decades": 0.7, "max_lag_fraction": 0.4,
                           "max_relative_half_width": 0.45, "guard_ps": 5.0, "n_blocks": 4, "trend_alpha": 0.049},
        "onsager_transport": {"fit_window_fraction": (0.06, 0.24), "beta_range": (0.75, 1.25),
                              "max_relative_half_width": 0.44, "guard_ps": 5.0, "t_plus_max_abs_half_width": 0.099,
                              "ionicity_max_abs_half_width": 0.098, "trend_alpha": 0.049},
        "green_kubo_viscosity": {"max_relative_half_width": 0.43, "max_component_spread": 0.42, "guard_ps": 5.0,
                                 "trend_alpha": 0.049},
    }
    for name, expected in want.items():
        assert spies[name], f"{name} was never called"
        for call in spies[name]:
            assert {k: call.get(k) for k in expected} == expected, name
    rule = spies["green_kubo_viscosity"][0]["plateau_rule"]
    assert (rule.rel_tol, rule.width_tau, rule.start_tau, rule.min_width_fraction) == (0.031, 4.1, 2.1, 0.021)
    # the registered contact definition is the one used
    assert doc["association"]["CL"]["cutoff_nm"] == 0.33 and doc["association"]["CL"]["contact_channels"] == ["CL:ion"]
    assert registration_definitions(s)["analysis_contacts_clusters"]["contact_cutoffs_nm"] == {"CL:ion": 0.33}
