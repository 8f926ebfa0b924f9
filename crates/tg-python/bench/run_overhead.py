"""Overhead of a Python ``Compiled.run()`` call on a tiny graph (``x + 1`` on 4 floats).

The engine's work is a few nanoseconds here, so the figure is the cost of the call itself:
argument parsing, input checks and the copy into an owned tensor, releasing and
re-acquiring the GIL, the executor (one step inside the CPU device's thread pool), and
the output handed to numpy. A benchmark, not a test: it asserts nothing.

    python crates/tg-python/bench/run_overhead.py [--repeat 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit

import numpy as np

import tensor_graphs as tg


def best_us(stmt, number: int, repeat: int) -> tuple[float, float]:
    times = timeit.repeat(stmt, number=number, repeat=repeat)
    per = [t / number * 1e6 for t in times]
    return min(per), statistics.median(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=20000)
    a = ap.parse_args()

    g = tg.Graph()
    x = g.input("x", (4,))
    g.output("y", x + 1.0)
    feeds = {"x": np.arange(4, dtype=np.float32)}
    print(f"load average: {os.getloadavg()[0]:.2f}, cores: {os.cpu_count()}")
    print(f"{'what':<44} {'min µs':>8} {'median µs':>10}")
    rows = []
    for threads in (1, 0):
        c = tg.compile(g, threads=threads)
        assert c.run(feeds)["y"].tolist() == [1.0, 2.0, 3.0, 4.0]
        label = f"run(dict), threads={threads or tg.default_threads()}"
        rows.append((label, *best_us(lambda c=c: c.run(feeds), a.number, a.repeat)))
        rows.append((label.replace("run(dict)", "run(x=...)"), *best_us(lambda c=c: c.run(x=feeds["x"]), a.number, a.repeat)))
    # Reference points: a numpy add on the same array and an empty Python call.
    rows.append(("numpy: x + 1 (for scale)", *best_us(lambda: feeds["x"] + 1.0, a.number, a.repeat)))
    rows.append(("empty Python function call", *best_us(lambda: None, a.number, a.repeat)))
    for label, lo, med in rows:
        print(f"{label:<44} {lo:8.2f} {med:10.2f}")


if __name__ == "__main__":
    main()
