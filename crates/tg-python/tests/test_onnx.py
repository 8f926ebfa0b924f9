"""tensor_graphs.onnx: ONNX node-test models run through the session API (onnxruntime's
shape), checked against numpy; bad feeds are errors naming the input."""

from __future__ import annotations

import numpy as np
import pytest

import tensor_graphs as tg
import tensor_graphs.onnx as tgx


def test_add_and_the_session_api(onnx_tests, rng):
    s = tgx.load(onnx_tests / "test_add" / "model.onnx")
    assert [i.name for i in s.get_inputs()] == ["x", "y"]
    assert s.get_inputs()[0].shape == [3, 4, 5] and s.get_inputs()[0].type == "tensor(float)"
    assert [o.name for o in s.get_outputs()] == ["sum"]
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    (got,) = s.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(got, x + y)
    assert s.run(["sum"], {"x": y, "y": y})[0].dtype == np.float32


def test_gemm_and_softmax_against_numpy(onnx_tests, rng):
    s = tgx.load(onnx_tests / "test_gemm_all_attributes" / "model.onnx")
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in s.get_inputs()}
    (y,) = s.run(None, feeds)
    a, b, c = feeds["a"], feeds["b"], feeds["c"]
    # transA=1, transB=1, alpha=0.25, beta=0.35 (the case's attributes)
    np.testing.assert_allclose(y, 0.25 * a.T @ b.T + 0.35 * c, rtol=1e-5, atol=1e-5)
    s = tgx.load(onnx_tests / "test_softmax_axis_1" / "model.onnx")
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    (y,) = s.run(None, {"x": x})
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_shape_inputs_are_bound_and_each_value_gets_its_plan(onnx_tests, rng):
    s = tgx.load(onnx_tests / "test_reshape_reordered_all_dims" / "model.onnx")
    data = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for shape in ([4, 2, 3], [3, 4, 2], [1, 24, 1]):
        (y,) = s.run(None, {"data": data, "shape": np.array(shape, dtype=np.int64)})
        np.testing.assert_array_equal(y, data.reshape(shape))


def test_bad_feeds_are_errors(onnx_tests, rng):
    s = tgx.load(onnx_tests / "test_add" / "model.onnx")
    x = np.zeros((3, 4, 5), np.float32)
    with pytest.raises(tg.MissingInputError, match="'y'"):
        s.run(None, {"x": x})
    with pytest.raises(tg.DTypeError, match="'y'"):
        s.run(None, {"x": x, "y": np.zeros((3, 4, 5), np.float64)})
    with pytest.raises(tg.UnknownNameError, match="'z'"):
        s.run(None, {"x": x, "y": x, "z": x})
    with pytest.raises(tg.UnknownNameError, match="'nope'"):
        s.run(["nope"], {"x": x, "y": x})
    with pytest.raises(tg.TensorGraphsError, match=r"\[3, 4, 5\]"):
        s.run(None, {"x": np.zeros((2, 2), np.float32), "y": x})
    with pytest.raises(tg.ModelNotFoundError):
        tgx.load(onnx_tests / "no-such" / "model.onnx")
    with pytest.raises(tg.CompileError, match="GridSample"):
        tgx.load(onnx_tests / "test_gridsample" / "model.onnx").run(
            None, {i.name: np.zeros(i.shape, np.float32) for i in tgx.load(onnx_tests / "test_gridsample" / "model.onnx").get_inputs()}
        )
