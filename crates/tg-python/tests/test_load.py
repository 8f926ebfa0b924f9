"""``tensor_graphs.load``: every model kind through the one model interface, against the
concrete APIs (``Gemma3.logits`` / ``generate``, ``EmbeddingGemma.embed``,
``tensor_graphs.onnx``) and onnxruntime; bad paths and feeds are errors naming the model
and the input."""

from __future__ import annotations

import numpy as np
import pytest

import tensor_graphs as tg
import tensor_graphs.onnx as tgx


def test_onnx_node_model_through_load(onnx_tests, rng):
    s = tg.load(onnx_tests / "test_add" / "model.onnx")
    assert s.kind == "onnx" and s.capabilities == ["run"]
    assert [(i.name, i.shape, i.dtype) for i in s.inputs()] == [("x", (3, 4, 5), "float32"), ("y", (3, 4, 5), "float32")]
    assert [o.name for o in s.outputs()] == ["sum"]
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    (got,) = s.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(got, x + y)
    (via_onnx,) = tgx.load(onnx_tests / "test_add" / "model.onnx").run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(got, via_onnx)
    with pytest.raises(tg.MissingInputError, match="'y'"):
        s.run(None, {"x": x})
    with pytest.raises(tg.UnknownNameError, match="'z'"):
        s.run(None, {"x": x, "y": y, "z": x})
    with pytest.raises(tg.ShapeError, match=r"'x'.*\[3, 4, 5\]"):
        s.run(None, {"x": x[:2], "y": y})
    with pytest.raises(tg.DTypeError, match="'y'"):
        s.run(None, {"x": x, "y": y.astype(np.float64)})
    with pytest.raises(tg.RequestError, match="does not generate"):
        s.generate("hello")


def test_unknown_and_missing_paths(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"not a model")
    with pytest.raises(tg.ModelError, match="weights.bin") as e:
        tg.load(f)
    for kind in tg.kinds:
        assert kind in str(e.value)
    with pytest.raises(tg.ModelNotFoundError):
        tg.load(tmp_path / "nothing.onnx")
    with pytest.raises(tg.ModelError, match="'nope'"):
        tg.load(f, kind="nope")
    assert set(tg.kinds) == {"gemma3", "llama", "qwen2", "qwen3", "embedding-gemma", "onnx"}


def test_terrain_unet_through_load_matches_onnxruntime(onnx_models):
    import onnxruntime as ort

    path = onnx_models / "terrain_consistency_unet_difficulty100.onnx"
    s = tg.load(path)
    names = [i.name for i in s.inputs()]
    assert names == ["noisy", "sigma", "difficulty"]
    rng = np.random.default_rng(11)
    feeds = {"noisy": (rng.standard_normal((1, 1, 128, 128)) * 2.0).astype(np.float32), "sigma": np.array([2.0], np.float32), "difficulty": np.array([0.5], np.float32)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    (want,) = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = s.run(None, feeds)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"terrain via tg.load: relative error {err:.2e}")
    assert err <= 1e-4


def test_gemma_through_load_is_the_concrete_api(gemma, gemma_path):
    s = tg.load(gemma_path)
    assert s.kind == "gemma3" and "generate" in s.capabilities
    (inp,) = s.inputs()
    assert (inp.name, inp.dtype, inp.shape, inp.dim_names) == ("tokens", "int32", (None,), ("tokens",))
    assert inp.limits == {"tokens": gemma.context_length}
    (out,) = s.outputs()
    assert out.shape == (None, gemma.vocab_size)
    ids = gemma.tokenize("The capital of France is")
    (logits,) = s.run(None, {"tokens": np.array(ids, np.int64)})
    assert logits.shape == (len(ids), gemma.vocab_size) and logits.dtype == np.float32
    np.testing.assert_array_equal(logits, gemma.logits(ids, all_positions=True))
    assert s.generate("The capital of France is", max_tokens=8) == gemma.generate("The capital of France is", max_tokens=8)
    with pytest.raises(tg.RequestError, match="vocabulary"):
        s.run(None, {"tokens": np.array([2, gemma.vocab_size], np.int32)})
    with pytest.raises(tg.ShapeError, match="'tokens'"):
        s.run(None, {"tokens": np.array([[2, 3]], np.int32)})
    with pytest.raises(tg.DTypeError, match="'tokens'"):
        s.run(None, {"tokens": np.array([2.0, 3.0], np.float32)})
    with pytest.raises(tg.RequestError, match="does not embed"):
        s.embed(["hello"])


def test_embedding_gemma_through_load_is_embed(embedder, embed_path):
    s = tg.load(embed_path)
    assert s.kind == "embedding-gemma" and "embed" in s.capabilities
    assert [(i.name, i.dtype) for i in s.inputs()] == [("input_ids", "int64"), ("attention_mask", "int64")]
    texts = ["Which planet is known as the Red Planet?", "Mars, the red one.", "Venus is hot."]
    rows = [embedder.tokenize(t) for t in texts]
    n = max(map(len, rows))
    ids = np.zeros((len(rows), n), np.int64)
    mask = np.zeros((len(rows), n), np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    (got,) = s.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})
    want = embedder.embed(texts)
    assert got.shape == want.shape == (3, embedder.output_dim)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(s.embed(texts), want)
    np.testing.assert_array_equal(s.embed(texts[0], dim=256), embedder.embed(texts[0], dim=256))
    with pytest.raises(tg.RequestError, match="row 0 has no tokens"):
        s.run(None, {"input_ids": ids, "attention_mask": np.zeros_like(mask)})
    with pytest.raises(tg.MissingInputError, match="'attention_mask'"):
        s.run(None, {"input_ids": ids})
    with pytest.raises(tg.UnknownNameError, match="'nope'"):
        s.run(["nope"], {"input_ids": ids, "attention_mask": mask})
