"""Random graphs built from Python, compiled and run, checked against numpy (float64) and
against the reference interpreter.

Each graph is a random program of 4-14 ops over random odd shapes (rank 0-4, sizes 1-7):
elementwise unary and binary ops (operators and functions, Python scalars, broadcasting),
comparisons, where, casts, logic, reductions over random axes, matmuls (batched,
broadcast, transposed, 1-d), reshape, transpose, broadcast_to, indexing, concat, stack,
gather, iota, and composites (softmax, norms, activations). numpy mirrors every op in
float64 on the same float32-rounded inputs and constants.

Tolerances (stated, and checked per element):
- Values whose computation is exact in float32 (data movement of inputs, integer ops,
  comparisons and casts of inputs, bool logic) must be bitwise equal.
- Other float32 values: ``|engine - numpy| <= 1e-4 * (1 + |numpy|) + 1e-5 * scale``, where
  ``scale`` is the largest magnitude among the value's operands along its computation (so
  cancellation in ``a - b`` is judged against ``|a|``, not the small difference). Float32
  rounding over a chain of <= 14 ops on values <= 20 stays well inside this.
- Reference interpreter (float64 throughout) vs numpy: ``<= 1e-9 * (1 + |numpy|)``.
Values are kept in a safe range (log/sqrt/recip get ``|x| + 0.5``; a value above 20 is
rescaled) so the comparisons are about the engine, not about overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

import tensor_graphs as tg
from conftest import make_rng, optional_stages

GRAPHS_PER_BATCH = 10
BATCHES = 24  # 240 random graphs
DIMS = [1, 2, 3, 4, 5, 7]
OPTIONAL_STAGES = optional_stages()


@dataclass
class Val:
    t: tg.Tensor
    v: np.ndarray  # float64 mirror for float32, int64 for int32, bool
    exact: bool  # the engine must reproduce v exactly
    scale: float  # largest magnitude seen along the computation

    @property
    def dtype(self) -> str:
        return self.t.dtype.name


def f32r(x: float) -> float:
    return float(np.float32(x))


class Gen:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.g = tg.Graph()
        self.pool: list[Val] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.log: list[str] = []

    # helpers ---------------------------------------------------------------------------
    def choice(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        r = int(self.rng.integers(0, 5)) if rank is None else rank
        return tuple(self.choice(DIMS) for _ in range(r))

    def leaf(self, shape, dtype="float32") -> Val:
        rng = self.rng
        if dtype == "float32":
            data = (rng.standard_normal(shape) * 1.5).astype(np.float32)
        elif dtype == "int32":
            data = rng.integers(-6, 7, shape).astype(np.int32)
        else:
            data = np.asarray(rng.random(shape) < 0.5)
        if rng.random() < 0.6:
            name = f"in{len(self.feeds)}"
            t = self.g.input(name, shape, dtype)
            self.feeds[name] = data
        else:
            t = self.g.constant(data.astype(np.float64) if dtype == "float32" else data, dtype)
        mirror = data.astype(np.float64) if dtype == "float32" else data.astype(np.int64) if dtype == "int32" else data.copy()
        v = Val(t, mirror, True, float(np.abs(mirror).max(initial=0)) if dtype != "bool" else 1.0)
        self.pool.append(v)
        return v

    def pick(self, dtype=None, exact=None, min_rank=0) -> Val | None:
        cands = [p for p in self.pool if (dtype is None or p.dtype == dtype) and (exact is None or p.exact == exact) and p.t.ndim >= min_rank]
        if not cands:
            return None
        # Prefer recent values so graphs grow deep rather than wide.
        w = np.arange(1, len(cands) + 1, dtype=float) ** 2
        return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]

    def bshape(self, shape) -> tuple[int, ...]:
        """A shape that broadcasts with `shape` to `shape` (or to a larger one)."""
        rng = self.rng
        s = list(shape)
        s = [1 if rng.random() < 0.3 else d for d in s]
        if s and rng.random() < 0.3:
            s = s[int(rng.integers(0, len(s) + 1)):]
        if rng.random() < 0.15 and len(s) < 4:
            s = [self.choice(DIMS)] + s if not shape or len(s) == len(shape) else s
        return tuple(s)

    def partner(self, a: Val, dtype=None, exact=None) -> Val:
        """An operand broadcast-compatible with `a`: from the pool, else a new leaf."""
        dtype = dtype or a.dtype
        if self.rng.random() < 0.4:
            for p in reversed(self.pool):
                if p is not a and p.dtype == dtype and (exact is None or p.exact == exact):
                    try:
                        np.broadcast_shapes(a.t.shape, p.t.shape)
                        return p
                    except ValueError:
                        pass
        return self.leaf(self.bshape(a.t.shape), dtype)

    def add(self, t: tg.Tensor, v: np.ndarray, exact: bool, scale: float, what: str) -> Val:
        assert t.shape == v.shape, f"{what}: tensor shape {t.shape} != numpy {v.shape}"
        scale = max(scale, float(np.abs(v).max(initial=0)) if v.dtype != bool else 1.0)
        val = Val(t, v, exact, scale)
        self.log.append(f"{what} -> {t.shape} {t.dtype}")
        if t.dtype == np.float32 and not exact and np.abs(v).max(initial=0) > 20:
            k = f32r(4.0 / np.abs(v).max())
            val = Val(t * k, v * k, False, scale)
            self.log.append(f"rescale by {k}")
        self.pool.append(val)
        return val

    # ops ----------------------------------------------------------------------------------
    def op_unary(self):
        a = self.pick("float32")
        if a is None:
            return
        t, v = a.t, a.v
        k = self.choice(["neg", "abs", "sin", "cos", "tanh", "exp", "log", "sqrt", "rsqrt", "recip", "square", "pow3", "neg_op", "abs_op"])
        if k == "neg":
            r, rv = tg.negative(t), -v
        elif k == "neg_op":
            r, rv = -t, -v
        elif k == "abs":
            r, rv = tg.abs(t), np.abs(v)
        elif k == "abs_op":
            r, rv = abs(t), np.abs(v)
        elif k == "sin":
            r, rv = tg.sin(t), np.sin(v)
        elif k == "cos":
            r, rv = tg.cos(t), np.cos(v)
        elif k == "tanh":
            r, rv = tg.tanh(t), np.tanh(v)
        elif k == "exp":
            r, rv = tg.exp(tg.tanh(t) * 2.0), np.exp(np.tanh(v) * 2.0)
        elif k == "log":
            r, rv = tg.log(abs(t) + 0.5), np.log(np.abs(v) + 0.5)
        elif k == "sqrt":
            r, rv = tg.sqrt(abs(t)), np.sqrt(np.abs(v))
        elif k == "rsqrt":
            r, rv = tg.rsqrt(abs(t) + 0.5), 1 / np.sqrt(np.abs(v) + 0.5)
        elif k == "recip":
            r, rv = tg.reciprocal(abs(t) + 0.5), 1 / (np.abs(v) + 0.5)
        elif k == "square":
            r, rv = tg.square(t), v * v
        else:
            r, rv = t**3, v**3
        exact = a.exact and k in ("neg", "neg_op", "abs", "abs_op")
        self.add(r, rv, exact, a.scale, k)

    def op_binary(self):
        a = self.pick("float32")
        if a is None:
            return
        k = self.choice(["add", "sub", "mul", "div", "max", "min", "radd", "rsub", "rmul", "scalar_div"])
        if k.startswith("r") or k == "scalar_div":
            c = f32r(float(self.rng.uniform(-3, 3)))
            if k == "radd":
                r, rv = c + a.t, c + a.v
            elif k == "rsub":
                r, rv = c - a.t, c - a.v
            elif k == "rmul":
                r, rv = a.t * c, a.v * c
            else:
                c = f32r(float(self.rng.uniform(0.5, 3)))
                r, rv = a.t / c, a.v / c
            self.add(r, rv, False, max(a.scale, abs(c)), k)
            return
        b = self.partner(a)
        ta, tb, va, vb = a.t, b.t, a.v, b.v
        if k == "add":
            r, rv = ta + tb, va + vb
        elif k == "sub":
            r, rv = tg.subtract(ta, tb) if self.rng.random() < 0.5 else ta - tb, va - vb
        elif k == "mul":
            r, rv = ta * tb, va * vb
        elif k == "div":
            r, rv = ta / (abs(tb) + 0.5), va / (np.abs(vb) + 0.5)
        elif k == "max":
            r, rv = tg.maximum(ta, tb), np.maximum(va, vb)
        else:
            r, rv = tg.minimum(ta, tb), np.minimum(va, vb)
        exact = a.exact and b.exact and k in ("max", "min")
        self.add(r, rv, exact, max(a.scale, b.scale), k)

    def op_int(self):
        a = self.pick("int32")
        if a is None:
            a = self.leaf(self.shape(), "int32")
        b = self.partner(a, "int32")
        k = self.choice(["add", "sub", "mul", "max", "min", "scalar"])
        if k == "add":
            r, rv = a.t + b.t, a.v + b.v
        elif k == "sub":
            r, rv = a.t - b.t, a.v - b.v
        elif k == "mul":
            r, rv = a.t * b.t, a.v * b.v
        elif k == "max":
            r, rv = tg.maximum(a.t, b.t), np.maximum(a.v, b.v)
        elif k == "min":
            r, rv = tg.minimum(a.t, b.t), np.minimum(a.v, b.v)
        else:
            c = int(self.rng.integers(-4, 5))
            r, rv = a.t + c, a.v + c
        if np.abs(rv).max(initial=0) > 10000:
            return
        self.add(r, rv, True, 1.0, f"i32 {k}")

    def op_compare(self):
        a = self.pick(exact=True)
        if a is None or a.dtype == "bool":
            a = self.leaf(self.shape(), self.choice(["float32", "int32"]))
        b = self.partner(a, exact=True)
        k = self.choice(["eq", "ne", "lt", "le", "gt", "ge", "scalar"])
        ops = {
            "eq": (lambda x, y: x == y, np.equal),
            "ne": (lambda x, y: x != y, np.not_equal),
            "lt": (lambda x, y: x < y, np.less),
            "le": (lambda x, y: x <= y, np.less_equal),
            "gt": (tg.greater, np.greater),
            "ge": (tg.greater_equal, np.greater_equal),
        }
        if k == "scalar":
            c = 0 if a.dtype == "int32" else 0.25
            r, rv = a.t > c, a.v > (c if a.dtype == "int32" else f32r(c))
        else:
            f, nf = ops[k]
            r, rv = f(a.t, b.t), nf(a.v, b.v)
        self.add(r, rv, True, 1.0, f"cmp {k}")

    def op_logic(self):
        a = self.pick("bool")
        if a is None:
            return
        k = self.choice(["and", "or", "not"])
        if k == "not":
            self.add(~a.t, ~a.v, True, 1.0, "not")
            return
        b = self.partner(a, "bool")
        if k == "and":
            self.add(a.t & b.t, a.v & b.v, True, 1.0, "and")
        else:
            self.add(tg.logical_or(a.t, b.t), a.v | b.v, True, 1.0, "or")

    def op_where(self):
        c = self.pick("bool")
        if c is None:
            return
        a = self.partner(c, "float32")
        b = self.partner(c, "float32")
        try:
            np.broadcast_shapes(c.v.shape, a.v.shape, b.v.shape)
        except ValueError:
            return
        if self.rng.random() < 0.3:
            s = f32r(-1.5)
            self.add(tg.where(c.t, a.t, s), np.where(c.v, a.v, s), a.exact, a.scale, "where scalar")
        else:
            self.add(tg.where(c.t, a.t, b.t), np.where(c.v, a.v, b.v), a.exact and b.exact, max(a.scale, b.scale), "where")

    def op_cast(self):
        a = self.pick(exact=True)
        if a is None:
            return
        if a.dtype == "float32":
            self.add(a.t.astype("int32"), np.trunc(a.v).astype(np.int64), True, 1.0, "f32->i32")
        elif a.dtype == "int32":
            self.add(a.t.astype(np.float32), a.v.astype(np.float64), True, a.scale, "i32->f32")
        else:
            dt = self.choice(["float32", "int32"])
            self.add(a.t.astype(dt), a.v.astype(np.float64 if dt == "float32" else np.int64), True, 1.0, f"bool->{dt}")

    def op_reduce(self):
        a = self.pick("float32", min_rank=1)
        if a is None:
            return
        nd = a.t.ndim
        axis = self.choice([None, int(self.rng.integers(-nd, nd)), tuple(sorted(set(int(x) for x in self.rng.integers(0, nd, 2))))])
        keep = bool(self.rng.random() < 0.5)
        k = self.choice(["sum", "mean", "max", "min", "argmax"])
        if k == "argmax":
            ax = int(self.rng.integers(0, nd))
            if not a.exact:
                return  # ties/near-ties would make the index ambiguous
            r, rv = a.t.argmax(ax, keep), np.argmax(a.v, axis=ax)
            if keep:
                rv = np.expand_dims(rv, ax)
            self.add(r, rv.astype(np.int64), True, 1.0, "argmax")
            return
        f = {"sum": (tg.sum, np.sum), "mean": (tg.mean, np.mean), "max": (tg.max, np.max), "min": (tg.min, np.min)}[k]
        r = f[0](a.t, axis, keep) if self.rng.random() < 0.5 else getattr(a.t, k)(axis=axis, keepdims=keep)
        rv = np.asarray(f[1](a.v, axis=axis, keepdims=keep))
        self.add(r, rv, a.exact and k in ("max", "min"), a.scale * (math.prod(a.t.shape) if k == "sum" else 1), f"reduce {k} {axis} keep={keep}")

    def op_matmul(self):
        a = self.pick("float32", min_rank=1)
        if a is None:
            return
        k = a.t.shape[-1]
        n = self.choice(DIMS)
        tb = bool(self.rng.random() < 0.3)
        if a.t.ndim == 1 and self.rng.random() < 0.5:
            bshape = (n, k) if tb else (k, n)
        elif self.rng.random() < 0.3:
            bshape = (k,)
            tb = False
        else:
            batch = self.bshape(a.t.shape[:-2]) if a.t.ndim > 2 else ()
            bshape = tuple(batch) + ((n, k) if tb else (k, n))
        b = self.leaf(bshape, "float32")
        bv = np.swapaxes(b.v, -1, -2) if tb and b.v.ndim >= 2 else b.v
        try:
            rv = np.matmul(a.v, bv)
        except ValueError:
            return
        r = tg.matmul(a.t, b.t, transpose_b=tb) if tb or self.rng.random() < 0.5 else a.t @ b.t
        self.add(r, np.asarray(rv), False, a.scale * b.scale * k, f"matmul {a.t.shape}@{bshape} tb={tb}")

    def op_reshape(self):
        a = self.pick()
        if a is None:
            return
        n = a.v.size
        dims = []
        m = n
        while m > 1 and len(dims) < 3:
            divs = [d for d in range(2, m + 1) if m % d == 0]
            d = self.choice(divs)
            dims.append(d)
            m //= d
        if m > 1:
            dims.append(m)
        if self.rng.random() < 0.3:
            dims.insert(int(self.rng.integers(0, len(dims) + 1)), 1)
        self.rng.shuffle(dims)
        if dims and self.rng.random() < 0.3:
            use = list(dims)
            use[int(self.rng.integers(len(use)))] = -1
            r = a.t.reshape(*use)
        else:
            r = tg.reshape(a.t, dims)
        self.add(r, a.v.reshape(dims), a.exact, a.scale, f"reshape {dims}")

    def op_transpose(self):
        a = self.pick(min_rank=2)
        if a is None:
            return
        perm = [int(p) for p in self.rng.permutation(a.t.ndim)]
        k = self.rng.random()
        r = a.t.T if k < 0.2 else a.t.transpose(*perm) if k < 0.6 else tg.permute(a.t, perm)
        rv = a.v.T if k < 0.2 else np.transpose(a.v, perm)
        self.add(r, rv, a.exact, a.scale, f"transpose {perm}")

    def op_broadcast(self):
        a = self.pick()
        if a is None or a.t.ndim >= 4:
            return
        shape = [d if d != 1 or self.rng.random() < 0.5 else self.choice(DIMS) for d in a.t.shape]
        if self.rng.random() < 0.5:
            shape = [self.choice(DIMS)] + shape
        self.add(tg.broadcast_to(a.t, shape), np.broadcast_to(a.v, shape).copy(), a.exact, a.scale, f"broadcast {shape}")

    def op_index(self):
        a = self.pick(min_rank=1)
        if a is None:
            return
        key = []
        for d in a.t.shape:
            c = self.rng.random()
            if c < 0.25:
                key.append(int(self.rng.integers(-d, d)))
            elif c < 0.7:
                s = int(self.rng.integers(0, d))
                e = int(self.rng.integers(s + 1, d + 1))
                key.append(slice(s, e))
            else:
                key.append(slice(None))
            if self.rng.random() < 0.1:
                key.append(None)
        if self.rng.random() < 0.3 and len(key) > 1:
            key = [Ellipsis] + key[len(key) // 2:]
        key = tuple(key)
        self.add(a.t[key], np.asarray(a.v[key]), a.exact, a.scale, f"index {key}")

    def op_concat(self):
        a = self.pick(min_rank=1)
        if a is None:
            return
        ax = int(self.rng.integers(0, a.t.ndim))
        parts = [a]
        for _ in range(int(self.rng.integers(1, 3))):
            s = list(a.t.shape)
            s[ax] = self.choice(DIMS)
            parts.append(self.leaf(tuple(s), a.dtype))
        if self.rng.random() < 0.5:
            self.rng.shuffle(parts)
        f = tg.concatenate if self.rng.random() < 0.5 else tg.concat
        self.add(f([p.t for p in parts], ax), np.concatenate([p.v for p in parts], ax), all(p.exact for p in parts), max(p.scale for p in parts), f"concat axis {ax}")

    def op_stack(self):
        a = self.pick()
        if a is None or a.t.ndim >= 4:
            return
        b = self.leaf(a.t.shape, a.dtype)
        ax = int(self.rng.integers(0, a.t.ndim + 1))
        self.add(tg.stack([a.t, b.t], ax), np.stack([a.v, b.v], ax), a.exact and b.exact, max(a.scale, b.scale), f"stack {ax}")

    def op_gather(self):
        a = self.pick("float32", min_rank=2)
        if a is None:
            return
        table = a if a.t.ndim == 2 else None
        if table is None:
            t2 = a.t.reshape(a.t.shape[0], -1)
            table = Val(t2, a.v.reshape(a.v.shape[0], -1), a.exact, a.scale)
        rows = table.t.shape[0]
        ishape = self.shape(int(self.rng.integers(0, 3)))
        ids = self.rng.integers(0, rows, ishape).astype(np.int32)
        if self.rng.random() < 0.5:
            name = f"in{len(self.feeds)}"
            it = self.g.input(name, ishape, "int32")
            self.feeds[name] = ids
        else:
            it = self.g.constant(ids)
        r = tg.take(table.t, it) if self.rng.random() < 0.5 else tg.gather(table.t, it)
        self.add(r, table.v[ids.astype(np.int64)], table.exact, table.scale, f"gather {table.t.shape}[{ishape}]")

    def op_iota(self):
        s = self.shape(int(self.rng.integers(1, 4)))
        ax = int(self.rng.integers(0, len(s)))
        dt = self.choice(["float32", "int32"])
        v = np.broadcast_to(np.arange(s[ax]).reshape([-1 if i == ax else 1 for i in range(len(s))]), s)
        self.add(self.g.iota(s, ax, dt), v.astype(np.float64 if dt == "float32" else np.int64), True, float(s[ax]), f"iota {s} {ax}")

    def op_composite(self):
        a = self.pick("float32", min_rank=1)
        if a is None:
            return
        v = a.v
        ax = int(self.rng.integers(-a.t.ndim, a.t.ndim))
        k = self.choice(["softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm", "relu", "sigmoid", "silu", "gelu", "clip"])
        if k == "softmax":
            e = np.exp(v - v.max(axis=ax, keepdims=True))
            r, rv = tg.softmax(a.t, ax), e / e.sum(axis=ax, keepdims=True)
        elif k == "log_softmax":
            m = v.max(axis=ax, keepdims=True)
            r, rv = tg.log_softmax(a.t, ax), v - m - np.log(np.exp(v - m).sum(axis=ax, keepdims=True))
        elif k == "logsumexp":
            m = v.max(axis=ax, keepdims=True)
            r, rv = tg.logsumexp(a.t, ax), np.squeeze(np.log(np.exp(v - m).sum(axis=ax, keepdims=True)) + m, ax)
        elif k == "rms_norm":
            eps = f32r(1e-6)
            r, rv = tg.rms_norm(a.t, axis=ax), v / np.sqrt((v * v).mean(axis=ax, keepdims=True) + eps)
        elif k == "layer_norm":
            eps = f32r(1e-5)
            xc = v - v.mean(axis=ax, keepdims=True)
            r, rv = tg.layer_norm(a.t, axis=ax), xc / np.sqrt((xc * xc).mean(axis=ax, keepdims=True) + eps)
            # Cancellation in x - mean: judge against the input's size.
        elif k == "relu":
            r, rv = tg.relu(a.t), np.maximum(v, 0)
        elif k == "sigmoid":
            r, rv = tg.sigmoid(a.t), 1 / (1 + np.exp(-v))
        elif k == "silu":
            r, rv = tg.silu(a.t), v / (1 + np.exp(-v))
        elif k == "gelu":
            c = f32r(math.sqrt(2 / math.pi))
            r, rv = tg.gelu(a.t), 0.5 * v * (1 + np.tanh(c * (v + f32r(0.044715) * v**3)))
        else:
            r, rv = tg.clip(a.t, -0.5, 0.75), np.clip(v, -0.5, 0.75)
        scale = a.scale
        if k in ("rms_norm", "layer_norm"):
            # Normalising a near-constant row amplifies its rounding: bound by 1/std.
            std = np.sqrt(np.var(v, axis=ax)).min(initial=np.inf) if k == "layer_norm" else np.sqrt((v * v).mean(axis=ax)).min(initial=np.inf)
            scale = a.scale / max(std, 1e-3)
        self.add(r, np.asarray(rv), a.exact and k in ("relu", "clip"), scale, k)

    OPS = [
        (op_unary, 3), (op_binary, 4), (op_int, 1), (op_compare, 1.5), (op_logic, 1), (op_where, 1.5),
        (op_cast, 1), (op_reduce, 2), (op_matmul, 2), (op_reshape, 1.5), (op_transpose, 1.5),
        (op_broadcast, 1), (op_index, 1.5), (op_concat, 1), (op_stack, 0.5), (op_gather, 1),
        (op_iota, 0.3), (op_composite, 2),
    ]

    def build(self, n_ops: int) -> list[tuple[str, Val]]:
        for _ in range(int(self.rng.integers(1, 3))):
            self.leaf(self.shape(), self.choice(["float32", "float32", "float32", "int32", "bool"]))
        fns, w = zip(*self.OPS)
        w = np.array(w) / np.sum(w)
        done = 0
        while done < n_ops:
            before = len(self.pool)
            fns[int(self.rng.choice(len(fns), p=w))](self)
            if len(self.pool) > before:
                done += 1
        outs = [self.pool[-1]] + [self.pool[int(i)] for i in self.rng.choice(len(self.pool), size=int(self.rng.integers(0, 3)))]
        named = []
        for i, o in enumerate(outs):
            name = f"out{i}"
            self.g.output(name, o.t)
            named.append((name, o))
        return named


def check(name: str, got: np.ndarray, val: Val, label: str, log: list[str]) -> None:
    want = val.v
    ctx = f"{label}, output {name} ({val.t.shape} {val.dtype}); ops:\n  " + "\n  ".join(log)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}: {ctx}"
    if val.dtype == "bool":
        assert got.dtype == np.bool_ and np.array_equal(got, want), ctx
    elif val.dtype == "int32":
        assert got.dtype == np.int32 and np.array_equal(got.astype(np.int64), want), ctx
    else:
        assert got.dtype == np.float32, ctx
        if val.exact:
            np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=ctx)
        else:
            tol = 1e-4 * (1 + np.abs(want)) + 1e-5 * val.scale
            bad = ~(np.abs(got.astype(np.float64) - want) <= tol)
            assert not bad.any(), f"max error {np.abs(got - want).max():.3g} (tol at worst {tol[bad].min():.3g}): {ctx}"


@pytest.mark.parametrize("batch", range(BATCHES))
def test_random_graphs(batch):
    stats = {"max_rel": 0.0}
    for k in range(GRAPHS_PER_BATCH):
        case = batch * GRAPHS_PER_BATCH + k
        rng, label = make_rng(f"random graph {case}", case)
        gen = Gen(rng)
        outs = gen.build(int(rng.integers(4, 15)))
        disable = [s for s in OPTIONAL_STAGES if rng.random() < 0.25]
        c = tg.compile(gen.g, disable=disable, threads=int(rng.integers(1, 3)))
        label = f"{label}, disabled stages {disable}"
        res = c.run(gen.feeds)
        assert list(res) == [n for n, _ in outs]
        for name, val in outs:
            check(name, res[name], val, label, gen.log)
            if val.dtype == "float32" and not val.exact:
                rel = np.abs(res[name] - val.v) / (1 + np.abs(val.v))
                stats["max_rel"] = max(stats["max_rel"], float(rel.max(initial=0)))
        # Run again: same results (plans are reusable, arenas reused).
        res2 = c.run(gen.feeds)
        for name, _ in outs:
            np.testing.assert_array_equal(res2[name], res[name], err_msg=f"second run differs: {label}")
        # The reference interpreter agrees with numpy (both float64).
        ref = tg.reference_eval(gen.g, gen.feeds)
        for name, val in outs:
            r = ref[name]
            if val.dtype == "float32":
                assert r.dtype == np.float64
                np.testing.assert_allclose(r, val.v, rtol=1e-9, atol=1e-9, err_msg=f"reference vs numpy: {label}")
            else:
                np.testing.assert_array_equal(r, val.v.astype(r.dtype), err_msg=f"reference vs numpy: {label}")
    print(f"batch {batch}: {GRAPHS_PER_BATCH} graphs, worst relative float32 error {stats['max_rel']:.3g}")
