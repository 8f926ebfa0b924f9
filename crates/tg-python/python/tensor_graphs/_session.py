"""Any model, one session type: ``tensor_graphs.load(path)``.

    import tensor_graphs as tg
    s = tg.load("model.onnx")                      # or a Gemma 3 .gguf, an EmbeddingGemma folder
    print(s.kind, [i.name for i in s.inputs()])    # "onnx", ["x", ...]
    (y,) = s.run(None, {"x": x})                   # named numpy arrays in, a list out

``tg.load`` finds the kind of the path (``tensor_graphs.kinds`` lists them, as the engine's registry does: an ``.onnx``
file, a GGUF file of architecture ``gemma3``, a sentence-transformers folder whose encoder
is Gemma 3) and opens it through the engine's one model interface (``tg_models::Model``):
``run`` is the model as a function of named tensors (Gemma 3: ``tokens`` int32 ``[n]`` →
``logits`` float32 ``[n, vocab]``; EmbeddingGemma: ``input_ids`` and ``attention_mask``
int64 ``[batch, sequence]`` → ``embeddings`` float32 ``[batch, dim]``; ONNX: the graph's
inputs and outputs). What only some models do is a capability: ``s.capabilities`` lists
``run`` (every model) and ``generate`` (``s.generate(prompt, ...)``) or ``embed``
(``s.embed(texts, ...)``). Plans are
compiled per input shape on first use and kept. Integer inputs take int32 or int64 arrays
(int64 values must fit int32); an ``int64`` output comes back as int64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _native

__all__ = ["Session", "TensorInfo", "load"]


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a model.

    ``shape``: the fixed sizes, ``None`` for a free dimension (``shape`` itself is ``None``
    when the model declares no shape); ``dtype``: the numpy dtype name; ``dim_names``: each
    free dimension's name (``None`` for a fixed one; dimensions of the same name take the
    same size); ``limits``: the largest size of the free dimensions that have one.
    """

    name: str
    shape: Optional[Tuple[Optional[int], ...]]
    dtype: str
    dim_names: Optional[Tuple[Optional[str], ...]] = None
    limits: Dict[str, int] = field(default_factory=dict)


def _info(t) -> TensorInfo:
    name, shape, dtype, names, limits = t
    return TensorInfo(name, None if shape is None else tuple(shape), dtype, None if names is None else tuple(names), dict(limits))


class Session:
    """A loaded model (see the module docs). Create it with :func:`load`."""

    def __init__(self, native: "_native.ModelSession"):
        self._s = native

    @property
    def kind(self) -> str:
        """The model's kind: ``gemma3``, ``embedding-gemma`` or ``onnx``."""
        return self._s.kind

    @property
    def path(self) -> str:
        return self._s.path

    @property
    def capabilities(self) -> List[str]:
        """What the model does: ``run`` (every model), ``generate``, ``embed``."""
        return list(self._s.capabilities)

    @property
    def config(self) -> Any:
        """The configuration read from the model's files (a dict), or ``None``."""
        return self._s.config

    def inputs(self) -> List[TensorInfo]:
        return [_info(t) for t in self._s.inputs()]

    def outputs(self) -> List[TensorInfo]:
        return [_info(t) for t in self._s.outputs()]

    def run(self, output_names: Optional[Sequence[str]], feeds: Dict[str, Any]) -> list:
        """The outputs named (all of them, in order, for ``None``) as new numpy arrays."""
        return self._s.run(None if output_names is None else list(output_names), dict(feeds))

    def compile(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        """Compiles the plans ``run`` needs for these feeds now; returns the times."""
        return self._s.compile(dict(feeds))

    def generate(self, prompt: str, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str:
        """Text generated after ``prompt`` (models with the ``generate`` capability); it
        ends before the first of ``stop``."""
        return self._s.generate(prompt, max_tokens, temperature, top_k, top_p, seed, min_p, repeat_penalty, list(stop))

    def chat(self, messages: Sequence[Dict[str, str]], max_tokens: int = 256, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str:
        """The assistant's reply to ``messages`` (``[{"role": ..., "content": ...}, ...]``)
        through the model's chat template (models with the ``generate`` capability)."""
        return self._s.chat(messages, max_tokens, temperature, top_k, top_p, seed, min_p, repeat_penalty, list(stop))

    def embed(self, texts, prompt_name: Optional[str] = None, dim: Optional[int] = None):
        """Embeddings of ``texts`` (a string or a sequence): float32 ``(dim,)`` or
        ``(len(texts), dim)`` (models with the ``embed`` capability)."""
        single = isinstance(texts, str)
        e = self._s.embed([texts] if single else list(texts), prompt_name, dim)
        return e[0] if single else e

    def explain(self) -> Optional[Dict[str, Any]]:
        """The compiler's report for the most recently compiled plan, or ``None``."""
        return self._s.explain()

    def __repr__(self) -> str:
        return f"Session(kind={self.kind!r}, path={self.path!r})"


#: The kinds of model :func:`load` recognises (name → what a path of that kind is), asked
#: in this order: the engine's registry (``tg_models::KINDS``).
kinds = dict(_native.MODEL_KINDS)


def load(path, devices: Sequence[str] = ("cpu",), threads: int = 0, kind: Optional[str] = None) -> Session:
    """Opens the model at ``path`` (its kind found from the file, or ``kind``) on
    ``devices`` (names as for ``compile``) with ``threads`` CPU workers (0 = all cores)."""
    return Session(_native.load_model(str(path), list(devices), threads, kind))
