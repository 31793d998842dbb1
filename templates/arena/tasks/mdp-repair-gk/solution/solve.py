import os, re
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
text = (app / "prod.mdp").read_text()
text = re.sub(r"(?m)^(comm-grps\s*=).*$", r"\1 System", text)
text = re.sub(r"(?m)^(nstenergy\s*=).*$", r"\1 10", text)
text = re.sub(r"(?m)^(nstcalcenergy\s*=).*$", r"\1 10", text)
(app / "output").mkdir(exist_ok=True)
(app / "output" / "prod.mdp").write_text(text)
(app / "output" / "changes.md").write_text(
    "- comm-grps: per-species COM removal (LI FSI DMC TTE) removes relative drift between species and "
    "biases interdiffusion/conductivity; use one group, System.\n"
    "- nstenergy 5000 -> 10 (every 20 fs) so the pressure tensor is sampled finely enough for the "
    "Green-Kubo autocorrelation; nstcalcenergy 100 -> 10 so energies are computed at every output step.\n")

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("comm-grps listed every species: removing the centre-of-mass motion of each species separately "
         "suppresses their relative motion and biases interdiffusion and conductivity; set comm-grps = System.",
         call=("python", {"code": "re.sub comm-grps"}))
rec.step("nstenergy = 5000 (10 ps) samples the pressure tensor far more coarsely than the stress autocorrelation "
         "decays (ps and below); the Green-Kubo integrand needs <= 20 fs, so nstenergy = nstcalcenergy = 10 (20 fs). "
         "Only these three lines changed; every other parameter is kept.")
rec.save()
