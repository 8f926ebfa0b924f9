"""Brute-force oracle: every decision of ``docs/planner.md`` enumerated, for small problems.

:func:`solve` returns the lexicographic optimum ``(makespan, peak_bytes)`` over all plans,
with one optimal plan, in the result format of ``docs/planner.md`` (``status`` is
``optimal`` or ``infeasible``).

What is enumerated, literally as the definition states it:

1. ``keep(c)`` in ``{none} ∪ D`` for every cacheable class; kept bytes per device within
   the cache budget.
2. ``sel(c)`` for every needed, non-kept class (roots are needed; the children of a
   selected node are needed), each needed set generated once; the selected graph (edges to
   the children that are not kept) must be acyclic.
3. one option per selected computed node, hence ``loc(c)``.
4. the implied copies: one per (class, device it is read on other than its location),
   infeasible without a link; a weight read on a device other than home is not copied but
   uploaded once (a persistent buffer there, like a kept one, outside the cache budget).
5. the order: for every device and link, every permutation of its steps that is a linear
   extension of the precedence order (a permutation that puts a step before one of its
   transitive predecessors on the same resource deadlocks at once); every combination over
   the resources; a combination whose order-plus-precedence graph has a cycle deadlocks and
   is discarded. Starts are then ``max(ready, end(prev))``, computed in topological order.
6. offsets: exact packing, see :func:`pack`.

Lifetimes, makespan and peak follow the definition (see :func:`_evaluate`).

Safe pruning only (every cut keeps at least one lexicographically optimal plan):

- keeping a class that is not needed only adds kept bytes (it changes no step, no
  lifetime, and kept buffers only take memory), so such keeps are skipped: the same plan
  without the keep is at least as good and is enumerated too;
- per structure (decisions 1-4), ``LB_M`` = max(critical path with unlimited resources,
  total step time on any one device or link) is a lower bound on the makespan of every
  order, and ``LB_P`` = Σ_d (persistent bytes on d (kept, uploaded weights) + the largest set of transient buffers on d
  that are live together in every order: the operands and the output of one kernel step,
  or all the root buffers on home, which all end at the makespan) is a lower bound on the
  peak. Structures are visited by increasing ``(LB_M, LB_P)`` and skipped when
  ``(LB_M, LB_P)`` is not lexicographically below the incumbent; a structure where kept
  bytes plus such a set exceed the capacity of a device has no feasible order at all;
- an order's lifetimes are computed only when its makespan is not above the incumbent's,
  and it is packed only when its ``(M, P)`` is below the incumbent and its peak on every
  device fits the capacity left by the kept buffers (a necessary condition).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .problem import Problem, parse_problem

Step = tuple  # ("k", class) kernel step, ("c", class, from, to) copy step
PERSISTENT = ("kept", "weight")  # buffers live during the whole run
Buf = tuple[int, int]  # (class, device): a class has at most one buffer per device


@dataclass
class Structure:
    """Decisions 1-4 (keep, choice, option, copies) and what follows from them."""

    keep: dict[int, int]
    sel: dict[int, int]  # class -> node, for every needed non-kept class
    opt: dict[int, int]  # class -> option index, for every selected computed node
    loc: dict[int, int]  # class -> device, for every needed class
    steps: list[Step]
    dur: dict[Step, int]
    res: dict[Step, tuple]  # resource: ("d", device) or ("l", from, to)
    preds: dict[Step, set[Step]]
    root_prod: list[Step | None]  # the step whose end makes each root available on home
    buffers: dict[Buf, tuple[str, Step | None]]  # kind ("output"/"copy"/"kept"/"weight"), writer
    readers: dict[Buf, list[Step]]
    root_bufs: set[Buf]
    persistent_bytes: list[int]  # per device: kept buffers and weight uploads
    lb_m: int = 0
    lb_p: int = 0


def _needed_selections(p: Problem, keep: dict[int, int]):
    """Every (sel, needed) with sel defined on exactly the needed non-kept classes."""
    sel: dict[int, int] = {}
    needed: set[int] = set(p.roots)

    def rec():
        todo = [c for c in needed if c not in keep and c not in sel]
        if not todo:
            yield dict(sel), frozenset(needed)
            return
        c = min(todo)
        for n in p.nodes_of[c]:
            added = [k for k in set(p.nodes[n].children) if k not in needed]
            sel[c] = n
            needed.update(added)
            yield from rec()
            needed.difference_update(added)
            del sel[c]

    yield from rec()


def _acyclic(p: Problem, sel: dict[int, int], keep: dict[int, int]) -> bool:
    state: dict[int, int] = {}  # 1 on the stack, 2 done

    def visit(c: int) -> bool:
        state[c] = 1
        for k in p.nodes[sel[c]].children:
            if k in keep:
                continue
            s = state.get(k, 0)
            if s == 1 or (s == 0 and not visit(k)):
                return False
        state[c] = 2
        return True

    return all(state.get(c, 0) == 2 or visit(c) for c in sel)


def _build(p: Problem, keep: dict[int, int], sel: dict[int, int], opt: dict[int, int], needed) -> Structure | None:
    """Decisions 3-4 and the steps, precedences and buffers they imply; None if a copy has no link."""
    loc: dict[int, int] = {}
    for c in needed:
        if c in keep:
            loc[c] = keep[c]
        elif c in opt:
            loc[c] = p.nodes[sel[c]].options[opt[c]].device
        else:
            loc[c] = p.home  # a source
    read: dict[int, set[int]] = {c: set() for c in needed}
    for c, n in sel.items():
        if c in opt:
            d = p.nodes[n].options[opt[c]].device
            for k in p.nodes[n].children:
                read[k].add(d)
    for r in p.roots:
        read[r].add(p.home)

    weight = {c for c in needed if c not in keep and p.nodes[sel[c]].source == "weight"}
    steps: list[Step] = []
    dur: dict[Step, int] = {}
    res: dict[Step, tuple] = {}
    for c in sorted(opt):
        o = p.nodes[sel[c]].options[opt[c]]
        if not o.alias:
            s = ("k", c)
            steps.append(s)
            dur[s] = o.time
            res[s] = ("d", o.device)
    uploads = [(c, d) for c in sorted(weight) for d in sorted(read[c] - {loc[c]})]
    for c in sorted(needed - weight):
        for d in sorted(read[c] - {loc[c]}):
            t = p.copy_time(c, loc[c], d)
            if t is None:
                return None
            s = ("c", c, loc[c], d)
            steps.append(s)
            dur[s] = t
            res[s] = ("l", loc[c], d)

    def producer(x: int, d: int) -> Step | None:
        """The step whose end makes x available on d (None: available at 0)."""
        if loc[x] != d:
            return None if x in weight else ("c", x, loc[x], d)
        if x in keep or x not in opt:
            return None  # kept, or a source on home
        o = p.nodes[sel[x]].options[opt[x]]
        if o.alias:
            return producer(p.nodes[sel[x]].children[0], d)
        return ("k", x)

    def uses(x: int, d: int) -> Buf | None:
        """The buffer that x's value on d uses (None: a source on home)."""
        if loc[x] != d or x in keep:
            return (x, d)
        if x not in opt:
            return None
        o = p.nodes[sel[x]].options[opt[x]]
        if o.alias:
            return uses(p.nodes[sel[x]].children[0], d)
        return (x, d)

    preds: dict[Step, set[Step]] = {s: set() for s in steps}
    buffers: dict[Buf, tuple[str, Step | None]] = {}
    readers: dict[Buf, list[Step]] = {}
    for c, d in keep.items():
        buffers[(c, d)] = ("kept", None)
    for c, d in uploads:
        buffers[(c, d)] = ("weight", None)
    for s in steps:
        if s[0] == "k":
            c = s[1]
            d = res[s][1]
            buffers[(c, d)] = ("output", s)
            operands = [(k, d) for k in set(p.nodes[sel[c]].children)]
        else:
            _, c, a, b = s
            buffers[(c, b)] = ("copy", s)
            operands = [(c, a)]
        for x, d in operands:
            q = producer(x, d)
            if q is not None:
                preds[s].add(q)
            u = uses(x, d)
            if u is not None:
                readers.setdefault(u, []).append(s)
    root_prod = [producer(r, p.home) for r in p.roots]
    root_bufs = {u for r in p.roots if (u := uses(r, p.home)) is not None}
    persistent = [0] * p.num_devices
    for c, d in [*keep.items(), *uploads]:
        persistent[d] += p.bytes[c]
    return Structure(keep, sel, opt, loc, steps, dur, res, preds, root_prod, buffers, readers, root_bufs, persistent)


