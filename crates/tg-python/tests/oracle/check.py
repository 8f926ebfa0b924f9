"""Independent checker of a planner result (``docs/planner.md``), from the plan alone.

:func:`check_result` recomputes everything the plan implies and compares it with what the
plan and the result state; it raises :class:`PlanError` with every discrepancy found.

What is checked:

- the result: ``status`` is one of the four, a plan is present exactly when the status is
  ``optimal`` or ``feasible``, ``lower_bound <= makespan``;
- keep: only cacheable classes, on existing devices, kept bytes within each cache budget;
- choice: exactly the needed, non-kept classes (roots, then the children of each chosen
  node, stopping at kept classes), each mapped to a node of that class; the chosen graph
  (edges to children that are not kept) is acyclic;
- option (keyed by class, like ``choice``): exactly the classes whose chosen node is
  computed, each an index into that node's options;
- steps: one kernel step per chosen kernel option (class, node, option, device as chosen,
  ``end = start + time``); copies exactly as implied (one per class and device it is read on
  other than its location, ``end = start + latency + ceil(bytes * 1000 / bytes_per_us)``),
  each over an existing link;
- starts: the order on each device and link is the order of the listed start times (two
  steps on one resource starting together is an error: every step takes >= 1), and every
  step must start at ``max(ready, end of the previous step on its resource)``; an order that
  deadlocks with the operand precedences is an error;
- buffers: exactly the outputs of kernel steps (``kind: "output"``), the destinations of
  copies (``kind: "copy"``), the kept classes (``kind: "kept"``, start 0, end null) and the
  weights read on a device other than home (``kind: "weight"``, uploaded once: start 0,
  end null, no copy step), with
  ``bytes`` of the class, and the lifetimes of the definition (root buffers on home end at
  the makespan);
- memory: ``0 <= offset``, ``offset + bytes <= capacity``, and byte ranges disjoint for
  buffers on one device whose lifetimes overlap (kept and weight buffers overlap
  everything);
- the makespan and ``peak_bytes`` equal the recomputed ones.
"""

from __future__ import annotations

from .problem import Problem, parse_problem

STATUSES = ("optimal", "feasible", "infeasible", "unknown")


