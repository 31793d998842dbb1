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
