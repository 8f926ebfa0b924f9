"""The planner (``tensor_graphs.plan_problem``) against the independent oracles of ``oracle/``.

- Hand-made problems with hand-computed optima.
- Small random problems (``TG_ORACLE_CASES``, default 2000): the planner must finish
  (status ``optimal`` or ``infeasible``) with brute force's verdict, exactly its makespan and
  peak, ``lower_bound == makespan``, and a plan the independent checker accepts.
- Medium random problems, 30-80 nodes (``TG_ORACLE_CPSAT_CASES``, default 8): CP-SAT with a
  limit of ``TG_ORACLE_CPSAT_TIME`` units of deterministic time (default 2, about 1-10 s
  here; deterministic, so CP-SAT's answers do not depend on the machine or its load, with
  ``TG_ORACLE_CPSAT_WORKERS`` = 1, the default), the planner with ``time_limit_s =
  TG_ORACLE_RUST_TIME`` (default 10). Where CP-SAT proves the
  optimal makespan the planner must reach it (and, if it claims optimality, match CP-SAT's
  proven peak); where CP-SAT only has an incumbent the planner must equal or beat it; its
  makespan is never below CP-SAT's proven bound, its lower bound never above CP-SAT's proven
  optimum; its plan passes the checker.

- Two-device pieces of the real Gemma problems (``oracle.gemma``: connected sub-DAGs of
  ``tests/fixtures/planning/gemma-{6,128}-2dev.json`` with their real byte sizes, kernel
  times on both devices and link): ``TG_ORACLE_GEMMA_CASES`` (default 30) of 4-14 computed
  classes against brute force (exactly its optimum, as the small cases), and
  ``TG_ORACLE_GEMMA_CPSAT_CASES`` (default 6) of 8-14 classes against CP-SAT (as the medium
  cases). About 20 s in all.

Seeds derive from ``TG_SEED`` (see conftest) and are printed with every failure; the failing
problem and both results are written to ``$TG_ORACLE_FAIL_DIR`` (default ``/tmp/tg-oracle``).
Rebuild a problem with ``oracle.random_problem(seed)`` (small) or
``oracle.random_problem(seed, "medium")``. A summary line with the counts is printed at the
end of the module.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import BASE_SEED
from oracle import brute, check, gemma
from oracle.problem import hand_cases, random_problem

tg = pytest.importorskip("tensor_graphs", reason="SKIPPED: the tensor_graphs package is not installed")
plan_problem = getattr(tg, "plan_problem", None)
if plan_problem is None:
    pytest.skip("SKIPPED: tensor_graphs.plan_problem is missing (this wheel was built without the planner "
                "bindings of issue 6)", allow_module_level=True)

SMALL_CASES = int(os.environ.get("TG_ORACLE_CASES", "2000"))
GEMMA_CASES = int(os.environ.get("TG_ORACLE_GEMMA_CASES", "30"))
GEMMA_CPSAT_CASES = int(os.environ.get("TG_ORACLE_GEMMA_CPSAT_CASES", "6"))
GEMMA_FIXTURES = ("gemma-6-2dev.json", "gemma-128-2dev.json")
MEDIUM_CASES = int(os.environ.get("TG_ORACLE_CPSAT_CASES", "8"))
CPSAT_TIME = float(os.environ.get("TG_ORACLE_CPSAT_TIME", "2"))
CPSAT_WORKERS = int(os.environ.get("TG_ORACLE_CPSAT_WORKERS", "1"))
RUST_TIME = float(os.environ.get("TG_ORACLE_RUST_TIME", "10"))
FAIL_DIR = Path(os.environ.get("TG_ORACLE_FAIL_DIR", "/tmp/tg-oracle"))
BATCH = 250
MAX_REPORTED = 5  # failures described per batch

STREAM_SMALL, STREAM_MEDIUM, STREAM_GEMMA = 11, 12, 13

SUMMARY: dict[str, float] = {}


def seed_of(stream: int, i: int) -> int:
    return BASE_SEED * 100 + stream * 1_000_000 + i


def count(what: str, n: float = 1) -> None:
    SUMMARY[what] = SUMMARY.get(what, 0) + n


@pytest.fixture(scope="module", autouse=True)
def summary_line(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if SUMMARY:
        parts = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(SUMMARY.items()))
        line = f"[planner oracle] {parts}"
        capman = request.config.pluginmanager.get_plugin("capturemanager")
        if tr is not None and capman is not None:
            with capman.global_and_fixture_disabled():  # shown without -s
                tr.write_line("")
                tr.write_line(line)
        else:
            print(line)


def dump(tag: str, seed: int | str, problem: dict, **results) -> str:
    FAIL_DIR.mkdir(parents=True, exist_ok=True)
    path = FAIL_DIR / f"{tag}-seed{seed}.json"
    path.write_text(json.dumps({"seed": seed, "problem": problem, **results}, indent=1, default=str))
    what = f"case {seed}" if isinstance(seed, str) else f"seed {seed}"
    return f"{what}: problem and results in {path}"


def run_planner(problem: dict, time_limit_s: float) -> tuple[dict, float]:
    t = time.perf_counter()
    out = plan_problem(json.dumps(problem), time_limit_s=time_limit_s, node_limit=None)
    dt = time.perf_counter() - t
    r = json.loads(out)
    if not isinstance(r, dict):
        raise AssertionError(f"plan_problem returned {type(r).__name__}, not a JSON object")
    return r, dt


def compare_exact(problem: dict, want: tuple, r: dict) -> list[str]:
    """Differences between a planner result and an exact optimum ``(status, M, P)``."""
    errs = []
    status = r.get("status")
    if status not in ("optimal", "infeasible"):
        return [f"status {status!r}: a small problem must be solved to the end (optimal or infeasible)"]
    if status != want[0]:
        return [f"status {status}, the oracle says {want[0]} (makespan {want[1]}, peak {want[2]})"]
    if status == "infeasible":
        if r.get("plan") is not None:
            errs.append("an infeasible result with a plan")
        return errs
    if (r.get("makespan"), r.get("peak_bytes")) != want[1:]:
        errs.append(f"(makespan, peak_bytes) = ({r.get('makespan')}, {r.get('peak_bytes')}), "
                    f"the oracle's optimum is ({want[1]}, {want[2]})")
    if r.get("lower_bound") != r.get("makespan"):
        errs.append(f"status optimal but lower_bound {r.get('lower_bound')} != makespan {r.get('makespan')}")
    try:
        check.check_result(problem, r)
    except check.PlanError as e:
        errs.append(f"plan rejected by the checker: {e}")
    return errs


# ------------------------------------------------------------------------------ hand cases


@pytest.mark.parametrize("name,problem,expected", hand_cases(), ids=[c[0] for c in hand_cases()])
def test_hand_cases(name, problem, expected):
    r, _ = run_planner(problem, RUST_TIME)
    errs = compare_exact(problem, expected, r)
    count("hand cases")
    assert not errs, f"{name}: " + "; ".join(errs) + f"\n{dump('planner-hand', name, problem, planner=r)}"


# ------------------------------------------------------------------------------ small: brute force


@pytest.mark.parametrize("batch", range((SMALL_CASES + BATCH - 1) // BATCH))
def test_small_vs_brute_force(batch):
    failures = []
    lo, hi = batch * BATCH, min(SMALL_CASES, (batch + 1) * BATCH)
    for i in range(lo, hi):
        seed = seed_of(STREAM_SMALL, i)
        p = random_problem(seed)
        t = time.perf_counter()
        b = brute.solve(p)
        count("brute s", time.perf_counter() - t)
        try:
            r, dt = run_planner(p, RUST_TIME)
            count("planner s", dt)
            errs = compare_exact(p, (b["status"], b["makespan"], b["peak_bytes"]), r)
        except Exception as e:  # an exception from the binding is a failure of this case
            r, errs = {"error": repr(e)}, [f"plan_problem raised {e!r}"]
        count("small cases")
        count(f"small {b['status']}")
        if errs:
            count("small FAILED")
            failures.append(f"- {'; '.join(errs)}\n  {dump('planner-small', seed, p, brute=b, planner=r)}")
    assert not failures, f"{len(failures)} of {hi - lo} small cases failed (first {MAX_REPORTED}):\n" + "\n".join(
        failures[:MAX_REPORTED])


# ------------------------------------------------------------------------------ medium: CP-SAT


@pytest.mark.parametrize("i", range(MEDIUM_CASES))
def test_medium_vs_cpsat(i):
    seed = seed_of(STREAM_MEDIUM, i)
    compare_cpsat(random_problem(seed, "medium"), seed, "medium", f"oracle.random_problem({seed}, 'medium')")


# ------------------------------------------------------------------------------ Gemma pieces


def gemma_cases(which: str, count: int, sizes: tuple[int, int], max_space: int | None) -> list[tuple[str, dict]]:
    """``count`` pieces, half from each fixture, named by fixture, stream seed and index."""
    out = []
    for f, name in enumerate(GEMMA_FIXTURES):
        seed = seed_of(STREAM_GEMMA, 2 * f + (which == "cpsat"))
        n = (count + 1 - f) // 2
        for i, p in enumerate(gemma.cuts(name, seed, n, sizes, max_space)):
            out.append((f"{name}:{seed}:{i}", p))
    return out


def test_gemma_pieces_vs_brute_force():
    failures = []
    cases = gemma_cases("brute", GEMMA_CASES, (4, 14), 20000)
    assert len(cases) == GEMMA_CASES, f"only {len(cases)} of {GEMMA_CASES} pieces cut"
    for name, p in cases:
        t = time.perf_counter()
        b = brute.solve(p)
        count("gemma brute s", time.perf_counter() - t)
        r, dt = run_planner(p, RUST_TIME)
        count("gemma planner s", dt)
        errs = compare_exact(p, (b["status"], b["makespan"], b["peak_bytes"]), r)
        count("gemma cases")
        if b["plan"] is not None and any(s["kind"] == "kernel" and s["device"] != p.get("home", 0) for s in b["plan"]["steps"]):
            count("gemma optimum uses the accelerator")
        if b["plan"] is not None and any(s["kind"] == "kernel" and s["device"] == p.get("home", 0) for s in b["plan"]["steps"]):
            count("gemma optimum uses the cpu")
        if errs:
            count("gemma FAILED")
            failures.append(f"- {name}: {'; '.join(errs)}\n  {dump('planner-gemma', name.replace(':', '-'), p, brute=b, planner=r)}")
        else:
            count("gemma matched brute force")
    assert not failures, f"{len(failures)} of {len(cases)} Gemma pieces failed (first {MAX_REPORTED}):\n" + "\n".join(
        failures[:MAX_REPORTED])


@pytest.mark.parametrize("i", range(GEMMA_CPSAT_CASES))
def test_gemma_pieces_vs_cpsat(i):
    name, p = gemma_cases("cpsat", GEMMA_CPSAT_CASES, (8, 14), None)[i]
    compare_cpsat(p, name.replace(":", "-"), "gemma piece", f"oracle.gemma.cuts({name!r})")


def compare_cpsat(p: dict, seed, what: str, rebuild: str) -> None:
    """The planner against CP-SAT on ``p`` (see the module doc, medium cases)."""
    cpsat = pytest.importorskip("oracle.cpsat", reason="SKIPPED: ortools is not installed (pip install 'ortools>=9.15,<10')")
    cp = cpsat.solve(p, time_limit_s=CPSAT_TIME, workers=CPSAT_WORKERS)
    count(f"{what} cpsat s", cp["wall_s"])
    r, dt = run_planner(p, RUST_TIME)
    count(f"{what} planner s", dt)
    count(f"{what} cases")
    count(f"{what} cpsat {cp['status']}")
    errs = []
    status = r.get("status")
    has_plan = status in ("optimal", "feasible")
    m = r.get("makespan")
    if status not in check.STATUSES:
        errs.append(f"status {status!r}")
    if has_plan:
        try:
            check.check_result(p, r)
        except check.PlanError as e:
            errs.append(f"plan rejected by the checker: {e}")
        if cp["bound"] is not None and m is not None and m < cp["bound"]:
            errs.append(f"makespan {m} is below CP-SAT's proven bound {cp['bound']}")
    lb = r.get("lower_bound")
    if cp["status"] == "INFEASIBLE":
        if status not in ("infeasible", "unknown"):
            errs.append(f"CP-SAT proved the problem infeasible, the planner says {status} with makespan {m}")
    elif cp["status"] == "OPTIMAL":
        if not has_plan:
            errs.append(f"CP-SAT found the optimum {cp['makespan']}, the planner says {status}")
        elif m != cp["makespan"]:
            errs.append(f"makespan {m}, CP-SAT's proven optimum is {cp['makespan']}")
        elif status == "optimal":
            if cp["peak_status"] == "OPTIMAL" and r.get("peak_bytes") != cp["peak_bytes"]:
                errs.append(f"optimal peak {r.get('peak_bytes')}, CP-SAT's proven peak is {cp['peak_bytes']}")
            elif cp["peak_bytes"] is not None and r.get("peak_bytes") > cp["peak_bytes"]:
                errs.append(f"'optimal' peak {r.get('peak_bytes')} above CP-SAT's plan ({cp['peak_bytes']})")
        if lb is not None and lb > cp["makespan"]:
            errs.append(f"lower_bound {lb} above the proven optimum {cp['makespan']}")
        if not errs:
            count(f"{what} matched the CP-SAT optimum")
    elif cp["status"] == "FEASIBLE":
        if not has_plan:
            errs.append(f"CP-SAT found a plan of makespan {cp['makespan']}, the planner says {status}")
        elif m > cp["makespan"]:
            errs.append(f"makespan {m} is worse than CP-SAT's incumbent {cp['makespan']}")
        if lb is not None and lb > cp["makespan"]:
            errs.append(f"lower_bound {lb} above a makespan CP-SAT achieves ({cp['makespan']})")
        if not errs:
            count(f"{what} beat CP-SAT's incumbent" if m < cp["makespan"] else f"{what} equalled CP-SAT's incumbent")
    if errs:
        count(f"{what} FAILED")
    cp_short = {k: v for k, v in cp.items() if k != "result"}
    assert not errs, "; ".join(errs) + (f"\n{dump('planner-' + what.replace(' ', '-'), seed, p, cpsat=cp_short, cpsat_result=cp['result'], planner=r)}"
                                        f" ({rebuild})")
