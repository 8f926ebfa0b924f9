"""Tensor Graphs: an ML compiler and inference engine, from Python.

Build a graph with a numpy-flavoured API, compile it, run it on numpy arrays::

    import numpy as np
    import tensor_graphs as tg

    g = tg.Graph()
    x = g.input("x", (2, 3))                       # float32 input
    w = g.constant(np.random.rand(3, 4))           # numpy data → float32 constant
    g.output("y", tg.softmax(x @ w + 1.0))
    c = tg.compile(g)                              # or tg.compile(g, disable=["views"])
    print(c.run({"x": np.ones((2, 3), np.float32)})["y"])
    print(c.explain(format="text"))                # what each compiler stage did

Run models::

    m = tg.LanguageModel()                         # ~/.cache/tensor-graphs/models/... or $TG_MODEL
    print(m.generate("The capital of France is", max_tokens=16))
    for tok in m.generate("Once upon a time", stream=True):
        print(tok.text, end="", flush=True)
    logits = m.logits(m.tokenize("Hello"))         # float32 (vocab_size,)

    e = tg.EmbeddingGemma()                        # or $TG_EMBED_MODEL
    v = e.embed(["Which planet is known as the Red Planet?"], prompt_name="query")

Any model through one interface (an ONNX file, a Gemma 3 GGUF file, an EmbeddingGemma
folder; see :mod:`tensor_graphs._session`)::

    s = tg.load("model.onnx")                      # kind found from the file
    (y,) = s.run(None, {"x": x})                   # named numpy arrays in, a list out

Errors are subclasses of :class:`TensorGraphsError` (see :mod:`tensor_graphs.errors`).
The GIL is released while the engine computes.
"""

from ._native import AudioEmbedder, Compiled, EmbeddingGemma, LanguageModel, TerrainDiffusion, Token, TokenStream, __version__, default_threads, plan_problem

#: Earlier name of :class:`LanguageModel` (it ran Gemma 3 only); kept so old code keeps working.
Gemma3 = LanguageModel
from . import errors, fused, onnx
from ._session import Session, TensorInfo, kinds, load
from .errors import (
    CompileError,
    DTypeError,
    DuplicateNameError,
    ExecutionError,
    GraphError,
    MissingInputError,
    ModelError,
    ModelNotFoundError,
    OptionsError,
    RequestError,
    ShapeError,
    TensorGraphsError,
    UnknownNameError,
)
from ._graph import *  # noqa: F401,F403
from ._graph import __all__ as _graph_all

#: numpy dtypes tensor_graphs supports.
float32 = __import__("numpy").float32
int32 = __import__("numpy").int32
bool_ = __import__("numpy").bool_

__all__ = [
    "__version__",
    "Compiled",
    "LanguageModel",
    "Gemma3",
    "TerrainDiffusion",
    "AudioEmbedder",
    "EmbeddingGemma",
    "Token",
    "TokenStream",
    "Session",
    "TensorInfo",
    "kinds",
    "load",
    "default_threads",
    "plan_problem",
    "errors",
    "fused",
    "float32",
    "int32",
    "bool_",
    *errors.__all__,
    *_graph_all,
]
