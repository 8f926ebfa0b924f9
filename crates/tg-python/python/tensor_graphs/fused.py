"""The IR's fused ops, built directly.

The compiler's ``rewrite`` stage introduces these when it recognises their primitive
composition (``tensor_graphs.softmax`` becomes ``softmax``, for instance), so models and
user code never need them. They are here so fused kernels can be tested from Python against
their definitions (each function's docstring), the same way the primitive ops are.
"""

from __future__ import annotations

from ._graph import Operand, Tensor, _operands

__all__ = ["rms_norm", "add_rms_norm", "rope_neox", "rms_norm_rope_neox", "gelu_tanh", "gated_gelu", "softmax", "attention", "attention_seq_major", "matmul_add"]


def _fused(name: str, xs, attr=None) -> Tensor:
    g, ts = _operands(name, *xs)
    return g._wrap(g._core.fused(name, [t.id for t in ts], attr))


def rms_norm(x: Tensor, w: Operand, eps: float = 1e-6) -> Tensor:
    """``x * rsqrt(mean(x², last axis) + eps) * w``; ``w`` broadcasts to ``x``."""
    return _fused("rms_norm", (x, w), float(eps))


def add_rms_norm(a: Tensor, b: Operand, w: Operand, eps: float = 1e-6) -> Tensor:
    """Residual add and RMSNorm, both results: with ``s = a + b`` (``a`` and ``b`` of one
    shape), ``stack([s, rms_norm(s, w, eps)])``, shape ``(2,) + a.shape``."""
    return _fused("add_rms_norm", (a, b, w), float(eps))


def rope_neox(x: Tensor, cos: Operand, sin: Operand) -> Tensor:
    """NeoX rotary embedding over the last axis (size ``d``, even): with
    ``x1, x2 = x[..., :d/2], x[..., d/2:]``, ``concat(x1*cos - x2*sin, x2*cos + x1*sin)``;
    ``cos``/``sin`` broadcast to ``x.shape[:-1] + (d/2,)``."""
    return _fused("rope_neox", (x, cos, sin))


def rms_norm_rope_neox(x: Tensor, w: Operand, cos: Operand, sin: Operand, eps: float = 1e-6) -> Tensor:
    """``rope_neox(rms_norm(x, w, eps), cos, sin)``: the per-head q/k norm followed by RoPE."""
    return _fused("rms_norm_rope_neox", (x, w, cos, sin), float(eps))


def gelu_tanh(x: Tensor) -> Tensor:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))``."""
    return _fused("gelu_tanh", (x,))


def gated_gelu(gate: Tensor, up: Operand) -> Tensor:
    """``gelu_tanh(gate) * up`` (equal shapes)."""
    return _fused("gated_gelu", (gate, up))


def softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis."""
    return _fused("softmax", (x,))


def attention(q: Tensor, k: Operand, v: Operand, mask: Operand, scale: float) -> Tensor:
    """``softmax(scale * q @ kᵀ + mask) @ v``: ``q [.., sq, d]``, ``k [.., sk, d]``,
    ``v [.., sk, dv]``, batch dimensions broadcast, ``mask`` broadcasts to ``[.., sq, sk]``."""
    return _fused("attention", (q, k, v, mask), float(scale))


def attention_seq_major(q: Tensor, k: Operand, v: Operand, mask: Operand, scale: float) -> Tensor:
    """``attention`` with position-major queries and output: ``q`` is ``(sq, a, b, d)``
    and the result ``(sq, a, b, dv)``, i.e. ``attention(q.transpose(1, 2, 0, 3), k, v,
    mask, scale).transpose(2, 0, 1, 3)``."""
    return _fused("attention_seq_major", (q, k, v, mask), float(scale))


def matmul_add(x: Tensor, w: Operand, c: Operand) -> Tensor:
    """The matmul epilogue: ``x @ w.T + c`` for a ``(n, k)`` weight ``w`` (a graph constant),
    ``c`` a bias row ``(n,)`` or an addend of the product's shape."""
    return _fused("matmul_add", (x, w, c), 1.0)
