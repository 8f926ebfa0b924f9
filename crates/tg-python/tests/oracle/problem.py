"""The planning problem of ``docs/planner.md``: parsing, validation, a random generator.

:func:`parse_problem` turns the JSON problem (a ``dict`` or a JSON string) into a
:class:`Problem` and rejects malformed input with a :class:`ProblemError` naming the field.
:func:`random_problem` draws seeded random problems for the oracle tests.

Readings of the definition taken here (where the text leaves room):

- ``home`` defaults to 0, an option's ``alias`` to ``false``, a class's ``cacheable`` to
  ``false``; every other field is required.
- Every class has at least one node (an e-class is never empty); a class may mix source and
  computed nodes (a constant-folded value next to the kernels that compute it).
- A computed node may have no children (``iota``, a constant fill): its kernel is ready at 0.
- Roots are distinct classes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

SOURCE_KINDS = ("input", "weight")


class ProblemError(ValueError):
    """A malformed problem: the message names the offending field."""


@dataclass(frozen=True)
class Option:
    """One way to run a computed node."""

    kernel: str
    device: int
    time: int
    alias: bool


@dataclass(frozen=True)
class Node:
    """An e-node: a source (``source`` set, no children, no options) or a computed node."""

    cls: int
    source: str | None
    children: tuple[int, ...]
    options: tuple[Option, ...]


@dataclass
class Problem:
    """A validated planning problem (ids are list indices, as in the JSON)."""

    device_names: list[str]
    capacity: list[int]
    cache_budget: list[int]
    home: int
    links: dict[tuple[int, int], tuple[int, int]]  # (from, to) -> (latency, bytes_per_us)
    bytes: list[int]
    cacheable: list[bool]
    nodes: list[Node]
    roots: list[int]
    nodes_of: list[list[int]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def num_devices(self) -> int:
        return len(self.capacity)

    @property
    def num_classes(self) -> int:
        return len(self.bytes)

    def copy_time(self, cls: int, src: int, dst: int) -> int | None:
        """``latency + ceil(bytes * 1000 / bytes_per_us)``, or None without a link."""
        link = self.links.get((src, dst))
        if link is None:
            return None
        latency, bpu = link
        return latency + -(-self.bytes[cls] * 1000 // bpu)

    def to_json(self) -> str:
        """The problem as JSON (the input it was parsed from)."""
        return json.dumps(self.raw, sort_keys=True)


def _int(v: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProblemError(f"{what}: expected an integer, got {v!r}")
    if lo is not None and v < lo:
        raise ProblemError(f"{what}: {v} is below {lo}")
    if hi is not None and v > hi:
        raise ProblemError(f"{what}: {v} is above {hi}")
    return v


def _bool(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise ProblemError(f"{what}: expected true or false, got {v!r}")
    return v


def _list(v: Any, what: str) -> list:
    if not isinstance(v, list):
        raise ProblemError(f"{what}: expected a list, got {type(v).__name__}")
    return v


def _obj(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise ProblemError(f"{what}: expected an object, got {type(v).__name__}")
    return v


def _get(obj: dict, key: str, what: str) -> Any:
    if key not in obj:
        raise ProblemError(f"{what}: missing field {key!r}")
    return obj[key]


def parse_problem(src: dict | str) -> Problem:
    """Parse and validate a JSON problem (``docs/planner.md``); raises :class:`ProblemError`."""
    if isinstance(src, str):
        try:
            src = json.loads(src)
        except json.JSONDecodeError as e:
            raise ProblemError(f"not JSON: {e}") from e
    top = _obj(src, "problem")

    devs = _list(_get(top, "devices", "problem"), "devices")
    if not devs:
        raise ProblemError("devices: at least one device is needed")
    names, cap, budget = [], [], []
    for i, d in enumerate(devs):
        w = f"devices[{i}]"
        d = _obj(d, w)
        name = d.get("name", f"dev{i}")
        if not isinstance(name, str):
            raise ProblemError(f"{w}.name: expected a string")
        names.append(name)
        c = _int(_get(d, "capacity", w), f"{w}.capacity", 0)
        b = _int(_get(d, "cache_budget", w), f"{w}.cache_budget", 0, c)
        cap.append(c)
        budget.append(b)
    nd = len(devs)
    home = _int(top.get("home", 0), "home", 0, nd - 1)

    links: dict[tuple[int, int], tuple[int, int]] = {}
    for i, l in enumerate(_list(top.get("links", []), "links")):
        w = f"links[{i}]"
        l = _obj(l, w)
        a = _int(_get(l, "from", w), f"{w}.from", 0, nd - 1)
        b = _int(_get(l, "to", w), f"{w}.to", 0, nd - 1)
        if a == b:
            raise ProblemError(f"{w}: a link joins two different devices (from = to = {a})")
        if (a, b) in links:
            raise ProblemError(f"{w}: a second link {a} -> {b}")
        lat = _int(_get(l, "latency", w), f"{w}.latency", 0)
        bpu = _int(_get(l, "bytes_per_us", w), f"{w}.bytes_per_us", 1)
        links[(a, b)] = (lat, bpu)

    classes = _list(_get(top, "classes", "problem"), "classes")
    nbytes, cacheable = [], []
    for i, c in enumerate(classes):
        w = f"classes[{i}]"
        c = _obj(c, w)
        nbytes.append(_int(_get(c, "bytes", w), f"{w}.bytes", 1))
        cacheable.append(_bool(c.get("cacheable", False), f"{w}.cacheable"))
    nc = len(classes)

    nodes: list[Node] = []
    nodes_of: list[list[int]] = [[] for _ in range(nc)]
    for i, n in enumerate(_list(_get(top, "nodes", "problem"), "nodes")):
        w = f"nodes[{i}]"
        n = _obj(n, w)
        cls = _int(_get(n, "class", w), f"{w}.class", 0, nc - 1)
        nodes_of[cls].append(i)
        if "source" in n:
            kind = n["source"]
            if kind not in SOURCE_KINDS:
                raise ProblemError(f"{w}.source: expected one of {SOURCE_KINDS}, got {kind!r}")
            if n.get("children") or n.get("options"):
                raise ProblemError(f"{w}: a source has no children and no options")
            nodes.append(Node(cls, kind, (), ()))
            continue
        children = tuple(
            _int(k, f"{w}.children[{j}]", 0, nc - 1)
            for j, k in enumerate(_list(n.get("children", []), f"{w}.children"))
        )
        opts_raw = _list(_get(n, "options", w), f"{w}.options")
        if not opts_raw:
            raise ProblemError(f"{w}.options: a computed node needs at least one option")
        opts = []
        for j, o in enumerate(opts_raw):
            wo = f"{w}.options[{j}]"
            o = _obj(o, wo)
            kernel = o.get("kernel", "")
            if not isinstance(kernel, str):
                raise ProblemError(f"{wo}.kernel: expected a string")
            dev = _int(_get(o, "device", wo), f"{wo}.device", 0, nd - 1)
            alias = _bool(o.get("alias", False), f"{wo}.alias")
            t = _int(_get(o, "time", wo), f"{wo}.time", 0)
            if alias:
                if len(children) != 1:
                    raise ProblemError(f"{wo}: an alias option needs exactly one child, the node has {len(children)}")
                if t != 0:
                    raise ProblemError(f"{wo}: an alias option takes time 0, got {t}")
            elif t < 1:
                raise ProblemError(f"{wo}.time: a kernel takes at least 1, got {t}")
            opts.append(Option(kernel, dev, t, alias))
        nodes.append(Node(cls, None, children, tuple(opts)))
    for c in range(nc):
        if not nodes_of[c]:
            raise ProblemError(f"classes[{c}]: no node computes this class")

    roots = [_int(r, f"roots[{j}]", 0, nc - 1) for j, r in enumerate(_list(_get(top, "roots", "problem"), "roots"))]
    if len(set(roots)) != len(roots):
        raise ProblemError(f"roots: repeated class in {roots}")
    return Problem(names, cap, budget, home, links, nbytes, cacheable, nodes, roots, nodes_of, top)


# ----------------------------------------------------------------------------------------
# Random problems
# ----------------------------------------------------------------------------------------


def _rng(rng: random.Random | int) -> random.Random:
    return rng if isinstance(rng, random.Random) else random.Random(rng)


def _choice_weighted(rng: random.Random, pairs: list[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in pairs], weights=[w for _, w in pairs])[0]


def _links(rng: random.Random, nd: int, dense: bool) -> list[dict]:
    out = []
    pairs = [(a, b) for a in range(nd) for b in range(nd) if a != b]
    for a, b in pairs:
        if rng.random() >= (0.95 if dense else 0.75):
            continue  # no link this way
        out.append({
            "from": a, "to": b,
            "latency": _choice_weighted(rng, [(0, 3), (1, 3), (2, 2), (3, 1), (5, 1)]),
            # copy of 1..8 bytes: ceil(b * 1000 / bpu) in 1..8 (3000 and 1500 exercise the rounding)
            "bytes_per_us": rng.choice([1000, 1500, 2000, 3000, 4000, 8000]),
        })
    return out


def _input_free(classes_nodes: list[list[dict]]) -> list[bool]:
    """Classes that depend on no input: least fixpoint of "has an input node, or a node
    reading an input-dependent class" (conservative for generated e-graphs, whose
    alternative nodes need not agree)."""
    nc = len(classes_nodes)
    dep = [False] * nc
    changed = True
    while changed:
        changed = False
        for c in range(nc):
            if not dep[c] and any(n.get("source") == "input" or any(dep[k] for k in n.get("children", []))
                                  for n in classes_nodes[c]):
                dep[c] = True
                changed = True
    return [not d for d in dep]


def _capacities(rng: random.Random, nd: int, bytes_: list[int], classes_nodes: list[list[dict]],
                levels: list[tuple[str, float]]) -> tuple[list[int], list[int]]:
    foot = 1
    for c, ns in enumerate(classes_nodes):
        for n in ns:
            if "source" in n:
                continue
            foot = max(foot, bytes_[c] + sum(bytes_[k] for k in set(n["children"])))
    total = sum(bytes_) + 1
    caps, budgets = [], []
    for _ in range(nd):
        level = _choice_weighted(rng, levels)
        if level == "tiny":
            cap = rng.randint(0, foot)
        elif level == "tight":
            cap = rng.randint(foot, max(foot, (foot + total) // 2))
        elif level == "snug":  # a few kernels' worth
            cap = rng.randint(foot, 3 * foot)
        elif level == "roomy":
            cap = rng.randint(foot, 2 * total)
        else:
            cap = 4 * total + 16
        b = _choice_weighted(rng, [(0, 0.3), (rng.randint(0, cap), 0.4), (cap, 0.3)])
        caps.append(cap)
        budgets.append(b)
    return caps, budgets


def _squeeze(rng: random.Random, p: dict) -> None:
    """Make memory bind: solve with ample capacities (brute force), then set one device's
    capacity just at or below the peak the optimal plan has there."""
    from . import brute  # the generator only uses it to pick capacities

    ample = json.loads(json.dumps(p))
    for d in ample["devices"]:
        d["capacity"] = 10**6
    r = brute.solve(ample)
    if r["status"] != "optimal":
        return
    used: dict[int, list[tuple[int, int | None, int]]] = {}
    for b in r["plan"]["buffers"]:
        used.setdefault(b["device"], []).append((b["start"], b["end"], b["bytes"]))
    if not used:
        return
    d = rng.choice(sorted(used))
    bufs = used[d]
    peak = max(sum(n for s, e, n in bufs if s <= t and (e is None or t < e)) for t, _, _ in bufs)
    cap = max(0, peak - _choice_weighted(rng, [(0, 0.25), (1, 0.45), (2, 0.2), (4, 0.1)]))
    dev = p["devices"][d]
    dev["capacity"] = cap
    dev["cache_budget"] = min(dev["cache_budget"], cap)


def _search_space(nc: int, classes_nodes: list[list[dict]], cacheable: list[bool], nd: int) -> int:
    space = 1
    for c in range(nc):
        ways = sum(1 if "source" in n else len(n["options"]) for n in classes_nodes[c])
        if cacheable[c]:
            ways += nd
        space *= ways
    return space


def random_problem(rng: random.Random | int, size: str = "small") -> dict:
    """A random problem as a JSON-ready dict (seeded: ``rng`` is a ``random.Random`` or a seed).

    ``small`` (brute force): 2-8 classes (1-2 sources), 1-2 devices (home sometimes 1),
    1-2 nodes per computed class with different children (shared sub-expressions, sometimes
    cycles, now and then a constant-folded weight node), 1-3 options per computed node
    (kernels of time 1-20, faster on one device; views), sizes 1-8 bytes, weight transforms
    that are cacheable, links (sometimes one way or none) with copies of 1-10 ns, capacities
    from tiny (infeasible) to ample, and in about a third of the cases one device's capacity
    set at or just below the peak of the unconstrained optimum (so memory binds). The product
    of the per-class choices is capped at 4000 so that exhaustive enumeration stays fast
    (a few ms on average).

    ``medium`` (CP-SAT): 30-80 nodes over 1-3 devices, sizes 1-64 bytes, capacities mostly
    snug to ample.
    """
    rng = _rng(rng)
    if size == "small":
        while True:
            p = _random_small(rng)
            nc = len(p["classes"])
            cn = [[n for n in p["nodes"] if n["class"] == c] for c in range(nc)]
            space = _search_space(nc, cn, [c["cacheable"] for c in p["classes"]], len(p["devices"]))
            if space <= 4000:
                if rng.random() < 0.35:
                    _squeeze(rng, p)
                return p
    if size == "medium":
        return _random_medium(rng)
    raise ValueError(f"unknown size {size!r} (small or medium)")


def _draw_children(rng: random.Random, c: int, n_before: int, nc: int, back_edges: float) -> list[int]:
    k = _choice_weighted(rng, [(0, 0.06), (1, 0.5), (2, 0.34), (3, 0.1)])
    kids = []
    for _ in range(k):
        if n_before == 0 or rng.random() < back_edges:
            kids.append(rng.randrange(c, nc))  # itself or a later class: a cycle in the e-graph
        elif kids and rng.random() < 0.1:
            kids.append(kids[-1])  # a repeated child
        else:
            # prefer recent classes (deeper graphs), but reach back for shared sub-expressions
            lo = max(0, n_before - 4) if rng.random() < 0.7 else 0
            kids.append(rng.randrange(lo, n_before))
    return kids


def _draw_options(rng: random.Random, nd: int, nkids: int, fast_dev: int, alias_p: float) -> list[dict]:
    nopt = _choice_weighted(rng, [(1, 0.4), (2, 0.4), (3, 0.2)])
    opts = []
    base = rng.randint(1, 12)
    for _ in range(nopt):
        d = rng.randrange(nd)
        if nkids == 1 and rng.random() < alias_p:
            opts.append({"kernel": "view", "device": d, "time": 0, "alias": True})
            continue
        t = base if rng.random() < 0.5 else rng.randint(1, 20)
        if d == fast_dev and nd > 1:
            t = max(1, t // rng.choice([1, 2, 3]))  # the accelerator is often faster
        opt = {"kernel": rng.choice(["k", "mm", "add", "exp"]), "device": d, "time": t}
        if rng.random() < 0.3:
            opt["alias"] = False
        opts.append(opt)
    return opts


SMALL_LEVELS = [("tiny", 0.07), ("tight", 0.38), ("roomy", 0.25), ("ample", 0.3)]
MEDIUM_LEVELS = [("tiny", 0.03), ("snug", 0.3), ("roomy", 0.3), ("ample", 0.37)]


def _assemble(rng: random.Random, nd: int, home: int, links: list[dict], bytes_: list[int],
              classes_nodes: list[list[dict]], roots: list[int], cache_p: float,
              levels: list[tuple[str, float]]) -> dict:
    nc = len(bytes_)
    free = _input_free(classes_nodes)
    cacheable = [free[c] and rng.random() < cache_p for c in range(nc)]
    caps, budgets = _capacities(rng, nd, bytes_, classes_nodes, levels)
    devices = [{"name": f"d{d}", "capacity": caps[d], "cache_budget": budgets[d]} for d in range(nd)]
    nodes = []
    order = [(c, n) for c in range(nc) for n in classes_nodes[c]]
    rng.shuffle(order)  # node ids are not grouped by class
    for c, n in order:
        nodes.append({"class": c, **n})
    p = {
        "devices": devices,
        "links": links,
        "classes": [{"bytes": bytes_[c], "cacheable": cacheable[c]} for c in range(nc)],
        "nodes": nodes,
        "roots": roots,
    }
    if home != 0 or rng.random() < 0.5:
        p["home"] = home
    return p


def _random_small(rng: random.Random) -> dict:
    nd = 1 if rng.random() < 0.25 else 2
    home = 1 if nd == 2 and rng.random() < 0.15 else 0
    links = _links(rng, nd, dense=rng.random() < 0.7)
    nsrc = rng.randint(1, 2)
    nc = nsrc + _choice_weighted(rng, [(1, 0.05), (2, 0.1), (3, 0.2), (4, 0.25), (5, 0.25), (6, 0.15)])
    fast = rng.randrange(nd)
    bytes_ = [rng.randint(1, 8) for _ in range(nc)]
    classes_nodes: list[list[dict]] = []
    back = 0.04 if rng.random() < 0.7 else 0.2
    unread: list[int] = []  # classes no first node reads yet: read them, so most are needed
    weights: list[int] = []  # classes computed from weights only (cacheable candidates)
    for c in range(nc):
        if c < nsrc:
            if c == 0:
                kind = "input" if rng.random() < 0.85 else rng.choice(SOURCE_KINDS)
            else:
                kind = "weight" if rng.random() < 0.8 else "input"
            classes_nodes.append([{"source": kind}])
            unread.append(c)
            if kind == "weight":
                weights.append(c)
            continue
        nn = 1 if rng.random() < 0.6 else 2
        ns = []
        transform = c < nc - 1 and weights and rng.random() < 0.3  # a weight transform
        for j in range(nn):
            if transform:
                kids = [rng.choice(weights) for _ in range(rng.randint(1, 2))]
            else:
                kids = _draw_children(rng, c, c, nc, back if j > 0 or rng.random() < 0.3 else 0.0)
            if j == 0:
                if c == nc - 1:
                    kids = (kids + unread[-3:])[-3:] if unread else kids
                elif unread and rng.random() < 0.8 and not transform:
                    pick = unread[-1] if rng.random() < 0.6 else rng.choice(unread)
                    kids = [pick] + kids[1:] if kids else [pick]
                for k in kids:
                    if k in unread:
                        unread.remove(k)
            opts = _draw_options(rng, nd, len(kids), fast, alias_p=0.12)
            if transform:
                for o in opts:
                    if not o.get("alias"):
                        o["time"] += rng.randint(0, 10)  # worth caching
            ns.append({"children": kids, "options": opts})
        if rng.random() < 0.04:
            ns.append({"source": "weight"})  # a constant-folded value next to its kernels
        classes_nodes.append(ns)
        unread.append(c)
        if transform:
            weights.append(c)
    roots = [nc - 1]
    if rng.random() < 0.3:
        roots.append(rng.randrange(nc - 1))
    rng.shuffle(roots)
    return _assemble(rng, nd, home, links, bytes_, classes_nodes, roots, cache_p=0.6, levels=SMALL_LEVELS)


def _random_medium(rng: random.Random) -> dict:
    nd = rng.choice([1, 2, 2, 3])
    home = 0 if rng.random() < 0.85 else rng.randrange(nd)
    links = _links(rng, nd, dense=True)
    target_nodes = rng.randint(30, 80)
    nsrc = rng.randint(2, 6)
    fast = rng.randrange(nd)
    classes_nodes: list[list[dict]] = []
    bytes_: list[int] = []
    count = 0
    c = 0
    while count < target_nodes:
        bytes_.append(rng.choice([rng.randint(1, 8), rng.randint(8, 64)]))
        if c < nsrc:
            classes_nodes.append([{"source": rng.choice(SOURCE_KINDS)}])
            count += 1
            c += 1
            continue
        nn = _choice_weighted(rng, [(1, 0.55), (2, 0.35), (3, 0.1)])
        ns = []
        for j in range(nn):
            kids = _draw_children(rng, c, c, c + 1, 0.05 if j > 0 else 0.0)
            ns.append({"children": kids, "options": _draw_options(rng, nd, len(kids), fast, alias_p=0.2)})
        classes_nodes.append(ns)
        count += nn
        c += 1
    nc = len(classes_nodes)
    # roots: the last class and a few others with no reader (graph outputs)
    read = {k for ns in classes_nodes for n in ns for k in n.get("children", [])}
    sinks = [x for x in range(nsrc, nc - 1) if x not in read]
    rng.shuffle(sinks)
    roots = [nc - 1] + sinks[: rng.randint(0, 3)]
    return _assemble(rng, nd, home, links, bytes_, classes_nodes, roots, cache_p=0.4, levels=MEDIUM_LEVELS)


# ----------------------------------------------------------------------------------------
# Hand-made problems with hand-computed optima (the oracles and the planner must agree)
# ----------------------------------------------------------------------------------------


def _dev(cap: int, budget: int = 0, name: str = "d") -> dict:
    return {"name": name, "capacity": cap, "cache_budget": budget}


def _k(dev: int, time: int, kernel: str = "k") -> dict:
    return {"kernel": kernel, "device": dev, "time": time}


def _view(dev: int) -> dict:
    return {"kernel": "view", "device": dev, "time": 0, "alias": True}


def hand_cases() -> list[tuple[str, dict, tuple[str, int | None, int | None]]]:
    """``(name, problem, (status, makespan, peak_bytes))`` with optima worked out by hand
    (the reasoning is in the comments)."""
    cases = []
    # A view of the input is free: no step, no buffer.
    cases.append(("alias_of_input", {
        "devices": [_dev(4096, 1024, "cpu")],
        "classes": [{"bytes": 64, "cacheable": False}, {"bytes": 64, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 1, "children": [0], "options": [_k(0, 7, "exp"), _view(0)]}],
        "roots": [1]}, ("optimal", 0, 0)))
    # Without the view: the kernel [0,7), its output is a root on home, live [0, M=7).
    cases.append(("single_kernel", {
        "devices": [_dev(4096, 1024, "cpu")],
        "classes": [{"bytes": 64, "cacheable": False}, {"bytes": 64, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 1, "children": [0], "options": [_k(0, 7, "exp")]}],
        "roots": [1]}, ("optimal", 7, 64)))
    # Round trip: copy 0->1 of 4 bytes = 1 + ceil(4000/2000) = 3 [0,3); kernel on 1 [3,8);
    # copy 1->0 of 3 bytes = 2 + ceil(3000/1000) = 5 [8,13); M = 13.
    # dev1: copy of c0 [0,8) 4 B + output c1 [3,13) 3 B -> 7; home: copy of c1 [8,13) 3 B.
    rt = {
        "devices": [_dev(100, 0, "cpu"), _dev(100, 0, "gpu")],
        "links": [{"from": 0, "to": 1, "latency": 1, "bytes_per_us": 2000},
                  {"from": 1, "to": 0, "latency": 2, "bytes_per_us": 1000}],
        "classes": [{"bytes": 4, "cacheable": False}, {"bytes": 3, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"}, {"class": 1, "children": [0], "options": [_k(1, 5)]}],
        "roots": [1]}
    cases.append(("round_trip", rt, ("optimal", 13, 10)))
    # The same with the devices swapped and home = 1.
    rt1 = json.loads(json.dumps(rt))
    rt1["devices"].reverse()
    rt1["home"] = 1
    for l in rt1["links"]:
        l["from"], l["to"] = 1 - l["from"], 1 - l["to"]
    rt1["nodes"][1]["options"] = [_k(0, 5)]
    cases.append(("round_trip_home_1", rt1, ("optimal", 13, 10)))
    # No link back: infeasible.
    nl = json.loads(json.dumps(rt))
    nl["links"] = nl["links"][:1]
    cases.append(("no_link_back", nl, ("infeasible", None, None)))
    # Order matters. dev0 runs c1 and c2 (2 each); c3 on dev1 (10) reads c1 (copy 1);
    # c3 back home (copy 1). c1 first: c1 [0,2), copy [2,3), c2 [2,4), c3 [3,13),
    # back [13,14): M = 14 (c2 first gives 16). Home: c1 [0,3) 2 B, c2 (a root) [2,14) 3 B,
    # copy of c3 [13,14) 4 B -> max 3 + 4 = 7 at 13; dev1: copy of c1 [2,13) 2 B,
    # c3 [3,14) 4 B -> 6. P = 13.
    cases.append(("order_matters", {
        "devices": [_dev(100), _dev(100)],
        "links": [{"from": 0, "to": 1, "latency": 0, "bytes_per_us": 2000},
                  {"from": 1, "to": 0, "latency": 0, "bytes_per_us": 4000}],
        "classes": [{"bytes": 1, "cacheable": False}, {"bytes": 2, "cacheable": False},
                    {"bytes": 3, "cacheable": False}, {"bytes": 4, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 1, "children": [0], "options": [_k(0, 2)]},
                  {"class": 2, "children": [0], "options": [_k(0, 2)]},
                  {"class": 3, "children": [1], "options": [_k(1, 10)]}],
        "roots": [3, 2]}, ("optimal", 14, 13)))
    # Keep: c1 = transform of a weight (10), c3 = k(c1, input) (3). With a budget of 6 the
    # transform is kept: M = 3, P = 6 kept + c3 [0,3) 2 B = 8.
    keep = {
        "devices": [_dev(100, 6)],
        "classes": [{"bytes": 5, "cacheable": True}, {"bytes": 6, "cacheable": True},
                    {"bytes": 1, "cacheable": False}, {"bytes": 2, "cacheable": False}],
        "nodes": [{"class": 0, "source": "weight"}, {"class": 1, "children": [0], "options": [_k(0, 10)]},
                  {"class": 2, "source": "input"}, {"class": 3, "children": [1, 2], "options": [_k(0, 3)]}],
        "roots": [3]}
    cases.append(("keep_transform", keep, ("optimal", 3, 8)))
    # Budget 5: the transform does not fit (keeping the weight gains nothing):
    # c1 [0,10), c3 [10,13): M = 13; c1 live [0,13) 6 B, c3 [10,13) 2 B -> P = 8.
    keep5 = json.loads(json.dumps(keep))
    keep5["devices"][0]["cache_budget"] = 5
    cases.append(("keep_over_budget", keep5, ("optimal", 13, 8)))
    # Capacity 7: c1 (6) and c3 (2) are live together at 10 -> infeasible without the keep.
    keep_cap = json.loads(json.dumps(keep5))
    keep_cap["devices"][0]["capacity"] = 7
    cases.append(("capacity_infeasible", keep_cap, ("infeasible", None, None)))
    # Cycles only: c1's nodes read c1 itself or c2, whose only node reads c1.
    cases.append(("cycles_only", {
        "devices": [_dev(100)],
        "classes": [{"bytes": 1, "cacheable": False}, {"bytes": 1, "cacheable": False}, {"bytes": 1, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 1, "children": [1], "options": [_k(0, 1)]},
                  {"class": 1, "children": [2, 0], "options": [_k(0, 1)]},
                  {"class": 2, "children": [1], "options": [_k(0, 1)]}],
        "roots": [1]}, ("infeasible", None, None)))
    # Peak breaks the tie: c1 by its own kernel (5, 3 B) or as a view of c2 (5, 8 B).
    cases.append(("peak_tie_break", {
        "devices": [_dev(100)],
        "classes": [{"bytes": 1, "cacheable": False}, {"bytes": 3, "cacheable": False}, {"bytes": 8, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 1, "children": [2], "options": [_view(0)]},
                  {"class": 1, "children": [0], "options": [_k(0, 5)]},
                  {"class": 2, "children": [0], "options": [_k(0, 5)]}],
        "roots": [1]}, ("optimal", 5, 3)))
    # A view on the other device: copy c0 0->1 (1 + 1 = 2) [0,2), c1 = view of it on dev1,
    # copy c1 1->0 (0 + 4 = 4) [2,6): M = 6. dev1: copy of c0 [0,6) 4 B; home: [2,6) 4 B.
    cases.append(("view_on_other_device", {
        "devices": [_dev(100), _dev(100)],
        "links": [{"from": 0, "to": 1, "latency": 1, "bytes_per_us": 4000},
                  {"from": 1, "to": 0, "latency": 0, "bytes_per_us": 1000}],
        "classes": [{"bytes": 4, "cacheable": False}, {"bytes": 4, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"}, {"class": 1, "children": [0], "options": [_view(1)]}],
        "roots": [1]}, ("optimal", 6, 8)))
    # A root that is a source: M = 0, nothing to do.
    cases.append(("root_is_source", {
        "devices": [_dev(0)],
        "classes": [{"bytes": 4, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"}],
        "roots": [0]}, ("optimal", 0, 0)))
    # Kept on the other device: a weight transform kept on dev1 (budget 8), read by a
    # kernel on dev1 (4) whose 2 B result is copied home (1 + 1 = 2): M = 6,
    # P = 8 kept + dev1 output [0,6) 2 B + home copy [4,6) 2 B = 12. (Computing the transform
    # instead costs 9 + 4 + 2.)
    cases.append(("kept_on_accelerator", {
        "devices": [_dev(100, 0), _dev(20, 8)],
        "links": [{"from": 0, "to": 1, "latency": 0, "bytes_per_us": 1000},
                  {"from": 1, "to": 0, "latency": 1, "bytes_per_us": 2000}],
        "classes": [{"bytes": 8, "cacheable": True}, {"bytes": 8, "cacheable": True}, {"bytes": 2, "cacheable": False}],
        "nodes": [{"class": 0, "source": "weight"},
                  {"class": 1, "children": [0], "options": [_k(1, 9)]},
                  {"class": 2, "children": [1], "options": [_k(1, 4)]}],
        "roots": [2]}, ("optimal", 6, 12)))
    # Starts are not free. c4 (6 B) on home feeds c1 on dev1 (copy 1, kernel 10, copy back 1);
    # c2 (5 B) on home is read by the root c3 together with c1. Order (c4, c2, c3): c4 [0,1),
    # copy [1,2), c2 [1,2), c1 [2,12), back [12,13), c3 [13,14): M = 14 (c2 first: 15).
    # c2 must start as soon as its order allows, so it is live [1,14) next to c4 [0,2):
    # home peak 11 (delaying c2 to 12 would need only 8, which the definition does not
    # allow); dev1: copy of c4 [1,12) 6 B + c1 [2,13) 2 B = 8. P = 19.
    es = {
        "devices": [_dev(11), _dev(100)],
        "links": [{"from": 0, "to": 1, "latency": 0, "bytes_per_us": 6000},
                  {"from": 1, "to": 0, "latency": 0, "bytes_per_us": 2000}],
        "classes": [{"bytes": 1, "cacheable": False}, {"bytes": 2, "cacheable": False},
                    {"bytes": 5, "cacheable": False}, {"bytes": 1, "cacheable": False},
                    {"bytes": 6, "cacheable": False}],
        "nodes": [{"class": 0, "source": "input"},
                  {"class": 4, "children": [0], "options": [_k(0, 1)]},
                  {"class": 1, "children": [4], "options": [_k(1, 10)]},
                  {"class": 2, "children": [0], "options": [_k(0, 1)]},
                  {"class": 3, "children": [1, 2], "options": [_k(0, 1)]}],
        "roots": [3]}
    cases.append(("earliest_starts", es, ("optimal", 14, 19)))
    # Capacity 10 on home: infeasible (with free start times it would fit).
    es10 = json.loads(json.dumps(es))
    es10["devices"][0]["capacity"] = 10
    cases.append(("earliest_starts_infeasible", es10, ("infeasible", None, None)))
    # A weight read on the other device is uploaded once, not copied: c1 = k(weight c0) on
    # dev0 (20) or dev1 (4), links 1 byte/ns. On dev1: kernel [0,4) (the weight is there at
    # 0), copy back [4,6): M = 6 (a copy of the weight would add 8). P = dev1: upload 8
    # (persistent) + output [0,6) 2; home: copy [4,6) 2 -> 12.
    wu = {
        "devices": [_dev(100, 0, "cpu"), _dev(100, 0, "gpu")],
        "links": [{"from": 0, "to": 1, "latency": 0, "bytes_per_us": 1000},
                  {"from": 1, "to": 0, "latency": 0, "bytes_per_us": 1000}],
        "classes": [{"bytes": 8, "cacheable": False}, {"bytes": 2, "cacheable": False}],
        "nodes": [{"class": 0, "source": "weight"},
                  {"class": 1, "children": [0], "options": [_k(0, 20), _k(1, 4)]}],
        "roots": [1]}
    cases.append(("weight_uploaded", wu, ("optimal", 6, 12)))
    # The upload counts against the capacity: dev1 with 9 bytes cannot hold the weight (8)
    # and the output (2), so dev0 computes it: M = 20, P = the root's output 2.
    wu9 = json.loads(json.dumps(wu))
    wu9["devices"][1]["capacity"] = 9
    cases.append(("weight_upload_over_capacity", wu9, ("optimal", 20, 2)))
    return cases
