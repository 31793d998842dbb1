import json, os
from pathlib import Path
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
regs = [json.loads(l) for l in (app / "run_record" / "registrations.jsonl").read_text().splitlines() if l.strip()]
res = json.loads((app / "analysis" / "results.json").read_text())
by_id = {r["id"]: r for r in regs}


def in_force(rid):
    """Follow revisions: the last registration of the same kind and case that revises this chain."""
    cur = by_id[rid]
    while True:
        nxt = [r for r in regs if r.get("revises") == cur["id"] and r["kind"] == cur["kind"] and r["case"] == cur["case"]]
        if not nxt:
            return cur
        cur = nxt[-1]


def diff(a, b, path=()):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            yield from diff(a.get(k), b.get(k), path + (k,))
    elif a != b:
        yield ".".join(path), a, b


found = []
for name, rid in res["registrations"].items():
    reg = in_force(rid)
    for field, registered, used in diff(reg["definition"], res["definitions"][name]):
        found.append({"definition": name, "registration_id": reg["id"], "field": field, "registered": registered,
                      "used": used})
rec.step("Compared every definition the analysis used with the registration in force (revision chains followed) "
         "by a recursive diff of all fields.", call=("python", {"code": "diff(registration, used) per definition"}),
         result=found)
decoys = [r["id"] for r in regs if r.get("revises")]
rec.step(f"Registered revisions ({decoys}) are not changes; exactly one unregistered difference remains. It changes "
         "results without the preregistration a reader relies on.")
assert len(found) == 1, found
out = dict(found[0], explanation="the analysis used a value the registration in force does not contain, and no "
                                 "registration revises it: an undeclared change of the analysis definition")
(app / "output").mkdir(exist_ok=True)
(app / "output" / "finding.json").write_text(json.dumps(out, indent=2))
rec.save()
