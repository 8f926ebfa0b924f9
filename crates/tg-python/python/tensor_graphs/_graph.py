"""Graph building with a numpy-flavoured API, compilation, and the reference interpreter.

A :class:`Graph` holds nodes; a :class:`Tensor` is a handle to one node. Every op checks
shapes and dtypes when it is applied, so a mistake raises at the line that made it
(:class:`~tensor_graphs.errors.ShapeError`, :class:`~tensor_graphs.errors.DTypeError`, ...)
with a message naming the op and the mismatch.

Dtypes are float32, int32 and bool. There is no implicit promotion between tensors (add
an explicit ``astype``); Python scalars and numpy arrays mixed with a tensor take the
tensor's dtype when that loses nothing but float precision (a float into float32, an int
into float32 or int32, a bool into anything); a float into an int32 tensor is a
``DTypeError``.
"""

from __future__ import annotations

import builtins
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import DTypeError, GraphError, ShapeError

__all__ = [
    "Graph",
    "Tensor",
    "CompileOptions",
    "compile",
    "reference_eval",
    "STAGES",
    # elementwise unary
    "negative", "exp", "log", "tanh", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "abs",
    "square", "relu", "sigmoid", "silu", "gelu",
    # elementwise binary
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "clip",
    "logical_and", "logical_or", "logical_not",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "where", "astype", "cast",
    # reductions
    "sum", "mean", "max", "min", "argmax", "softmax", "log_softmax", "logsumexp",
    "rms_norm", "layer_norm",
    # linear algebra and data movement
    "matmul", "reshape", "transpose", "permute", "broadcast_to", "expand", "expand_dims",
    "squeeze", "slice_axis", "concatenate", "concat", "stack", "take", "gather",
]

#: Names of the compiler stages, in order (see ``CompileOptions.disable``).
STAGES: Tuple[str, ...] = tuple(_native.STAGES)

DTypeLike = Union[str, type, np.dtype]
ArrayLike = Union[np.ndarray, Sequence[Any], float, int, bool]
Operand = Union["Tensor", float, int, bool, np.ndarray]

_NAMES = {"f32": "float32", "float32": "float32", "i32": "int32", "int32": "int32", "bool": "bool", "bool_": "bool"}
_NUMPY = {"float32": np.dtype(np.float32), "int32": np.dtype(np.int32), "bool": np.dtype(np.bool_)}
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def _dtype_name(dtype: DTypeLike) -> str:
    """Canonical name (``float32``, ``int32``, ``bool``) of a dtype-like."""
    if isinstance(dtype, str) and dtype in _NAMES:
        return _NAMES[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"not a dtype: {dtype!r} (use float32, int32 or bool)") from None
    if d in (_NUMPY["float32"], _NUMPY["int32"], _NUMPY["bool"]):
        return d.name
    raise DTypeError(f"unsupported dtype {d.name}: tensor_graphs has float32, int32 and bool")


def _shape_tuple(shape: Union[int, Sequence[int]], what: str) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise ShapeError(f"{what}: a shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ShapeError(f"{what}: negative dimension in shape {dims}")
    return dims


def _axis(axis: int, ndim: int, what: str) -> int:
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ShapeError(f"{what}: axis {a} is out of bounds for a tensor of rank {ndim}")
    return a % ndim


def _axes(axis: Union[None, int, Sequence[int]], ndim: int, what: str) -> List[int]:
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (int, np.integer)):
        return [_axis(int(axis), ndim, what)]
    out = [_axis(a, ndim, what) for a in axis]
    if len(set(out)) != len(out):
        raise ShapeError(f"{what}: repeated axis in {tuple(axis)}")
    return out


def _f32(v: float) -> float:
    """``v`` rounded to float32 (constants of float32 tensors are float32 values)."""
    return float(np.float32(v))


