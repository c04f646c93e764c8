"""packaging/slim.py: the trimmed ICU data, the encoder stubs and the OpenBLAS shim, checked for real.

Each generated library is loaded into a child Python of this venv with
``LD_PRELOAD`` (the loader then satisfies the wheel's DT_NEEDED entry of that
SONAME with it), and what the app relies on is compared with the original
libraries: Qt's collation and case mapping, PyAV's encoders and decoders,
OpenCV's LAPACK/BLAS paths. Needs binutils (``as``, ``ld``, ``readelf``), which
CI installs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(np.__file__).resolve().parents[1]


def _load_slim():
    spec = importlib.util.spec_from_file_location("_pkg_slim", ROOT / "packaging" / "slim.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


slim = _load_slim()


def _one(folder: str, pattern: str) -> Path:
    hits = sorted((SITE / folder).glob(pattern)) if (SITE / folder).is_dir() else []
    assert len(hits) == 1, f"expected one {folder}/{pattern} in {SITE}, found {hits}"
    return hits[0]


def _opencv_libs() -> str:
    for name in ("opencv_contrib_python.libs", "opencv_python_headless.libs", "opencv_python.libs"):
        if (SITE / name).is_dir():
            return name
    raise AssertionError(f"no OpenCV wheel libraries folder in {SITE}")


def _toc() -> list[tuple[str, str, str]]:
    """A PyInstaller-style binaries TOC of the venv's real wheels (the parts slim touches)."""
    cv = _opencv_libs()
    entries = [("PySide6/Qt/lib/libicudata.so.73", _one("PySide6/Qt/lib", "libicudata.so.*")),
               ("cv2/cv2.abi3.so", _one("cv2", "cv2*.so"))]
    for folder in ("av.libs", cv, "numpy.libs"):
        entries += [(f"{folder}/{p.name}", p) for p in sorted((SITE / folder).iterdir())]
    return [(d, str(s), "BINARY") for d, s in entries]


@pytest.fixture(scope="module")
def slimmed(tmp_path_factory):
    """slim_binaries run once on the venv's libraries: (new TOC as {dest: src}, notes, gen dir)."""
    assert slim.have_binutils(), "GNU as/ld missing: install binutils (the bundle build needs it)"
    gen = tmp_path_factory.mktemp("slim")
    toc = _toc()
    new, notes = slim.slim_binaries(toc, gen)
    return {d: Path(s) for d, s, _t in new}, notes, {d: Path(s) for d, s, _t in toc}


