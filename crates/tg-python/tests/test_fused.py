"""The IR's fused ops built directly (tensor_graphs.fused), compiled and run, against their
definitions in numpy (float64) and the reference interpreter; and the compiler's rewrite
stage fusing the Python composites without changing results beyond float32 rounding.

Tolerance: ``|engine - numpy| <= 1e-5 * (1 + |numpy|)`` (fused kernels accumulate in
float32 over rows of <= 64 values).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensor_graphs as tg
from tensor_graphs import fused

TOL = 1e-5


def run_both(g, feeds):
    out = tg.compile(g).run(feeds)
    ref = tg.reference_eval(g, feeds)
    return out, ref


def check(got, ref, want, tol=TOL):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape and got.dtype == np.float32
    for name, v in (("engine", got.astype(np.float64)), ("reference", ref)):
        err = np.abs(v - want)
        assert (err <= tol * (1 + np.abs(want))).all(), f"{name}: max error {err.max():.3g}"


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_rms_norm(rng):
    x = rng.standard_normal((3, 5, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    g = tg.Graph()
    g.output("y", fused.rms_norm(g.input("x", x.shape), g.constant(w), eps=1e-6))
    out, ref = run_both(g, {"x": x})
    xs = x.astype(np.float64)
    eps = float(np.float64(1e-6))
    check(out["y"], ref["y"], xs / np.sqrt((xs**2).mean(-1, keepdims=True) + eps) * w)


def test_add_rms_norm(rng):
    a = rng.standard_normal((3, 5, 64)).astype(np.float32)
    b = rng.standard_normal((3, 5, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    g = tg.Graph()
    g.output("y", fused.add_rms_norm(g.input("a", a.shape), g.input("b", b.shape), g.constant(w), eps=1e-6))
    out, ref = run_both(g, {"a": a, "b": b})
    s = a.astype(np.float64) + b.astype(np.float64)
    eps = float(np.float64(1e-6))
    check(out["y"], ref["y"], np.stack([s, s / np.sqrt((s**2).mean(-1, keepdims=True) + eps) * w]))


@pytest.mark.parametrize("residual", [False, True])
def test_matmul_add(residual, rng):
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = rng.standard_normal((24, 64)).astype(np.float32)
    c = rng.standard_normal((5, 24) if residual else (24,)).astype(np.float32)
    g = tg.Graph()
    g.output("y", fused.matmul_add(g.input("x", x.shape), g.constant(w), g.input("c", c.shape)))
    out, ref = run_both(g, {"x": x, "c": c})
    check(out["y"], ref["y"], x.astype(np.float64) @ w.astype(np.float64).T + c)


def test_rope_neox(rng):
    x = rng.standard_normal((4, 2, 16)).astype(np.float32)  # [seq, heads, d]
    pos = np.arange(4, dtype=np.float64)[:, None, None]
    theta = pos * (10000.0 ** (-np.arange(8) / 8))[None, None, :]
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)  # [4, 1, 8]
    g = tg.Graph()
    g.output("y", fused.rope_neox(g.input("x", x.shape), g.input("c", cos.shape), g.input("s", sin.shape)))
    out, ref = run_both(g, {"x": x, "c": cos, "s": sin})
    xs, c, s = x.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64)
    x1, x2 = xs[..., :8], xs[..., 8:]
    check(out["y"], ref["y"], np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1))


def test_rms_norm_rope_neox(rng):
    x = rng.standard_normal((4, 2, 16)).astype(np.float32)  # [seq, heads, d]
    w = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    theta = np.arange(4, dtype=np.float64)[:, None, None] * (10000.0 ** (-np.arange(8) / 8))[None, None, :]
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)  # [4, 1, 8]
    g = tg.Graph()
    g.output("y", fused.rms_norm_rope_neox(g.input("x", x.shape), g.constant(w), g.input("c", cos.shape), g.input("s", sin.shape), eps=1e-6))
    out, ref = run_both(g, {"x": x, "c": cos, "s": sin})
    xs, c, s = x.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64)
    y = xs / np.sqrt((xs**2).mean(-1, keepdims=True) + float(np.float64(1e-6))) * w
    y1, y2 = y[..., :8], y[..., 8:]
    check(out["y"], ref["y"], np.concatenate([y1 * c - y2 * s, y2 * c + y1 * s], -1))


def test_gelu_and_gated_gelu(rng):
    a = rng.uniform(-4, 4, (5, 33)).astype(np.float32)
    b = rng.standard_normal((5, 33)).astype(np.float32)
    g = tg.Graph()
    ta, tb = g.input("a", a.shape), g.input("b", b.shape)
    g.output("gelu", fused.gelu_tanh(ta))
    g.output("gated", fused.gated_gelu(ta, tb))
    out, ref = run_both(g, {"a": a, "b": b})
    A, B = a.astype(np.float64), b.astype(np.float64)
    check(out["gelu"], ref["gelu"], gelu(A))
    check(out["gated"], ref["gated"], gelu(A) * B)


def test_softmax(rng):
    x = rng.uniform(-6, 6, (2, 3, 17)).astype(np.float32)
    g = tg.Graph()
    g.output("y", fused.softmax(g.input("x", x.shape)))
    out, ref = run_both(g, {"x": x})
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    check(out["y"], ref["y"], e / e.sum(-1, keepdims=True))


def attention_ref(q, k, v, mask, scale):
    Q, K, V = (t.astype(np.float64) for t in (q, k, v))
    s = scale * Q @ np.swapaxes(K, -1, -2) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ V


@pytest.mark.parametrize("sq,sk", [(1, 7), (5, 5), (6, 9)])
def test_attention_grouped_query(sq, sk, rng):
    # The CPU kernel's form: 2 kv heads, 2 query heads per kv head: q [2, 2, sq, d],
    # k/v [2, 1, sk, d] broadcast over the group axis, one causal [sq, sk] mask.
    d = 16
    q = rng.standard_normal((2, 2, sq, d)).astype(np.float32)
    k = rng.standard_normal((2, 1, sk, d)).astype(np.float32)
    v = rng.standard_normal((2, 1, sk, d)).astype(np.float32)
    causal = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), 0.0, -np.inf).astype(np.float32)
    scale = 1 / math.sqrt(d)
    g = tg.Graph()
    tq, tk, tv = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    g.output("y", fused.attention(tq, tk, tv, g.constant(causal), scale))
    out, ref = run_both(g, {"q": q, "k": k, "v": v})
    check(out["y"], ref["y"], attention_ref(q, k, v, causal, scale), 2e-5)


def test_attention_seq_major(rng):
    # q and the output position-major: [sq, n_kv, group, d].
    sq, sk, d = 5, 7, 16
    q = rng.standard_normal((sq, 2, 2, d)).astype(np.float32)
    k = rng.standard_normal((2, 1, sk, d)).astype(np.float32)
    v = rng.standard_normal((2, 1, sk, d)).astype(np.float32)
    causal = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), 0.0, -np.inf).astype(np.float32)
    scale = 1 / math.sqrt(d)
    g = tg.Graph()
    tq, tk, tv = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    g.output("y", fused.attention_seq_major(tq, tk, tv, g.constant(causal), scale))
    out, ref = run_both(g, {"q": q, "k": k, "v": v})
    want = attention_ref(q.transpose(1, 2, 0, 3), k, v, causal, scale).transpose(2, 0, 1, 3)
    check(out["y"], ref["y"], want, 2e-5)


def test_attention_forms_without_a_kernel_are_compile_errors(rng):
    """The IR's attention is more general than the CPU kernel (here: value width 8 != key
    width 16). The graph is valid and the reference interpreter evaluates it; compiling it
    is a CompileError naming the node and the reason."""
    q = rng.standard_normal((2, 3, 16)).astype(np.float32)
    k = rng.standard_normal((2, 5, 16)).astype(np.float32)
    v = rng.standard_normal((2, 5, 8)).astype(np.float32)
    g = tg.Graph()
    y = fused.attention(g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape), 0.0, 0.25)
    assert y.shape == (2, 3, 8)
    g.output("y", y)
    with pytest.raises(tg.CompileError, match=r"node \d+ \(attention\): no implementation"):
        tg.compile(g)
    ref = tg.reference_eval(g, q=q, k=k, v=v)["y"]
    np.testing.assert_allclose(ref, attention_ref(q, k, v, 0.0, 0.25), rtol=1e-12, atol=1e-12)


def test_fused_op_errors():
    g = tg.Graph()
    x = g.input("x", (2, 5))
    with pytest.raises(tg.ShapeError, match=r"rope_neox: shape mismatch: last dim 5 of \[2, 5\] is odd"):
        fused.rope_neox(x, x, x)
    with pytest.raises(tg.ShapeError, match="gated_gelu: shape mismatch"):
        fused.gated_gelu(x, g.input("y", (5,)))
    with pytest.raises(tg.DTypeError, match="softmax: dtype mismatch: expects f32 operands, got i32"):
        fused.softmax(g.input("i", (3,), "int32"))
    with pytest.raises(tg.GraphError, match="unknown fused op 'swiglu'"):
        g._core.fused("swiglu", [x.id])
    with pytest.raises(tg.GraphError, match="rms_norm needs an epsilon"):
        g._core.fused("rms_norm", [x.id, x.id])


def test_rewrite_stage_keeps_composite_results(rng):
    """Composites the rewrite stage fuses (softmax, rms_norm, gelu) give the same values
    with the stage on and off, up to float32 rounding."""
    if "rewrite" not in tg.STAGES:
        pytest.skip("this compiler has no rewrite stage")
    x = rng.standard_normal((4, 32)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)
    g = tg.Graph()
    tx = g.input("x", x.shape)
    g.output("sm", tg.softmax(tx))
    g.output("rms", tg.rms_norm(tx, g.constant(w)))
    g.output("gelu", tg.gelu(tx))
    on, off = tg.compile(g), tg.compile(g, disable=["rewrite"])
    a, b = on.run(x=x), off.run(x=x)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)
    print(next(s for s in on.explain()["stages"] if s["name"] == "rewrite")["summary"])
