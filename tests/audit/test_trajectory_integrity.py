"""Issue 45, class 3: a production trajectory that is not one continuous simulation lowers Sim4 (and E5).

Built from the tiny real run the audit tests share: its production trajectory rewritten the way a fabricating
agent leaves it — the second part repeating the coordinates of the first with the times continued, or a splice
of the first part of one trajectory onto a second trajectory from other velocities, or frames dropped — with
the inventory's checksums updated and the production still recorded valid. Every instance names the frames
and lowers Sim4 to 0 (E5 to ½: the record calls it valid). A second honest production (other velocities)
and the honest run itself leave every simulation item as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import _runbuilder as rb
from _audit_helpers import saeo
from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.episode.spec_defects import read_frames, write_frames
from mdbench.record import RunRecord

pytestmark = pytest.mark.gromacs


def fabricate(run: Path, frames: list) -> None:
    xtc = run / "cases" / rb.CASE / "prod" / "prod.xtc"
    write_frames(xtc, frames)
    RunRecord(run).add_artifact(f"cases/{rb.CASE}/prod/prod.xtc")


def split_index(n: int, purpose: str) -> int:
    return int(n * (0.35 + 0.3 * (seed_for(purpose) % 1000) / 1000.0))


@pytest.fixture(scope="module")
def second_production(built, tmp_path_factory) -> Path:
    """A second honest production of the same system from other velocities (its prod folder)."""
    run, _bundle = built
    d = tmp_path_factory.mktemp("second") / "prod"
    shutil.copytree(run / "cases" / rb.CASE / "prod", d)
    for f in ("prod.tpr", "prod.xtc", "prod.edr", "prod.log", "prod.cpt", "prod.gro"):
        (d / f).unlink(missing_ok=True)
    mdp = (d / "prod.mdp").read_text().replace("continuation = yes", "continuation = no")
    mdp = mdp.replace("gen-vel = no", f"gen-vel = yes\ngen-temp = 298.15\ngen-seed = {seed_for('audit45/second')}")
    (d / "prod.mdp").write_text(mdp)
    eq = run / "cases" / rb.CASE / "equil"
    rb.gmx("grompp", "-f", "prod.mdp", "-c", str(eq / "npt.gro"), "-p", str(run / "cases" / rb.CASE / "setup/topol.top"),
           "-o", "prod.tpr", cwd=d)
    rb.gmx("mdrun", "-nt", "1", "-notunepme", "-deffnm", "prod", cwd=d)
    return d


def sim_items(out: Path) -> dict[str, float]:
    return {k: v["final"] for k, v in saeo(out)["items"].items() if k.startswith("Sim")}


def test_second_half_repeating_the_first_lowers_sim4_naming_frames(built, run_copy, bundle, tmp_path):
    frames = read_frames(run_copy / "cases" / rb.CASE / "prod" / "prod.xtc")
    k = split_index(len(frames), "audit45/repeat")
    fake = frames[:k] + [(frames[i - k][0], frames[i - k][1], frames[i][2], frames[i][3]) for i in range(k, len(frames))]
    fabricate(run_copy, fake)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    rep = [f for f in res.findings if f.code == "trajectory_frames_repeated"]
    assert rep and rep[0].item == "Sim4"
    assert f"frame {k} (t = {frames[k][3]:.3f} ps) = frame 0 " in rep[0].message
    assert sim_items(tmp_path / "a")["Sim4"] == 0.0
    assert saeo(tmp_path / "a")["items"]["E5"]["final"] <= 0.5
    assert any(f.code == "trajectory_frames_repeated" and f.item == "E5" for f in res.findings)


def test_splice_of_two_trajectories_lowers_sim4_naming_the_jump(built, run_copy, bundle, second_production, tmp_path):
    frames = read_frames(run_copy / "cases" / rb.CASE / "prod" / "prod.xtc")
    other = read_frames(second_production / "prod.xtc")
    k = split_index(len(frames), "audit45/splice")
    fake = frames[:k] + [(other[i][0], other[i][1], frames[i][2], frames[i][3]) for i in range(k, len(frames))]
    fabricate(run_copy, fake)
    res, doc = None, None
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=True)  # the reanalysis' centres are compared
    jump = [f for f in res.findings if f.code == "trajectory_splice"]
    assert jump, [f.code for f in res.findings]
    assert f"from frame {k - 1} to {k} " in jump[0].message
    doc = saeo(tmp_path / "a")
    assert doc["items"]["Sim4"]["final"] == 0.0 and doc["items"]["E5"]["final"] <= 0.5


def test_dropped_frames_are_irregular_times(run_copy, bundle, tmp_path):
    frames = read_frames(run_copy / "cases" / rb.CASE / "prod" / "prod.xtc")
    k = split_index(len(frames), "audit45/drop")
    fabricate(run_copy, frames[:k] + frames[k + 3:])
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    irr = [f for f in res.findings if f.code == "trajectory_times_irregular"]
    assert irr and f"frames {k} (t = {frames[k + 3][3]:.3f} ps)" in irr[0].message
    assert sim_items(tmp_path / "a")["Sim4"] == 0.0


def test_honest_runs_leave_every_simulation_item(built, run_copy, bundle, second_production, tmp_path):
    run, _ = built
    audit_run(run, bundle, tmp_path / "base", reanalysis=False)
    base = sim_items(tmp_path / "base")
    prod = run_copy / "cases" / rb.CASE / "prod"
    for ext in ("tpr", "xtc", "edr", "log", "cpt", "mdp"):
        shutil.copy(second_production / f"prod.{ext}", prod / f"prod.{ext}")
        RunRecord(run_copy).add_artifact(f"cases/{rb.CASE}/prod/prod.{ext}")
    res = audit_run(run_copy, bundle, tmp_path / "second", reanalysis=False)
    assert not [f for f in res.findings if f.code.startswith("trajectory_")]
    assert sim_items(tmp_path / "second") == base
    res0 = audit_run(run, bundle, tmp_path / "honest_re", reanalysis=True)
    assert not [f for f in res0.findings if f.code.startswith("trajectory_")]


def test_frames_whose_step_numbers_are_not_their_times(run_copy, bundle, tmp_path):
    """Copied frames whose times were continued but whose step numbers were not: the headers contradict the
    run input's dt."""
    frames = read_frames(run_copy / "cases" / rb.CASE / "prod" / "prod.xtc")
    k = split_index(len(frames), "audit45/steps")
    fabricate(run_copy, frames[:k] + [(frames[i][0], frames[i][1], frames[i - k][2], frames[i][3])
                                      for i in range(k, len(frames))])
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    irr = [f for f in res.findings if f.code == "trajectory_times_irregular"]
    assert irr and "not their step numbers" in irr[0].message and f"frames {k} (t = " in irr[0].message
    assert sim_items(tmp_path / "a")["Sim4"] == 0.0


