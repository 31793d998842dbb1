import json, os
from pathlib import Path
import MDAnalysis as mda
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
box = app / "box"
u = mda.Universe(str(box / "topol.top"), str(box / "LHCE.gro"), topology_format="ITP")
counts = {}
for line in (box / "topol.top").read_text().split("[ molecules ]")[1].splitlines():
    code = line.split(";")[0].split()
    if len(code) == 2:
        counts[code[0]] = int(code[1])
charge = {m.resname: round(float(m.atoms.charges.sum()), 6) for m in u.residues}
edge = float(min(u.dimensions[:3])) / 10.0
vol_cm3 = float(u.dimensions[0] * u.dimensions[1] * u.dimensions[2]) * 1e-24
out = {"counts": counts, "molecule_charge_e": charge, "total_charge_e": round(float(u.atoms.charges.sum()), 6),
       "density_g_cm3": float(u.atoms.masses.sum() / 6.02214076e23 / vol_cm3), "min_edge_nm": edge,
       "max_cutoff_nm": edge / 2.0, "rc_1.2_ok": bool(2 * 1.2 + 0.1 <= edge + 1e-9)}
rec.step("Read the topology (with its includes) and the coordinates with MDAnalysis; charges and masses from the "
         "[ atoms ] sections, volume from the gro box.", call=("python", {"code": "mda.Universe(topol.top, LHCE.gro)"}),
         result=out)
rec.step(f"Neutral system of neutral solvents and +/-0.72 e ions; the {edge:.3f} nm box allows cut-offs up to "
         f"{edge / 2:.3f} nm, so the 1.0 nm cut-off of the protocol fits and 1.2 nm with a buffer does "
         f"{'' if out['rc_1.2_ok'] else 'not '}fit.")
(app / "output").mkdir(exist_ok=True)
(app / "output" / "box_audit.json").write_text(json.dumps(out, indent=2))
rec.save()
