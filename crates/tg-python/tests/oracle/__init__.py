"""Independent oracles for the planning problem of ``docs/planner.md``.

Written from the definition alone (not from the Rust planner), so the planner can be tested
against them:

- :mod:`oracle.problem`: parse and validate a JSON problem, and a seeded random generator;
- :mod:`oracle.brute`: exhaustive enumeration of every decision (small problems), returning
  the lexicographic optimum ``(makespan, peak)`` with a plan, or ``infeasible``;
- :mod:`oracle.cpsat`: the same problem as an OR-tools CP-SAT model (medium problems);
- :mod:`oracle.check`: an independent checker of a result's ``plan``.

Only the standard library is needed, except :mod:`oracle.cpsat` (``ortools``).
"""

from .problem import Problem, ProblemError, parse_problem, random_problem

__all__ = ["Problem", "ProblemError", "parse_problem", "random_problem"]