def test_long_trajectories_stay_bounded_and_exact_copies_are_still_found():
    """Past MAX_PAIR_FRAMES frames the pair search hashes positions (exact copies, shifted by box vectors, are
    found); the kept sample shrinks with the frame count (a hostile trajectory of millions of frames)."""
    from mdbench.audit import simulation
    from mdbench.audit import trajectory_integrity as ti

    rng = np.random.default_rng(seed_for("audit45/long"))
    n = ti.MAX_PAIR_FRAMES + 500
    x = np.cumsum(rng.normal(0.0, 0.05, (n, 16, 3)), axis=0)
    box = np.full((n, 3), 4.0)
    assert ti.repeated_pairs(x, box, 0.005) == []
    x[n - 50:] = x[100:150] + 4.0            # 50 frames copied, every centre shifted by one box vector
    assert ti.repeated_pairs(x, box, 0.005)[0] == (100, n - 50)
    assert len(ti.sampled_atoms(5000, 400)) == simulation.N_COMPARED
    assert len(ti.sampled_atoms(5000, 10**7)) == ti.SCREEN_CENTRES


def _every_close_pair(x: np.ndarray, box: np.ndarray, threshold_nm: float) -> list[tuple[int, int]]:
    """The search's definition, pair by pair: every (earlier, later) pair within twice the threshold on the
    screen centres and within the threshold on all compared centres (rms distance, each difference taken to
    its minimum image in the later frame's box)."""
    from mdbench.audit.simulation import SCREEN_CENTRES

    screen = np.linspace(0, x.shape[1] - 1, min(SCREEN_CENTRES, x.shape[1])).astype(int)

    def rms(i: int, j: int, idx: np.ndarray | slice) -> float:
        d = x[i, idx] - x[j, idx]
        d = d - box[j] * np.round(d / box[j])
        return float(np.sqrt(np.mean(np.sum(d * d, axis=-1))))

    return [(i, j) for j in range(1, x.shape[0]) for i in range(j)
            if rms(i, j, screen) < 2 * threshold_nm and rms(i, j, slice(None)) < threshold_nm]


def test_the_narrowed_pair_search_finds_every_close_pair_and_only_those():
    """The repeated-frame search narrows the pairs one coordinate at a time before its screen: on random
    walks (a box that breathes as under a barostat, copies shifted by box vectors, near-copies at and around
    the threshold) it returns exactly the close pairs, in order of the later frame, as comparing every pair
    does."""
    from mdbench.audit import trajectory_integrity as ti

    rng = np.random.default_rng(seed_for("audit45/pairs"))
    found_some = 0
    for trial in range(12):
        n_frames, n_centres, edge = int(rng.integers(20, 160)), int(rng.integers(8, 40)), float(rng.uniform(1.5, 4.0))
        x = np.cumsum(rng.normal(0.0, rng.uniform(0.01, 0.08), (n_frames, n_centres, 3)), axis=0)
        x += rng.uniform(0.0, edge, (1, n_centres, 3))
        box = edge * (1 + 0.01 * np.sin(np.arange(n_frames) / 7.0))[:, None] * np.ones((1, 3))
        threshold = float(rng.uniform(2e-3, 1.2e-2))
        m = int(rng.integers(1, n_frames // 4))
        a, b = int(rng.integers(0, n_frames // 2 - m)), int(rng.integers(n_frames // 2, n_frames - m))
        # copies m frames later, each centre moved by a vector of the later frame's box, with noise whose rms is
        # none, half, about, or twice the threshold
        noise = threshold * (0.0, 0.5, 0.9, 1.1, 2.0)[trial % 5] / np.sqrt(3.0)
        shift = box[b:b + m, None, :] * rng.integers(-1, 2, (m, n_centres, 3))
        x[b:b + m] = x[a:a + m] + rng.normal(0.0, 1.0, (m, n_centres, 3)) * noise + shift
        want = _every_close_pair(x, box, threshold)
        assert ti.repeated_pairs(x, box, threshold, max_pairs=10**6) == want
        assert ti.repeated_pairs(x, box, threshold) == want[:20]
        found_some += bool(want)
    assert found_some >= 3   # the planted copies are found, not only the absence of pairs
