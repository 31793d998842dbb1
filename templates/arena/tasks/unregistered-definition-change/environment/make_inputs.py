import copy, json, os
import numpy as np

rng = np.random.default_rng(int(os.environ.get("ARENA_SEED", "7")))
regs = [json.loads(l) for l in open("run_record/registrations.jsonl") if l.strip()]
res = json.load(open("analysis/results.json"))
# a legitimately registered revision (the decoy): diffusion fit window widened, registered as R0010
base = next(r for r in regs if r["kind"] == "analysis_fitting_rules")
rev = copy.deepcopy(base)
rev.update({"id": f"R{len(regs) + 1:04d}", "revises": base["id"], "event_id": max(r["event_id"] for r in regs) + 1,
            "time_utc": regs[-1]["time_utc"], "evidence": "beta window widened after the pilot run, before any production analysis"})
rev["definition"]["diffusion"]["beta_range"] = [0.85, 1.15]
regs.append(rev)
res["definitions"]["analysis_fitting_rules"] = copy.deepcopy(rev["definition"])
res["registrations"]["analysis_fitting_rules"] = rev["id"]
# the unregistered change
plants = [("analysis_contacts_clusters", ["contact_cutoffs_nm", "FSI:O"], 0.35),
          ("analysis_guard_and_blocks", ["n_blocks"], 5),
          ("analysis_rdf_coordination", ["rdf_bin_nm"], 0.01),
          ("analysis_adequacy_and_stopping", ["thresholds", "association_fraction_max_half_width"], 0.2)]
name, path, value = plants[int(rng.integers(0, len(plants)))]
node = res["definitions"][name]
for key in path[:-1]:
    node = node[key]
node[path[-1]] = value
with open("run_record/registrations.jsonl", "w") as fh:
    for r in regs:
        fh.write(json.dumps(r, sort_keys=True) + "\n")
json.dump(res, open("analysis/results.json", "w"), indent=1)
