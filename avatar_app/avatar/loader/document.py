"""Reading a glTF 2.0 file: container, buffers, accessors, images.

pygltflib parses the JSON into its schema objects; this module reads the binary
container (GLB: Khronos, "glTF 2.0 Specification", section "Binary glTF Layout")
and the buffer data itself, with bounds checks on every byte range, so a damaged
file raises :class:`~avatar_app.core.errors.InputError` naming what is broken
instead of an IndexError or garbage geometry.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import struct
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pygltflib

from avatar_app.core.errors import InputError

logger = logging.getLogger(__name__)

_GLB_MAGIC = b"glTF"
_CHUNK_JSON = 0x4E4F534A
_CHUNK_BIN = 0x004E4942

#: glTF componentType -> numpy dtype (little endian).
COMPONENT_DTYPES = {
    5120: np.dtype("<i1"), 5121: np.dtype("<u1"), 5122: np.dtype("<i2"),
    5123: np.dtype("<u2"), 5125: np.dtype("<u4"), 5126: np.dtype("<f4"),
}
#: glTF accessor type -> number of components.
TYPE_SIZES = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}

#: Extensions this loader honours or can safely ignore when a file *requires* them.
SUPPORTED_REQUIRED_EXTENSIONS = frozenset({
    "KHR_materials_unlit",       # shading hint only: drawn lit
    "KHR_mesh_quantization",     # integer attributes: decoded by the accessor reader
    "KHR_materials_emissive_strength",
    "KHR_materials_specular",
    "KHR_materials_ior",
})
_EXTENSION_HINTS = {
    "KHR_draco_mesh_compression": "Draco-compressed meshes are not supported; export without mesh compression",
    "EXT_meshopt_compression": "meshoptimizer-compressed buffers are not supported; export without compression",
    "KHR_texture_basisu": "KTX2/Basis textures are not supported; export PNG or JPEG textures",
    "EXT_texture_webp": "WebP-only textures are not supported; export PNG or JPEG textures",
}


def _normalised_scale(dtype: np.dtype) -> float:
    """Divisor of a normalized integer component (glTF 2.0 "Animations", normalized ints)."""
    return float(np.iinfo(dtype).max)


class GltfDocument:
    """A parsed glTF 2.0 file with its binary data.

    Args:
        path: the .gltf/.glb/.vrm file (used to resolve external buffers/images and
            in messages).

    Raises:
        InputError: the file is missing, unreadable, not glTF 2.0, its JSON or
            binary container is damaged, or it requires an unsupported extension.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.label = self.path.name
        if not self.path.exists():
            raise InputError(f"avatar file {self.path} does not exist", path=self.path)
        if not self.path.is_file():
            raise InputError(f"avatar path {self.path} is not a file", path=self.path)
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise InputError(f"avatar file {self.path} cannot be read: {exc}", path=self.path) from exc
        self.is_binary = data[:4] == _GLB_MAGIC
        text, self._bin_chunk = self._split_glb(data) if self.is_binary else (self._as_text(data), None)
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise InputError(f"avatar file {self.path}: its glTF JSON is damaged ({exc})", path=self.path) from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("asset"), dict):
            raise InputError(f"avatar file {self.path} is not a glTF file (no 'asset' object)", path=self.path)
        version = str(raw["asset"].get("version", ""))
        if not version.startswith("2."):
            raise InputError(
                f"avatar file {self.path} is glTF {version or '(no version)'}; only glTF 2.0 is supported",
                path=self.path,
            )
        try:
            self.gltf = pygltflib.GLTF2.from_json(text, infer_missing=True)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InputError(f"avatar file {self.path}: the glTF JSON does not follow the schema ({exc})",
                             path=self.path) from exc
        self.raw = raw
        self._check_extensions()
        self._buffers: dict[int, bytes] = {}
        self._accessors: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ container
    def _as_text(self, data: bytes) -> str:
        head = data.lstrip()[:1]
        if head != b"{" and not data.startswith(b"\xef\xbb\xbf"):
            raise InputError(
                f"avatar file {self.path} is not a glTF file (neither binary glTF nor glTF JSON)",
                path=self.path,
            )
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"avatar file {self.path} is not a glTF file (not UTF-8 JSON)", path=self.path) from exc

    def _split_glb(self, data: bytes) -> tuple[str, bytes | None]:
        if len(data) < 20:
            raise InputError(f"avatar file {self.path}: binary glTF header is truncated", path=self.path)
        version, length = struct.unpack_from("<II", data, 4)
        if version != 2:
            raise InputError(f"avatar file {self.path}: binary glTF version {version}; only 2 is supported",
                             path=self.path)
        if length > len(data):
            raise InputError(
                f"avatar file {self.path} is truncated: the header says {length} bytes, the file has {len(data)}",
                path=self.path,
            )
        pos, text, bin_chunk = 12, None, None
        while pos + 8 <= length:
            clen, ctype = struct.unpack_from("<II", data, pos)
            pos += 8
            if pos + clen > length:
                raise InputError(f"avatar file {self.path}: a binary glTF chunk runs past the end of the file",
                                 path=self.path)
            chunk = data[pos:pos + clen]
            if ctype == _CHUNK_JSON and text is None:
                try:
                    text = chunk.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"avatar file {self.path}: the JSON chunk is not UTF-8", path=self.path) from exc
            elif ctype == _CHUNK_BIN and bin_chunk is None:
                bin_chunk = chunk
            pos += clen  # chunk lengths include their padding (multiples of 4)
        if text is None:
            raise InputError(f"avatar file {self.path}: binary glTF without a JSON chunk", path=self.path)
        return text, bin_chunk

    def _check_extensions(self) -> None:
        required = list(self.gltf.extensionsRequired or [])
        bad = [e for e in required if e not in SUPPORTED_REQUIRED_EXTENSIONS]
        if bad:
            hints = "; ".join(_EXTENSION_HINTS[e] for e in bad if e in _EXTENSION_HINTS)
            raise InputError(
                f"avatar file {self.path} requires glTF extension(s) {', '.join(bad)} which this app does not "
                f"support" + (f": {hints}" if hints else ""),
                path=self.path,
            )

    @property
    def extensions(self) -> dict:
        """Top-level ``extensions`` object (dict, possibly empty)."""
        ext = self.raw.get("extensions")
        return ext if isinstance(ext, dict) else {}

    # ------------------------------------------------------------------ buffers
    def _uri_bytes(self, uri: str, what: str) -> bytes:
        if uri.startswith("data:"):
            head, _, payload = uri.partition(",")
            if ";base64" not in head:
                return unquote(payload).encode("latin-1")
            try:
                return base64.b64decode(payload, validate=False)
            except (binascii.Error, ValueError) as exc:
                raise InputError(f"avatar file {self.path}: {what} has a damaged base64 data URI",
                                 path=self.path) from exc
        target = (self.path.parent / unquote(uri)).resolve()
        try:
            return target.read_bytes()
        except OSError as exc:
            raise InputError(f"avatar file {self.path}: {what} refers to {target}, which cannot be read "
                             f"({exc.strerror or exc})", path=target) from exc

    def buffer(self, index: int) -> bytes:
        """Bytes of buffer ``index``.

        Raises:
            InputError: the buffer is missing, shorter than declared or unreadable.
        """
        if index in self._buffers:
            return self._buffers[index]
        bufs = self.gltf.buffers or []
        if not 0 <= index < len(bufs):
            raise InputError(f"avatar file {self.path}: buffer {index} does not exist", path=self.path)
        b = bufs[index]
        if b.uri is None:
            if index != 0 or self._bin_chunk is None:
                raise InputError(f"avatar file {self.path}: buffer {index} has no data (no URI and no GLB "
                                 "binary chunk)", path=self.path)
            data = self._bin_chunk
        else:
            data = self._uri_bytes(b.uri, f"buffer {index}")
        if b.byteLength is not None and len(data) < b.byteLength:
            raise InputError(
                f"avatar file {self.path}: buffer {index} holds {len(data)} bytes but declares {b.byteLength} "
                "(truncated or damaged)", path=self.path)
        self._buffers[index] = data
        return data

    def _view_bytes(self, view_index: int) -> tuple[bytes, int, int, int | None]:
        views = self.gltf.bufferViews or []
        if not 0 <= view_index < len(views):
            raise InputError(f"avatar file {self.path}: bufferView {view_index} does not exist", path=self.path)
        v = views[view_index]
        data = self.buffer(v.buffer)
        off = v.byteOffset or 0
        if v.byteLength is None or off + v.byteLength > len(data):
            raise InputError(
                f"avatar file {self.path}: bufferView {view_index} (bytes {off}..{off + (v.byteLength or 0)}) "
                f"runs past the end of buffer {v.buffer} ({len(data)} bytes)", path=self.path)
        return data, off, v.byteLength, v.byteStride

    def view_bytes(self, view_index: int) -> bytes:
        """The bytes of a bufferView (e.g. an embedded image)."""
        data, off, length, _ = self._view_bytes(view_index)
        return data[off:off + length]

    # ------------------------------------------------------------------ accessors
    def accessor(self, index: int, as_float: bool = True) -> np.ndarray:
        """Decode accessor ``index`` (strides, normalized integers, sparse substitution).

        Args:
            index: accessor index.
            as_float: convert to float32 (normalized integers scaled to [0, 1] or
                [-1, 1]); False keeps the stored integer dtype (indices, joints).

        Returns:
            (count, components) array (float32 when ``as_float``); a new array.

        Raises:
            InputError: the accessor is missing or its bytes lie outside its bufferView.
        """
        key = index if as_float else -1 - index
        if key in self._accessors:
            return self._accessors[key]
        accs = self.gltf.accessors or []
        if index is None or not 0 <= index < len(accs):
            raise InputError(f"avatar file {self.path}: accessor {index} does not exist", path=self.path)
        a = accs[index]
        dtype = COMPONENT_DTYPES.get(a.componentType)
        ncomp = TYPE_SIZES.get(a.type)
        if dtype is None or ncomp is None or a.count is None or a.count < 0:
            raise InputError(f"avatar file {self.path}: accessor {index} has an invalid type "
                             f"({a.componentType}, {a.type}, count {a.count})", path=self.path)
        out = np.zeros((a.count, ncomp), dtype)
        if a.bufferView is not None:
            out[:] = self._strided(a.bufferView, a.byteOffset or 0, dtype, ncomp, a.count, f"accessor {index}")
        if a.sparse is not None and a.sparse.count:
            sp = a.sparse
            idt = COMPONENT_DTYPES.get(sp.indices.componentType)
            if idt is None or idt.kind != "u":
                raise InputError(f"avatar file {self.path}: accessor {index} has invalid sparse indices",
                                 path=self.path)
            ids = self._strided(sp.indices.bufferView, sp.indices.byteOffset or 0, idt, 1, sp.count,
                                f"accessor {index} sparse indices")[:, 0].astype(np.int64)
            vals = self._strided(sp.values.bufferView, sp.values.byteOffset or 0, dtype, ncomp, sp.count,
                                 f"accessor {index} sparse values")
            if ids.size and int(ids.max()) >= a.count:
                raise InputError(f"avatar file {self.path}: accessor {index} sparse index out of range",
                                 path=self.path)
            out[ids] = vals
        if as_float:
            if dtype.kind == "f":
                res = out.astype(np.float32)
            elif a.normalized:
                res = np.maximum(out.astype(np.float32) / _normalised_scale(dtype), -1.0)
            else:
                res = out.astype(np.float32)
            if not np.all(np.isfinite(res)):
                raise InputError(f"avatar file {self.path}: accessor {index} contains NaN or infinity",
                                 path=self.path)
        else:
            res = out
        self._accessors[key] = res
        return res

    def _strided(self, view_index: int, offset: int, dtype: np.dtype, ncomp: int, count: int,
                 what: str) -> np.ndarray:
        data, view_off, view_len, stride = self._view_bytes(view_index)
        elem = dtype.itemsize * ncomp
        stride = stride or elem
        if count == 0:
            return np.zeros((0, ncomp), dtype)
        need = offset + stride * (count - 1) + elem
        if need > view_len or stride < elem:
            raise InputError(
                f"avatar file {self.path}: {what} needs {need} bytes of bufferView {view_index} "
                f"which has {view_len} (damaged buffer)", path=self.path)
        arr = np.ndarray((count, ncomp), dtype, buffer=data, offset=view_off + offset,
                         strides=(stride, dtype.itemsize))
        return arr.copy()

    # ------------------------------------------------------------------ images
    def image(self, index: int, max_size: int = 2048) -> np.ndarray:
        """Decode image ``index`` (PNG or JPEG, with OpenCV) to RGBA.

        Args:
            index: image index.
            max_size: larger images are downscaled (keeping the aspect ratio) so the
                longer side is at most this many pixels (software OpenGL memory and speed).

        Returns:
            (H, W, 4) uint8 sRGB RGBA, top row first.

        Raises:
            InputError: the image is missing or cannot be decoded.
        """
        import cv2

        imgs = self.gltf.images or []
        if not 0 <= index < len(imgs):
            raise InputError(f"avatar file {self.path}: image {index} does not exist", path=self.path)
        im = imgs[index]
        label = f"image {index}" + (f" ('{im.name}')" if im.name else "")
        if im.bufferView is not None:
            data = self.view_bytes(im.bufferView)
        elif im.uri:
            data = self._uri_bytes(im.uri, label)
        else:
            raise InputError(f"avatar file {self.path}: {label} has no data", path=self.path)
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) if data else None
        if img is None:
            raise InputError(f"avatar file {self.path}: {label} cannot be decoded as PNG/JPEG", path=self.path)
        if img.dtype == np.uint16:
            img = (img >> 8).astype(np.uint8)
        elif img.dtype != np.uint8:
            raise InputError(f"avatar file {self.path}: {label} has unsupported pixel type {img.dtype}",
                             path=self.path)
        if img.ndim == 2:
            img = cv2.cvtColor(img, cv2.COLOR_GRAY2RGBA)
        elif img.shape[2] == 3:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGBA)
        else:
            img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA)
        h, w = img.shape[:2]
        if max(h, w) > max_size:
            scale = max_size / max(h, w)
            img = cv2.resize(img, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(img)
