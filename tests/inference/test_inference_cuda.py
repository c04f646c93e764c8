"""CUDA plumbing of the TensorRT runner (cuda-python): devices, pinned buffers, async copies, graphs.

Needs an NVIDIA GPU and cuda-python; skipped elsewhere with the reason.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.inference.trt import CudaBuffer, _cudart, capture_graph, cuda_check, cuda_devices

DEVICES, WHY = cuda_devices()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not DEVICES, reason=f"no CUDA GPU: {WHY}")]


def test_devices_have_name_and_compute_capability():
    d = DEVICES[0]
    assert d["name"] and not d["name"].endswith("\x00")
    major, minor = d["cc"]
    assert major >= 5 and minor >= 0 and d["memory_bytes"] > 1 << 30


def test_pinned_round_trip_on_a_stream():
    rt = _cudart()
    stream = cuda_check(rt.cudaStreamCreate())
    x = np.random.default_rng(0).standard_normal((16, 478, 3)).astype(np.float32)
    buf = CudaBuffer(x.nbytes * 2, np.float32)
    try:
        buf.upload(x, stream)
        cuda_check(rt.cudaStreamSynchronize(stream))
        buf.host[:] = 0  # the device copy must come back, not the staging data
        buf.download(x.nbytes, stream)
        cuda_check(rt.cudaStreamSynchronize(stream))
        np.testing.assert_array_equal(buf.result(x.shape), x)
    finally:
        buf.free()
        rt.cudaStreamDestroy(stream)


def test_graph_replays_on_fresh_inputs():
    """Inputs are copied outside the graph into fixed device addresses, as TrtRunner does."""
    rt = _cudart()
    stream = cuda_check(rt.cudaStreamCreate())
    a, b = CudaBuffer(4096, np.float32), CudaBuffer(4096, np.float32)
    d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    try:
        def enqueue():
            cuda_check(rt.cudaMemcpyAsync(b.device_ptr, a.device_ptr, 4096, d2d, stream))
            return True

        enqueue()  # one ordinary run first
        graph = capture_graph(stream, enqueue)
        assert graph is not None
        for seed in range(3):
            x = np.random.default_rng(seed).standard_normal(1024).astype(np.float32)
            a.upload(x, stream)
            cuda_check(rt.cudaGraphLaunch(graph, stream))
            b.download(4096, stream)
            cuda_check(rt.cudaStreamSynchronize(stream))
            np.testing.assert_array_equal(b.result((1024,)), x)
        rt.cudaGraphExecDestroy(graph)
    finally:
        a.free()
        b.free()
        rt.cudaStreamDestroy(stream)
