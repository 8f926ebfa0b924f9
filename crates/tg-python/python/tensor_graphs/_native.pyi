"""Type stubs of the compiled extension ``tensor_graphs._native``.

``Compiled``, ``LanguageModel`` (alias ``Gemma3``), ``EmbeddingGemma``, ``TokenStream`` and ``Token`` are public
(re-exported by ``tensor_graphs``); ``GraphCore``, ``compile`` and ``reference_eval`` are
the low-level layer under ``tensor_graphs.Graph`` / ``tensor_graphs.compile``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Union, final, overload

import numpy as np
import numpy.typing as npt

__all__ = ["GraphCore", "Compiled", "LanguageModel", "EmbeddingGemma", "TokenStream", "Token", "compile", "reference_eval", "default_threads", "plan_problem", "STAGES", "ModelSession", "load_model", "MODEL_KINDS", "__version__"]
__version__: str
#: Names of the compiler stages, in order.
STAGES: List[str]

def default_threads() -> int:
    """The number of worker threads ``threads=0`` means (all cores)."""

def plan_problem(problem: str, time_limit_s: float = 10.0, node_limit: Optional[int] = None) -> str:
    """Solve a planning problem (JSON, see docs/planner.md); returns the result JSON."""

@final
class GraphCore:
    """A graph under construction; methods that add a node return its id."""

    def __new__(cls) -> GraphCore: ...
    def input(self, name: str, shape: Sequence[int], dtype: str) -> int: ...
    def weight(self, array: np.ndarray, name: Optional[str] = None) -> int: ...
    def constant(self, value: float, dtype: str) -> int: ...
    def iota(self, shape: Sequence[int], axis: int, dtype: str) -> int: ...
    def unary(self, op: str, x: int) -> int: ...
    def binary(self, op: str, a: int, b: int) -> int: ...
    def compare(self, op: str, a: int, b: int) -> int: ...
    def where(self, cond: int, a: int, b: int) -> int: ...
    def cast(self, x: int, dtype: str) -> int: ...
    def reduce(self, op: str, x: int, axis: int) -> int: ...
    def matmul(self, a: int, b: int, transpose_rhs: bool = False) -> int: ...
    def reshape(self, x: int, shape: Sequence[int]) -> int: ...
    def permute(self, x: int, perm: Sequence[int]) -> int: ...
    def expand(self, x: int, shape: Sequence[int]) -> int: ...
    def slice(self, x: int, axis: int, start: int, end: int) -> int: ...
    def concat(self, xs: Sequence[int], axis: int) -> int: ...
    def gather(self, table: int, ids: int) -> int: ...
    def fused(self, name: str, inputs: Sequence[int], attr: Optional[float] = None) -> int: ...
    def output(self, name: str, x: int) -> None: ...
    def shape(self, x: int) -> List[int]: ...
    def dtype(self, x: int) -> str: ...
    def op(self, x: int) -> str: ...
    def num_nodes(self) -> int: ...
    def inputs(self) -> List[Tuple[str, List[int], str]]: ...
    def outputs(self) -> List[Tuple[str, int]]: ...
    def weight_names(self) -> List[str]: ...
    def op_histogram(self) -> List[Tuple[str, int]]: ...
    def to_json(self) -> str: ...
    def verify(self) -> None: ...

def compile(core: GraphCore, disable: Sequence[str] = ..., numerics: str = "exact", alignment: int = 64, threads: int = 0, devices: Sequence[str] = ..., place: Sequence[str] = ...) -> Compiled:
    """Compiles the graph of ``core`` for the CPU (see ``tensor_graphs.compile``)."""

def reference_eval(core: GraphCore, inputs: Optional[Dict[str, Any]] = None, /, **kwargs: Any) -> Dict[str, np.ndarray]:
    """Evaluates the graph with the f64 reference interpreter (see ``tensor_graphs.reference_eval``)."""

@final
class Compiled:
    """A compiled graph, ready to run; create it with ``tensor_graphs.compile(graph)``.

    ``run()`` may be called from several threads: runs of one compiled graph are
    serialized, runs of different ones proceed in parallel, and the GIL is released while
    the engine works.
    """

    def run(self, inputs: Optional[Dict[str, Any]] = None, /, **kwargs: Any) -> Dict[str, np.ndarray]:
        """Runs the graph on numpy arrays (a dict, and/or keyword arguments, by input name).

        Each array must have exactly the input's dtype and shape (``DTypeError`` /
        ``ShapeError`` otherwise; lists and scalars are converted with ``numpy.asarray``).
        Every input is required (``MissingInputError``); other names are errors
        (``UnknownNameError``). Returns new arrays owned by the caller, never views of
        engine memory.
        """
    @overload
    def explain(self, format: Literal["dict"] = "dict", steps: bool = False) -> Dict[str, Any]: ...
    @overload
    def explain(self, format: Literal["text"], steps: bool = False) -> str: ...
    @property
    def inputs(self) -> Dict[str, Tuple[Tuple[int, ...], str]]:
        """Declared inputs: ``{name: (shape, dtype)}``."""
    @property
    def output_names(self) -> List[str]:
        """Output names in declaration order."""
    @property
    def arena_bytes(self) -> int:
        """Bytes of the memory arena the plan runs in."""
    @property
    def threads(self) -> int:
        """Worker threads of the CPU device."""

@final
class Token:
    """One generated token."""

    @property
    def id(self) -> int:
        """Token id."""
    @property
    def text(self) -> str:
        """Text completed by this token (may be empty inside a multi-byte character)."""

@final
@final
class TokenStream(Iterator[Token]):
    """Tokens of a generation as they are produced."""

    def __iter__(self) -> TokenStream: ...
    def __next__(self) -> Token: ...
    def close(self) -> None:
        """Stops the generation and ends the iteration."""
    @property
    def tokens(self) -> List[int]:
        """Ids yielded so far."""
    @property
    def text(self) -> str:
        """Text yielded so far."""
    @property
    def prompt_tokens(self) -> List[int]:
        """The prompt's token ids."""
    @property
    def timings(self) -> Optional[Dict[str, float]]:
        """``prompt_ms``, ``generate_ms``, ``compile_ms`` once the stream has ended."""

