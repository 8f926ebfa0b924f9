"""Every op of the IR, one at a time, through compile + run, against numpy (float64) and the
reference interpreter; operator overloads with Python scalars, numpy arrays and
broadcasting; indexing; the composite ops built in Python.

Float32 tolerance: ``|engine - numpy| <= 2e-6 * (1 + |numpy|)`` for single ops on values
of order 1 (one float32 rounding, SIMD transcendental approximations within a few ulps),
looser where stated. Exact ops (data movement, comparisons, integer arithmetic) must match
bitwise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensor_graphs as tg

TOL = 2e-6


def run(g: tg.Graph, feeds: dict, **opts) -> dict:
    """Compiles and runs `g`; also checks the reference interpreter gives the same values
    (to float32 precision) so every op is covered by both."""
    out = tg.compile(g, **opts).run(feeds)
    ref = tg.reference_eval(g, feeds)
    for k, v in out.items():
        r = ref[k]
        if v.dtype == np.float32:
            np.testing.assert_allclose(v, r, rtol=1e-5, atol=1e-5, err_msg=f"engine vs reference for {k}")
        else:
            np.testing.assert_array_equal(v, r, err_msg=f"engine vs reference for {k}")
    return out


def close(got: np.ndarray, want: np.ndarray, tol: float = TOL) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, f"{got.shape} != {want.shape}"
    err = np.abs(got.astype(np.float64) - want)
    lim = tol * (1 + np.abs(want))
    assert (err <= lim).all(), f"max error {err.max():.3g}"


def f32(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


UNARY = {
    "negative": (tg.negative, np.negative, None),
    "exp": (tg.exp, np.exp, None),
    "log": (tg.log, np.log, (0.1, 4)),
    "tanh": (tg.tanh, np.tanh, None),
    "sqrt": (tg.sqrt, np.sqrt, (0.0, 4)),
    "rsqrt": (tg.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 4)),
    "reciprocal": (tg.reciprocal, lambda x: 1 / x, (0.2, 4)),
    "sin": (tg.sin, np.sin, (-6, 6)),
    "cos": (tg.cos, np.cos, (-6, 6)),
    "abs": (tg.abs, np.abs, None),
}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 33)])
def test_unary(name, shape, rng):
    f, nf, dom = UNARY[name]
    lo, hi = dom or (-3, 3)
    x = f32(rng, *shape, lo=lo, hi=hi)
    g = tg.Graph()
    g.output("y", f(g.input("x", shape)))
    y = run(g, {"x": x})["y"]
    assert y.dtype == np.float32
    close(y, nf(x.astype(np.float64)), 4e-6)


BINARY = {
    "add": (tg.add, np.add),
    "subtract": (tg.subtract, np.subtract),
    "multiply": (tg.multiply, np.multiply),
    "divide": (tg.divide, np.divide),
    "maximum": (tg.maximum, np.maximum),
    "minimum": (tg.minimum, np.minimum),
}
BROADCASTS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 5), (3, 1)), ((), (2, 3)), ((5, 1), (1, 7))]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", BROADCASTS)
def test_binary_f32(name, shapes, rng):
    f, nf = BINARY[name]
    a, b = f32(rng, *shapes[0]), f32(rng, *shapes[1], lo=0.5, hi=2.5)
    g = tg.Graph()
    g.output("y", f(g.input("a", shapes[0]), g.input("b", shapes[1])))
    close(run(g, {"a": a, "b": b})["y"], nf(a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "maximum", "minimum", "divide"])
def test_binary_i32(name, rng):
    f, nf = BINARY[name]
    a = rng.integers(-50, 50, (4, 5)).astype(np.int32)
    b = rng.integers(1, 9, (5,)).astype(np.int32) * rng.choice([-1, 1], (5,)).astype(np.int32)
    g = tg.Graph()
    g.output("y", f(g.input("a", a.shape, "int32"), g.input("b", b.shape, np.int32)))
    y = run(g, {"a": a, "b": b})["y"]
    assert y.dtype == np.int32
    want = (np.trunc(a / b) if name == "divide" else nf(a, b)).astype(np.int32)  # C-style truncation
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("name,nf", [("logical_and", np.logical_and), ("logical_or", np.logical_or)])
def test_logical(name, nf, rng):
    a, b = rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5
    g = tg.Graph()
    ta, tb = g.input("a", a.shape, "bool"), g.input("b", b.shape, "bool")
    g.output("y", getattr(tg, name)(ta, tb))
    g.output("op", (ta & tb) if name == "logical_and" else (ta | tb))
    g.output("not", tg.logical_not(ta))
    g.output("inv", ~ta)
    out = run(g, {"a": a, "b": b})
    np.testing.assert_array_equal(out["y"], nf(a, b))
    np.testing.assert_array_equal(out["op"], nf(a, b))
    np.testing.assert_array_equal(out["not"], ~a)
    np.testing.assert_array_equal(out["inv"], ~a)


CMP = {
    "equal": (tg.equal, np.equal, lambda x, y: x == y),
    "not_equal": (tg.not_equal, np.not_equal, lambda x, y: x != y),
    "less": (tg.less, np.less, lambda x, y: x < y),
    "less_equal": (tg.less_equal, np.less_equal, lambda x, y: x <= y),
    "greater": (tg.greater, np.greater, lambda x, y: x > y),
    "greater_equal": (tg.greater_equal, np.greater_equal, lambda x, y: x >= y),
}


@pytest.mark.parametrize("name", list(CMP))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_compare(name, dtype, rng):
    f, nf, op = CMP[name]
    a = rng.integers(-3, 4, (4, 6)).astype(dtype)  # small integers: plenty of ties
    b = rng.integers(-3, 4, (6,)).astype(dtype)
    g = tg.Graph()
    ta, tb = g.input("a", a.shape, dtype), g.input("b", b.shape, dtype)
    g.output("f", f(ta, tb))
    g.output("op", op(ta, tb))
    g.output("scalar", op(ta, 1))
    out = run(g, {"a": a, "b": b})
    for k in ("f", "op"):
        assert out[k].dtype == np.bool_
        np.testing.assert_array_equal(out[k], nf(a, b))
    np.testing.assert_array_equal(out["scalar"], nf(a, 1))


def test_where(rng):
    c = rng.random((3, 1, 5)) < 0.5
    a, b = f32(rng, 4, 5), f32(rng, 3, 4, 1)
    g = tg.Graph()
    tc, ta, tb = g.input("c", c.shape, "bool"), g.input("a", a.shape), g.input("b", b.shape)
    g.output("y", tg.where(tc, ta, tb))
    g.output("s", tg.where(tc, ta, 0.5))
    g.output("ss", tg.where(tc, 1, 2))
    out = run(g, {"c": c, "a": a, "b": b})
    np.testing.assert_array_equal(out["y"], np.where(c, a, b))
    np.testing.assert_array_equal(out["s"], np.where(c, a, np.float32(0.5)))
    np.testing.assert_array_equal(out["ss"], np.where(c, 1, 2).astype(np.int32))
    assert out["ss"].dtype == np.int32


def test_casts(rng):
    x = np.array([-2.7, -0.5, 0.0, 0.49, 1.5, 3.99, -7.0], np.float32)
    i = np.array([-3, 0, 2, 7], np.int32)
    b = np.array([True, False, True])
    g = tg.Graph()
    tx, ti, tb = g.input("x", x.shape), g.input("i", i.shape, "int32"), g.input("b", b.shape, "bool")
    g.output("f2i", tx.astype("int32"))
    g.output("i2f", tg.cast(ti, np.float32))
    g.output("b2f", tb.astype(tg.float32))
    g.output("b2i", tb.astype("int32"))
    g.output("f2b", tx.astype("bool"))
    g.output("same", tx.astype("float32") + 0.0)
    out = run(g, {"x": x, "i": i, "b": b})
    np.testing.assert_array_equal(out["f2i"], np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(out["i2f"], i.astype(np.float32))
    np.testing.assert_array_equal(out["b2f"], b.astype(np.float32))
    np.testing.assert_array_equal(out["b2i"], b.astype(np.int32))
    np.testing.assert_array_equal(out["f2b"], x.astype(bool))
    np.testing.assert_array_equal(out["same"], x)


@pytest.mark.parametrize("name,nf", [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, nf, axis, keepdims, rng):
    x = f32(rng, 3, 5, 7)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    g.output("f", getattr(tg, name)(tx, axis, keepdims))
    g.output("m", getattr(tx, name)(axis=axis, keepdims=keepdims))
    out = run(g, {"x": x})
    want = nf(x.astype(np.float64), axis=axis, keepdims=keepdims)
    close(out["f"], want, 1e-5)
    close(out["m"], want, 1e-5)


def test_argmax_first_on_ties(rng):
    x = rng.integers(0, 3, (4, 9)).astype(np.float32)  # many ties
    g = tg.Graph()
    tx = g.input("x", x.shape)
    g.output("a1", tg.argmax(tx, -1))
    g.output("a0", tx.argmax(0, keepdims=True))
    out = run(g, {"x": x})
    np.testing.assert_array_equal(out["a1"], np.argmax(x, -1))
    np.testing.assert_array_equal(out["a0"], np.argmax(x, 0)[None, :])
    assert out["a1"].dtype == np.int32


@pytest.mark.parametrize(
    "sa,sb,tb",
    [((3, 4), (4, 5), False), ((3, 4), (5, 4), True), ((2, 3, 4), (4, 6), False), ((2, 1, 3, 4), (5, 4, 2), False),
     ((4,), (4, 3), False), ((2, 3, 4), (4,), False), ((4,), (4,), False), ((1, 17), (17, 33), False), ((2, 3, 8), (2, 5, 8), True)],
)
def test_matmul(sa, sb, tb, rng):
    a, b = f32(rng, *sa), f32(rng, *sb)
    g = tg.Graph()
    ta, tb_ = g.input("a", sa), g.input("b", sb)
    g.output("y", tg.matmul(ta, tb_, transpose_b=tb))
    if not tb:
        g.output("op", ta @ tb_)
    out = run(g, {"a": a, "b": b})
    bb = np.swapaxes(b, -1, -2) if tb else b
    want = np.matmul(a.astype(np.float64), bb.astype(np.float64))
    close(out["y"], want, 1e-5)
    if not tb:
        close(out["op"], want, 1e-5)


def test_matmul_with_constant_weight(rng):
    w = rng.standard_normal((5, 3))  # float64 data becomes a float32 constant
    x = f32(rng, 2, 5)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    g.output("y", tx @ g.constant(w))
    g.output("yt", tg.matmul(tx, g.constant(w.T.copy(), name="wt"), transpose_b=True))
    g.output("left", w.T @ tx.T)  # numpy array on the left: Tensor's reflected operator
    out = run(g, {"x": x})
    want = x.astype(np.float64) @ w.astype(np.float32).astype(np.float64)
    close(out["y"], want, 1e-5)
    close(out["yt"], want, 1e-5)
    close(out["left"], want.T, 1e-5)


def test_data_movement(rng):
    x = f32(rng, 2, 3, 4)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    outs = {
        "reshape": (tg.reshape(tx, (4, 6)), x.reshape(4, 6)),
        "reshape_m1": (tx.reshape(-1, 2), x.reshape(-1, 2)),
        "flatten": (tx.flatten(), x.flatten()),
        "transpose": (tg.transpose(tx, (2, 0, 1)), x.transpose(2, 0, 1)),
        "T": (tx.T, x.T),
        "permute": (tg.permute(tx, [1, 0, 2]), x.transpose(1, 0, 2)),
        "broadcast": (tg.broadcast_to(tx[:, :1, :], (5, 2, 3, 4)), np.broadcast_to(x[:, :1, :], (5, 2, 3, 4))),
        "expand": (tg.expand(tx[0, :, :1], (3, 7)), np.broadcast_to(x[0, :, :1], (3, 7))),
        "expand_dims": (tg.expand_dims(tx, 1), np.expand_dims(x, 1)),
        "squeeze": (tg.squeeze(tx[:, :1, None]), np.squeeze(x[:, :1, None])),
        "slice": (tg.slice_axis(tx, 2, 1, 3), x[:, :, 1:3]),
        "concat": (tg.concatenate([tx, tx[:, :2] * 1.0], axis=1), np.concatenate([x, x[:, :2]], 1)),
        "concat3": (tg.concat([tx, tx, tx], -1), np.concatenate([x, x, x], -1)),
        "stack": (tg.stack([tx, tx + 0.0], 3), np.stack([x, x], 3)),
    }
    for k, (t, _) in outs.items():
        g.output(k, t)
    out = run(g, {"x": x})
    for k, (_, want) in outs.items():
        np.testing.assert_array_equal(out[k], want, err_msg=k)


def test_indexing(rng):
    x = f32(rng, 4, 5, 6)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    keys = [1, -1, (slice(1, 3),), (slice(None), 2), (Ellipsis, 3), (None, 0, slice(None, -1)), (1, None, slice(2, 5), -2),
            (slice(-3, None), Ellipsis, None), (slice(4, 2),), ()]
    for i, k in enumerate(keys):
        g.output(f"k{i}", tx[k])
    out = run(g, {"x": x})
    for i, k in enumerate(keys):
        np.testing.assert_array_equal(out[f"k{i}"], x[k], err_msg=str(k))
    rows = [r for r in tx]
    assert len(rows) == len(tx) == 4 and rows[2].shape == (5, 6)


def test_gather(rng):
    table = f32(rng, 9, 5)
    ids = rng.integers(0, 9, (3, 4)).astype(np.int32)
    g = tg.Graph()
    tt, ti = g.input("t", table.shape), g.input("i", ids.shape, "int32")
    g.output("take", tg.take(tt, ti))
    g.output("gather_list", tg.gather(tt, [8, 0, 8]))
    g.output("scalar_id", tg.take(tt, g.constant(np.int32(4))))
    out = run(g, {"t": table, "i": ids})
    np.testing.assert_array_equal(out["take"], table[ids])
    np.testing.assert_array_equal(out["gather_list"], table[[8, 0, 8]])
    np.testing.assert_array_equal(out["scalar_id"], table[4])


def test_gather_out_of_range_is_an_error():
    g = tg.Graph()
    g.output("y", tg.take(g.input("t", (3, 2)), g.input("i", (2,), "int32")))
    c = tg.compile(g)
    with pytest.raises(tg.ExecutionError, match="gather|index|range"):
        c.run({"t": np.zeros((3, 2), np.float32), "i": np.array([0, 3], np.int32)})
    with pytest.raises(tg.ExecutionError):
        tg.reference_eval(g, {"t": np.zeros((3, 2), np.float32), "i": np.array([-1, 0], np.int32)})


def test_iota_and_arange():
    g = tg.Graph()
    g.output("i", g.iota((2, 3, 4), axis=1))
    g.output("f", g.iota((3, 2), 0, "float32"))
    g.output("a", g.arange(5))
    out = run(g, {})
    np.testing.assert_array_equal(out["i"], np.broadcast_to(np.arange(3)[None, :, None], (2, 3, 4)))
    np.testing.assert_array_equal(out["f"], np.broadcast_to(np.arange(3, dtype=np.float32)[:, None], (3, 2)))
    np.testing.assert_array_equal(out["a"], np.arange(5, dtype=np.int32))
    assert out["i"].dtype == np.int32 and out["f"].dtype == np.float32


def test_constants_from_numpy():
    g = tg.Graph()
    arrays = {
        "f64": np.linspace(-1, 1, 6).reshape(2, 3),
        "i64": np.arange(6).reshape(3, 2),
        "bool": np.array([True, False]),
        "f32_named": np.float32([1.5, 2.5]),
        "scalar": np.float64(math.pi),
        "list": [[1.0, 2.0], [3.0, 4.0]],
    }
    g.output("f64", g.constant(arrays["f64"]))
    g.output("i64", g.constant(arrays["i64"]))
    g.output("bool", g.constant(arrays["bool"]))
    g.output("f32_named", g.weight("w", arrays["f32_named"]))
    g.output("scalar", g.constant(arrays["scalar"]))
    g.output("list", g.constant(arrays["list"]))
    g.output("i2f", g.constant([1, 2, 3], dtype="float32"))
    out = run(g, {})
    np.testing.assert_array_equal(out["f64"], arrays["f64"].astype(np.float32))
    assert out["i64"].dtype == np.int32 and out["bool"].dtype == np.bool_
    np.testing.assert_array_equal(out["i64"], arrays["i64"])
    np.testing.assert_array_equal(out["bool"], arrays["bool"])
    np.testing.assert_array_equal(out["f32_named"], arrays["f32_named"])
    assert out["scalar"].shape == () and out["scalar"] == np.float32(math.pi)
    np.testing.assert_array_equal(out["list"], np.float32(arrays["list"]))
    np.testing.assert_array_equal(out["i2f"], np.float32([1, 2, 3]))


def test_constant_data_is_copied():
    a = np.ones(3, np.float32)
    g = tg.Graph()
    g.output("c", g.constant(a))
    a[:] = 7
    np.testing.assert_array_equal(tg.compile(g).run()["c"], np.ones(3, np.float32))


def test_operator_overloads_with_scalars_and_broadcasting(rng):
    x = f32(rng, 3, 4, lo=0.5, hi=2)
    v = f32(rng, 4)
    i = rng.integers(-5, 5, (3, 4)).astype(np.int32)
    g = tg.Graph()
    tx, tv, ti = g.input("x", x.shape), g.input("v", v.shape), g.input("i", i.shape, "int32")
    xs, vs = x.astype(np.float64), v.astype(np.float64)
    r = np.float32
    cases = {
        "x+2": (tx + 2, xs + 2),
        "2+x": (2 + tx, 2 + xs),
        "x-0.5": (tx - 0.5, xs - 0.5),
        "1-x": (1 - tx, 1 - xs),
        "x*3": (tx * 3, xs * 3),
        "0.1*x": (0.1 * tx, float(r(0.1)) * xs),
        "x/4": (tx / 4, xs / 4),
        "1/x": (1 / tx, 1 / xs),
        "x+v": (tx + tv, xs + vs),
        "v*x": (tv * tx, vs * xs),
        "x-v": (tx - tv, xs - vs),
        "x/v": (tx / (abs(tv) + 1), xs / (np.abs(vs) + 1)),
        "x**2": (tx**2, xs**2),
        "x**3": (tx**3, xs**3),
        "x**-1": (tx**-1, 1 / xs),
        "x**0.5": (tx**0.5, np.sqrt(xs)),
        "x**-0.5": (tx**-0.5, 1 / np.sqrt(xs)),
        "x**1.5": (tx**1.5, xs**1.5),
        "x**0": (tx**0, np.ones_like(xs)),
        "-x": (-tx, -xs),
        "+x": (+tx, xs),
        "abs(x-1)": (abs(tx - 1), np.abs(xs - 1)),
        "x+np": (tx + np.arange(4.0), xs + np.arange(4.0)),
        "np+x": (np.arange(4.0) + tx, np.arange(4.0) + xs),
        "np*x": (np.float32([[2.0], [3.0], [4.0]]) * tx, np.array([[2.0], [3.0], [4.0]]) * xs),
        "x+list": (tx + [1.0, 2.0, 3.0, 4.0], xs + [1.0, 2.0, 3.0, 4.0]),
    }
    icases = {
        "i+1": (ti + 1, i + 1),
        "2*i": (2 * ti, 2 * i),
        "i-i": (ti - ti, i - i),
        "i*np": (ti * np.arange(4), i * np.arange(4)),
        "i>0": (ti > 0, i > 0),
        "0<i": (0 < ti, 0 < i),
        "i==np": (ti == np.arange(4), i == np.arange(4)),
        "x>=0.9": (tx >= 0.9, x >= r(0.9)),
        "x!=v": (tx != tv, x != v),
        "x<1": (tx < 1, x < 1),
    }
    for k, (t, _) in {**cases, **icases}.items():
        g.output(k, t)
    out = run(g, {"x": x, "v": v, "i": i})
    for k, (_, want) in cases.items():
        assert out[k].dtype == np.float32, k
        close(out[k], want, 1e-5)
    for k, (_, want) in icases.items():
        np.testing.assert_array_equal(out[k], want, err_msg=k)
        assert out[k].dtype == (np.bool_ if want.dtype == bool else np.int32), k


def test_composites(rng):
    x = f32(rng, 3, 8, lo=-4, hi=4)
    w = f32(rng, 8)
    b = f32(rng, 8)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    xs = x.astype(np.float64)
    e = np.exp(xs - xs.max(-1, keepdims=True))
    mu = xs.mean(-1, keepdims=True)
    var = ((xs - mu) ** 2).mean(-1, keepdims=True)
    c = math.sqrt(2 / math.pi)
    m0 = xs.max(0, keepdims=True)
    cases = {
        "softmax": (tg.softmax(tx), e / e.sum(-1, keepdims=True)),
        "softmax0": (tg.softmax(tx, 0), np.exp(xs - m0) / np.exp(xs - m0).sum(0, keepdims=True)),
        "log_softmax": (tg.log_softmax(tx), np.log(e / e.sum(-1, keepdims=True))),
        "logsumexp": (tg.logsumexp(tx, 1), np.log(np.exp(xs).sum(1))),
        "relu": (tg.relu(tx), np.maximum(xs, 0)),
        "sigmoid": (tg.sigmoid(tx), 1 / (1 + np.exp(-xs))),
        "silu": (tg.silu(tx), xs / (1 + np.exp(-xs))),
        "gelu": (tg.gelu(tx), 0.5 * xs * (1 + np.tanh(c * (xs + 0.044715 * xs**3)))),
        "square": (tg.square(tx), xs * xs),
        "clip": (tg.clip(tx, -1, 2), np.clip(xs, -1, 2)),
        "rms_norm": (tg.rms_norm(tx, g.constant(w), eps=1e-6), xs / np.sqrt((xs**2).mean(-1, keepdims=True) + 1e-6) * w),
        "layer_norm": (tg.layer_norm(tx, w, b, eps=1e-5), (xs - mu) / np.sqrt(var + 1e-5) * w + b),
        "power": (tg.power(abs(tx) + 1, 2.5), (np.abs(xs) + 1) ** 2.5),
    }
    for k, (t, _) in cases.items():
        g.output(k, t)
    out = run(g, {"x": x})
    for k, (_, want) in cases.items():
        close(out[k], want, 2e-5)


def test_graph_introspection():
    g = tg.Graph()
    x = g.input("x", (2, 3))
    y = g.output("y", tg.exp(x) + 1)
    assert isinstance(y, tg.Tensor) and y.shape == (2, 3) and y.dtype == np.float32 and y.ndim == 2 and y.size == 6
    assert x.op == "input:x" and y.op == "add"
    assert list(g.inputs) == ["x"] and list(g.outputs) == ["y"]
    assert g.op_histogram()["exp"] == 1 and g.num_nodes == 4
    assert '"outputs"' in g.to_json()
    assert "Graph(nodes=4" in repr(g) and "Tensor(shape=(2, 3)" in repr(x)
    with pytest.raises(TypeError, match="truth value"):
        bool(x > 0)


def test_zero_size_and_scalar_tensors():
    g = tg.Graph()
    x = g.input("x", (0, 3))
    s = g.input("s", ())
    g.output("y", x * 2.0 + s)
    g.output("col", tg.sum(x, 0))  # an empty sum is 0
    g.output("s2", s * s)
    out = run(g, {"x": np.zeros((0, 3), np.float32), "s": np.float32(3.0)})
    assert out["y"].shape == (0, 3)
    np.testing.assert_array_equal(out["col"], np.zeros(3, np.float32))
    assert out["s2"].shape == () and out["s2"] == 9.0
