#!/usr/bin/env python3
"""Converts a one-device planning problem (docs/planner.md JSON) to an extraction-gym
(egraph-serialize) file, as tg-planner's one-device reduction builds its extraction graph
(`extraction_graph` in crates/tg-planner/src/single.rs): a class per planner class, a node
per planner node costing its cheapest option's time (sources, without options, cost 0)
with the same child classes, the problem's roots. Classes are `c<i>`, nodes `n<i>`; a
child names the first node of its class, which in this format stands for the class.

Usage: planner_to_gym.py PROBLEM.json OUT.json
"""

import json
import sys


def convert(problem):
    classes = problem["classes"]
    nodes = problem["nodes"]
    first = {}
    for i, n in enumerate(nodes):
        first.setdefault(n["class"], i)
    missing = [c for c in range(len(classes)) if c not in first]
    if missing:
        raise ValueError(f"classes without nodes: {missing[:10]}")
    out = {}
    for i, n in enumerate(nodes):
        times = [o["time"] for o in n.get("options", [])]
        out[f"n{i}"] = {
            "op": n.get("source") or (n["options"][0]["kernel"] if n.get("options") else "node"),
            "children": [f"n{first[c]}" for c in n["children"]],
            "eclass": f"c{n['class']}",
            "cost": float(min(times)) if times else 0.0,
        }
    return {"nodes": out, "root_eclasses": [f"c{r}" for r in problem["roots"]]}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        problem = json.load(f)
    if len(problem.get("devices", [])) != 1:
        sys.exit("expected a one-device problem")
    with open(sys.argv[2], "w") as f:
        json.dump(convert(problem), f)


if __name__ == "__main__":
    main()
