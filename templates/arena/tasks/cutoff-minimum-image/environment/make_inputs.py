from pathlib import Path
specs = {"run_a": ((3.2, 3.2, 3.2), {"rvdw": 1.2, "rcoulomb": 1.2, "rlist": 1.2}),
         "run_b": ((3.0, 2.3, 3.0), {"rvdw": 1.0, "rcoulomb": 1.2, "rlist": 1.0}),
         "run_c": ((2.6, 2.6, 2.6), {"rvdw": 1.3, "rcoulomb": 1.0, "rlist": 1.0})}
for run, (box, cut) in specs.items():
    d = Path("runs") / run; d.mkdir(parents=True, exist_ok=True)
    (d / "conf.gro").write_text("box\n    1\n    1LI      LI    1   0.100   0.100   0.100\n"
                                 + "".join(f"{x:10.5f}" for x in box) + "\n")
    mdp = ["integrator = md", "dt = 0.002", "cutoff-scheme = Verlet", "coulombtype = PME"]
    mdp += [f"{k:<10s}= {v}" for k, v in cut.items()]
    (d / "md.mdp").write_text("\n".join(mdp) + "\n")