_Prompt = Union[str, Sequence[int]]

@final
class LanguageModel:
    """A decoder LLM from a GGUF file (Gemma 3, Llama, Mistral, Qwen2, Qwen3): tokenizer, logits, generation, chat."""

    def __new__(cls, path: Optional[Union[str, os.PathLike[str]]] = None, threads: int = 0, numerics: Literal["exact", "q8"] = "exact", devices: Sequence[str] = ..., place: Sequence[str] = ...) -> LanguageModel:
        """Loads ``path``, else ``$TG_MODEL``, else the default model in the cache
        (``ModelNotFoundError`` if absent; ``ModelError`` if unusable)."""
    @property
    def path(self) -> Path: ...
    @property
    def config(self) -> Dict[str, Any]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def context_length(self) -> int: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    def tokenize(self, text: str, add_bos: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids of ``text``."""
    def detokenize(self, ids: Sequence[int], render_special: bool = False) -> str:
        """Text of token ids."""
    def token_text(self, id: int) -> str:
        """Vocabulary entry of one token id."""
    def logits(self, tokens: _Prompt, all_positions: bool = False) -> npt.NDArray[np.float32]:
        """Logits after ``tokens``: ``(vocab_size,)``, or ``(len, vocab_size)`` for all positions."""
    @overload
    def generate(self, prompt: _Prompt, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, add_bos: bool = True, stream: Literal[False] = False, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str: ...
    @overload
    def generate(self, prompt: _Prompt, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, add_bos: bool = True, *, stream: Literal[True], min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> TokenStream: ...
    @overload
    def chat(self, messages: Sequence[Dict[str, str]], max_tokens: int = 256, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, stream: Literal[False] = False, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str:
        """The assistant's reply to ``messages`` through the model's chat template."""
    @overload
    def chat(self, messages: Sequence[Dict[str, str]], max_tokens: int = 256, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, *, stream: Literal[True], min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> TokenStream: ...
    def set_chat_template(self, source: str) -> None:
        """Use the Jinja chat template ``source`` instead of the file's."""
    @property
    def incremental(self) -> bool:
        """Generation keeps states between runs (default) instead of recomputing the sequence."""
    @incremental.setter
    def incremental(self, on: bool) -> None: ...
    def session(self) -> Dict[str, Any]:
        """What the incremental path keeps: tokens, capacity, states, bytes, reused, derivation."""
    def explain(self) -> Optional[Dict[str, Any]]:
        """The compiler's report for the most recent plan."""

@final
class EmbeddingGemma:
    """EmbeddingGemma (sentence-transformers folder): text embeddings on the CPU."""

    def __new__(cls, path: Optional[Union[str, os.PathLike[str]]] = None, threads: int = 0, devices: Sequence[str] = ..., place: Sequence[str] = ...) -> EmbeddingGemma:
        """Loads ``path``, else ``$TG_EMBED_MODEL``, else the default model in the cache."""
    @overload
    def embed(self, texts: str, prompt_name: Optional[str] = None, dim: Optional[int] = None) -> npt.NDArray[np.float32]: ...
    @overload
    def embed(self, texts: Sequence[str], prompt_name: Optional[str] = None, dim: Optional[int] = None) -> npt.NDArray[np.float32]: ...
    def tokenize(self, text: str, prompt_name: Optional[str] = None) -> List[int]:
        """Token ids fed to the encoder (BOS, prompt + text, EOS)."""
    @property
    def prompts(self) -> Dict[str, str]: ...
    @property
    def default_prompt_name(self) -> Optional[str]: ...
    @property
    def output_dim(self) -> int: ...
    @property
    def max_seq_length(self) -> int: ...
    @property
    def path(self) -> Path: ...
    @property
    def config(self) -> Dict[str, Any]: ...
    def explain(self) -> Optional[Dict[str, Any]]:
        """The compiler's report for the most recent plan."""

class TerrainDiffusion:
    """Terrain heightmaps (128×128) from the terrain diffusion consistency UNet."""

    def __new__(cls, path: Optional[Union[str, os.PathLike[str]]] = None, threads: int = 0, devices: Sequence[str] = ...) -> TerrainDiffusion:
        """Loads the UNet file or its folder, else ``$TG_ONNX_MODELS``, else the cache's."""
    def generate(
        self,
        difficulty: Union[int, Sequence[int]],
        seed: int = 0,
        steps: int = 1,
        batch: int = 1,
        noise: Optional[npt.NDArray[np.float32]] = None,
        init: Optional[npt.NDArray[np.float32]] = None,
        strength: float = 0.5,
        metres: bool = False,
    ) -> npt.NDArray[np.float32]:
        """``(batch, 128, 128)``: the UNet's values, or heights in metres with ``metres``."""
    @property
    def path(self) -> Path: ...

class AudioEmbedder:
    """Speech embeddings and wake-word scores with openwakeword's ONNX models."""

    def __new__(cls, path: Optional[Union[str, os.PathLike[str]]] = None, wakewords: Sequence[str] = ..., threads: int = 0, devices: Sequence[str] = ..., sliding: bool = True) -> AudioEmbedder:
        """Loads the models folder, else ``$TG_ONNX_MODELS``, else the cache's; ``sliding=False``
        embeds window by window (as openwakeword does) instead of in runs over many windows."""
    def embed(self, samples: Union[npt.NDArray[np.int16], npt.NDArray[np.float32]], sample_rate: int = 16000) -> npt.NDArray[np.float32]:
        """``(windows, 96)`` embeddings (int16 samples, or float32 with full scale ±1)."""
    def scores(self, samples: Union[npt.NDArray[np.int16], npt.NDArray[np.float32]], sample_rate: int = 16000) -> Dict[str, npt.NDArray[np.float32]]:
        """Per wake word, ``(windows,)`` scores."""
    @property
    def wakewords(self) -> List[str]: ...
    @property
    def path(self) -> Path: ...

MODEL_KINDS: List[Tuple[str, str]]

_Spec = Tuple[str, Optional[List[Optional[int]]], str, Optional[List[Optional[str]]], Dict[str, int]]

class ModelSession:
    """Any model the registry opens, through the one model interface."""
    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def capabilities(self) -> List[str]: ...
    @property
    def config(self) -> Any: ...
    def inputs(self) -> List[_Spec]: ...
    def outputs(self) -> List[_Spec]: ...
    def run(self, output_names: Optional[Sequence[str]], feeds: Dict[str, np.ndarray]) -> List[np.ndarray]: ...
    def compile(self, feeds: Dict[str, np.ndarray]) -> Dict[str, Any]: ...
    def generate(self, prompt: str, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str: ...
    def chat(self, messages: Sequence[Dict[str, str]], max_tokens: int = 256, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, seed: int = 0, min_p: float = 0.05, repeat_penalty: float = 1.0, stop: Sequence[str] = ()) -> str: ...
    def embed(self, texts: Sequence[str], prompt_name: Optional[str] = None, dim: Optional[int] = None) -> npt.NDArray[np.float32]: ...
    def explain(self) -> Optional[Dict[str, Any]]: ...

def load_model(path: Union[str, os.PathLike[str]], devices: Sequence[str] = ..., threads: int = 0, kind: Optional[str] = None) -> ModelSession: ...
