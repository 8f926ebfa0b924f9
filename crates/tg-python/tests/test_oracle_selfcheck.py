"""Self-check of the planner oracles in ``oracle/`` (no Rust needed).

The brute-force oracle, the CP-SAT oracle and the plan checker are three separate readings
of ``docs/planner.md``; here they are held against each other and against hand-computed
optima:

- hand-made problems: brute force, CP-SAT and the checker give the hand-computed result;
- the exact packer against enumeration of every offset assignment;
- brute force with and without its pruning (same optimum);
- brute force against CP-SAT on random small problems (same verdict, makespan and peak),
  every plan of both accepted by the checker;
- the checker rejects corrupted plans;
- the generator produces the variety the planner tests rely on (infeasible cases, memory
  that binds, copies, keeps, aliases, both devices used).

Environment: ``TG_SEED`` (base seed, see conftest), ``TG_ORACLE_SELF_CASES`` (random cases
for brute vs CP-SAT, default 300). A failing case's problem is written to
``$TG_ORACLE_FAIL_DIR`` (default ``/tmp/tg-oracle``) and its seed printed; rebuild it with
``oracle.random_problem(seed)``.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import time
from pathlib import Path

import pytest

from conftest import BASE_SEED
from oracle import brute, check
from oracle.problem import ProblemError, hand_cases, parse_problem, random_problem

SELF_CASES = int(os.environ.get("TG_ORACLE_SELF_CASES", "300"))
FAIL_DIR = Path(os.environ.get("TG_ORACLE_FAIL_DIR", "/tmp/tg-oracle"))

# seed streams, so that the tests draw different problems
STREAM_CHECK, STREAM_PRUNE, STREAM_CPSAT, STREAM_MUTATE, STREAM_VARIETY, STREAM_PACK, STREAM_MEDIUM = range(1, 8)


SUMMARY: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def summary_line(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if SUMMARY and tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():  # shown without -s
            tr.write_line("")
            for k, v in SUMMARY.items():
                tr.write_line(f"[oracle self-check] {k}: {v}")


def seed_of(stream: int, i: int) -> int:
    return BASE_SEED * 100 + stream * 1_000_000 + i


def dump(tag: str, seed: int, problem: dict, **results) -> str:
    FAIL_DIR.mkdir(parents=True, exist_ok=True)
    path = FAIL_DIR / f"{tag}-seed{seed}.json"
    path.write_text(json.dumps({"seed": seed, "problem": problem, **results}, indent=1))
    return f"seed {seed} (oracle.random_problem({seed})), problem and results in {path}"


def key(r: dict) -> tuple:
    return (r["status"], r.get("makespan"), r.get("peak_bytes"))


# ------------------------------------------------------------------------------ hand cases


@pytest.mark.parametrize("name,problem,expected", hand_cases(), ids=[c[0] for c in hand_cases()])
def test_hand_cases_brute(name, problem, expected):
    r = brute.solve(problem)
    assert key(r) == expected, f"{name}: brute force gives {key(r)}, by hand {expected}"
    check.check_result(problem, r)


@pytest.mark.parametrize("name,problem,expected", hand_cases(), ids=[c[0] for c in hand_cases()])
def test_hand_cases_cpsat(name, problem, expected):
    cpsat = pytest.importorskip("oracle.cpsat", reason="SKIPPED: ortools is not installed (pip install 'ortools>=9.15,<10')")
    r = cpsat.solve(problem, time_limit_s=30)
    got = (r["result"]["status"], r["makespan"], r["peak_bytes"]) if r["result"] else (r["status"], None, None)
    assert got == expected, f"{name}: CP-SAT gives {got}, by hand {expected}"
    if r["result"]["plan"] is not None:
        check.check_result(problem, r["result"])


def test_earliest_starts_matter():
    """The hand case built for it tells the definition's starts from free start times."""
    cpsat = pytest.importorskip("oracle.cpsat", reason="SKIPPED: ortools is not installed (pip install 'ortools>=9.15,<10')")
    cases = {n: p for n, p, _ in hand_cases()}
    free = cpsat.solve(cases["earliest_starts_infeasible"], earliest_starts=False, peak=False)
    assert free["status"] == "OPTIMAL" and free["makespan"] == 14, free


# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize("mutate,field", [
    (lambda p: p.pop("devices"), "devices"),
    (lambda p: p["devices"][0].update(cache_budget=10**9), "cache_budget"),
    (lambda p: p["nodes"][1]["options"][0].update(time=0), "time"),
    (lambda p: p["nodes"][1]["options"].append({"kernel": "v", "device": 0, "time": 3, "alias": True}), "alias"),
    (lambda p: p["nodes"][1].update(children=[0, 0], options=[{"kernel": "v", "device": 0, "time": 0, "alias": True}]), "alias"),
    (lambda p: p["nodes"][1].update(children=[7]), "children"),
    (lambda p: p["nodes"][1]["options"][0].update(device=3), "device"),
    (lambda p: p.update(roots=[1, 1]), "roots"),
    (lambda p: p["classes"].append({"bytes": 1, "cacheable": False}), "no node"),
    (lambda p: p["classes"][0].update(bytes=0), "bytes"),
    (lambda p: p.update(links=[{"from": 0, "to": 0, "latency": 1, "bytes_per_us": 1}]), "link"),
    (lambda p: p["nodes"][0].update(children=[1]), "source"),
    (lambda p: p["nodes"][1].update(options=[]), "options"),
    (lambda p: p["classes"][0].update(cacheable="yes"), "cacheable"),
])
def test_parse_errors(mutate, field):
    p = copy.deepcopy(hand_cases()[1][1])
    parse_problem(p)
    mutate(p)
    with pytest.raises(ProblemError, match=field):
        parse_problem(p)


# ------------------------------------------------------------------------------ packer


def test_pack_is_exact():
    """``brute.pack`` against every offset assignment, on random small buffer sets."""
    rng = random.Random(seed_of(STREAM_PACK, 0))
    seen = {True: 0, False: 0}
    for i in range(3000):
        n = rng.randint(1, 5)
        items = []
        for _ in range(n):
            s = rng.randint(0, 5)
            items.append((s, s + rng.randint(1, 4), rng.randint(1, 3)))
        cap = rng.randint(0, 7)
        got = brute.pack(items, cap)
        exists = any(
            all(not (items[a][0] < items[b][1] and items[b][0] < items[a][1]
                     and offs[a] < offs[b] + items[b][2] and offs[b] < offs[a] + items[a][2])
                for a in range(n) for b in range(a + 1, n))
            for offs in itertools.product(*[range(cap - it[2] + 1) for it in items]))
        assert (got is not None) == exists, f"case {i}: items {items} cap {cap}: pack {got}, exists {exists}"
        if got is not None:
            for a in range(n):
                assert 0 <= got[a] and got[a] + items[a][2] <= cap
                for b in range(a + 1, n):
                    live = items[a][0] < items[b][1] and items[b][0] < items[a][1]
                    assert not (live and got[a] < got[b] + items[b][2] and got[b] < got[a] + items[a][2])
        seen[exists] += 1
    assert seen[True] > 300 and seen[False] > 300, seen


# ------------------------------------------------------------------------------ brute force


def test_brute_plans_pass_the_checker():
    n = max(SELF_CASES, 200)
    counts = {"optimal": 0, "infeasible": 0}
    for i in range(n):
        seed = seed_of(STREAM_CHECK, i)
        p = random_problem(seed)
        r = brute.solve(p)
        counts[r["status"]] += 1
        try:
            check.check_result(p, r)
        except check.PlanError as e:
            pytest.fail(f"{e}\n{dump('brute-check', seed, p, brute=r)}")
    SUMMARY["brute force plans accepted by the checker"] = str(counts)
    assert counts["optimal"] > n // 3 and counts["infeasible"] > n // 20, counts


