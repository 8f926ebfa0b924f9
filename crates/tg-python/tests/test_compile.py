"""compile(): options and explain(); run(): memory semantics (what is copied, what is
owned, what may alias) and thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensor_graphs as tg
from conftest import optional_stages

OPTIONAL = optional_stages()


def model(rng):
    g = tg.Graph()
    x = g.input("x", (4, 6))
    w = g.constant(rng.standard_normal((6, 5)))
    h = tg.relu(x @ w + 0.5)
    dead = tg.exp(x) * 3.0  # no output uses it: dce removes it
    assert dead.shape == (4, 6)
    g.output("h", h)
    g.output("t", h.T)  # a view: permute
    g.output("row", h[1])  # a view: slice + reshape
    g.output("sm", tg.softmax(h, 0))
    return g


def test_explain_dict_and_text(rng):
    g = model(rng)
    c = tg.compile(g)
    d = c.explain()
    assert [s["name"] for s in d["stages"]] == list(tg.STAGES)
    assert all(s["ran"] for s in d["stages"])
    assert all(isinstance(s["micros"], int) and isinstance(s["summary"], str) for s in d["stages"])
    dce = next(s for s in d["stages"] if s["name"] == "dce")
    assert "->" in dce["summary"]
    assert d["graph"]["nodes"] == g.num_nodes and d["graph"]["ops"]["matmul"] == 1
    assert d["plan"]["steps"] > 0 and d["plan"]["arena_bytes"] == c.arena_bytes > 0
    assert sum(d["plan"]["kernels"].values()) == d["plan"]["steps"]
    assert any(k.startswith("matmul") for k in d["plan"]["kernels"])
    assert "step_list" not in d["plan"] and len(c.explain(steps=True)["plan"]["step_list"]) == d["plan"]["steps"]
    assert d["options"] == {"disabled": [], "numerics": "exact", "threads": tg.default_threads()}
    text = c.explain(format="text")
    for s in tg.STAGES:
        assert s in text
    assert text.startswith("graph: ") and "plan:" in text and "plan valid" in text
    assert "matmul" in c.explain(format="text", steps=True).split("plan:")[1]


def test_explain_html_is_the_plan_report(rng):
    c = tg.compile(model(rng))
    page = c.explain(format="html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # Self-contained: the data and the script that draws the schedule and the memory map.
    assert '<svg id="gantt"' in page and 'id="data"' in page and "memmap" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    frame = c._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and "&quot;" not in page and "<svg" not in frame.split("srcdoc=")[0]
    with pytest.raises(tg.OptionsError, match="html"):
        c.explain(format="pdf")


@pytest.mark.parametrize("disabled", [[s] for s in OPTIONAL] + [OPTIONAL])
def test_stages_switched_off_give_the_same_results(disabled, rng):
    g = model(rng)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    base = tg.compile(g).run(x=x)
    c = tg.compile(g, disable=disabled, threads=1)
    got = c.run(x=x)
    for k in base:
        np.testing.assert_array_equal(got[k], base[k], err_msg=k)
    stages = {s["name"]: s for s in c.explain()["stages"]}
    for s in disabled:
        assert not stages[s]["ran"]
    assert "(switched off)" in c.explain(format="text")
    assert c.threads == 1


def test_outputs_are_fresh_owned_arrays(rng):
    """The engine copies each output out of its arena into a new buffer that the array then
    owns (no second copy): results of an earlier run never change, even though the next
    run reuses the arena, and outputs never share memory with inputs or each other."""
    g = model(rng)
    c = tg.compile(g)
    x1 = rng.standard_normal((4, 6)).astype(np.float32)
    x2 = rng.standard_normal((4, 6)).astype(np.float32)
    keep = x1.copy()
    r1 = c.run(x=x1)
    snap = {k: v.copy() for k, v in r1.items()}
    r2 = c.run(x=x2)
    for k in r1:
        np.testing.assert_array_equal(r1[k], snap[k], err_msg=f"{k} changed by a later run")
        assert not np.shares_memory(r1[k], r2[k])
        assert not np.shares_memory(r1[k], x1)
        v = r1[k]
        assert v.flags.c_contiguous and v.flags.writeable
        # Memory handed over from Rust: the array's base is the container of the Rust
        # vector the engine wrote (rust-numpy's PySliceContainer), not a numpy copy.
        assert type(v.base).__name__ == "PySliceContainer", type(v.base)
    np.testing.assert_array_equal(x1, keep)  # inputs are never written
    others = [r1[k] for k in r1]
    for i in range(len(others)):
        for j in range(i + 1, len(others)):
            assert not np.shares_memory(others[i], others[j])
    r1["h"][:] = -1  # writing an output affects nothing else
    np.testing.assert_array_equal(c.run(x=x1)["h"], snap["h"])


def test_output_that_is_an_input_or_a_constant():
    g = tg.Graph()
    x = g.input("x", (3,))
    g.output("x", x)
    g.output("c", g.constant(np.arange(3.0)))
    c = tg.compile(g)
    a = np.float32([1, 2, 3])
    out = c.run(x=a)
    np.testing.assert_array_equal(out["x"], a)
    assert not np.shares_memory(out["x"], a)
    out["c"][:] = 0
    np.testing.assert_array_equal(c.run(x=a)["c"], np.arange(3.0, dtype=np.float32))


def test_non_contiguous_and_read_only_inputs(rng):
    g = tg.Graph()
    x = g.input("x", (3, 4))
    g.output("y", x * 2.0)
    c = tg.compile(g)
    base = rng.standard_normal((4, 8)).astype(np.float32)
    for view in (base.T[:3, :], base[::-1, ::2][:3], np.asfortranarray(base[:3, :4])):
        assert view.shape == (3, 4)
        np.testing.assert_array_equal(c.run(x=view)["y"], view * 2)
    ro = base[:3, :4].copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(c.run(x=ro)["y"], ro * 2)


def test_graph_can_grow_after_compile():
    g = tg.Graph()
    x = g.input("x", (2,))
    g.output("a", x + 1.0)
    c1 = tg.compile(g)
    g.output("b", x * 3.0)
    c2 = tg.compile(g)
    a = np.float32([1, 2])
    assert list(c1.run(x=a)) == ["a"]
    assert list(c2.run(x=a)) == ["a", "b"]
    assert c2.inputs == {"x": ((2,), "float32")}
    assert "Compiled(inputs=['x'], outputs=['a', 'b']" in repr(c2)


def test_graph_without_inputs_runs_without_arguments():
    g = tg.Graph()
    g.output("c", g.arange(4).astype("float32") * 0.5)
    np.testing.assert_array_equal(tg.compile(g).run()["c"], np.arange(4, dtype=np.float32) * 0.5)


def test_concurrent_runs_of_one_compiled_graph(rng):
    """Runs of one Compiled from several threads are serialized on its arena: every thread
    gets exactly its own result."""
    g = tg.Graph()
    x = g.input("x", (64, 64))
    g.output("y", tg.softmax(x @ x.T, -1))
    c = tg.compile(g)
    xs = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4)]
    want = [c.run(x=v)["y"] for v in xs]
    errs = []

    def worker(i):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(c.run(x=xs[i])["y"], want[i])
        except Exception as e:  # pragma: no cover - reported below
            errs.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts), "deadlock"
    assert not errs, errs
