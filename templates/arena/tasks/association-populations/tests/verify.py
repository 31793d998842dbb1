import csv
from collections import defaultdict
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/association-populations")
app = app_dir()
out = app / "output" / "populations.json"
s = read_json(app / "system.json")
bound = defaultdict(set)
with open(app / "contacts.csv") as fh:
    for row in csv.DictReader(fh):
        bound[(int(row["frame"]), int(row["fsi_id"]))].add(int(row["li_id"]))
N = s["n_frames"] * s["n_fsi"]
counts = [len(bound.get((f, a), ())) for f in range(s["n_frames"]) for a in range(s["n_fsi"])]
want = {"SSIP": sum(c == 0 for c in counts) / N, "CIP": sum(c == 1 for c in counts) / N, "AGG": sum(c >= 2 for c in counts) / N}
g.check("output_exists", out.is_file, "output/populations.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("n_samples", lambda: res()["n_samples"] == N, "n_samples counts every (frame, anion), free anions included")
for k, v in want.items():
    g.check(k, lambda k=k, v=v: (abs(res()[k] - v) < 1e-6, res()[k]), f"{k} fraction = {v:.4f}")
g.finish()