def _bounds(p: Problem, st: Structure) -> bool:
    """Set st.lb_m and st.lb_p; False when no order of st can fit in memory."""
    end: dict[Step, int] = {}

    def est_end(s: Step) -> int:
        if s not in end:
            end[s] = max((est_end(q) for q in st.preds[s]), default=0) + st.dur[s]
        return end[s]

    lb_m = max((est_end(q) if q is not None else 0 for q in st.root_prod), default=0)
    load: dict[tuple, int] = {}
    for s in st.steps:
        load[st.res[s]] = load.get(st.res[s], 0) + st.dur[s]
    lb_m = max([lb_m, *load.values()])

    together = [0] * p.num_devices  # bytes live together in every order, per device
    for buf, (kind, _) in st.buffers.items():
        if kind not in PERSISTENT:
            together[buf[1]] = max(together[buf[1]], p.bytes[buf[0]])
    for s in st.steps:
        if s[0] == "k":
            d = st.res[s][1]
            bufs = {(s[1], d)} | {b for b, rs in st.readers.items() if s in rs and st.buffers[b][0] not in PERSISTENT}
            together[d] = max(together[d], sum(p.bytes[b[0]] for b in bufs))
    rb = [b for b in st.root_bufs if st.buffers[b][0] not in PERSISTENT]
    together[p.home] = max(together[p.home], sum(p.bytes[b[0]] for b in rb))
    for d in range(p.num_devices):
        if st.persistent_bytes[d] + together[d] > p.capacity[d]:
            return False
    st.lb_m = lb_m
    st.lb_p = sum(st.persistent_bytes) + sum(together)
    return True


