"""CP-SAT oracle: the planning problem of ``docs/planner.md`` as an OR-tools CP-SAT model.

:func:`solve` minimises the makespan, then (when the makespan is proven optimal) the peak
among plans of that makespan, and returns the statuses, values, bound and a plan in the
result format of ``docs/planner.md`` (rebuilt from the solver's decisions, start times and
offsets, so :mod:`oracle.check` can validate it).

What the model computes, and why it equals the definition
----------------------------------------------------------

Decisions are booleans: ``keep[c,d]`` (cacheable classes), ``sel[n]`` per node, ``x[n,o]``
per option of a computed node; ``needed[c]`` is exactly "a root, or a child of a selected
node" and a needed class has exactly one of (a keep, a selected node). Keeping a class that
is not needed is forbidden: it only adds kept bytes (no step, no lifetime changes), so the
plan without that keep is at least as good and the optimum is unchanged. ``loc[c,d]`` and
``read[c,d]`` are the location and "read on device" of the definition, and a copy
``cp[c,a,b]`` exists exactly when ``loc[c,a] ∧ read[c,b]`` (forbidden without a link),
except for a weight (``wsel[c]``: the class's selected node is a weight source): read on
``b ≠ home`` it is uploaded, ``up[c,b] = wsel[c] ∧ read[c,b]``, available there at 0, a
persistent buffer (like a kept one, outside the cache budget), and never copied.
Acyclicity: integer ranks, ``rank[c] > rank[k]`` for every child ``k`` of a selected node
that is not kept (aliases take no time, so timing alone would not exclude alias cycles).

Times. Each kernel step and copy is an optional interval on its device's / link's
``NoOverlap``; availabilities follow the definition (``av[c,d]``: a kernel's end, a
copy's end, the child's availability for an alias, 0 for sources and kept classes);
precedence ``start ≥ ready``. Start times are NOT free: the definition fixes
``start(s) = max(ready(s), end(prev(s)))`` for the order on each resource. The model
demands, for every present step ``s``: ``start(s) = ready(s)`` (``ready`` is an exact
``max`` of the operand availabilities), or ``start(s) = end(i)`` for some present step
``i`` on the same resource. Given no-overlap and ``start ≥ ready``, that is equivalent to
the definition for the order the start times induce: if ``start(s) = end(i)``, then ``i``
is the step just before ``s`` (a step between them would last 0, and every step lasts
≥ 1), so ``start(s) = end(prev) ≥ ready``; if ``start(s) = ready(s)``, the previous step
ended by then (no-overlap). Conversely the earliest-start schedule of any deadlock-free
order satisfies these constraints. So the solutions are exactly the (order, earliest-start
schedule) pairs of the definition; there is no left-shift relaxation, and memory (which
depends on the exact start times) is modelled exactly.

Memory. Buffers per (class, device): a kernel output, a copy destination, or a kept
buffer. A transient buffer's interval starts with its writing step; its end ``be`` is only
bounded below: by the writer's end, by ``R[c,d]`` = the latest end of a step reading the
value of ``c`` on ``d`` (propagated from alias classes down to the buffer they use), and by
the makespan for a root's buffer on home. Longer lifetimes only make ``NoOverlap2D``
(lifetime × bytes, per device, kept buffers spanning the whole horizon, offsets within the
capacity) and the peak harder, so any solution stays a solution with the exact lifetimes,
and the optimum has them: the inequalities are exact at the optimum. The per-device peak of
live transient bytes is the capacity variable of a ``Cumulative`` (minimised in phase 2,
hence exactly the maximum). Kept bytes count against the cache budget and in the peak.

The makespan variable is bounded below by every root's availability on home; as it is
minimised, it equals the makespan at the optimum (and in phase 2 it is fixed to the proven
optimum, which no solution can undercut).

Horizon: an earliest-start schedule has no idle instant before the makespan (the first
step to start after an idle instant would start at the end of an earlier step or at 0), so
the makespan is at most the total time of the steps, bounded by
``Σ_c (max kernel time of c + Σ_links copy time of c)``.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from . import brute
from .problem import Problem, parse_problem

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.UNKNOWN: "UNKNOWN",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
}


class _Model:
    def __init__(self, p: Problem, earliest_starts: bool = True):
        self.p = p
        m = self.m = cp_model.CpModel()
        nc, nd, home = p.num_classes, p.num_devices, p.home
        roots = set(p.roots)
        devs = range(nd)

        # horizon
        h = 0
        for c in range(nc):
            h += max((o.time for n in p.nodes_of[c] for o in p.nodes[n].options), default=0)
            h += sum(p.copy_time(c, a, b) for (a, b) in p.links)
        self.h = h = max(h, 1)

        # ---------------- decisions
        self.needed = [m.NewBoolVar(f"needed{c}") for c in range(nc)]
        self.keep = {(c, d): m.NewBoolVar(f"keep{c}_{d}") for c in range(nc) if p.cacheable[c] for d in devs}
        self.sel = [m.NewBoolVar(f"sel{n}") for n in range(len(p.nodes))]
        self.x = {(n, o): m.NewBoolVar(f"x{n}_{o}") for n, node in enumerate(p.nodes) for o in range(len(node.options))}
        kept = [sum(self.keep[c, d] for d in devs) if p.cacheable[c] else 0 for c in range(nc)]
        self.kept = kept
        for c in range(nc):
            if p.cacheable[c]:
                m.Add(kept[c] <= 1)
                for d in devs:
                    m.AddImplication(self.keep[c, d], self.needed[c])
            m.Add(sum(self.sel[n] for n in p.nodes_of[c]) + kept[c] == self.needed[c])
        for n, node in enumerate(p.nodes):
            if node.source is None:
                m.Add(sum(self.x[n, o] for o in range(len(node.options))) == self.sel[n])
        parents: list[list[int]] = [[] for _ in range(nc)]
        for n, node in enumerate(p.nodes):
            for k in set(node.children):
                parents[k].append(n)
                m.AddImplication(self.sel[n], self.needed[k])
        for c in range(nc):
            if c in roots:
                m.Add(self.needed[c] == 1)
            else:
                m.AddBoolOr([self.sel[n] for n in parents[c]] + [self.needed[c].Not()])

        # acyclicity
        rank = [m.NewIntVar(0, nc, f"rank{c}") for c in range(nc)]
        for n, node in enumerate(p.nodes):
            c = node.cls
            for k in set(node.children):
                if k == c:
                    m.Add(self.sel[n] == 0)
                    continue
                lits = [self.sel[n]]
                if p.cacheable[k]:
                    kk = m.NewBoolVar("")
                    m.Add(kept[k] == 0).OnlyEnforceIf(kk)
                    m.Add(kept[k] == 1).OnlyEnforceIf(kk.Not())
                    lits.append(kk)
                m.Add(rank[c] >= rank[k] + 1).OnlyEnforceIf(lits)

        # location, reads, copies
        self.loc = {}
        for c in range(nc):
            for d in devs:
                terms = [self.x[n, o] for n in p.nodes_of[c] for o, op in enumerate(p.nodes[n].options) if op.device == d]
                if d == home:
                    terms += [self.sel[n] for n in p.nodes_of[c] if p.nodes[n].source is not None]
                if p.cacheable[c]:
                    terms.append(self.keep[c, d])
                v = m.NewBoolVar(f"loc{c}_{d}")
                m.Add(v == sum(terms))
                self.loc[c, d] = v
            m.Add(sum(self.loc[c, d] for d in devs) == self.needed[c])
        readers: dict[tuple[int, int], list] = {}
        for n, node in enumerate(p.nodes):
            for o, op in enumerate(node.options):
                for k in set(node.children):
                    readers.setdefault((k, op.device), []).append(self.x[n, o])
        self.read = {}
        for c in range(nc):
            for d in devs:
                v = m.NewBoolVar(f"read{c}_{d}")
                lits = readers.get((c, d), [])
                if c in roots and d == home:
                    m.Add(v == 1)
                else:
                    for lit in lits:
                        m.AddImplication(lit, v)
                    m.AddBoolOr(lits + [v.Not()])
                self.read[c, d] = v
        # weights: selected as a weight source, uploaded to every other device reading them
        self.wsel, self.up = {}, {}
        for c in range(nc):
            wn = [self.sel[n] for n in p.nodes_of[c] if p.nodes[n].source == "weight"]
            if not wn:
                continue
            w = m.NewBoolVar(f"wsel{c}")
            m.Add(w == sum(wn))
            self.wsel[c] = w
            for b in devs:
                if b == home:
                    continue
                u = m.NewBoolVar(f"up{c}_{b}")
                m.AddImplication(u, w)
                m.AddImplication(u, self.read[c, b])
                m.AddBoolOr([w.Not(), self.read[c, b].Not(), u])
                self.up[c, b] = u
        self.cp = {}
        for c in range(nc):
            for a in devs:
                for b in devs:
                    if a == b:
                        continue
                    not_w = [self.wsel[c]] if (c in self.wsel and a == home) else []
                    if (a, b) not in p.links:
                        m.AddBoolOr([self.loc[c, a].Not(), self.read[c, b].Not()] + not_w)
                        continue
                    v = m.NewBoolVar(f"cp{c}_{a}_{b}")
                    m.AddImplication(v, self.loc[c, a])
                    m.AddImplication(v, self.read[c, b])
                    if not_w:
                        m.AddImplication(v, self.wsel[c].Not())
                    m.AddBoolOr([self.loc[c, a].Not(), self.read[c, b].Not(), v] + not_w)
                    self.cp[c, a, b] = v

        # ---------------- times
        self.kstart = [m.NewIntVar(0, h, f"ks{c}") for c in range(nc)]
        self.kend = [m.NewIntVar(0, h, f"ke{c}") for c in range(nc)]
        kdur = []
        self.kp = {}
        for c in range(nc):
            kern = [(n, o, op) for n in p.nodes_of[c] for o, op in enumerate(p.nodes[n].options) if not op.alias]
            dur = m.NewIntVar(0, max((op.time for _, _, op in kern), default=0), f"kd{c}")
            m.Add(dur == sum(op.time * self.x[n, o] for n, o, op in kern))
            m.Add(self.kend[c] == self.kstart[c] + dur)
            kdur.append(dur)
            for d in devs:
                lits = [self.x[n, o] for n, o, op in kern if op.device == d]
                if lits:
                    v = m.NewBoolVar(f"kp{c}_{d}")
                    m.Add(v == sum(lits))
                    self.kp[c, d] = v
        self.cs, self.ce = {}, {}
        for (c, a, b) in self.cp:
            t = p.copy_time(c, a, b)
            self.cs[c, a, b] = m.NewIntVar(0, h, f"cs{c}_{a}_{b}")
            self.ce[c, a, b] = m.NewIntVar(0, h, f"ce{c}_{a}_{b}")
            m.Add(self.ce[c, a, b] == self.cs[c, a, b] + t)

        availl = [m.NewIntVar(0, h, f"al{c}") for c in range(nc)]
        av = {(c, d): m.NewIntVar(0, h, f"av{c}_{d}") for c in range(nc) for d in devs}
        self.availl, self.av = availl, av
        for c in range(nc):
            for d in devs:
                m.Add(av[c, d] == availl[c]).OnlyEnforceIf(self.loc[c, d])
                if p.cacheable[c]:
                    m.Add(availl[c] == 0).OnlyEnforceIf(self.keep[c, d])
            for n in p.nodes_of[c]:
                node = p.nodes[n]
                if node.source is not None:
                    m.Add(availl[c] == 0).OnlyEnforceIf(self.sel[n])
                for o, op in enumerate(node.options):
                    if op.alias:
                        m.Add(availl[c] == av[node.children[0], op.device]).OnlyEnforceIf(self.x[n, o])
                    else:
                        m.Add(availl[c] == self.kend[c]).OnlyEnforceIf(self.x[n, o])
        for (c, a, b), v in self.cp.items():
            m.Add(av[c, b] == self.ce[c, a, b]).OnlyEnforceIf(v)
            m.Add(self.cs[c, a, b] >= availl[c]).OnlyEnforceIf(v)
        for (c, b), u in self.up.items():
            m.Add(av[c, b] == 0).OnlyEnforceIf(u)

        # kernel readiness: start >= ready always, start == ready when tight
        tight = [m.NewBoolVar(f"tight{c}") for c in range(nc)]
        for n, node in enumerate(p.nodes):
            c = node.cls
            for o, op in enumerate(node.options):
                if op.alias:
                    continue
                kids = sorted(set(node.children))
                for k in kids:
                    m.Add(self.kstart[c] >= av[k, op.device]).OnlyEnforceIf(self.x[n, o])
                if kids:
                    r = m.NewIntVar(0, h, "")
                    m.AddMaxEquality(r, [av[k, op.device] for k in kids])
                    if earliest_starts:
                        m.Add(self.kstart[c] <= r).OnlyEnforceIf([tight[c], self.x[n, o]])
                elif earliest_starts:
                    m.Add(self.kstart[c] == 0).OnlyEnforceIf([tight[c], self.x[n, o]])

        # resources: no overlap, and every start is its ready time or the end of a step on it
        for d in devs:
            cls_d = [c for c in range(nc) if (c, d) in self.kp]
            m.AddNoOverlap([m.NewOptionalIntervalVar(self.kstart[c], kdur[c], self.kend[c], self.kp[c, d], f"k{c}_{d}")
                            for c in cls_d])
            for j in cls_d if earliest_starts else []:
                alts = [tight[j]]
                for i in cls_d:
                    if i != j:
                        b = m.NewBoolVar("")
                        m.AddImplication(b, self.kp[i, d])
                        m.Add(self.kstart[j] == self.kend[i]).OnlyEnforceIf(b)
                        alts.append(b)
                m.AddBoolOr(alts + [self.kp[j, d].Not()])
        for (a, b) in p.links:
            on = [c for c in range(nc) if (c, a, b) in self.cp]
            m.AddNoOverlap([m.NewOptionalIntervalVar(self.cs[c, a, b], p.copy_time(c, a, b), self.ce[c, a, b],
                                                     self.cp[c, a, b], f"c{c}_{a}_{b}") for c in on])
            for j in on if earliest_starts else []:
                ct = m.NewBoolVar("")
                m.Add(self.cs[j, a, b] <= availl[j]).OnlyEnforceIf(ct)
                alts = [ct]
                for i in on:
                    if i != j:
                        bb = m.NewBoolVar("")
                        m.AddImplication(bb, self.cp[i, a, b])
                        m.Add(self.cs[j, a, b] == self.ce[i, a, b]).OnlyEnforceIf(bb)
                        alts.append(bb)
                m.AddBoolOr(alts + [self.cp[j, a, b].Not()])

        self.mk = m.NewIntVar(0, h, "makespan")
        for r in roots:
            m.Add(self.mk >= av[r, home])

        # ---------------- memory
        rr = {(c, d): m.NewIntVar(0, h, f"R{c}_{d}") for c in range(nc) for d in devs}
        for n, node in enumerate(p.nodes):
            c = node.cls
            for o, op in enumerate(node.options):
                for k in set(node.children):
                    if op.alias:
                        m.Add(rr[k, op.device] >= rr[c, op.device]).OnlyEnforceIf(self.x[n, o])
                    else:
                        m.Add(rr[k, op.device] >= self.kend[c]).OnlyEnforceIf(self.x[n, o])
        for (c, a, b), v in self.cp.items():
            m.Add(rr[c, a] >= self.ce[c, a, b]).OnlyEnforceIf(v)
        for r in roots:
            m.Add(rr[r, home] >= self.mk)

        self.off = {}
        peaks = []
        kept_bytes = []
        for d in devs:
            cap = p.capacity[d]
            xs, ys, life, demand = [], [], [], []
            for c in range(nc):
                nb = p.bytes[c]
                writers = []  # (presence, start, end)
                if (c, d) in self.kp:
                    writers.append((self.kp[c, d], self.kstart[c], self.kend[c]))
                for a in devs:
                    if (c, a, d) in self.cp:
                        writers.append((self.cp[c, a, d], self.cs[c, a, d], self.ce[c, a, d]))
                if writers:
                    pres = m.NewBoolVar(f"bp{c}_{d}")
                    m.Add(pres == sum(w[0] for w in writers))
                    if nb > cap:
                        m.Add(pres == 0)
                    else:
                        bs = m.NewIntVar(0, h, f"bs{c}_{d}")
                        be = m.NewIntVar(0, h, f"be{c}_{d}")
                        size = m.NewIntVar(0, h, f"bl{c}_{d}")
                        m.Add(be == bs + size)
                        for lit, s, e in writers:
                            m.Add(bs == s).OnlyEnforceIf(lit)
                            m.Add(be >= e).OnlyEnforceIf(lit)
                        m.Add(be >= rr[c, d]).OnlyEnforceIf(pres)
                        off = m.NewIntVar(0, cap - nb, f"off{c}_{d}")
                        self.off[c, d] = off
                        iv = m.NewOptionalIntervalVar(bs, size, be, pres, f"life{c}_{d}")
                        xs.append(iv)
                        ys.append(m.NewOptionalFixedSizeIntervalVar(off, nb, pres, f"bytes{c}_{d}"))
                        life.append(iv)
                        demand.append(nb)
                persistent = []  # (presence, tag): kept buffer, weight upload
                if p.cacheable[c]:
                    persistent.append((self.keep[c, d], "kept"))
                if (c, d) in self.up:
                    persistent.append((self.up[c, d], "weight"))
                for kv, tag in persistent:
                    if nb > cap:
                        m.Add(kv == 0)
                    else:
                        off = m.NewIntVar(0, cap - nb, f"{tag}off{c}_{d}")
                        self.off[c, d, tag] = off
                        xs.append(m.NewOptionalFixedSizeIntervalVar(0, h + 1, kv, f"{tag}l{c}_{d}"))
                        ys.append(m.NewOptionalFixedSizeIntervalVar(off, nb, kv, f"{tag}b{c}_{d}"))
            if xs:
                m.AddNoOverlap2D(xs, ys)
            pk = m.NewIntVar(0, cap, f"peak{d}")
            if life:
                m.AddCumulative(life, demand, pk)
            peaks.append(pk)
            kb = sum(p.bytes[c] * self.keep[c, d] for c in range(nc) if p.cacheable[c])
            m.Add(kb <= p.cache_budget[d])
            kept_bytes.append(kb)
        uploaded = sum(p.bytes[c] * u for (c, _), u in self.up.items())
        self.peak = sum(peaks) + sum(kept_bytes) + uploaded


def _extract(p: Problem, mod: _Model, s: cp_model.CpSolver) -> dict:
    """The solver's decisions, start times and offsets as a plan, with lifetimes, makespan
    and peak recomputed from them by the definition (brute force's evaluator)."""
    keep = {c: d for (c, d), v in mod.keep.items() if s.BooleanValue(v)}
    sel = {p.nodes[n].cls: n for n in range(len(p.nodes)) if s.BooleanValue(mod.sel[n])}
    opt = {p.nodes[n].cls: o for (n, o), v in mod.x.items() if s.BooleanValue(v)}
    needed = frozenset(c for c in range(p.num_classes) if s.BooleanValue(mod.needed[c]))
    st = brute._build(p, keep, sel, opt, needed)
    assert st is not None, "the model chose a copy without a link"
    start = {}
    for step in st.steps:
        if step[0] == "k":
            start[step] = s.Value(mod.kstart[step[1]])
        else:
            start[step] = s.Value(mod.cs[step[1:]])
    m, life, peaks = brute._evaluate(p, st, start)
    offsets = {}
    for b, (kind, _) in st.buffers.items():
        offsets[b] = s.Value(mod.off[(b[0], b[1], kind)] if kind in brute.PERSISTENT else mod.off[b])
    plan = brute._plan(p, st, start, life, offsets)
    return {"makespan": m, "peak_bytes": sum(st.persistent_bytes) + sum(peaks), "plan": plan}


def _solver(time_limit_s: float, workers: int) -> cp_model.CpSolver:
    """A solver limited in deterministic time (so that, with one worker, a run gives the same
    answer on any machine and any load), with a wall-clock backstop."""
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = time_limit_s
    solver.parameters.max_time_in_seconds = 10 * time_limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 1
    return solver


def solve(problem: dict | str | Problem, time_limit_s: float = 10.0, workers: int = 1, peak: bool = True,
          earliest_starts: bool = True) -> dict:
    """Solve with CP-SAT: minimise the makespan, then (if proven optimal and ``peak``) the
    peak among plans of that makespan.

    ``time_limit_s`` is in CP-SAT's deterministic time (work units calibrated to about a
    second; on a loaded 2-core machine one unit takes 1-4 s of wall time), so that results
    are reproducible with ``workers=1``; the phase-2 limit is what phase 1 left, at least
    half of it. Each phase also stops at 10x its limit in wall time.

    Returns ``status`` (``OPTIMAL``/``FEASIBLE``/``INFEASIBLE``/``UNKNOWN`` for the
    makespan), ``makespan`` (incumbent or None), ``bound`` (proven lower bound on the
    makespan, None when infeasible), ``peak_status`` (status of the peak phase, or None),
    ``peak_bytes`` (of the returned plan), ``wall_s``, and ``result``: a result dict in the
    format of ``docs/planner.md`` with the plan (``status`` ``optimal`` only when both
    phases are optimal), or None when no plan was found.

    ``earliest_starts=False`` drops the "as early as the order allows" constraints (start
    times become free): a relaxation of the definition, only for showing that the tests
    tell the two apart. Its plans are not plans of the definition.
    """
    p = problem if isinstance(problem, Problem) else parse_problem(problem)
    mod = _Model(p, earliest_starts)
    solver = _solver(time_limit_s, workers)
    mod.m.Minimize(mod.mk)
    st = solver.Solve(mod.m)
    wall = solver.WallTime()
    status = _STATUS[st]
    out = {"status": status, "makespan": None, "bound": None, "peak_status": None, "peak_bytes": None,
           "wall_s": wall, "result": None}
    if status == "INFEASIBLE":
        out["result"] = {"status": "infeasible", "makespan": None, "peak_bytes": None, "lower_bound": None, "plan": None}
        return out
    if status == "UNKNOWN":
        out["bound"] = int(solver.BestObjectiveBound()) if solver.BestObjectiveBound() > -1e18 else 0
        return out
    if status not in ("OPTIMAL", "FEASIBLE"):
        raise RuntimeError(f"CP-SAT: {status}")
    if not earliest_starts:
        out["makespan"] = solver.Value(mod.mk)
        out["bound"] = int(round(solver.BestObjectiveBound()))
        return out
    ex = _extract(p, mod, solver)
    if ex["makespan"] != solver.Value(mod.mk):
        raise RuntimeError(f"CP-SAT model error: objective {solver.Value(mod.mk)}, plan makespan {ex['makespan']}")
    out["makespan"] = ex["makespan"]
    out["bound"] = int(round(solver.BestObjectiveBound()))
    out["peak_bytes"] = ex["peak_bytes"]
    res_status = "feasible"
    if status == "OPTIMAL" and peak:
        mstar = ex["makespan"]
        mod.m.Add(mod.mk == mstar)
        mod.m.ClearObjective()
        mod.m.Minimize(mod.peak)
        # hint the phase-1 solution
        mod.m.ClearHints()
        for v in list(mod.keep.values()) + mod.sel + list(mod.x.values()):
            mod.m.AddHint(v, solver.BooleanValue(v))
        left = max(time_limit_s / 2, time_limit_s - solver.ResponseProto().deterministic_time)
        solver2 = _solver(left, workers)
        st2 = solver2.Solve(mod.m)
        out["wall_s"] = wall + solver2.WallTime()
        out["peak_status"] = _STATUS[st2]
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            ex2 = _extract(p, mod, solver2)
            if ex2["makespan"] != mstar:
                raise RuntimeError(f"CP-SAT model error: phase 2 makespan {ex2['makespan']} != {mstar}")
            if st2 == cp_model.OPTIMAL and ex2["peak_bytes"] != solver2.Value(mod.peak):
                raise RuntimeError(f"CP-SAT model error: objective peak {solver2.Value(mod.peak)}, plan peak {ex2['peak_bytes']}")
            if ex2["peak_bytes"] <= ex["peak_bytes"]:
                ex = ex2
            out["peak_bytes"] = ex["peak_bytes"]
            if st2 == cp_model.OPTIMAL:
                res_status = "optimal"
    out["result"] = {"status": res_status, "makespan": ex["makespan"], "peak_bytes": ex["peak_bytes"],
                     "lower_bound": out["bound"], "plan": ex["plan"]}
    return out
