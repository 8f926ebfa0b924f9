"""ONNX models through the Tensor Graphs compiler, in onnxruntime's shape.

    import tensor_graphs.onnx as ort_like
    sess = ort_like.load("model.onnx")             # or devices=["cpu", "opencl"]
    (y,) = sess.run(None, {"x": x})                # like onnxruntime.InferenceSession.run

This is :func:`tensor_graphs.load` opened as the ``onnx`` kind, with onnxruntime's
method names. The model is imported for the shapes of the arrays given (one plan per input signature,
compiled on first use and kept); inputs whose values decide shapes (a Reshape target, Slice
bounds) are bound at import when the graph needs them known. Inputs are float32, int64, int32
or bool arrays; int64 outputs come back as int64. An op the importer does not map raises
``CompileError`` naming the op type, the node and the opset (``docs/onnx.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from . import _native

__all__ = ["InferenceSession", "NodeArg", "load"]


@dataclass(frozen=True)
class NodeArg:
    """An input or output: its name, declared shape (``None`` for a dynamic dimension) and
    type (``"tensor(float)"``, ...), as onnxruntime's ``NodeArg``."""

    name: str
    shape: Optional[list]
    type: str


_TYPES = {"float32": "tensor(float)", "int32": "tensor(int32)", "int64": "tensor(int64)", "bool": "tensor(bool)"}


def _arg(t) -> NodeArg:
    name, shape, dtype = t[0], t[1], t[2]
    return NodeArg(name, [] if shape is None else list(shape), _TYPES.get(dtype, "tensor(unsupported)"))


class InferenceSession:
    """A loaded ONNX model (see the module docs)."""

    def __init__(self, native: "_native.ModelSession"):
        self._s = native

    def get_inputs(self) -> list:
        return [_arg(t) for t in self._s.inputs()]

    def get_outputs(self) -> list:
        return [_arg(t) for t in self._s.outputs()]

    def run(self, output_names: Optional[Sequence[str]], input_feed: dict, run_options=None) -> list:
        """The outputs named (all of them, in order, for ``None``) as new numpy arrays."""
        if run_options is not None:
            raise TypeError("run_options is not supported")
        return self._s.run(None if output_names is None else list(output_names), dict(input_feed))


def load(path, devices: Sequence[str] = ("cpu",), threads: int = 0) -> InferenceSession:
    """Opens the ONNX model at ``path`` on ``devices`` (names as for ``compile``)."""
    return InferenceSession(_native.load_model(str(path), list(devices), threads, "onnx"))