class Tensor:
    """A node of a :class:`Graph`: its value is computed when the compiled graph runs.

    Tensors support numpy-style operators with broadcasting (``+ - * / @ ** -x abs()``,
    comparisons ``== != < <= > >=`` giving bool tensors, ``& | ~`` on bool tensors) and
    indexing with integers, step-1 slices, ``None`` and ``...``. Python scalars and numpy
    arrays can be mixed in. ``bool(tensor)`` is an error: the value is not known while
    building.
    """

    __slots__ = ("graph", "id", "shape", "_dtype")
    # Makes numpy defer to Tensor's reflected operators (``np_array + tensor``).
    __array_ufunc__ = None

    graph: "Graph"
    id: int
    shape: Tuple[int, ...]

    def __init__(self, graph: "Graph", node: int) -> None:
        self.graph = graph
        self.id = node
        self.shape = tuple(graph._core.shape(node))
        self._dtype = graph._core.dtype(node)

    @property
    def dtype(self) -> np.dtype:
        """The element type (``numpy.float32``, ``numpy.int32`` or ``numpy.bool_``)."""
        return _NUMPY.get(self._dtype, np.dtype(np.float32))

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def op(self) -> str:
        """Name of the op that produces this tensor (as in compiler reports)."""
        return self.graph._core.op(self.id)

    @property
    def T(self) -> "Tensor":
        """The tensor with its dimensions reversed."""
        return transpose(self)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self._dtype}, op={self.op}, node={self.id})"

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is not known while the graph is built; use tensor_graphs.where")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator["Tensor"]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    # Arithmetic -------------------------------------------------------------------
    def __add__(self, o: Operand) -> "Tensor":
        return add(self, o)

    def __radd__(self, o: Operand) -> "Tensor":
        return add(o, self)

    def __sub__(self, o: Operand) -> "Tensor":
        return subtract(self, o)

    def __rsub__(self, o: Operand) -> "Tensor":
        return subtract(o, self)

    def __mul__(self, o: Operand) -> "Tensor":
        return multiply(self, o)

    def __rmul__(self, o: Operand) -> "Tensor":
        return multiply(o, self)

    def __truediv__(self, o: Operand) -> "Tensor":
        return _true_divide(self, o)

    def __rtruediv__(self, o: Operand) -> "Tensor":
        return _true_divide(o, self)

    def __matmul__(self, o: Operand) -> "Tensor":
        return matmul(self, o)

    def __rmatmul__(self, o: Operand) -> "Tensor":
        return matmul(o, self)

    def __pow__(self, p: Union[float, int]) -> "Tensor":
        return power(self, p)

    def __neg__(self) -> "Tensor":
        return negative(self)

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        return abs(self)

    # Comparisons and logic --------------------------------------------------------------
    def __eq__(self, o: Operand) -> "Tensor":  # type: ignore[override]
        return equal(self, o)

    def __ne__(self, o: Operand) -> "Tensor":  # type: ignore[override]
        return not_equal(self, o)

    def __lt__(self, o: Operand) -> "Tensor":  # type: ignore[misc]
        return less(self, o)

    def __le__(self, o: Operand) -> "Tensor":  # type: ignore[misc]
        return less_equal(self, o)

    def __gt__(self, o: Operand) -> "Tensor":  # type: ignore[misc]
        return greater(self, o)

    def __ge__(self, o: Operand) -> "Tensor":  # type: ignore[misc]
        return greater_equal(self, o)

    def __and__(self, o: Operand) -> "Tensor":
        return logical_and(self, o)

    def __rand__(self, o: Operand) -> "Tensor":
        return logical_and(o, self)

    def __or__(self, o: Operand) -> "Tensor":
        return logical_or(self, o)

    def __ror__(self, o: Operand) -> "Tensor":
        return logical_or(o, self)

    def __invert__(self) -> "Tensor":
        return logical_not(self)

    __hash__ = None  # type: ignore[assignment]  # == builds a tensor, like numpy arrays

    # Indexing --------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "Tensor":
        """numpy basic indexing: ints (negative ok), slices with step 1, ``None``, ``...``."""
        if not isinstance(key, tuple):
            key = (key,)
        if builtins.sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
        if used > self.ndim:
            raise IndexError(f"too many indices for tensor: tensor is {self.ndim}-dimensional, but {used} were indexed")
        if Ellipsis in key:
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - used) + key[i + 1:]
        else:
            key = key + (slice(None),) * (self.ndim - used)
        x: Tensor = self
        axis = 0
        out_shape: List[int] = []
        for k in key:
            if k is None:
                out_shape.append(1)
            elif isinstance(k, slice):
                dim = x.shape[axis]
                start, stop, step = k.indices(dim)
                if step != 1:
                    raise IndexError(f"slice steps other than 1 are not supported (got step {step} on axis {axis})")
                stop = builtins.max(stop, start)
                if (start, stop) != (0, dim):
                    x = slice_axis(x, axis, start, stop)
                out_shape.append(stop - start)
                axis += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
                dim = x.shape[axis]
                i = int(k)
                if not -dim <= i < dim:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
                i %= dim
                x = slice_axis(x, axis, i, i + 1)
                axis += 1
            else:
                raise IndexError(
                    f"unsupported index {k!r}: only integers, slices with step 1, None and ... are valid "
                    "(use tensor_graphs.take for integer-array indexing)"
                )
        if tuple(out_shape) != x.shape:
            x = reshape(x, out_shape)
        return x

    # numpy-style methods ------------------------------------------------------------------
    def reshape(self, *shape: Union[int, Sequence[int]]) -> "Tensor":
        """Same elements, new shape; one dimension may be -1 (inferred)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            return reshape(self, shape[0])  # type: ignore[arg-type]
        return reshape(self, shape)  # type: ignore[arg-type]

    def transpose(self, *axes: Union[int, Sequence[int]]) -> "Tensor":
        """Permuted dimensions (reversed when no axes are given)."""
        if not axes:
            return transpose(self)
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            return transpose(self, axes[0])  # type: ignore[arg-type]
        return transpose(self, axes)  # type: ignore[arg-type]

    def flatten(self) -> "Tensor":
        """The elements as a 1-d tensor."""
        return reshape(self, (-1,))

    def astype(self, dtype: DTypeLike) -> "Tensor":
        """Converted to ``dtype`` (see :func:`astype`)."""
        return astype(self, dtype)

    def broadcast_to(self, shape: Sequence[int]) -> "Tensor":
        """Broadcast to ``shape`` (numpy rules)."""
        return broadcast_to(self, shape)

    def squeeze(self, axis: Union[None, int, Sequence[int]] = None) -> "Tensor":
        """Size-1 dimensions removed (all of them, or those in ``axis``)."""
        return squeeze(self, axis)

    def sum(self, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> "Tensor":
        """Sum over ``axis`` (all axes if None)."""
        return sum(self, axis, keepdims)

    def mean(self, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> "Tensor":
        """Mean over ``axis`` (all axes if None)."""
        return mean(self, axis, keepdims)

    def max(self, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> "Tensor":
        """Maximum over ``axis`` (all axes if None)."""
        return max(self, axis, keepdims)

    def min(self, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> "Tensor":
        """Minimum over ``axis`` (all axes if None)."""
        return min(self, axis, keepdims)

    def argmax(self, axis: int = -1, keepdims: bool = False) -> "Tensor":
        """Index of the maximum along ``axis`` (first on ties), int32."""
        return argmax(self, axis, keepdims)



class Graph:
    """A tensor program under construction.

    >>> import numpy as np, tensor_graphs as tg
    >>> g = tg.Graph()
    >>> x = g.input("x", (2, 3))                 # float32 by default
    >>> w = g.constant(np.ones((3, 4)))          # numpy data, stored as float32
    >>> y = g.output("y", tg.relu(x @ w + 1.0))
    >>> tg.compile(g).run({"x": np.ones((2, 3), np.float32)})["y"].shape
    (2, 4)
    """

    def __init__(self) -> None:
        self._core = _native.GraphCore()
        self._inputs: Dict[str, Tensor] = {}
        self._outputs: Dict[str, Tensor] = {}

    def _wrap(self, node: int) -> Tensor:
        return Tensor(self, node)

    # Sources --------------------------------------------------------------------------
    def input(self, name: str, shape: Union[int, Sequence[int]], dtype: DTypeLike = "float32") -> Tensor:
        """A runtime input called ``name`` with a fixed ``shape`` and ``dtype``."""
        t = self._wrap(self._core.input(name, list(_shape_tuple(shape, f"input '{name}'")), _dtype_name(dtype)))
        self._inputs[name] = t
        return t

    def constant(self, value: ArrayLike, dtype: Optional[DTypeLike] = None, name: Optional[str] = None) -> Tensor:
        """A constant from a numpy array, a nested sequence or a scalar.

        Without ``dtype``: floating values become float32, integers int32 (a value outside
        the int32 range is a ``DTypeError``), booleans bool. The data is copied into the
        graph (later changes to the array do not affect it). Arrays are stored as named
        weights (``name``, or a generated ``const<N>``); scalars without a name become
        scalar constant nodes.
        """
        arr = np.asarray(value)
        target = _dtype_name(dtype) if dtype is not None else _natural_dtype(arr, "constant")
        data = _convert_array(arr, target, "constant")
        if data.ndim == 0 and name is None:
            return self._scalar(data.item(), target)
        return self._wrap(self._core.weight(np.ascontiguousarray(data), name))

    def weight(self, name: str, value: ArrayLike, dtype: Optional[DTypeLike] = None) -> Tensor:
        """A named constant (``constant(value, dtype, name=name)``)."""
        return self.constant(value, dtype, name=name)

    def _scalar(self, value: Union[float, int, bool], dtype: str) -> Tensor:
        v = _f32(value) if dtype == "float32" else float(value)
        return self._wrap(self._core.constant(v, dtype))

    def iota(self, shape: Union[int, Sequence[int]], axis: int = 0, dtype: DTypeLike = "int32") -> Tensor:
        """The index along ``axis`` at every position of ``shape`` (int32 or float32)."""
        dims = _shape_tuple(shape, "iota")
        return self._wrap(self._core.iota(list(dims), _axis(axis, builtins.max(len(dims), 1), "iota"), _dtype_name(dtype)))

    def arange(self, n: int, dtype: DTypeLike = "int32") -> Tensor:
        """``0, 1, ..., n-1`` (like ``numpy.arange(n)``)."""
        return self.iota((n,), 0, dtype)

    # Outputs and introspection ----------------------------------------------------------
    def output(self, name: str, tensor: Tensor) -> Tensor:
        """Marks ``tensor`` as the output called ``name``; returns it."""
        t = _tensor(tensor, "output")
        if t.graph is not self:
            raise GraphError(f"output '{name}': the tensor belongs to another graph")
        self._core.output(name, t.id)
        self._outputs[name] = t
        return t

    @property
    def inputs(self) -> Dict[str, Tensor]:
        """Inputs by name, in declaration order."""
        return dict(self._inputs)

    @property
    def outputs(self) -> Dict[str, Tensor]:
        """Outputs by name, in declaration order."""
        return dict(self._outputs)

    @property
    def num_nodes(self) -> int:
        """Number of nodes built so far."""
        return self._core.num_nodes()

    def op_histogram(self) -> Dict[str, int]:
        """Node count per op kind."""
        return dict(self._core.op_histogram())

    def to_json(self) -> str:
        """The graph (nodes, outputs; not the constants' data) in the IR's JSON form."""
        return self._core.to_json()

    def compile(self, options: Optional["CompileOptions"] = None, **overrides: Any) -> "_native.Compiled":
        """``tensor_graphs.compile(self, options, **overrides)``."""
        return compile(self, options, **overrides)

    def reference_eval(self, inputs: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Dict[str, np.ndarray]:
        """``tensor_graphs.reference_eval(self, inputs, **kwargs)``."""
        return reference_eval(self, inputs, **kwargs)

    def __repr__(self) -> str:
        return f"Graph(nodes={self.num_nodes}, inputs={list(self._inputs)}, outputs={list(self._outputs)})"


@dataclass(frozen=True)
class CompileOptions:
    """Options of :func:`compile`.

    - ``disable``: compiler stages to skip, of ``tensor_graphs.STAGES`` (the optional ones,
      such as ``dce``, ``views``, ``memory``, ``validate``; others raise ``OptionsError``).
    - ``numerics``: ``"exact"`` (default) or ``"q8"`` (quantized matmuls with activations
      rounded to 8-bit blocks; only matters for quantized weights).
    - ``alignment``: byte alignment of arena buffers (a power of two).
    - ``threads``: CPU worker threads (0 = all cores).
    - ``devices``: the devices to compile for, by name (``"cpu"``, ``"opencl"``,
      ``"opencl:N"``, ``"cuda"``, ``"cuda:N"``; ``tg devices`` lists them). With one, every
      step runs on it; with several, the planner places each op on one of them from the
      kernel times measured on each (``tg profile --device NAME``; a device without them is
      measured on first use: its roofline and links), inserting a transfer at every
      cross-device edge. The first is home: inputs arrive and outputs leave there.
    - ``place``: ops pinned to a device, ``"OP_PATTERN=DEVICE"`` (``*`` is a wildcard, e.g.
      ``"attention*=opencl"``).
    """

    disable: Sequence[str] = field(default_factory=tuple)
    numerics: str = "exact"
    alignment: int = 64
    threads: int = 0
    devices: Sequence[str] = ("cpu",)
    place: Sequence[str] = field(default_factory=tuple)


def compile(graph: Graph, options: Optional[CompileOptions] = None, **overrides: Any) -> "_native.Compiled":
    """Compiles ``graph`` for the CPU and returns a :class:`Compiled` ready to ``run()``.

    ``options`` is a :class:`CompileOptions`; keyword arguments override its fields
    (``compile(g, disable=["views"], threads=1)``). The graph is copied: building more
    nodes afterwards does not change the compiled object. Raises ``OptionsError`` for an
    unknown stage, ``GraphError`` for a graph without outputs, ``CompileError`` if no
    kernel can run a node.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"compile() expects a tensor_graphs.Graph, got {type(graph).__name__}")
    opts = options if options is not None else CompileOptions()
    if overrides:
        unknown = set(overrides) - {"disable", "numerics", "alignment", "threads", "devices", "place"}
        if unknown:
            raise TypeError(f"compile() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        opts = CompileOptions(**{**opts.__dict__, **overrides})
    disable = [opts.disable] if isinstance(opts.disable, str) else list(opts.disable)
    devices = [opts.devices] if isinstance(opts.devices, str) else list(opts.devices)
    place = [opts.place] if isinstance(opts.place, str) else list(opts.place)
    return _native.compile(graph._core, disable, opts.numerics, opts.alignment, opts.threads, devices, place)


def reference_eval(graph: Graph, inputs: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Dict[str, np.ndarray]:
    """Evaluates ``graph`` with the reference interpreter (plain loops in float64).

    Inputs are checked like :meth:`Compiled.run`. Returns float64 arrays for float32
    outputs (the reference's precision), int32 and bool arrays as they are. Slow on
    purpose: it is the definition every compiled plan is tested against.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"reference_eval() expects a tensor_graphs.Graph, got {type(graph).__name__}")
    if inputs is not None and not isinstance(inputs, dict):
        inputs = dict(inputs)
    return _native.reference_eval(graph._core, inputs, **kwargs)


# ---------------------------------------------------------------------------------------
# Operand conversion


def _natural_dtype(arr: np.ndarray, what: str) -> str:
    k = arr.dtype.kind
    if k == "f":
        return "float32"
    if k in "iu":
        return "int32"
    if k == "b":
        return "bool"
    raise DTypeError(f"{what}: cannot make a constant of dtype {arr.dtype} (use float, int or bool data)")


def _convert_array(arr: np.ndarray, target: str, what: str) -> np.ndarray:
    """``arr`` as ``target``, allowing float→float32 rounding, int→float32/int32 (in range)
    and bool→anything; anything else is a ``DTypeError``."""
    k = arr.dtype.kind
    if target == "float32" and k in "fiub":
        return arr.astype(np.float32, copy=False)
    if target == "int32" and k in "iub":
        if k in "iu" and arr.size and (arr.min() < _I32_MIN or arr.max() > _I32_MAX):
            raise DTypeError(f"{what}: values outside the int32 range")
        return arr.astype(np.int32, copy=False)
    if target == "bool" and k == "b":
        return arr.astype(np.bool_, copy=False)
    raise DTypeError(f"{what}: cannot use {arr.dtype} data as {target} (convert it explicitly)")


def _tensor(x: Any, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    raise TypeError(f"{what}: expected a Tensor, got {type(x).__name__}")


def _graph_of(what: str, *xs: Any) -> Graph:
    g = None
    for x in xs:
        if isinstance(x, Tensor):
            if g is None:
                g = x.graph
            elif x.graph is not g:
                raise GraphError(f"{what}: operands belong to different graphs")
    if g is None:
        raise TypeError(f"{what}: at least one operand must be a Tensor")
    return g


def _lift(g: Graph, x: Any, like: Optional[str], what: str) -> Tensor:
    """``x`` as a tensor of graph ``g``; non-tensors take dtype ``like`` (see module doc)."""
    if isinstance(x, Tensor):
        if x.graph is not g:
            raise GraphError(f"{what}: operands belong to different graphs")
        return x
    if isinstance(x, (bool, np.bool_)):
        target = like or "bool"
        return g._scalar(bool(x), target)
    if isinstance(x, (numbers.Integral, np.integer)):
        target = like or "int32"
        if target == "bool":
            raise DTypeError(f"{what}: cannot combine a bool tensor with the integer {x}")
        if target == "int32" and not _I32_MIN <= int(x) <= _I32_MAX:
            raise DTypeError(f"{what}: {x} is outside the int32 range")
        return g._scalar(int(x), target)
    if isinstance(x, (numbers.Real, np.floating)):
        target = like or "float32"
        if target != "float32":
            raise DTypeError(f"{what}: cannot combine a {target} tensor with the float {x} (cast the tensor with .astype('float32'))")
        return g._scalar(float(x), target)
    if isinstance(x, (np.ndarray, list, tuple)):
        arr = np.asarray(x)
        target = like or _natural_dtype(arr, what)
        return g.constant(_convert_array(arr, target, what), target)
    raise TypeError(f"{what}: unsupported operand of type {type(x).__name__}")


def _operands(what: str, *xs: Any) -> Tuple[Graph, List[Tensor]]:
    g = _graph_of(what, *xs)
    like = next((x._dtype for x in xs if isinstance(x, Tensor)), None)
    return g, [_lift(g, x, like, what) for x in xs]


def _unary(op: str, x: Any) -> Tensor:
    t = _tensor(x, op)
    return t.graph._wrap(t.graph._core.unary(op, t.id))


def _binary(op: str, a: Any, b: Any) -> Tensor:
    g, (ta, tb) = _operands(op, a, b)
    return g._wrap(g._core.binary(op, ta.id, tb.id))


def _compare(op: str, a: Any, b: Any) -> Tensor:
    g, (ta, tb) = _operands(op, a, b)
    return g._wrap(g._core.compare(op, ta.id, tb.id))


# ---------------------------------------------------------------------------------------
# Elementwise


def negative(x: Tensor) -> Tensor:
    """``-x`` (float32)."""
    return _unary("neg", x)


def exp(x: Tensor) -> Tensor:
    """``e**x`` (float32)."""
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    """Natural logarithm (float32)."""
    return _unary("log", x)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent (float32)."""
    return _unary("tanh", x)


def sqrt(x: Tensor) -> Tensor:
    """Square root (float32)."""
    return _unary("sqrt", x)


def rsqrt(x: Tensor) -> Tensor:
    """``1 / sqrt(x)`` (float32)."""
    return _unary("rsqrt", x)


def reciprocal(x: Tensor) -> Tensor:
    """``1 / x`` (float32)."""
    return _unary("recip", x)


def sin(x: Tensor) -> Tensor:
    """Sine, radians (float32)."""
    return _unary("sin", x)


def cos(x: Tensor) -> Tensor:
    """Cosine, radians (float32)."""
    return _unary("cos", x)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - numpy's name
    """Absolute value (float32)."""
    return _unary("abs", x)


def square(x: Tensor) -> Tensor:
    """``x * x``."""
    return multiply(x, x)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` (float32)."""
    return maximum(x, 0.0)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` (float32)."""
    return reciprocal(add(exp(negative(x)), 1.0))


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (float32)."""
    return multiply(x, sigmoid(x))


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    inner = multiply(add(x, multiply(multiply(multiply(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
    return multiply(multiply(x, 0.5), add(tanh(inner), 1.0))


def add(a: Operand, b: Operand) -> Tensor:
    """``a + b`` with broadcasting (float32 or int32)."""
    return _binary("add", a, b)


def subtract(a: Operand, b: Operand) -> Tensor:
    """``a - b`` with broadcasting (float32 or int32)."""
    return _binary("sub", a, b)


def multiply(a: Operand, b: Operand) -> Tensor:
    """``a * b`` with broadcasting (float32 or int32)."""
    return _binary("mul", a, b)


def divide(a: Operand, b: Operand) -> Tensor:
    """``a / b`` with broadcasting. float32: IEEE division. int32: division truncated toward
    zero (like C; the ``/`` operator refuses int32 operands, since numpy's would give floats)."""
    return _binary("div", a, b)


def _true_divide(a: Operand, b: Operand) -> Tensor:
    g, (ta, tb) = _operands("div", a, b)
    if ta._dtype != "float32" or tb._dtype != "float32":
        raise DTypeError(
            f"div: '/' needs float32 operands, got {ta._dtype} and {tb._dtype} "
            "(cast with .astype('float32'), or use tensor_graphs.divide for truncating int32 division)"
        )
    return g._wrap(g._core.binary("div", ta.id, tb.id))


def maximum(a: Operand, b: Operand) -> Tensor:
    """Elementwise maximum with broadcasting."""
    return _binary("max", a, b)


def minimum(a: Operand, b: Operand) -> Tensor:
    """Elementwise minimum with broadcasting."""
    return _binary("min", a, b)


def clip(x: Tensor, lo: Operand, hi: Operand) -> Tensor:
    """``minimum(maximum(x, lo), hi)``."""
    return minimum(maximum(x, lo), hi)


def power(x: Tensor, p: Union[float, int]) -> Tensor:
    """``x ** p`` for a Python number ``p``: integers by repeated multiplication (negative:
    then the reciprocal), ``0.5``/``-0.5`` by ``sqrt``/``rsqrt``, other exponents as
    ``exp(p * log(x))`` (NaN for negative ``x``, as numpy)."""
    t = _tensor(x, "power")
    if isinstance(p, Tensor):
        raise TypeError("power: the exponent must be a Python number")
    if float(p).is_integer() and builtins.abs(p) <= 64:
        n = int(p)
        if n == 0:
            return broadcast_to(t.graph._scalar(1, t._dtype), t.shape)
        result: Optional[Tensor] = None
        base = t
        k = builtins.abs(n)
        while k:
            if k & 1:
                result = base if result is None else multiply(result, base)
            k >>= 1
            if k:
                base = multiply(base, base)
        assert result is not None
        return reciprocal(result) if n < 0 else result
    if p == 0.5:
        return sqrt(t)
    if p == -0.5:
        return rsqrt(t)
    return exp(multiply(log(t), float(p)))


def logical_and(a: Operand, b: Operand) -> Tensor:
    """Elementwise and of bool tensors."""
    return _binary("and", a, b)


def logical_or(a: Operand, b: Operand) -> Tensor:
    """Elementwise or of bool tensors."""
    return _binary("or", a, b)


def logical_not(x: Tensor) -> Tensor:
    """Elementwise not of a bool tensor."""
    t = _tensor(x, "logical_not")
    if t._dtype != "bool":
        raise DTypeError(f"logical_not: expects bool, got {t._dtype}")
    g = t.graph
    return where(t, g._scalar(False, "bool"), g._scalar(True, "bool"))


def equal(a: Operand, b: Operand) -> Tensor:
    """``a == b`` (bool) with broadcasting; operands float32 or int32."""
    return _compare("eq", a, b)


def not_equal(a: Operand, b: Operand) -> Tensor:
    """``a != b`` (bool) with broadcasting."""
    return _compare("ne", a, b)


def less(a: Operand, b: Operand) -> Tensor:
    """``a < b`` (bool) with broadcasting."""
    return _compare("lt", a, b)


def less_equal(a: Operand, b: Operand) -> Tensor:
    """``a <= b`` (bool) with broadcasting."""
    return _compare("le", a, b)


def greater(a: Operand, b: Operand) -> Tensor:
    """``a > b`` (bool) with broadcasting."""
    return _compare("gt", a, b)


def greater_equal(a: Operand, b: Operand) -> Tensor:
    """``a >= b`` (bool) with broadcasting."""
    return _compare("ge", a, b)


def where(cond: Tensor, a: Operand, b: Operand) -> Tensor:
    """``a`` where ``cond`` is true, else ``b``, with broadcasting over all three."""
    c = _tensor(cond, "where")
    g = c.graph
    like = next((x._dtype for x in (a, b) if isinstance(x, Tensor)), None)
    if like is None:
        # Two non-tensors: the wider of their natural dtypes (bool < int32 < float32).
        kinds = [np.asarray(v).dtype.kind for v in (a, b)]
        like = "float32" if "f" in kinds else "int32" if ("i" in kinds or "u" in kinds) else "bool"
    ta, tb = _lift(g, a, like, "where"), _lift(g, b, like, "where")
    return g._wrap(g._core.where(c.id, ta.id, tb.id))


def astype(x: Tensor, dtype: DTypeLike) -> Tensor:
    """Dtype conversion. float32 → int32 truncates toward zero; bool → numbers gives 0/1;
    to bool: ``x != 0``. Converting to the same dtype returns ``x``."""
    t = _tensor(x, "astype")
    target = _dtype_name(dtype)
    if target == t._dtype:
        return t
    if target == "bool":
        return not_equal(t, 0)
    return t.graph._wrap(t.graph._core.cast(t.id, target))


cast = astype


# ---------------------------------------------------------------------------------------
# Reductions


def _reduce(op: str, what: str, x: Tensor, axis: Union[None, int, Sequence[int]], keepdims: bool) -> Tensor:
    t = _tensor(x, what)
    axes = _axes(axis, t.ndim, what)
    out = t
    for a in sorted(axes, reverse=True):
        out = out.graph._wrap(out.graph._core.reduce(op, out.id, a))
    if not keepdims and axes:
        out = reshape(out, [d for i, d in enumerate(t.shape) if i not in axes])
    return out


def sum(x: Tensor, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (an int, a tuple, or None for all), float32."""
    return _reduce("sum", "sum", x, axis, keepdims)


def mean(x: Tensor, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis``, float32."""
    return _reduce("mean", "mean", x, axis, keepdims)


def max(x: Tensor, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``, float32."""
    return _reduce("max", "max", x, axis, keepdims)


def min(x: Tensor, axis: Union[None, int, Sequence[int]] = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis``, float32 (``-max(-x)``)."""
    return negative(_reduce("max", "min", negative(x), axis, keepdims))


def argmax(x: Tensor, axis: int = -1, keepdims: bool = False) -> Tensor:
    """Index of the maximum along ``axis`` (the first one on ties), int32."""
    t = _tensor(x, "argmax")
    a = _axis(axis, t.ndim, "argmax")
    m = _reduce("max", "argmax", t, a, True)
    idx = t.graph.iota(t.shape, a, "float32")
    first = min(where(equal(t, m), idx, float(t.shape[a])), a, keepdims)
    return astype(first, "int32")


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    t = _tensor(x, "softmax")
    a = _axis(axis, t.ndim, "softmax")
    e = exp(subtract(t, _reduce("max", "softmax", t, a, True)))
    return divide(e, _reduce("sum", "softmax", e, a, True))


def logsumexp(x: Tensor, axis: int = -1, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` along ``axis``, computed stably."""
    t = _tensor(x, "logsumexp")
    a = _axis(axis, t.ndim, "logsumexp")
    m = _reduce("max", "logsumexp", t, a, True)
    r = add(log(_reduce("sum", "logsumexp", exp(subtract(t, m)), a, True)), m)
    return r if keepdims else squeeze(r, a)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``."""
    t = _tensor(x, "log_softmax")
    return subtract(t, logsumexp(t, axis, keepdims=True))


def rms_norm(x: Tensor, weight: Optional[Operand] = None, eps: float = 1e-6, axis: int = -1) -> Tensor:
    """``x / sqrt(mean(x², axis) + eps)``, times ``weight`` if given."""
    t = _tensor(x, "rms_norm")
    a = _axis(axis, t.ndim, "rms_norm")
    y = multiply(t, rsqrt(add(_reduce("mean", "rms_norm", multiply(t, t), a, True), eps)))
    return y if weight is None else multiply(y, weight)


def layer_norm(x: Tensor, weight: Optional[Operand] = None, bias: Optional[Operand] = None, eps: float = 1e-5, axis: int = -1) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` along ``axis``, then ``* weight + bias`` if given."""
    t = _tensor(x, "layer_norm")
    a = _axis(axis, t.ndim, "layer_norm")
    xc = subtract(t, _reduce("mean", "layer_norm", t, a, True))
    y = multiply(xc, rsqrt(add(_reduce("mean", "layer_norm", multiply(xc, xc), a, True), eps)))
    if weight is not None:
        y = multiply(y, weight)
    if bias is not None:
        y = add(y, bias)
    return y


# ---------------------------------------------------------------------------------------
# Linear algebra and data movement


def matmul(a: Operand, b: Operand, transpose_b: bool = False) -> Tensor:
    """Matrix product with numpy's rules: batch dimensions broadcast, a 1-d operand is a
    vector. With ``transpose_b``, ``b`` is given as ``[..., n, k]``."""
    g, (ta, tb) = _operands("matmul", a, b)
    if ta.ndim == 0 or tb.ndim == 0:
        raise ShapeError(f"matmul: operands must have at least one dimension, got {ta.shape} and {tb.shape}")
    va, vb = ta.ndim == 1, tb.ndim == 1
    if va:
        ta = reshape(ta, (1, ta.shape[0]))
    if vb:
        tb = reshape(tb, (1, tb.shape[0]) if transpose_b else (tb.shape[0], 1))
    out = g._wrap(g._core.matmul(ta.id, tb.id, bool(transpose_b)))
    if va or vb:
        shape = list(out.shape)
        if vb:
            shape.pop(-1)
        if va:
            shape.pop(-2 if not vb else -1)
        out = reshape(out, shape)
    return out


def reshape(x: Tensor, shape: Union[int, Sequence[int]]) -> Tensor:
    """Same elements, new shape; one dimension may be -1 (inferred)."""
    t = _tensor(x, "reshape")
    dims = [int(shape)] if isinstance(shape, (int, np.integer)) else [int(d) for d in shape]
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape: can only infer one dimension, got {tuple(dims)}")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or t.size % known:
            raise ShapeError(f"reshape: cannot reshape {t.shape} ({t.size} elements) to {tuple(dims)}")
        dims[dims.index(-1)] = t.size // known
    if any(d < 0 for d in dims):
        raise ShapeError(f"reshape: negative dimension in {tuple(dims)}")
    if tuple(dims) == t.shape:
        return t
    return t.graph._wrap(t.graph._core.reshape(t.id, dims))


def transpose(x: Tensor, axes: Optional[Sequence[int]] = None) -> Tensor:
    """Dimensions permuted: output dim ``i`` is input dim ``axes[i]`` (reversed if None)."""
    t = _tensor(x, "transpose")
    perm = list(range(t.ndim))[::-1] if axes is None else [_axis(a, t.ndim, "transpose") for a in axes]
    if perm == list(range(t.ndim)) and axes is not None and len(perm) == t.ndim:
        return t
    return t.graph._wrap(t.graph._core.permute(t.id, perm))


def permute(x: Tensor, perm: Sequence[int]) -> Tensor:
    """The IR's permute: output dim ``i`` is input dim ``perm[i]``."""
    return transpose(x, perm)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to ``shape`` (numpy rules: may add leading dimensions)."""
    t = _tensor(x, "broadcast_to")
    dims = list(_shape_tuple(shape, "broadcast_to"))
    if tuple(dims) == t.shape:
        return t
    return t.graph._wrap(t.graph._core.expand(t.id, dims))


expand = broadcast_to


def expand_dims(x: Tensor, axis: int) -> Tensor:
    """A size-1 dimension inserted at ``axis``."""
    t = _tensor(x, "expand_dims")
    a = _axis(axis, t.ndim + 1, "expand_dims")
    shape = list(t.shape)
    shape.insert(a, 1)
    return reshape(t, shape)


def squeeze(x: Tensor, axis: Union[None, int, Sequence[int]] = None) -> Tensor:
    """Size-1 dimensions removed (all of them, or the ones in ``axis``)."""
    t = _tensor(x, "squeeze")
    if axis is None:
        axes = [i for i, d in enumerate(t.shape) if d == 1]
    else:
        axes = _axes(axis, t.ndim, "squeeze")
        for a in axes:
            if t.shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} has size {t.shape[a]}, not 1")
    return reshape(t, [d for i, d in enumerate(t.shape) if i not in axes])


def slice_axis(x: Tensor, axis: int, start: int, end: int) -> Tensor:
    """Elements ``start:end`` along ``axis`` (the IR's slice; ``x[..., a:b]`` uses it)."""
    t = _tensor(x, "slice")
    a = _axis(axis, t.ndim, "slice")
    return t.graph._wrap(t.graph._core.slice(t.id, a, int(start), int(end)))


def concatenate(xs: Sequence[Operand], axis: int = 0) -> Tensor:
    """Tensors joined along ``axis``; they must agree in every other dimension and dtype."""
    xs = list(xs)
    if not xs:
        raise ShapeError("concat: needs at least one tensor")
    g, ts = _operands("concat", *xs)
    if len(ts) == 1:
        return ts[0]
    a = _axis(axis, ts[0].ndim, "concat")
    return g._wrap(g._core.concat([t.id for t in ts], a))


concat = concatenate


def stack(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Tensors of one shape joined along a new ``axis``."""
    xs = list(xs)
    if not xs:
        raise ShapeError("stack: needs at least one tensor")
    first = _tensor(xs[0], "stack")
    a = _axis(axis, first.ndim + 1, "stack")
    return concatenate([expand_dims(_tensor(t, "stack"), a) for t in xs], a)


def take(table: Tensor, ids: Operand) -> Tensor:
    """Rows of a 2-d float32 ``table`` selected by int32 ``ids`` of any shape: the result has
    shape ``ids.shape + (table.shape[1],)`` (``numpy.take(table, ids, axis=0)``). An id out of
    range is an ``ExecutionError`` when the graph runs."""
    t = _tensor(table, "gather")
    g = t.graph
    i = _lift(g, ids, "int32", "gather")
    return g._wrap(g._core.gather(t.id, i.id))


gather = take
