"""Exceptions raised by tensor_graphs.

Every exception derives from :class:`TensorGraphsError` and, where one fits, from the
builtin a Python programmer would expect, so ``except ValueError`` / ``except KeyError`` /
``except TypeError`` / ``except FileNotFoundError`` work as usual::

    TensorGraphsError(Exception)
    ├── GraphError(ValueError)          invalid graph: operand count, foreign tensor, ...
    │   └── DuplicateNameError          an input, output or constant name used twice
    ├── ShapeError(ValueError)          shapes that do not fit an op, or a wrongly shaped input
    ├── DTypeError(TypeError)           dtypes that do not fit an op, or a wrongly typed input
    ├── MissingInputError(KeyError)     run() without a required input
    ├── UnknownNameError(KeyError)      an input or output name the graph does not have
    ├── CompileError                    the compiler cannot compile the graph
    │   └── OptionsError(ValueError)    unknown or required stage, bad numerics
    ├── ExecutionError(RuntimeError)    a kernel failed, or an internal error in the engine
    ├── ModelError                      a model file that cannot be used
    │   └── ModelNotFoundError(FileNotFoundError)
    └── RequestError(ValueError)        bad sampling parameters, empty or too long prompt

Messages name the op and the mismatch, e.g.
``matmul: shape mismatch: contracted dims differ: [2, 3] · [4, 5]``.
"""

from __future__ import annotations

__all__ = [
    "TensorGraphsError",
    "GraphError",
    "DuplicateNameError",
    "ShapeError",
    "DTypeError",
    "MissingInputError",
    "UnknownNameError",
    "CompileError",
    "OptionsError",
    "ExecutionError",
    "ModelError",
    "ModelNotFoundError",
    "RequestError",
]


class TensorGraphsError(Exception):
    """Base class of every error raised by tensor_graphs."""


class GraphError(TensorGraphsError, ValueError):
    """An invalid graph: wrong operand count, a tensor of another graph, no outputs."""


class DuplicateNameError(GraphError):
    """An input, output or constant name declared twice."""


class ShapeError(TensorGraphsError, ValueError):
    """Shapes that an op does not accept, or an input of the wrong shape."""


class DTypeError(TensorGraphsError, TypeError):
    """Dtypes that an op does not accept, or an input of the wrong dtype."""


class _PlainKeyError(KeyError):
    # KeyError's str() is the repr of its argument (quoted); show the message as written.
    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class MissingInputError(TensorGraphsError, _PlainKeyError):
    """``run()`` was not given a value for one of the graph's inputs."""


class UnknownNameError(TensorGraphsError, _PlainKeyError):
    """An input or output name that the graph does not have."""


class CompileError(TensorGraphsError):
    """The compiler could not compile the graph (no kernel for a node, invalid plan)."""


class OptionsError(CompileError, ValueError):
    """Bad compiler options: an unknown stage, a stage that cannot be switched off, bad numerics."""


class ExecutionError(TensorGraphsError, RuntimeError):
    """Running a compiled graph failed, or the engine hit an internal error."""


class ModelError(TensorGraphsError):
    """A model file or folder that cannot be used (format, architecture, tokenizer)."""


class ModelNotFoundError(ModelError, FileNotFoundError):
    """The model file or folder does not exist."""


class RequestError(TensorGraphsError, ValueError):
    """A request a model cannot serve: bad sampling parameters, empty or over-long prompt."""
