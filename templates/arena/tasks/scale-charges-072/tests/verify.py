import re
from mdbench.arena.grading import Grader, app_dir

def parse_itp(path):
    """Return {molname: [(atom_line_fields...)]} and the list of non-[atoms] lines per molecule."""
    mols, cur, section, other = {}, None, None, {}
    for raw in open(path, encoding="utf-8"):
        line = raw.split(";")[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[] ").lower()
            continue
        if section == "moleculetype":
            cur = line.split()[0]
            mols[cur] = []
            other[cur] = []
        elif section == "atoms" and cur:
            mols[cur].append(line.split())
        elif cur:
            other[cur].append((section, " ".join(line.split())))
    return mols, other

g = Grader("mdbench/scale-charges-072")
app = app_dir()
out = app / "output" / "fsi_li_q072.itp"
orig, orig_other = parse_itp(app / "fsi_li.itp")
g.check("output_exists", out.is_file, "output/fsi_li_q072.itp exists", weight=0.0)
def load():
    return parse_itp(out)
def charges_scaled():
    new, _ = load()
    pairs = [(float(a[6]), float(b[6])) for m in orig for a, b in zip(orig[m], new[m], strict=True)]
    worst = max(abs(n - 0.72 * o) for o, n in pairs)
    return worst <= 5e-5, worst
g.check("charges_scaled", charges_scaled, "every charge equals 0.72 x the original (|err| <= 5e-5 e)")
def net_charges():
    new, _ = load()
    q = {m: round(sum(float(a[6]) for a in new[m]), 6) for m in new}
    ok = abs(q.get("LI", 9) - 0.72) < 1e-4 and abs(q.get("FSI", 9) + 0.72) < 1e-4
    return ok, q
g.check("molecule_charges", net_charges, "net charges are +0.72 (LI) and -0.72 (FSI) within 1e-4 e")
def unchanged():
    new, new_other = load()
    same_atoms = all([a[:6] + a[7:] for a in orig[m]] == [b[:6] + b[7:] for b in new[m]] for m in orig)
    return same_atoms and new_other == orig_other and list(new) == list(orig)
g.check("rest_unchanged", unchanged, "names, types, masses, order and bonds are unchanged")
def neutral():
    new, _ = load()
    counts, section = {}, None
    for raw in (app / "topol.top").read_text().splitlines():
        code = raw.split(";")[0].strip()
        if code.startswith("["):
            section = code.strip("[] ").lower()
        elif section == "molecules" and code:
            counts[code.split()[0]] = int(code.split()[1])
    total = sum(n * sum(float(a[6]) for a in new[m]) for m, n in counts.items() if m in new)
    return abs(total) < 1e-3, total
g.check("system_neutral", neutral, "the system of topol.top (20 LI + 20 FSI) is neutral within 1e-3 e")
g.finish()
