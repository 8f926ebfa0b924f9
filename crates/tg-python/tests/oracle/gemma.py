"""Sub-problems cut from the real two-device Gemma planning problems.

``tests/fixtures/planning/gemma-{6,128}-2dev.json`` are the problems the compiler builds
from the Gemma 3 270M e-graph for a CPU and a hypothetical accelerator (4x faster per
kernel, 16 GB/s and 5 us each way; see the fixtures' README). :func:`cut` takes a connected
piece of one: a seed class and the classes below it (breadth-first over the children of all
their nodes) up to a size, every node of those classes with its real options (times on both
devices), the real byte sizes, devices and links. Children outside the piece become sources
of the piece: a weight where the original class is a weight, an input otherwise (an
intermediate value computed before the piece, arriving on home). The roots are the piece's
classes that nothing in the piece reads (the seed always among them). Capacities are
clamped to the piece's total bytes (which changes no plan's feasibility).
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "planning"


@lru_cache(maxsize=None)
def _load(name: str) -> str:
    return (FIXTURES / name).read_text()


def load(name: str) -> dict:
    """A fixture problem as a dict (a fresh copy)."""
    return json.loads(_load(name))


def _space(p: dict) -> int:
    """Product over classes of their (node, option) choices: the brute force's structures."""
    ways: dict[int, int] = {}
    for n in p["nodes"]:
        ways[n["class"]] = ways.get(n["class"], 0) + (1 if "source" in n else len(n["options"]))
    out = 1
    for w in ways.values():
        out *= w
    return out


def cut(full: dict, rng: random.Random, size: int, max_space: int | None = None) -> dict | None:
    """A piece of ``full`` with ``size`` computed classes grown from a random seed class
    (None when the seed's piece is smaller, or its search space exceeds ``max_space``)."""
    nodes_of: dict[int, list[dict]] = {}
    for n in full["nodes"]:
        nodes_of.setdefault(n["class"], []).append(n)
    computed = [c for c, ns in nodes_of.items() if all("source" not in n for n in ns)]
    seed = rng.choice(computed)
    piece = [seed]
    inside = {seed}
    i = 0
    while i < len(piece) and len(piece) < size:
        c = piece[i]
        i += 1
        kids = [k for n in nodes_of[c] for k in n.get("children", [])]
        rng.shuffle(kids)
        for k in kids:
            if k not in inside and len(piece) < size and all("source" not in n for n in nodes_of[k]):
                inside.add(k)
                piece.append(k)
    if len(piece) < size:
        return None
    boundary = sorted({k for c in piece for n in nodes_of[c] for k in n.get("children", []) if k not in inside})
    ids = {c: i for i, c in enumerate(piece + boundary)}
    classes = [dict(full["classes"][c]) for c in piece + boundary]
    nodes = []
    for c in piece:
        for n in nodes_of[c]:
            nodes.append({"class": ids[c], "children": [ids[k] for k in n["children"]], "options": n["options"]})
    for b in boundary:
        weight = any(n.get("source") == "weight" for n in nodes_of[b])
        nodes.append({"class": ids[b], "source": "weight" if weight else "input"})
    read = {k for c in piece for n in nodes_of[c] for k in n.get("children", [])}
    roots = [ids[c] for c in piece if c not in read or c == seed]
    # A device holds at most one buffer per class, so capacities above the piece's total
    # bytes decide nothing; clamping them keeps CP-SAT's integers small (its domains stop
    # at 2^62, the CPU's arena is 2^61 - 1).
    total = sum(c["bytes"] for c in classes)
    devices = [{**d, "capacity": min(d["capacity"], total), "cache_budget": min(d.get("cache_budget", 0), total)}
               for d in full["devices"]]
    p = {"devices": devices, "home": full.get("home", 0), "links": full["links"], "classes": classes,
         "nodes": nodes, "roots": sorted(set(roots))}
    if max_space is not None and _space(p) > max_space:
        return None
    return p


def cuts(name: str, seed: int, count: int, sizes: tuple[int, int], max_space: int | None = None) -> list[dict]:
    """``count`` pieces of fixture ``name`` with ``sizes[0]..=sizes[1]`` computed classes,
    drawn from ``random.Random(seed)`` (deterministic)."""
    full = load(name)
    rng = random.Random(seed)
    out = []
    for _ in range(count * 200):
        if len(out) == count:
            break
        p = cut(full, rng, rng.randint(*sizes), max_space)
        if p is not None:
            out.append(p)
    return out