class PlanError(AssertionError):
    """The plan contradicts the problem or the result's own claims."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ikeys(m, what: str, errs: list[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    if not isinstance(m, dict):
        errs.append(f"plan.{what}: expected an object, got {type(m).__name__}")
        return out
    for k, v in m.items():
        try:
            kk = int(k)
        except (TypeError, ValueError):
            errs.append(f"plan.{what}: key {k!r} is not a class id")
            continue
        if not _is_int(v):
            errs.append(f"plan.{what}[{k}]: expected an integer, got {v!r}")
            continue
        out[kk] = v
    return out


def check_result(problem: dict | str | Problem, result: dict) -> None:
    """Raise :class:`PlanError` unless ``result`` (a result dict) is consistent with the
    problem: see the module doc for the list of checks."""
    p = problem if isinstance(problem, Problem) else parse_problem(problem)
    errs: list[str] = []
    status = result.get("status")
    if status not in STATUSES:
        raise PlanError(f"status {status!r} is not one of {STATUSES}")
    plan = result.get("plan")
    if status in ("infeasible", "unknown"):
        if plan is not None:
            raise PlanError(f"status {status} with a plan")
        return
    if not isinstance(plan, dict):
        raise PlanError(f"status {status} without a plan")
    lb, claimed = result.get("lower_bound"), result.get("makespan")
    if not _is_int(claimed) or not _is_int(result.get("peak_bytes")):
        errs.append(f"makespan {claimed!r} and peak_bytes {result.get('peak_bytes')!r} must be integers")
    elif lb is not None and (not _is_int(lb) or lb > claimed):
        errs.append(f"lower_bound {lb!r} is not an integer <= makespan {claimed}")
    m, peak = _check_plan(p, plan, errs)
    if not errs:
        if m != result.get("makespan"):
            errs.append(f"makespan: the plan gives {m}, the result says {result.get('makespan')}")
        if peak != result.get("peak_bytes"):
            errs.append(f"peak_bytes: the plan gives {peak}, the result says {result.get('peak_bytes')}")
    if errs:
        raise PlanError("; ".join(errs))


def _check_plan(p: Problem, plan: dict, errs: list[str]) -> tuple[int | None, int | None]:
    nc, nd = p.num_classes, p.num_devices
    keep = _ikeys(plan.get("keep", {}), "keep", errs)
    choice = _ikeys(plan.get("choice"), "choice", errs)
    option = _ikeys(plan.get("option"), "option", errs)
    if errs:
        return None, None

    # keep
    kept = [0] * nd
    for c, d in keep.items():
        if not (0 <= c < nc) or not p.cacheable[c]:
            errs.append(f"keep: class {c} is not a cacheable class")
        elif not (0 <= d < nd):
            errs.append(f"keep[{c}]: no device {d}")
        else:
            kept[d] += p.bytes[c]
    for d in range(nd):
        if kept[d] > p.cache_budget[d]:
            errs.append(f"device {d}: kept bytes {kept[d]} exceed the cache budget {p.cache_budget[d]}")
    if errs:
        return None, None

    # choice: walk from the roots
    needed: set[int] = set()
    stack = list(p.roots)
    while stack:
        c = stack.pop()
        if c in needed:
            continue
        needed.add(c)
        if c in keep:
            continue
        if c not in choice:
            errs.append(f"choice: needed class {c} has no chosen node")
            continue
        n = choice[c]
        if not (0 <= n < len(p.nodes)) or p.nodes[n].cls != c:
            errs.append(f"choice[{c}]: node {n} is not a node of class {c}")
            continue
        stack.extend(p.nodes[n].children)
    for c in choice:
        if c not in needed or c in keep:
            errs.append(f"choice: class {c} is {'kept' if c in keep else 'not needed'}, it has no choice")
    if errs:
        return None, None
    color: dict[int, int] = {}
    for c0 in choice:
        if color.get(c0):
            continue
        path = [(c0, iter(p.nodes[choice[c0]].children))]
        color[c0] = 1
        while path:
            c, it = path[-1]
            k = next(it, None)
            if k is None:
                color[c] = 2
                path.pop()
            elif k not in keep:
                if color.get(k) == 1:
                    errs.append(f"choice: the chosen graph has a cycle through class {k}")
                    return None, None
                if not color.get(k):
                    color[k] = 1
                    path.append((k, iter(p.nodes[choice[k]].children)))

    # option and location
    opt_of: dict[int, object] = {}
    for c, n in choice.items():
        node = p.nodes[n]
        if node.source is not None:
            if c in option:
                errs.append(f"option: class {c} is chosen as a source, it has no option")
            continue
        if c not in option:
            errs.append(f"option: class {c} (node {n}) has no option")
        elif not (0 <= option[c] < len(node.options)):
            errs.append(f"option[{c}]: node {n} has no option {option[c]}")
        else:
            opt_of[c] = node.options[option[c]]
    for c in option:
        if c not in choice:
            errs.append(f"option: class {c} has no chosen node")
    if errs:
        return None, None
    loc = {}
    for c in needed:
        loc[c] = keep[c] if c in keep else (opt_of[c].device if c in opt_of else p.home)

    # implied steps; a weight read on another device is uploaded there, not copied
    weight = {c for c in needed if c not in keep and p.nodes[choice[c]].source == "weight"}
    reads: set[tuple[int, int]] = {(r, p.home) for r in p.roots}
    for c, o in opt_of.items():
        for k in p.nodes[choice[c]].children:
            reads.add((k, o.device))
    want: dict[tuple, int] = {}  # step key -> duration
    for c, o in opt_of.items():
        if not o.alias:
            want[("kernel", c)] = o.time
    uploads = {(k, d) for k, d in reads if d != loc[k] and k in weight}
    for k, d in reads:
        if d != loc[k] and k not in weight:
            t = p.copy_time(k, loc[k], d)
            if t is None:
                errs.append(f"class {k} is read on device {d} but there is no link {loc[k]} -> {d}")
            else:
                want[("copy", k, loc[k], d)] = t
    if errs:
        return None, None

    got: dict[tuple, tuple[int, int]] = {}
    resource: dict[tuple, tuple] = {}
    for i, s in enumerate(plan.get("steps", [])):
        w = f"steps[{i}]"
        try:
            if s["kind"] == "kernel":
                c = s["class"]
                key = ("kernel", c)
                if key in want:
                    o = opt_of[c]
                    if s.get("node") != choice[c] or s.get("option") != option[c] or s.get("device") != o.device:
                        errs.append(f"{w}: node/option/device {s.get('node')}/{s.get('option')}/{s.get('device')} "
                                    f"differ from the choice {choice[c]}/{option[c]}/{o.device}")
                    resource[key] = ("device", o.device)
            elif s["kind"] == "copy":
                key = ("copy", s["class"], s["from"], s["to"])
                resource[key] = ("link", s["from"], s["to"])
            else:
                errs.append(f"{w}: unknown kind {s['kind']!r}")
                continue
            start, end = s["start"], s["end"]
        except (KeyError, TypeError) as e:
            errs.append(f"{w}: malformed step ({e!r})")
            continue
        if not (_is_int(start) and _is_int(end)) or start < 0:
            errs.append(f"{w}: start {start!r} and end {end!r} must be integers, start >= 0")
            continue
        if key not in want:
            errs.append(f"{w}: {key} is not a step the decisions imply")
        elif key in got:
            errs.append(f"{w}: {key} listed twice")
        else:
            got[key] = (start, end)
            if end != start + want[key]:
                errs.append(f"{w}: {key} lasts {end - start}, expected {want[key]}")
    for key in want:
        if key not in got:
            errs.append(f"steps: missing {key}")
    if errs:
        return None, None

    # availability and starts under "as early as the order allows"
    def avail(x: int, d: int):
        """(step key or None, its end) making x available on d."""
        if loc[x] != d:
            if x in weight:
                return None, 0
            key = ("copy", x, loc[x], d)
            return key, got[key][1]
        if x in keep or x not in opt_of:
            return None, 0
        if opt_of[x].alias:
            return avail(p.nodes[choice[x]].children[0], d)
        return ("kernel", x), got[("kernel", x)][1]

    def bottom(x: int, d: int):
        """The buffer (class, device) that x's value on d uses; None for a source on home."""
        if loc[x] != d or x in keep:
            return (x, d)
        if x not in opt_of:
            return None
        if opt_of[x].alias:
            return bottom(p.nodes[choice[x]].children[0], d)
        return (x, d)

    operands: dict[tuple, list[tuple[int, int]]] = {}
    for key in got:
        if key[0] == "kernel":
            c = key[1]
            operands[key] = [(k, opt_of[c].device) for k in p.nodes[choice[c]].children]
        else:
            operands[key] = [(key[1], key[2])]
    by_res: dict[tuple, list[tuple]] = {}
    for key in got:
        by_res.setdefault(resource[key], []).append(key)
    prev: dict[tuple, tuple | None] = {}
    for r, keys in by_res.items():
        keys.sort(key=lambda k: got[k][0])
        for i, k in enumerate(keys):
            if i and got[keys[i - 1]][0] == got[k][0]:
                errs.append(f"{r}: {keys[i - 1]} and {k} start together")
            prev[k] = keys[i - 1] if i else None
    if errs:
        return None, None
    # recompute the starts from the orders alone (a fixed point over the dependency graph)
    start: dict[tuple, int] = {}
    visiting: set[tuple] = set()

    def earliest(k: tuple) -> int | None:
        if k in start:
            return start[k]
        if k in visiting:
            return None
        visiting.add(k)
        t = 0
        deps = [avail(x, d)[0] for x, d in operands[k]] + [prev[k]]
        for q in deps:
            if q is None:
                continue
            s = earliest(q)
            if s is None:
                return None
            t = max(t, s + want[q])
        visiting.discard(k)
        start[k] = t
        return t

    for k in got:
        if earliest(k) is None:
            errs.append(f"the orders deadlock (at {k})")
            return None, None
        if start[k] != got[k][0]:
            errs.append(f"{k} starts at {got[k][0]}, but its operands and its resource allow {start[k]}")
    if errs:
        return None, None
    m = max((avail(r, p.home)[1] for r in p.roots), default=0)

    # buffers and lifetimes
    want_buf: dict[tuple[int, int], tuple[str, int, int | None]] = {}
    for c, d in keep.items():
        want_buf[(c, d)] = ("kept", 0, None)
    for c, d in uploads:
        want_buf[(c, d)] = ("weight", 0, None)
    for key, (s0, e0) in got.items():
        b = (key[1], resource[key][1]) if key[0] == "kernel" else (key[1], key[3])
        want_buf[b] = ("output" if key[0] == "kernel" else "copy", s0, e0)
    for key, (_, e0) in got.items():
        for x, d in operands[key]:
            b = bottom(x, d)
            if b is not None and want_buf[b][0] not in ("kept", "weight"):
                kind, s1, e1 = want_buf[b]
                want_buf[b] = (kind, s1, max(e1, e0))
    for r in p.roots:
        b = bottom(r, p.home)
        if b is not None and want_buf[b][0] not in ("kept", "weight"):
            kind, s1, e1 = want_buf[b]
            want_buf[b] = (kind, s1, max(e1, m))

    placed: dict[tuple[int, int], tuple[int, int, int, int | None]] = {}
    for i, b in enumerate(plan.get("buffers", [])):
        w = f"buffers[{i}]"
        try:
            key = (b["class"], b["device"])
            kind, nbytes, off, s0, e0 = b["kind"], b["bytes"], b["offset"], b["start"], b["end"]
        except (KeyError, TypeError) as e:
            errs.append(f"{w}: malformed buffer ({e!r})")
            continue
        if key not in want_buf:
            errs.append(f"{w}: class {key[0]} has no buffer on device {key[1]}")
            continue
        if not _is_int(s0) or not (e0 is None or _is_int(e0)):
            errs.append(f"{w}: start {s0!r} and end {e0!r} must be integers (end null for a kept buffer)")
            continue
        if key in placed:
            errs.append(f"{w}: buffer {key} listed twice")
            continue
        wk, ws, we = want_buf[key]
        if (kind, s0, e0) != (wk, ws, we):
            errs.append(f"{w}: buffer {key} is {(kind, s0, e0)}, expected (kind, start, end) = {(wk, ws, we)}")
        if nbytes != p.bytes[key[0]]:
            errs.append(f"{w}: buffer {key} has {nbytes} bytes, its class has {p.bytes[key[0]]}")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0 or off + p.bytes[key[0]] > p.capacity[key[1]]:
            errs.append(f"{w}: offset {off!r} + {p.bytes[key[0]]} bytes is outside [0, {p.capacity[key[1]]})")
        placed[key] = (off, ws, we if we is not None else None, p.bytes[key[0]])
    for key in want_buf:
        if key not in placed:
            errs.append(f"buffers: missing {want_buf[key][0]} buffer of class {key[0]} on device {key[1]}")
    if errs:
        return None, None
    keys = sorted(placed)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[1] != b[1]:
                continue
            oa, sa, ea, na = placed[a]
            ob, sb, eb, nb = placed[b]
            live = (ea is None or sb < ea) and (eb is None or sa < eb)
            if live and oa < ob + nb and ob < oa + na:
                errs.append(f"device {a[1]}: buffers of classes {a[0]} and {b[0]} overlap in time and in bytes")
    peak = sum(kept) + sum(p.bytes[c] for c, _ in uploads)
    for d in range(nd):
        trans = [v for k, v in placed.items() if k[1] == d and v[2] is not None]
        peak += max((sum(n for _, s, e, n in trans if s <= t < e) for _, t, _, _ in trans), default=0)
    return m, peak