def structures(p: Problem, prune: bool = True):
    """Every structure (decisions 1-4) with a link for each copy (and, with ``prune``,
    memory for each step and no keep of a class that is not needed)."""
    cacheable = [c for c in range(p.num_classes) if p.cacheable[c]]
    devs = list(range(p.num_devices))
    for ks in itertools.product(*[[None, *devs] for _ in cacheable]):
        keep = {c: d for c, d in zip(cacheable, ks) if d is not None}
        kb = [0] * p.num_devices
        for c, d in keep.items():
            kb[d] += p.bytes[c]
        if any(kb[d] > p.cache_budget[d] for d in devs):
            continue
        for sel, needed in _needed_selections(p, keep):
            if prune and any(c not in needed for c in keep):
                continue  # dominated: the same plan without this keep is no worse
            if not _acyclic(p, sel, keep):
                continue
            computed = [c for c in sorted(sel) if p.nodes[sel[c]].source is None]
            for os in itertools.product(*[range(len(p.nodes[sel[c]].options)) for c in computed]):
                st = _build(p, keep, sel, dict(zip(computed, os)), needed)
                if st is not None and (_bounds(p, st) or not prune):
                    yield st


def _linear_extensions(items: list[Step], before: dict[Step, set[Step]]):
    """Permutations of items in which no item comes after one of its successors."""
    out: list[Step] = []
    placed: set[Step] = set()

    def rec():
        if len(out) == len(items):
            yield tuple(out)
            return
        for s in items:
            if s not in placed and all(q in placed for q in before[s] if q in items_set):
                out.append(s)
                placed.add(s)
                yield from rec()
                placed.discard(s)
                out.pop()

    items_set = set(items)
    yield from rec()


def _orders(st: Structure):
    """Every deadlock-free combination of per-resource orders, with its start times."""
    # transitive predecessors
    anc: dict[Step, set[Step]] = {}

    def ancestors(s: Step) -> set[Step]:
        if s not in anc:
            a: set[Step] = set()
            for q in st.preds[s]:
                a.add(q)
                a |= ancestors(q)
            anc[s] = a
        return anc[s]

    for s in st.steps:
        ancestors(s)
    by_res: dict[tuple, list[Step]] = {}
    for s in st.steps:
        by_res.setdefault(st.res[s], []).append(s)
    resources = sorted(by_res)
    per_res = [list(_linear_extensions(by_res[r], anc)) for r in resources]
    for combo in itertools.product(*per_res):
        prev: dict[Step, Step | None] = {}
        for seq in combo:
            for i, s in enumerate(seq):
                prev[s] = seq[i - 1] if i > 0 else None
        start = _earliest_starts(st, prev)
        if start is not None:
            yield combo, start


