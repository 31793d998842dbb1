import json

from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/planted-record-error")
app = app_dir()
out = app / "output" / "finding.json"
# the generator's own record of what it planted (root-only in the image), not a search of the record
truth = json.loads((app / ".grader" / "planted.json").read_text())
f, rid, field = truth["file"], str(truth["record_id"]), truth["field"]
g.check("output_exists", out.is_file, "output/finding.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("file", lambda: (res()["file"] == f, res()["file"]), f"file = {f}")
g.check("record_id", lambda: (str(res()["record_id"]) == rid, res()["record_id"]), f"record_id = {rid}")
g.check("field", lambda: (res()["field"] == field, res()["field"]), f"field = {field}")
g.finish()
