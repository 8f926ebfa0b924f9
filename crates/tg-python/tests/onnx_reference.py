"""What the ONNX model tests compare against: onnxruntime sessions (CPU, default graph
optimisations, 2 threads) and the relative error they bound."""

import numpy as np
import onnxruntime as ort


def ort_session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def rel_err(got, want):
    """``max|got − want| / max|want|``."""
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
