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
