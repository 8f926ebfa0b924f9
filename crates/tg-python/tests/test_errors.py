"""Error cases: each raises the right exception class (and the builtin it derives from)
with a message that names the op or input and the mismatch. None may crash the
interpreter or leak a PanicException."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensor_graphs as tg
from tensor_graphs import errors


def simple():
    g = tg.Graph()
    x = g.input("x", (2, 3))
    i = g.input("ids", (4,), "int32")
    g.output("y", x * 2.0)
    g.output("n", i + 1)
    return g, tg.compile(g)


FEEDS = {"x": np.zeros((2, 3), np.float32), "ids": np.zeros(4, np.int32)}


def test_hierarchy():
    assert issubclass(tg.ShapeError, (tg.TensorGraphsError, ValueError))
    assert issubclass(tg.DTypeError, tg.TensorGraphsError) and issubclass(tg.DTypeError, TypeError)
    assert issubclass(tg.MissingInputError, KeyError) and issubclass(tg.UnknownNameError, KeyError)
    assert issubclass(tg.DuplicateNameError, tg.GraphError) and issubclass(tg.GraphError, ValueError)
    assert issubclass(tg.OptionsError, tg.CompileError) and issubclass(tg.OptionsError, ValueError)
    assert issubclass(tg.ExecutionError, RuntimeError)
    assert issubclass(tg.ModelNotFoundError, FileNotFoundError) and issubclass(tg.ModelNotFoundError, tg.ModelError)
    assert issubclass(tg.RequestError, ValueError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), tg.TensorGraphsError)


# Build time -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,exc,pattern",
    [
        (lambda g, x, i: x @ x, tg.ShapeError, r"matmul: shape mismatch: contracted dims differ: \[2, 3\] · \[2, 3\]"),
        (lambda g, x, i: x + g.constant(np.zeros(4)), tg.ShapeError, r"add: shape mismatch: cannot broadcast \[2, 3\] with \[4\]"),
        (lambda g, x, i: x + i, tg.DTypeError, r"add: dtype mismatch: operands must share a plain dtype, got f32 and i32"),
        (lambda g, x, i: tg.exp(i), tg.DTypeError, r"exp: dtype mismatch: expects f32, got i32"),
        (lambda g, x, i: tg.sum(i), tg.DTypeError, r"reduce_sum\[\d\]: dtype mismatch: expects f32, got i32"),
        (lambda g, x, i: x.reshape(4, 2), tg.ShapeError, r"reshape: shape mismatch: cannot reshape \[2, 3\] \(6 elements\) to \[4, 2\]"),
        (lambda g, x, i: x.reshape(-1, 4), tg.ShapeError, r"reshape: cannot reshape \(2, 3\)"),
        (lambda g, x, i: x.transpose(0, 0), tg.ShapeError, r"permute\[0, 0\]: shape mismatch: \[0, 0\] is not a permutation"),
        (lambda g, x, i: tg.broadcast_to(x, (3, 3)), tg.ShapeError, r"expand: shape mismatch: cannot expand \[2, 3\] to \[3, 3\]"),
        (lambda g, x, i: tg.slice_axis(x, 1, 2, 5), tg.ShapeError, r"slice\[1:2..5\]: shape mismatch: slice 2..5 on axis 1 out of range"),
        (lambda g, x, i: tg.concat([x, g.constant(np.zeros((2, 4)))], 0), tg.ShapeError, r"concat\[0\]: shape mismatch: \[2, 4\] does not match \[2, 3\] outside axis 0"),
        (lambda g, x, i: tg.concat([x, i], 0), tg.DTypeError, r"concat\[0\]: dtype mismatch"),
        (lambda g, x, i: tg.take(x, x), tg.DTypeError, r"gather: dtype mismatch: indices must be i32, got f32"),
        (lambda g, x, i: tg.take(g.constant(np.zeros(3)), i), tg.ShapeError, r"gather: shape mismatch: table must be rank 2"),
        (lambda g, x, i: tg.where(x > 0, x, i), tg.DTypeError, r"where: dtype mismatch: branches must share a plain dtype, got f32 and i32"),
        (lambda g, x, i: tg.where(x, x, x), tg.DTypeError, r"where: dtype mismatch: condition must be bool, got f32"),
        (lambda g, x, i: (x > 0) < (x > 0), tg.DTypeError, r"cmp_lt: dtype mismatch: compares f32 or i32"),
        (lambda g, x, i: x & x, tg.DTypeError, r"and: dtype mismatch: And does not apply to f32"),
        (lambda g, x, i: i / 2, tg.DTypeError, r"div: '/' needs float32 operands, got int32"),
        (lambda g, x, i: i + 0.5, tg.DTypeError, r"cannot combine a int32 tensor with the float 0.5"),
        (lambda g, x, i: i + 2**40, tg.DTypeError, r"outside the int32 range"),
        (lambda g, x, i: tg.sum(x, axis=2), tg.ShapeError, r"sum: axis 2 is out of bounds for a tensor of rank 2"),
        (lambda g, x, i: tg.softmax(x, 5), tg.ShapeError, r"softmax: axis 5 is out of bounds"),
        (lambda g, x, i: tg.squeeze(x, 0), tg.ShapeError, r"squeeze: axis 0 has size 2, not 1"),
        (lambda g, x, i: tg.matmul(x, g.constant(np.float32(1.0))), tg.ShapeError, r"matmul: operands must have at least one dimension"),
        (lambda g, x, i: g.input("bad", (2,), "float64"), tg.DTypeError, r"unsupported dtype float64"),
        (lambda g, x, i: g.input("bad", (2,), "complex"), tg.DTypeError, r"unsupported dtype complex128"),
        (lambda g, x, i: g.input("bad", (-1, 2)), tg.ShapeError, r"negative dimension"),
        (lambda g, x, i: g.input("huge", (2**40, 2**40)), tg.ShapeError, r"input:huge: shape mismatch: shape \[1099511627776, 1099511627776\] is too large"),
        (lambda g, x, i: tg.broadcast_to(x, (2**62, 2, 3)), tg.ShapeError, r"expand: shape mismatch: shape .* is too large"),
        (lambda g, x, i: g.constant(np.array(["a"])), tg.DTypeError, r"cannot make a constant of dtype <U1"),
        (lambda g, x, i: g.constant([1.5], dtype="int32"), tg.DTypeError, r"cannot use float64 data as int32"),
        (lambda g, x, i: g.constant(np.array([2**40])), tg.DTypeError, r"outside the int32 range"),
        (lambda g, x, i: g.input("x", (1,)), tg.DuplicateNameError, r"input 'x' is declared twice"),
        (lambda g, x, i: (g.weight("w", [1.0]), g.weight("w", [2.0])), tg.DuplicateNameError, r"weight 'w' is declared twice"),
        (lambda g, x, i: (g.output("o", x), g.output("o", x)), tg.DuplicateNameError, r"output 'o' is declared twice"),
        (lambda g, x, i: g.input("", (1,)), tg.GraphError, r"input names must not be empty"),
        (lambda g, x, i: x + tg.Graph().input("q", (2, 3)), tg.GraphError, r"add: operands belong to different graphs"),
        (lambda g, x, i: g.output("o", tg.Graph().input("q", (1,))), tg.GraphError, r"the tensor belongs to another graph"),
        (lambda g, x, i: tg.concatenate([], 0), tg.ShapeError, r"concat: needs at least one tensor"),
        (lambda g, x, i: x[0, 0, 0], IndexError, r"too many indices for tensor: tensor is 2-dimensional, but 3 were indexed"),
        (lambda g, x, i: x[2], IndexError, r"index 2 is out of bounds for axis 0 with size 2"),
        (lambda g, x, i: x[::2], IndexError, r"slice steps other than 1 are not supported"),
        (lambda g, x, i: x[..., ...], IndexError, r"single ellipsis"),
        (lambda g, x, i: x["a"], IndexError, r"unsupported index 'a'"),
        (lambda g, x, i: x + "a", TypeError, r"unsupported operand of type str"),
        (lambda g, x, i: x ** x, TypeError, r"exponent must be a Python number"),
    ],
)
def test_build_errors(build, exc, pattern):
    g = tg.Graph()
    x = g.input("x", (2, 3))
    i = g.input("i", (2, 3), "int32")
    with pytest.raises(exc, match=pattern):
        build(g, x, i)
    # The graph is still usable afterwards.
    g.output("still_ok", x + 1.0)
    assert tg.compile(g).run(x=np.ones((2, 3), np.float32), i=np.ones((2, 3), np.int32))["still_ok"][0, 0] == 2.0


def test_core_rejects_foreign_node_ids():
    core = tg._native.GraphCore()
    with pytest.raises(tg.GraphError, match="node 5 does not exist in this graph"):
        core.unary("exp", 5)
    with pytest.raises(tg.GraphError, match="unknown unary op 'cube'"):
        core.unary("cube", core.input("x", [1], "f32"))
    with pytest.raises(tg.GraphError, match=r"concat\[0\]: expected 2 inputs, got 1"):
        core.concat([0], 0)


# Compile time ---------------------------------------------------------------------------


def test_unknown_stage():
    g, _ = simple()
    listed = ", ".join(tg.STAGES)
    with pytest.raises(tg.OptionsError, match=re.escape(f"unknown stage 'fusion' (stages: {listed})")):
        tg.compile(g, disable=["fusion"])
    with pytest.raises(tg.OptionsError, match="stage 'lower' cannot be switched off"):
        tg.compile(g, tg.CompileOptions(disable=("lower",)))
    with pytest.raises(tg.OptionsError, match="unknown numerics 'int4'"):
        tg.compile(g, numerics="int4")
    with pytest.raises(tg.OptionsError, match="alignment must be a power of two"):
        tg.compile(g, alignment=48)
    with pytest.raises(TypeError, match="unexpected keyword arguments: fast"):
        tg.compile(g, fast=True)


def test_graph_without_outputs():
    g = tg.Graph()
    g.input("x", (1,))
    with pytest.raises(tg.GraphError, match="the graph has no outputs"):
        tg.compile(g)


# Run time ---------------------------------------------------------------------------------


def test_float64_array_for_float32_input():
    _, c = simple()
    with pytest.raises(tg.DTypeError, match=r"input 'x': expected a float32 array, got float64 \(convert it with .astype\(np.float32\)\)") as e:
        c.run({**FEEDS, "x": np.zeros((2, 3))})
    assert isinstance(e.value, TypeError)
    with pytest.raises(tg.DTypeError, match=r"input 'ids': expected a int32 array, got int64"):
        c.run({**FEEDS, "ids": np.zeros(4, np.int64)})
    with pytest.raises(tg.DTypeError, match=r"got >f4"):
        c.run({**FEEDS, "x": np.zeros((2, 3), ">f4")})


def test_wrong_shape_at_run():
    _, c = simple()
    with pytest.raises(tg.ShapeError, match=r"input 'x': expected shape \(2, 3\), got \(3, 2\)") as e:
        c.run({**FEEDS, "x": np.zeros((3, 2), np.float32)})
    assert isinstance(e.value, ValueError)
    with pytest.raises(tg.ShapeError, match=r"input 'ids': expected shape \(4,\), got \(\)"):
        c.run({**FEEDS, "ids": np.int32(1)})


def test_missing_input():
    g, c = simple()
    with pytest.raises(tg.MissingInputError, match=r"missing input 'ids' \(the graph's inputs are: x, ids\)") as e:
        c.run({"x": FEEDS["x"]})
    assert isinstance(e.value, KeyError)
    assert str(e.value) == "missing input 'ids' (the graph's inputs are: x, ids)"  # not quoted like KeyError
    with pytest.raises(tg.MissingInputError, match="missing input 'x'"):
        c.run()
    with pytest.raises(tg.MissingInputError, match="missing input 'x'"):
        tg.reference_eval(g, {})


def test_unknown_input_name():
    g, c = simple()
    with pytest.raises(tg.UnknownNameError, match=r"unknown input 'xx' \(its inputs are: x, ids\)"):
        c.run({**FEEDS, "xx": FEEDS["x"]})
    with pytest.raises(tg.UnknownNameError, match="unknown input 7"):
        c.run({**FEEDS, 7: 1})
    with pytest.raises(tg.UnknownNameError, match="unknown input 'y'"):
        tg.reference_eval(g, FEEDS, y=1)
    with pytest.raises(tg.DuplicateNameError, match="input 'x' is given both in the dict and as a keyword"):
        c.run(FEEDS, x=FEEDS["x"])


def test_inputs_by_keyword_and_conversion_of_lists():
    _, c = simple()
    out = c.run(x=[[1, 2, 3], [4, 5, 6]], ids=[1, 2, 3, 4])
    np.testing.assert_array_equal(out["y"], np.float32([[2, 4, 6], [8, 10, 12]]))
    np.testing.assert_array_equal(out["n"], np.int32([2, 3, 4, 5]))
    with pytest.raises(tg.DTypeError, match="input 'ids': cannot convert a list to a int32 array"):
        c.run(x=FEEDS["x"], ids=["a", "b", "c", "d"])


def test_unknown_output_name():
    _, c = simple()
    out = c.run(FEEDS)
    with pytest.raises(KeyError):
        out["nope"]
    assert c.output_names == ["y", "n"]


def test_explain_bad_format():
    _, c = simple()
    with pytest.raises(tg.OptionsError, match="explain"):
        c.explain(format="xml")


def test_missing_model_files(tmp_path):
    with pytest.raises(tg.ModelNotFoundError, match=r"model file not found: .*nope\.gguf \(pass a path, set TG_MODEL") as e:
        tg.Gemma3(tmp_path / "nope.gguf")
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(tg.ModelNotFoundError, match=r"model folder not found: .*nope \(pass a path, set TG_EMBED_MODEL"):
        tg.EmbeddingGemma(tmp_path / "nope")


def test_bad_model_file(tmp_path):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(tg.ModelError) as e:
        tg.Gemma3(p)
    assert not isinstance(e.value, FileNotFoundError)
    d = tmp_path / "emb"
    d.mkdir()
    with pytest.raises(tg.ModelError):
        tg.EmbeddingGemma(d)
