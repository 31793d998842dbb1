import csv, json
import numpy as np
rng = np.random.default_rng(23)
n_frames, n_fsi, n_li = 50, 12, 12
rows = []
for f in range(n_frames):
    for a in range(n_fsi):
        k = rng.choice([0, 1, 2, 3], p=[0.3, 0.4, 0.25, 0.05])
        for li in rng.choice(n_li, size=k, replace=False):
            # a Li bound to an anion may touch one or two of its oxygens (bidentate): duplicate rows
            for o in rng.choice(["O1", "O2", "O3", "O4"], size=rng.integers(1, 3), replace=False):
                rows.append((f, a, int(li), o))
rng.shuffle(rows)
with open("contacts.csv", "w", newline="") as fh:
    w = csv.writer(fh); w.writerow(["frame", "fsi_id", "li_id", "o_name"]); w.writerows(rows)
json.dump({"n_frames": n_frames, "n_fsi": n_fsi, "n_li": n_li, "fsi_ids": "0..n_fsi-1", "frames": "0..n_frames-1"},
          open("system.json", "w"), indent=2)
