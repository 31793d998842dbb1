import json, os
from pathlib import Path
import pandas as pd
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
s = json.loads((app / "system.json").read_text())
df = pd.read_csv(app / "contacts.csv")
n = df.groupby(["frame", "fsi_id"])["li_id"].nunique()
full = n.reindex(pd.MultiIndex.from_product([range(s["n_frames"]), range(s["n_fsi"])]), fill_value=0)
N = len(full)
out = {"SSIP": float((full == 0).sum() / N), "CIP": float((full == 1).sum() / N),
       "AGG": float((full >= 2).sum() / N), "n_samples": N}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "populations.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Counted distinct Li per (frame, FSI) with groupby().nunique(), so a bidentate FSI listed twice for "
         "the same Li counts once.", call=("python", {"code": "df.groupby(['frame', 'fsi_id'])['li_id'].nunique()"}),
         result=n.value_counts().sort_index().to_dict())
rec.step("Reindexed over every (frame, anion) pair: FSI anions without any contact row are SSIP and stay in the "
         f"denominator (n_samples = {s['n_frames']} frames x {s['n_fsi']} anions = {N}).", result=out)
rec.save()
