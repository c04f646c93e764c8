"""INT8 ``reduce_range`` (7-bit weights) for ONNX Runtime CPU on x86 without VNNI: detection, cache key, build."""
from __future__ import annotations

import json

import onnx
import pytest

from avatar_app.inference import Precision
from avatar_app.inference.modelinfo import ModelInfo
from avatar_app.inference.precision import (META_INT8, REDUCED_RANGE_NOTE, Int8Recipe, cpu_has_vnni,
                                            int8_reduce_range)

NO_VNNI = {"cpuinfo_flags": ["sse4_2", "avx2", "avx512f", "avx512bw"], "machine": "x86_64"}
VNNI = {"cpuinfo_flags": ["avx2", "avx512f", "avx512_vnni"], "machine": "x86_64"}
AVX_VNNI = {"cpuinfo_flags": ["avx2", "avx_vnni"], "machine": "AMD64"}


@pytest.mark.parametrize("features,expected", [
    (NO_VNNI, False), (VNNI, True), (AVX_VNNI, True),
    ({"cpuinfo_flags": ["AVXVNNI"], "machine": "x86_64"}, True),
    # no /proc/cpuinfo flags: numpy's run-time features decide
    ({"cpuinfo_flags": [], "numpy_features": {"AVX2": True, "AVX512VNNI": False}, "machine": "x86_64"}, False),
    ({"cpuinfo_flags": [], "numpy_features": {"AVX512_CLX": True}, "machine": "x86_64"}, True),
    # nothing readable on x86: unknown
    ({"cpuinfo_flags": [], "numpy_features": {}, "machine": "x86_64"}, None),
    # ARM: the saturation does not exist, whatever the flags
    ({"cpuinfo_flags": ["asimd", "asimddp"], "machine": "aarch64"}, True),
    ({"cpuinfo_flags": [], "numpy_features": {}, "machine": "arm64"}, True),
])
def test_vnni_detection_from_injected_features(features, expected):
    assert cpu_has_vnni(**features) is expected


def test_reduce_range_only_for_ort_cpu_without_vnni():
    unknown = {"cpuinfo_flags": [], "numpy_features": {}, "machine": "x86_64"}
    assert int8_reduce_range("CPUExecutionProvider", **NO_VNNI) is True
    assert int8_reduce_range("CPUExecutionProvider", **unknown) is True  # the safe setting
    assert int8_reduce_range("CPUExecutionProvider", **VNNI) is False
    assert int8_reduce_range("CPUExecutionProvider", cpuinfo_flags=[], machine="aarch64") is False
    for provider in (None, "CUDAExecutionProvider", "TensorrtExecutionProvider"):
        assert int8_reduce_range(provider, **NO_VNNI) is False


def test_fingerprint_keeps_8bit_digest_and_separates_7bit():
    base = Int8Recipe()
    assert Int8Recipe(reduce_range=False).fingerprint() == base.fingerprint()
    assert Int8Recipe(reduce_range=True).fingerprint() != base.fingerprint()
    assert Int8Recipe.from_card({}, reduce_range=True).reduce_range is True


def _manager(user_dirs, features):
    from avatar_app.inference.cache import EngineCache
    from avatar_app.inference.manager import EngineManager

    return EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False, cpu_features=features)


def test_cache_key_carries_the_flag_and_tensorrt_never_gets_it(tiny_models, user_dirs):
    info = ModelInfo.from_onnx(tiny_models["conv"])
    no, yes = _manager(user_dirs, NO_VNNI), _manager(user_dirs, VNNI)
    k_no, k_yes = (m.cache_key(info, "ort_cpu", Precision.INT8) for m in (no, yes))
    assert no.int8_reduce_range("ort_cpu") and not yes.int8_reduce_range("ort_cpu")
    # a 7-bit file made on a CPU without VNNI is not reused on a VNNI CPU (and the other way round)
    assert k_no.variant != k_yes.variant and k_no.digest() != k_yes.digest()
    # FP32/FP16 keys do not depend on it
    assert no.cache_key(info, "ort_cpu", Precision.FP16) == yes.cache_key(info, "ort_cpu", Precision.FP16)
    # TensorRT (and ORT's GPU providers) keep full 8-bit weights on any CPU: same variant as 8-bit ORT CPU
    for backend in ("tensorrt", "tensorrt_rtx", "ort_cuda", "ort_tensorrt"):
        assert not no.int8_reduce_range(backend)
        assert no.cache_key(info, backend, Precision.INT8).variant == k_yes.variant


@pytest.mark.parametrize("backend,features,bits7", [
    ("ort_cpu", NO_VNNI, True), ("ort_cpu", VNNI, False), ("tensorrt_rtx", NO_VNNI, False)])
def test_build_quantises_with_the_chosen_range(tiny_models, user_dirs, monkeypatch, backend, features, bits7):
    import onnxruntime.quantization as oq

    seen = []
    real = oq.quantize_static

    def spy(*args, **kwargs):
        seen.append(kwargs.get("reduce_range"))
        return real(*args, **kwargs)

    monkeypatch.setattr(oq, "quantize_static", spy)
    entry = _manager(user_dirs, features).build(tiny_models["matmul"], backend, "int8")
    assert seen and set(seen) == {bits7}
    assert (entry.manifest.details.get("int8_weights") == REDUCED_RANGE_NOTE) is bits7
    if backend == "ort_cpu":  # the artifact is the QDQ file itself
        meta = {p.key: p.value for p in onnx.load(str(entry.artifact_path)).metadata_props}
        assert json.loads(meta[META_INT8])["reduce_range"] is bits7


@pytest.mark.parametrize("vnni,reduce_range,simulated", [
    (False, False, True), (None, False, True), (False, True, False), (True, False, False)])
def test_search_meter_simulates_qdq_only_for_8bit_files_on_saturating_cpus(
        tiny_models, tmp_path, monkeypatch, vnni, reduce_range, simulated):
    """An 8-bit (TensorRT) file on a CPU without VNNI is measured with the QDQ graph's arithmetic."""
    from avatar_app.inference import int8_search, precision
    from avatar_app.inference.modelinfo import load_feed_set
    from avatar_app.inference.precision import FeedSetReader, quantize_int8_mixed

    flags = []
    real = int8_search.ErrorMeter.__init__

    def spy(self, src, feeds, simulate_qdq=False):
        flags.append(simulate_qdq)
        real(self, src, feeds, simulate_qdq)

    monkeypatch.setattr(int8_search.ErrorMeter, "__init__", spy)
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda **_: vnni)
    info = ModelInfo.from_onnx(tiny_models["matmul"])
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
    quantize_int8_mixed(info.path, tmp_path / "m8.onnx", reader, 0.05, Int8Recipe(reduce_range=reduce_range))
    assert flags and flags[0] is simulated
