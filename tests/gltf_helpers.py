"""Helpers of the avatar tests: small glTF 2.0 files built in memory (no fixtures, no tests)."""
from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np


class GltfBuilder:
    """Builds small glTF 2.0 files for tests (one buffer; GLB, embedded or external .gltf)."""

    def __init__(self):
        self.doc: dict = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": []}], "nodes": [],
                          "meshes": [], "accessors": [], "bufferViews": [], "buffers": []}
        self.bin = bytearray()

    def _view(self, data: bytes) -> int:
        while len(self.bin) % 4:
            self.bin += b"\0"
        self.doc["bufferViews"].append({"buffer": 0, "byteOffset": len(self.bin), "byteLength": len(data)})
        self.bin += data
        return len(self.doc["bufferViews"]) - 1

    def accessor(self, arr, kind: str | None = None, normalized: bool = False) -> int:
        a = np.asarray(arr)
        ctype = {np.dtype("float32"): 5126, np.dtype("uint32"): 5125, np.dtype("uint16"): 5123,
                 np.dtype("uint8"): 5121}[a.dtype]
        if kind is None:
            kind = {1: "SCALAR", 2: "VEC2", 3: "VEC3", 4: "VEC4", 16: "MAT4"}[1 if a.ndim == 1 else a.shape[1]]
        acc = {"bufferView": self._view(a.tobytes()), "componentType": ctype, "count": int(a.shape[0]), "type": kind}
        if normalized:
            acc["normalized"] = True
        if kind == "VEC3" and a.dtype == np.float32:
            acc["min"], acc["max"] = a.min(0).tolist(), a.max(0).tolist()
        self.doc["accessors"].append(acc)
        return len(self.doc["accessors"]) - 1

    def mesh(self, positions, indices=None, *, mode=None, targets=None, names=None, material=None,
             normals=None, uvs=None, joints=None, weights=None, name=None) -> int:
        prim = {"attributes": {"POSITION": self.accessor(np.asarray(positions, np.float32))}}
        if indices is not None:
            prim["indices"] = self.accessor(np.asarray(indices, np.uint16))
        if mode is not None:
            prim["mode"] = mode
        if normals is not None:
            prim["attributes"]["NORMAL"] = self.accessor(np.asarray(normals, np.float32))
        if uvs is not None:
            prim["attributes"]["TEXCOORD_0"] = self.accessor(np.asarray(uvs, np.float32))
        if joints is not None:
            prim["attributes"]["JOINTS_0"] = self.accessor(np.asarray(joints, np.uint16))
            prim["attributes"]["WEIGHTS_0"] = self.accessor(np.asarray(weights, np.float32))
        if material is not None:
            prim["material"] = material
        if targets:
            prim["targets"] = [{"POSITION": self.accessor(np.asarray(t, np.float32))} for t in targets]
        mesh = {"primitives": [prim]}
        if names is not None:
            mesh["extras"] = {"targetNames": list(names)}
        if name:
            mesh["name"] = name
        self.doc["meshes"].append(mesh)
        return len(self.doc["meshes"]) - 1

    def node(self, root: bool = True, **fields) -> int:
        self.doc["nodes"].append({k: v for k, v in fields.items() if v is not None})
        i = len(self.doc["nodes"]) - 1
        if root:
            self.doc["scenes"][0]["nodes"].append(i)
        return i

    def texture(self, rgba: np.ndarray) -> int:
        import cv2

        ok, png = cv2.imencode(".png", cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
        assert ok
        self.doc.setdefault("images", []).append({"bufferView": self._view(png.tobytes()), "mimeType": "image/png"})
        self.doc.setdefault("textures", []).append({"source": len(self.doc["images"]) - 1})
        return len(self.doc["textures"]) - 1

    def material(self, **fields) -> int:
        self.doc.setdefault("materials", []).append(fields)
        return len(self.doc["materials"]) - 1

    def _finish(self) -> dict:
        while len(self.bin) % 4:
            self.bin += b"\0"
        doc = json.loads(json.dumps(self.doc))
        doc["buffers"] = [{"byteLength": len(self.bin)}]
        return doc

    def write_glb(self, path: Path) -> Path:
        doc = self._finish()
        js = json.dumps(doc).encode()
        js += b" " * (-len(js) % 4)
        body = struct.pack("<II", len(js), 0x4E4F534A) + js + struct.pack("<II", len(self.bin), 0x004E4942) + self.bin
        path.write_bytes(b"glTF" + struct.pack("<II", 2, 12 + len(body)) + body)
        return path

    def write_gltf(self, path: Path, external: bool = False) -> Path:
        doc = self._finish()
        if external:
            (path.parent / "data.bin").write_bytes(bytes(self.bin))
            doc["buffers"][0]["uri"] = "data.bin"
        else:
            doc["buffers"][0]["uri"] = "data:application/octet-stream;base64," + base64.b64encode(self.bin).decode()
        path.write_text(json.dumps(doc))
        return path


def quad(z: float = 0.0, size: float = 0.2, y0: float = 0.0):
    """A square facing +Z: (4, 3) positions and counter-clockwise indices."""
    p = np.array([[-size, y0, z], [size, y0, z], [size, y0 + 2 * size, z], [-size, y0 + 2 * size, z]], np.float32)
    return p, np.array([0, 1, 2, 0, 2, 3], np.uint16)


def box(lo, hi):
    """An axis-aligned closed box with outward counter-clockwise faces: (8, 3), (36,)."""
    lo, hi = np.asarray(lo, np.float32), np.asarray(hi, np.float32)
    p = np.array([[x, y, z] for z in (lo[2], hi[2]) for y in (lo[1], hi[1]) for x in (lo[0], hi[0])], np.float32)
    f = [(0, 2, 1), (1, 2, 3), (4, 5, 6), (5, 7, 6), (0, 1, 4), (1, 5, 4), (2, 6, 3), (3, 6, 7),
         (0, 4, 2), (2, 4, 6), (1, 3, 5), (3, 7, 5)]
    return p, np.array(f, np.uint16).reshape(-1)


# ---------------------------------------------------------------------------- the test avatars
