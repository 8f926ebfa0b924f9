"""devices=[...]: compiling for the OpenCL device (PoCL in CI) gives the CPU's results;
unknown devices are refused with the devices present."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import tensor_graphs as tg


def opencl_present() -> bool:
    try:
        out = subprocess.run(["clinfo", "-l"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Device" in out


def require_opencl():
    if not opencl_present():
        if os.environ.get("CI"):
            pytest.fail("no OpenCL device under CI (scripts/test.sh installs PoCL)")
        pytest.skip("SKIPPED: no OpenCL device (clinfo -l lists none)")


def model(rng):
    g = tg.Graph()
    x = g.input("x", (5, 7))
    w = g.constant(rng.standard_normal((7, 3)))
    h = tg.softmax(tg.relu(x @ w + 0.25), 1)
    g.output("h", h)
    g.output("t", h.T)
    return g


def test_opencl_equals_cpu(rng):
    require_opencl()
    g = model(rng)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    want = tg.compile(g).run({"x": x})
    c = tg.compile(g, devices=["opencl"])
    got = c.run({"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    # Every step of the plan names the OpenCL device.
    assert c.explain()["plan"]["devices"] == ["opencl:0"]
    lines = c.explain("text", steps=True).splitlines()
    assert any(" opencl:0 " in l for l in lines)


def test_unknown_device_lists_the_present_ones(rng):
    g = model(rng)
    with pytest.raises(tg.OptionsError, match="present: cpu"):
        tg.compile(g, devices=["tpu"])
    with pytest.raises(tg.OptionsError, match="empty"):
        tg.compile(g, devices=[])


def test_two_devices_with_pinned_ops_equal_cpu(rng):
    """devices=["cpu", "opencl"] with the matmuls pinned to OpenCL: the plan has steps on both
    and transfers between them, and gives the CPU's results."""
    require_opencl()
    g = model(rng)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    want = tg.compile(g).run({"x": x})
    c = tg.compile(g, devices=["cpu", "opencl"], place=["matmul*=opencl"])
    got = c.run({"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert c.explain()["plan"]["devices"] == ["cpu", "opencl:0"]
    kernels = c.explain()["plan"]["kernels"]
    assert kernels.get("transfer", 0) >= 2, kernels
    text = c.explain("text", steps=True)
    assert " opencl:0 " in text and " cpu " in text, text
    # Nothing pinned and no kernel times measured on OpenCL: everything stays home.
    home = tg.compile(g, devices=["cpu", "opencl"])
    assert "transfer" not in home.explain()["plan"]["kernels"]


def test_bad_pins_are_options_errors(rng):
    g = model(rng)
    with pytest.raises(tg.OptionsError, match="OP_PATTERN=DEVICE"):
        tg.compile(g, place=["matmul"])
    with pytest.raises(tg.OptionsError, match="opencl"):
        tg.compile(g, place=["matmul=opencl"])