def test_brute_pruning_is_safe():
    n = max(SELF_CASES // 3, 60)
    for i in range(n):
        seed = seed_of(STREAM_PRUNE, i)
        p = random_problem(seed)
        a, b = brute.solve(p), brute.solve(p, prune=False)
        assert key(a) == key(b), f"pruned {key(a)} vs exhaustive {key(b)}: {dump('brute-prune', seed, p, pruned=a, full=b)}"


# ------------------------------------------------------------------------------ brute vs CP-SAT


def test_brute_vs_cpsat():
    cpsat = pytest.importorskip("oracle.cpsat", reason="SKIPPED: ortools is not installed (pip install 'ortools>=9.15,<10')")
    stats = {"optimal": 0, "infeasible": 0, "cpsat_s": 0.0, "brute_s": 0.0}
    for i in range(SELF_CASES):
        seed = seed_of(STREAM_CPSAT, i)
        p = random_problem(seed)
        t = time.perf_counter()
        rb = brute.solve(p)
        stats["brute_s"] += time.perf_counter() - t
        rc = cpsat.solve(p, time_limit_s=60)
        stats["cpsat_s"] += rc["wall_s"]
        where = lambda: dump("brute-cpsat", seed, p, brute=rb, cpsat=rc)  # noqa: E731
        stats[rb["status"]] += 1
        if rb["status"] == "infeasible":
            assert rc["status"] == "INFEASIBLE", f"brute: infeasible, CP-SAT: {rc['status']} {rc['makespan']}: {where()}"
            continue
        assert rc["status"] == "OPTIMAL" and rc["peak_status"] == "OPTIMAL", f"CP-SAT not optimal: {where()}"
        assert (rc["makespan"], rc["peak_bytes"]) == (rb["makespan"], rb["peak_bytes"]), (
            f"brute ({rb['makespan']}, {rb['peak_bytes']}) vs CP-SAT ({rc['makespan']}, {rc['peak_bytes']}): {where()}")
        try:
            check.check_result(p, rc["result"])
        except check.PlanError as e:
            pytest.fail(f"CP-SAT plan rejected: {e}: {where()}")
    SUMMARY["brute force vs CP-SAT"] = (f"{SELF_CASES} cases agree: {stats['optimal']} optimal, "
                                        f"{stats['infeasible']} infeasible; brute {stats['brute_s']:.1f} s, "
                                        f"CP-SAT {stats['cpsat_s']:.1f} s")


# ------------------------------------------------------------------------------ checker


def _mutations(plan: dict, p) -> list[tuple[str, dict]]:
    out = []

    def variant(name, fn):
        q = copy.deepcopy(plan)
        if fn(q) is not False:
            out.append((name, q))

    if plan["steps"]:
        variant("start later", lambda q: q["steps"][0].update(start=q["steps"][0]["start"] + 1, end=q["steps"][0]["end"] + 1))
        variant("drop a step", lambda q: q["steps"].pop())
        variant("longer step", lambda q: q["steps"][-1].update(end=q["steps"][-1]["end"] + 1))
    if plan["buffers"]:
        variant("drop a buffer", lambda q: q["buffers"].pop())
        variant("offset past capacity", lambda q: q["buffers"][0].update(offset=p.capacity[q["buffers"][0]["device"]]))
        variant("negative offset", lambda q: q["buffers"][0].update(offset=-1))

        def shorter(q):
            b = next((b for b in q["buffers"] if b["end"] is not None), None)
            if b is None:
                return False
            b["end"] -= 1

        variant("shorter lifetime", shorter)

        def collide(q):
            bs = q["buffers"]
            for a in range(len(bs)):
                for b in range(len(bs)):
                    x, y = bs[a], bs[b]
                    if a == b or x["device"] != y["device"]:
                        continue
                    live = (x["end"] is None or y["start"] < x["end"]) and (y["end"] is None or x["start"] < y["end"])
                    if live:
                        y["offset"] = x["offset"]
                        return
            return False

        variant("overlapping buffers", collide)
    if plan["option"]:
        c = next(iter(plan["option"]))
        n = plan["choice"][c]
        cur = p.nodes[n].options[plan["option"][c]]
        alt = p.nodes[n].options[(plan["option"][c] + 1) % len(p.nodes[n].options)]
        if len(p.nodes[n].options) > 1 and not (cur.alias and alt.alias and cur.device == alt.device):
            variant("other option", lambda q: q["option"].update({c: (q["option"][c] + 1) % len(p.nodes[n].options)}))
    variant("choice of an unneeded class", lambda q: (
        q["choice"].update({str(c): p.nodes_of[c][0]}) if (c := next(
            (c for c in range(p.num_classes) if str(c) not in q["choice"] and str(c) not in q["keep"]), None)) is not None
        else False))
    if plan["choice"]:
        variant("missing choice", lambda q: q["choice"].pop(next(iter(q["choice"]))))
    return out


def test_checker_rejects_corrupted_plans():
    rejected = 0
    for i in range(200):
        seed = seed_of(STREAM_MUTATE, i)
        p = random_problem(seed)
        r = brute.solve(p)
        if r["status"] != "optimal":
            continue
        P = parse_problem(p)
        for claim, delta in (("makespan", 1), ("peak_bytes", -1)):
            bad = dict(r, **{claim: r[claim] + delta})
            with pytest.raises(check.PlanError):
                check.check_result(P, bad)
        for name, plan in _mutations(r["plan"], P):
            try:
                check.check_result(P, dict(r, plan=plan))
            except check.PlanError:
                rejected += 1
                continue
            pytest.fail(f"the checker accepted a corrupted plan ({name}): {dump('check-mutation', seed, p, plan=plan)}")
    SUMMARY["corrupted plans rejected"] = str(rejected)
    assert rejected > 500, rejected


# ------------------------------------------------------------------------------ generator


def test_generator_variety():
    """The random problems exercise what the planner must get right (else the planner tests
    could pass vacuously)."""
    n = 300
    seen = dict.fromkeys(["infeasible", "infeasible_by_memory", "memory_binds", "copy", "keep", "alias",
                          "two_devices_compute", "home_1", "three_plus_steps", "cycle_in_egraph"], 0)
    for i in range(n):
        seed = seed_of(STREAM_VARIETY, i)
        p = random_problem(seed)
        P = parse_problem(p)
        r = brute.solve(P)
        ample = copy.deepcopy(p)
        for d in ample["devices"]:
            d["capacity"] = 10**6
        ra = brute.solve(ample)
        seen["home_1"] += P.home == 1
        seen["cycle_in_egraph"] += any(k >= P.nodes[x].cls for x in range(len(P.nodes)) for k in P.nodes[x].children)
        if r["status"] == "infeasible":
            seen["infeasible"] += 1
            seen["infeasible_by_memory"] += ra["status"] == "optimal"
            continue
        seen["memory_binds"] += key(r) != key(ra)
        plan = r["plan"]
        seen["copy"] += any(s["kind"] == "copy" for s in plan["steps"])
        seen["keep"] += bool(plan["keep"])
        seen["alias"] += any(P.nodes[plan["choice"][c]].options[o].alias for c, o in plan["option"].items())
        seen["two_devices_compute"] += len({s["device"] for s in plan["steps"] if s["kind"] == "kernel"}) == 2
        seen["three_plus_steps"] += len(plan["steps"]) >= 3
    SUMMARY[f"generator variety over {n} small problems"] = str(seen)
    for what, least in [("infeasible", 30), ("infeasible_by_memory", 15), ("memory_binds", 8), ("copy", 30),
                        ("keep", 15), ("alias", 15), ("two_devices_compute", 10), ("home_1", 10),
                        ("three_plus_steps", 80), ("cycle_in_egraph", 20)]:
        assert seen[what] >= least, f"generator: only {seen[what]} problems with {what} (want >= {least})"


def test_cpsat_medium_plans_pass_the_checker():
    """The CP-SAT model at the size it is used for: its plans are plans of the definition."""
    cpsat = pytest.importorskip("oracle.cpsat", reason="SKIPPED: ortools is not installed (pip install 'ortools>=9.15,<10')")
    found = 0
    for i in range(4):
        seed = seed_of(STREAM_MEDIUM, i)
        p = random_problem(seed, "medium")
        r = cpsat.solve(p, time_limit_s=2)
        if r["result"] is not None and r["result"]["plan"] is not None:
            found += 1
            try:
                check.check_result(p, r["result"])
            except check.PlanError as e:
                pytest.fail(f"CP-SAT plan rejected: {e}: {dump('cpsat-medium', seed, p, cpsat=r['result'])}")
    assert found >= 2, f"CP-SAT found a plan for only {found} of 4 medium problems"
