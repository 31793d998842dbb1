import json
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/unregistered-definition-change")
app = app_dir()
out = app / "output" / "finding.json"
regs = [json.loads(l) for l in (app / "run_record" / "registrations.jsonl").read_text().splitlines()
        if l.strip()]
res = read_json(app / "analysis" / "results.json")


def latest(rid):
    chain = [r for r in regs if r["id"] == rid]
    while True:
        later = [r for r in regs if r.get("revises") == chain[-1]["id"]
                 and (r["kind"], r["case"]) == (chain[-1]["kind"], chain[-1]["case"])]
        if not later:
            return chain[-1]
        chain.append(later[-1])


def leaves(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


diffs = []
for name, rid in res["registrations"].items():
    reg = latest(rid)
    a, b = leaves(reg["definition"]), leaves(res["definitions"][name])
    diffs += [(name, reg["id"], k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
assert len(diffs) == 1, diffs          # the task's own premise
name, rid, field, registered, used = diffs[0]
f = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/finding.json exists", weight=0.0)
g.check("definition", lambda: (f()["definition"] == name, f()["definition"]), f"the changed definition is {name}")
g.check("registration_id", lambda: (f()["registration_id"] == rid, f()["registration_id"]), f"registration in force {rid}")
g.check("field", lambda: (f()["field"] == field, f()["field"]), f"the changed field is {field}")
g.check("values", lambda: (f()["registered"] == registered and f()["used"] == used, [f()["registered"], f()["used"]]),
        f"registered {registered!r}, used {used!r}")
g.check("decoy_not_flagged", lambda: (f()["definition"] != "analysis_fitting_rules", f()["definition"]),
        "the registered revision of analysis_fitting_rules is not reported")
g.finish()