def _earliest_starts(st: Structure, prev: dict[Step, Step | None]) -> dict[Step, int] | None:
    """start(s) = max(ready(s), end(prev(s))) in topological order; None on a deadlock."""
    deps = {s: set(st.preds[s]) | ({prev[s]} if prev[s] is not None else set()) for s in st.steps}
    succ: dict[Step, list[Step]] = {s: [] for s in st.steps}
    for s, ds in deps.items():
        for q in ds:
            succ[q].append(s)
    indeg = {s: len(ds) for s, ds in deps.items()}
    ready = [s for s in st.steps if indeg[s] == 0]
    start: dict[Step, int] = {}
    while ready:
        s = ready.pop()
        start[s] = max((start[q] + st.dur[q] for q in deps[s]), default=0)
        for t in succ[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    return start if len(start) == len(st.steps) else None


def _makespan(st: Structure, start: dict[Step, int]) -> int:
    """The latest availability of a root on home."""
    return max((start[q] + st.dur[q] if q is not None else 0 for q in st.root_prod), default=0)


def _evaluate(p: Problem, st: Structure, start: dict[Step, int]):
    """Makespan, transient lifetimes and peak of one order."""
    end = {s: start[s] + st.dur[s] for s in st.steps}
    m = _makespan(st, start)
    life: dict[Buf, tuple[int, int]] = {}
    for b, (kind, w) in st.buffers.items():
        if kind in PERSISTENT:
            continue
        e = max([end[w], *(end[r] for r in st.readers.get(b, []))])
        if b in st.root_bufs:
            e = max(e, m)
        life[b] = (start[w], e)
    peaks = [0] * p.num_devices
    for b, (s0, _) in life.items():
        d = b[1]
        live = sum(p.bytes[x[0]] for x, (s1, e1) in life.items() if x[1] == d and s1 <= s0 < e1)
        peaks[d] = max(peaks[d], live)
    return m, life, peaks


def pack(items: list[tuple[int, int, int]], cap: int) -> list[int] | None:
    """Exact packing of buffers ``(start, end, bytes)`` (half-open lifetimes) into
    ``[0, cap)``: offsets, or None when no packing exists.

    Exactness: if a packing exists, placing the buffers one by one in the order of their
    offsets in that packing, each at the lowest offset where it overlaps no placed buffer
    that is live at the same time, gives every buffer an offset no higher than its offset in
    that packing (induction: each placed conflicting buffer lies below the original offset
    of the next one, since it did in the packing and only moved down), so it fits. Hence a
    packing exists iff some order placed lowest-first fits. A few orders are tried first,
    then all orders depth-first, cut as soon as a placement exceeds ``cap``.
    """
    n = len(items)
    if n == 0:
        return []
    conflict = [[j for j in range(n) if j != i and items[i][0] < items[j][1] and items[j][0] < items[i][1]] for i in range(n)]

    def lowest(i: int, off: list[int | None]) -> int:
        busy = sorted((off[j], off[j] + items[j][2]) for j in conflict[i] if off[j] is not None)
        x = 0
        for lo, hi in busy:
            if x + items[i][2] <= lo:
                break
            x = max(x, hi)
        return x

    def greedy(order) -> list[int] | None:
        off: list[int | None] = [None] * n
        for i in order:
            x = lowest(i, off)
            if x + items[i][2] > cap:
                return None
            off[i] = x
        return off  # type: ignore[return-value]

    for key in (lambda i: (items[i][0], -items[i][2]), lambda i: (-items[i][2], items[i][0]),
                lambda i: (-(items[i][1] - items[i][0]), -items[i][2])):
        r = greedy(sorted(range(n), key=key))
        if r is not None:
            return r

    off: list[int | None] = [None] * n

    def rec(k: int) -> bool:
        if k == n:
            return True
        for i in range(n):
            if off[i] is None:
                x = lowest(i, off)
                if x + items[i][2] <= cap:
                    off[i] = x
                    if rec(k + 1):
                        return True
                    off[i] = None
        return False

    return list(off) if rec(0) else None  # type: ignore[arg-type]


def _plan(p: Problem, st: Structure, start: dict[Step, int], life, offsets) -> dict:
    def key(s: Step):
        return (start[s], (0, s[1]) if s[0] == "k" else (1, s[1], s[3]))

    steps = []
    for s in sorted(st.steps, key=key):
        if s[0] == "k":
            c = s[1]
            steps.append({"kind": "kernel", "class": c, "node": st.sel[c], "option": st.opt[c],
                          "device": st.res[s][1], "start": start[s], "end": start[s] + st.dur[s]})
        else:
            steps.append({"kind": "copy", "class": s[1], "from": s[2], "to": s[3],
                          "start": start[s], "end": start[s] + st.dur[s]})
    buffers = []
    for b in sorted(st.buffers):
        kind, _ = st.buffers[b]
        lo, hi = (0, None) if kind in PERSISTENT else life[b]
        buffers.append({"class": b[0], "device": b[1], "kind": kind, "bytes": p.bytes[b[0]],
                        "offset": offsets[b], "start": lo, "end": hi})
    return {
        "keep": {str(c): d for c, d in sorted(st.keep.items())},
        "choice": {str(c): n for c, n in sorted(st.sel.items())},
        "option": {str(c): o for c, o in sorted(st.opt.items())},
        "steps": steps,
        "buffers": buffers,
    }


def _offsets(p: Problem, st: Structure, life) -> dict[Buf, int] | None:
    """Persistent (kept and weight) buffers stacked from 0, the transient ones packed above
    them (equivalent to any packing: persistent buffers are live always, so the transient
    ones fill the gaps between them and those gaps can be laid side by side); None when
    they do not fit."""
    out: dict[Buf, int] = {}
    for d in range(p.num_devices):
        base = 0
        for b in sorted(st.buffers):
            if b[1] == d and st.buffers[b][0] in PERSISTENT:
                out[b] = base
                base += p.bytes[b[0]]
        trans = [b for b in sorted(life) if b[1] == d]
        offs = pack([(life[b][0], life[b][1], p.bytes[b[0]]) for b in trans], p.capacity[d] - base)
        if offs is None:
            return None
        for b, o in zip(trans, offs):
            out[b] = base + o
    return out


def solve(problem: dict | str | Problem, max_structures: int | None = None, prune: bool = True) -> dict:
    """The optimum of ``problem`` by exhaustive enumeration, as a result dict
    (``status`` ``optimal`` with a plan, or ``infeasible``).

    ``prune=False`` turns every pruning of the module doc off (for testing the pruning):
    all keeps, all structures, all orders, each order packed."""
    p = problem if isinstance(problem, Problem) else parse_problem(problem)
    sts = list(structures(p, prune))
    if max_structures is not None and len(sts) > max_structures:
        raise ValueError(f"{len(sts)} structures: too large for brute force")
    sts.sort(key=lambda s: (s.lb_m, s.lb_p))
    best: tuple[int, int] | None = None
    best_plan = None
    explored = 0
    for st in sts:
        if prune and best is not None and (st.lb_m, st.lb_p) >= best:
            if st.lb_m > best[0]:
                break
            continue
        for _, start in _orders(st):
            explored += 1
            if prune and best is not None and _makespan(st, start) > best[0]:
                continue
            m, life, peaks = _evaluate(p, st, start)
            cand = (m, sum(st.persistent_bytes) + sum(peaks))
            if best is not None and cand >= best:
                continue
            if prune and any(st.persistent_bytes[d] + peaks[d] > p.capacity[d] for d in range(p.num_devices)):
                continue
            offsets = _offsets(p, st, life)
            if offsets is None:
                continue
            best = cand
            best_plan = _plan(p, st, start, life, offsets)
    if best is None:
        return {"status": "infeasible", "makespan": None, "peak_bytes": None, "lower_bound": None,
                "nodes_explored": explored, "plan": None}
    return {"status": "optimal", "makespan": best[0], "peak_bytes": best[1], "lower_bound": best[0],
            "nodes_explored": explored, "plan": best_plan}