def _run(code: str, preload: list[Path] = (), extra_env: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "QT_QPA_PLATFORM")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    if preload:
        env["LD_PRELOAD"] = ":".join(str(p) for p in preload)
    env.update(extra_env or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_slim_replaces_the_big_libraries_and_drops_orphans(slimmed):
    new, notes, old = slimmed
    cv = _opencv_libs()
    icu = "PySide6/Qt/lib/libicudata.so.73"
    x265 = next(d for d in old if d.startswith("av.libs/libx265"))
    svt = next(d for d in old if d.startswith("av.libs/libSvtAv1Enc"))
    blas = next(d for d in old if d.startswith(f"{cv}/libopenblas"))
    assert not any("kept as is" in n for n in notes), notes
    assert old[icu].stat().st_size > 20e6 and new[icu].stat().st_size < 6e6
    for d in (x265, svt, blas):
        assert new[d] != old[d] and new[d].stat().st_size < 100_000, (d, new[d])
        assert slim.soname_of(new[d]) == slim.soname_of(old[d])
    numpy_blas = _one("numpy.libs", "libopenblas64_*").name
    assert slim.needed_of(new[blas]) == (numpy_blas,)
    # OpenCV's libgfortran.so.3 was needed by its OpenBLAS only
    gone = set(old) - set(new)
    assert any(Path(d).name.startswith("libgfortran") and d.startswith(cv) for d in gone), gone
    assert not any(d.startswith(("numpy.libs/", "av.libs/libavcodec")) for d in gone)
    # every import of cv2 from OpenBLAS and of libavcodec from the encoders is exported
    for consumer, lib in (("cv2/cv2.abi3.so", blas), (next(d for d in old if "libavcodec" in d), x265),
                          (next(d for d in old if "libavcodec" in d), svt)):
        wanted = {s.name for s in slim._imported_from(old[consumer], old[lib])}
        have = {s.name for s in slim.dynamic_symbols(new[lib]) if s.defined}
        assert wanted and wanted <= have, (lib, wanted - have)


def test_icu_filter_keeps_a_valid_table_of_contents():
    data = slim.symbol_bytes(_one("PySide6/Qt/lib", "libicudata.so.*"), "icudt73_dat")
    same, dropped = slim.filter_icu_common_data(data, lambda _n: True)
    assert same == data and dropped == []
    small, dropped = slim.filter_icu_common_data(data)
    assert len(small) < len(data) / 5
    names = {n.split("/", 1)[1] for n in dropped}
    assert {"brkitr/cjdict.dict", "en.res", "zone/en.res", "ibm-943_P15A-2003.cnv"} <= names
    again, none = slim.filter_icu_common_data(small, lambda _n: True)  # the new blob parses as CmnD
    assert again == small and none == []
    _, dropped_twice = slim.filter_icu_common_data(small)
    assert dropped_twice == []  # nothing left that the policy drops
    assert not names & {"coll/root.res", "coll/ucadata.icu", "coll/de.res", "cnvalias.icu", "root.res",
                        "zoneinfo64.res", "supplementalData.res"}
    with pytest.raises(slim.SlimError):
        slim.filter_icu_common_data(b"\0" * 64)


QT_ICU = r"""
import json
from PySide6.QtCore import QByteArray, QCollator, QDateTime, QLocale, QStringDecoder, QTimeZone
words = ["Äpfel", "zebra", "apple", "Zürich", "öl", "Ol", "ångström", "ob", "10", "9", "ß", "ss", "İstanbul"]
out = {}
for loc in ("en_US", "de_DE", "sv_SE", "tr_TR", "ja_JP"):
    c = QCollator(QLocale(loc))
    out["sort_" + loc] = sorted(words, key=c.sortKey)
    c.setNumericMode(True)
    out["num_" + loc] = sorted(words, key=c.sortKey)
out["upper_tr"] = QLocale("tr_TR").toUpper("istanbul")
out["upper_de"] = QLocale("de_DE").toUpper("straße")
tz = QTimeZone(QByteArray(b"Europe/Berlin"))
out["tz"] = [tz.isValid(), tz.offsetFromUtc(QDateTime.fromSecsSinceEpoch(0))]
out["latin1"] = QStringDecoder("ISO-8859-1").isValid()
out["shift_jis"] = QStringDecoder("Shift_JIS").isValid()
print(json.dumps(out, ensure_ascii=False))
"""


def test_trimmed_icu_keeps_qt_collation_and_case_mapping(slimmed):
    new, _notes, _old = slimmed
    before = _run(QT_ICU)
    after = _run(QT_ICU, [new["PySide6/Qt/lib/libicudata.so.73"]])
    assert before["shift_jis"] and not after["shift_jis"]  # the trimmed data really is in use
    for key in ("shift_jis",):
        before.pop(key), after.pop(key)
    assert after == before
    assert after["upper_tr"] == "İSTANBUL" and after["tz"][0]


AV_ENCODE = r"""
import io, json, sys
import av, numpy as np
def encode(codec, pix="yuv420p", path=None):
    buf = path or io.BytesIO()
    with av.open(buf, "w", format="matroska") as out:
        s = out.add_stream(codec, rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, pix
        for i in range(6):
            f = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 40 * i, np.uint8), format="rgb24")
            for p in s.encode(f.reformat(format=pix)):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return True
out = {}
mode, folder = sys.argv[1], sys.argv[2]
for codec in ("libx264", "mpeg4", "libvpx-vp9", "libx265", "libsvtav1"):
    try:
        out[codec] = encode(codec, path=f"{folder}/{mode}-{codec}.mkv")
    except av.FFmpegError as e:
        out[codec] = type(e).__name__
for codec in ("libx265", "libsvtav1"):
    src = f"{folder}/real-{codec}.mkv"
    try:
        with av.open(src) as c:
            out["decode_" + codec] = sum(1 for _ in c.decode(video=0))
    except FileNotFoundError:
        pass
print(json.dumps(out))
"""


def test_encoder_stubs_fail_cleanly_and_leave_the_rest_working(slimmed, tmp_path):
    new, _notes, old = slimmed
    stubs = [new[d] for d in old if d.startswith(("av.libs/libx265", "av.libs/libSvtAv1Enc"))]
    code = AV_ENCODE.replace("sys.argv[1], sys.argv[2]", f"'{{m}}', {str(tmp_path)!r}")
    real = _run(code.replace("{m}", "real"))
    assert all(real[c] is True for c in ("libx264", "mpeg4", "libvpx-vp9", "libx265", "libsvtav1")), real
    stubbed = _run(code.replace("{m}", "stub"), stubs)
    assert all(stubbed[c] is True for c in ("libx264", "mpeg4", "libvpx-vp9")), stubbed
    assert stubbed["libx265"] != True and stubbed["libsvtav1"] != True  # noqa: E712 - an error name
    # HEVC and AV1 *decoding* (FFmpeg's hevc decoder, dav1d) is untouched
    assert stubbed["decode_libx265"] == real["decode_libx265"] == 6
    assert stubbed["decode_libsvtav1"] == real["decode_libsvtav1"] >= 5


CV_LAPACK = r"""
import ctypes, json, sys
import numpy as np, cv2
rng = np.random.default_rng(0)
def rel(a, b): return float(np.abs(np.asarray(a) - b).max() / max(1e-30, np.abs(b).max()))
out = {}
n = 160  # above OpenCV's small-matrix thresholds, so cv2 calls LAPACK/CBLAS
for dt, tol in ((np.float32, 2e-3), (np.float64, 1e-9)):
    k = dt.__name__
    A = rng.standard_normal((n, n)).astype(dt) + n * np.eye(n, dtype=dt)
    S = (A @ A.T).astype(dt)
    B = rng.standard_normal((n, 3)).astype(dt)
    A64, S64, B64 = A.astype(np.float64), S.astype(np.float64), B.astype(np.float64)
    for name, flag, M, R in (("lu", cv2.DECOMP_LU, A, np.linalg.solve(A64, B64)),
                             ("svd", cv2.DECOMP_SVD, A, np.linalg.solve(A64, B64)),
                             ("chol", cv2.DECOMP_CHOLESKY, S, np.linalg.solve(S64, B64))):
        ok, X = cv2.solve(M, B, flags=flag)
        out[f"solve_{name}_{k}"] = bool(ok) and rel(X, R) < tol
    Ao = rng.standard_normal((300, n)).astype(dt)
    Bo = rng.standard_normal((300, 2)).astype(dt)
    ok, X = cv2.solve(Ao, Bo, flags=cv2.DECOMP_QR)
    ref = np.linalg.lstsq(Ao.astype(np.float64), Bo.astype(np.float64), rcond=None)[0]
    out[f"lstsq_{k}"] = bool(ok) and rel(X, ref) < 10 * tol
    w, u, vt = cv2.SVDecomp(Ao)
    out[f"svd_{k}"] = rel(u @ np.diag(w.ravel()) @ vt, Ao.astype(np.float64)) < 10 * tol
    out[f"inv_{k}"] = rel(cv2.invert(A, flags=cv2.DECOMP_LU)[1], np.linalg.inv(A64)) < 10 * tol
    out[f"gemm_{k}"] = rel(cv2.gemm(Ao, A, 1.0, None, 0.0), Ao.astype(np.float64) @ A64) < tol
    Z = rng.standard_normal((200, 200, 2)).astype(dt)
    Zc = Z[..., 0] + 1j * Z[..., 1]
    C = cv2.gemm(Z, Z, 1.0, None, 0.0)
    out[f"cgemm_{k}"] = rel(C[..., 0] + 1j * C[..., 1], Zc @ Zc) < tol
# the LAPACK functions cv2's Python API does not reach here, called directly (column-major)
lib = ctypes.CDLL(sys.argv[1]) if len(sys.argv) > 1 else None
if lib is not None:
    I, P = ctypes.c_int, ctypes.POINTER
    def ip(v): return ctypes.byref(I(v))
    m = 40
    M = np.asfortranarray(rng.standard_normal((m, m)))
    SPD = np.asfortranarray(M @ M.T + m * np.eye(m))
    info = I(0)
    L = SPD.copy(order="F")
    lib.dpotrf_(b"L", ip(m), L.ctypes.data_as(P(ctypes.c_double)), ip(m), ctypes.byref(info))
    out["dpotrf"] = info.value == 0 and rel(np.tril(L), np.linalg.cholesky(SPD)) < 1e-12
    Lf = SPD.astype(np.float32, order="F")
    lib.spotrf_(b"L", ip(m), Lf.ctypes.data_as(P(ctypes.c_float)), ip(m), ctypes.byref(info))
    out["spotrf"] = info.value == 0 and rel(np.tril(Lf), np.linalg.cholesky(SPD)) < 1e-5
    for t, ct, tol in (("d", ctypes.c_double, 1e-12), ("s", ctypes.c_float, 1e-5)):
        Q = M.astype(ct is ctypes.c_double and np.float64 or np.float32, order="F")
        tau = np.zeros(m, Q.dtype)
        work = np.zeros(64 * m, Q.dtype)
        getattr(lib, t + "geqrf_")(ip(m), ip(m), Q.ctypes.data_as(P(ct)), ip(m), tau.ctypes.data_as(P(ct)),
                                  work.ctypes.data_as(P(ct)), ip(work.size), ctypes.byref(info))
        out[t + "geqrf"] = info.value == 0 and rel(np.abs(np.diag(Q)), np.abs(np.diag(np.linalg.qr(M)[1]))) < tol
    G = M.copy(order="F")
    wr, wi = np.zeros(m), np.zeros(m)
    work = np.zeros(8 * m)
    D = ctypes.c_double
    dummy = np.zeros(1)
    lib.dgeev_(b"N", b"N", ip(m), G.ctypes.data_as(P(D)), ip(m), wr.ctypes.data_as(P(D)), wi.ctypes.data_as(P(D)),
               dummy.ctypes.data_as(P(D)), ip(1), dummy.ctypes.data_as(P(D)), ip(1), work.ctypes.data_as(P(D)),
               ip(work.size), ctypes.byref(info))
    ev = np.sort_complex(wr + 1j * wi)
    out["dgeev"] = info.value == 0 and rel(ev, np.sort_complex(np.linalg.eigvals(M))) < 1e-9
maps = open("/proc/self/maps").read()
out["libs"] = sorted({line.split()[-1] for line in maps.splitlines() if "openblas" in line})
print(json.dumps(out))
"""


def test_openblas_shim_gives_opencv_the_same_answers(slimmed):
    new, _notes, old = slimmed
    cv = _opencv_libs()
    blas = next(d for d in old if d.startswith(f"{cv}/libopenblas"))
    numpy_dir = str(_one("numpy.libs", "libopenblas64_*").parent)
    before = _run(CV_LAPACK)
    code = CV_LAPACK.replace("len(sys.argv) > 1", "True").replace("sys.argv[1]", repr(str(new[blas])))
    after = _run(code, [new[blas]], {"LD_LIBRARY_PATH": numpy_dir})
    libs_before, libs_after = before.pop("libs"), after.pop("libs")
    numpy_blas = str(_one("numpy.libs", "libopenblas64_*").resolve())
    assert str(old[blas].resolve()) in libs_before
    assert libs_after == sorted([str(new[blas].resolve()), numpy_blas])  # OpenCV's copy is not loaded
    assert all(before.values()), before
    failed = [k for k, v in after.items() if v is not True]
    assert not failed, f"wrong results through the shim: {failed}"
    assert set(after) >= set(before) | {"dpotrf", "spotrf", "dgeqrf", "sgeqrf", "dgeev"}
