import os, re
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
out = app / "output"; out.mkdir(parents=True, exist_ok=True)
lines, section = [], None
for raw in (app / "fsi_li.itp").read_text().splitlines():
    code = raw.split(";")[0].strip()
    if code.startswith("["):
        section = code.strip("[] ").lower()
    elif section == "atoms" and code:
        f = code.split()
        f[6] = f"{float(f[6]) * 0.72:.4f}"
        raw = "{:>5} {:<6} {:>4} {:>4} {:>5} {:>5} {:>9} {:>9}".format(*f)
    lines.append(raw)
(out / "fsi_li_q072.itp").write_text("\n".join(lines) + "\n")

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
top = (app / "topol.top").read_text()
rec.step("Read topol.top: the [ molecules ] section has as many LI as FSI, so charges of +0.72 e and -0.72 e keep "
         "the system neutral.", call=("python", {"code": "read topol.top"}), result=top.split("[ molecules ]")[-1].strip())
rec.step("Edited only the charge column of the [ atoms ] lines of LI and FSI (x 0.72, 4 decimals); every other "
         "line is copied unchanged.")
rec.save()
