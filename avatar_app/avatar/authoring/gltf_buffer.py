"""The binary buffer of a glTF 2.0 file under construction: buffer views and accessors.

One helper for every glTF file the project writes (the avatar ``.glb`` of
:mod:`~avatar_app.avatar.authoring.glb_writer`, the glTF animation of recorded
tracks). It follows the glTF 2.0 specification (Khronos): one buffer (the GLB
binary chunk), buffer views 4-byte aligned ("Data Alignment"), accessors typed by
component and element type, morph deltas optionally as sparse accessors ("Sparse
Accessors": no buffer view, so the base is zeros, plus the moved rows' indices and
values). pygltflib (imported when a buffer is made) holds the JSON side.
"""
from __future__ import annotations

import numpy as np

#: glTF componentType codes (glTF 2.0 "Accessor Data Types").
FLOAT, UNSIGNED_BYTE, UNSIGNED_SHORT, UNSIGNED_INT = 5126, 5121, 5123, 5125
#: bufferView targets.
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963
#: Element type by number of components.
ELEMENT_TYPES = {1: "SCALAR", 2: "VEC2", 3: "VEC3", 4: "VEC4", 16: "MAT4"}
#: numpy dtype of each componentType this project writes.
COMPONENT_DTYPES = {FLOAT: np.float32, UNSIGNED_SHORT: np.uint16, UNSIGNED_INT: np.uint32, UNSIGNED_BYTE: np.uint8}
_COMPONENT_OF_DTYPE = {np.dtype(v): k for k, v in COMPONENT_DTYPES.items()}


class GltfBuffer:
    """Buffer views and accessors appended to a ``pygltflib.GLTF2`` and its one binary buffer.

    Args:
        gltf: the ``pygltflib.GLTF2`` being built; a buffer is added when it has none.
            Views and accessors are appended to its lists; :meth:`finish` stores the bytes.

    Thread: one builder thread.
    """

    def __init__(self, gltf):
        import pygltflib

        self.gltf = gltf
        if not gltf.buffers:
            gltf.buffers.append(pygltflib.Buffer())
        self.parts: list[bytes] = []
        self.size = 0

    def view(self, data: bytes | np.ndarray, target: int | None = None) -> int:
        """Append a buffer view, 4-byte aligned.

        Args:
            data: raw bytes, or an array (its C-order bytes).
            target: ``ARRAY_BUFFER``/``ELEMENT_ARRAY_BUFFER`` for vertex/index data, or None.

        Returns:
            The buffer view's index.
        """
        import pygltflib

        raw = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
        pad = (-self.size) % 4
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        self.gltf.bufferViews.append(pygltflib.BufferView(buffer=0, byteOffset=self.size, byteLength=len(raw),
                                                          target=target))
        self.parts.append(raw)
        self.size += len(raw)
        return len(self.gltf.bufferViews) - 1

    def accessor(self, data: np.ndarray, component: int | None = None, target: int | None = None,
                 minmax: bool = False, kind: str | None = None) -> int:
        """Append an accessor of ``data`` with its own buffer view.

        Args:
            data: (N,) or (N, C) array; one element per row.
            component: glTF componentType to write (``data`` is cast to it); None: from
                ``data``'s dtype (float32, uint8, uint16 or uint32).
            target: the buffer view's target.
            minmax: store per-component ``min``/``max`` (required for POSITION and
                animation input times).
            kind: element type ("SCALAR", "VEC3", "MAT4", ...); None: from C.

        Returns:
            The accessor's index.

        Raises:
            KeyError: a dtype or component count glTF has no code for here.
        """
        import pygltflib

        if component is None:
            component = _COMPONENT_OF_DTYPE[np.asarray(data).dtype]
        a = np.ascontiguousarray(data, COMPONENT_DTYPES[component])
        count = int(a.shape[0])
        flat = a.reshape(count, -1)
        acc = pygltflib.Accessor(bufferView=self.view(a.tobytes(), target), componentType=component,
                                 count=count, type=kind or ELEMENT_TYPES[flat.shape[1]])
        if minmax:
            acc.min = [float(v) for v in flat.min(axis=0)]
            acc.max = [float(v) for v in flat.max(axis=0)]
        return self._append(acc)

    def zeros(self, count: int) -> int:
        """Append a VEC3 float accessor of ``count`` zeros with no buffer view (glTF: zero-initialised)."""
        import pygltflib

        return self._append(pygltflib.Accessor(componentType=FLOAT, count=int(count), type="VEC3",
                                               min=[0.0, 0.0, 0.0], max=[0.0, 0.0, 0.0]))

    def sparse(self, delta: np.ndarray, rows: np.ndarray | None = None, minmax: bool = True) -> int:
        """Append a VEC3 float sparse accessor: zeros except ``rows`` of ``delta``.

        Args:
            delta: (N, 3) float morph deltas.
            rows: (K,) increasing row indices to store; None: the non-zero rows.
            minmax: store ``min``/``max`` of the stored values (zeros elsewhere).

        Returns:
            The accessor's index (no buffer view; a sparse part only when K > 0;
            indices UNSIGNED_SHORT when N fits, else UNSIGNED_INT).
        """
        import pygltflib

        d = np.ascontiguousarray(delta, np.float32)
        rows = np.flatnonzero(np.any(d != 0.0, axis=1)) if rows is None else np.asarray(rows, np.int64)
        kept = d
        if len(rows) and len(rows) < len(d):
            kept = np.zeros_like(d)
            kept[rows] = d[rows]
        elif not len(rows):
            kept = np.zeros_like(d)
        acc = pygltflib.Accessor(componentType=FLOAT, count=int(len(d)), type="VEC3")
        if len(rows):
            comp = UNSIGNED_SHORT if len(d) <= 65536 else UNSIGNED_INT
            acc.sparse = pygltflib.Sparse(
                count=int(len(rows)),
                indices=pygltflib.AccessorSparseIndices(
                    bufferView=self.view(rows.astype(COMPONENT_DTYPES[comp]).tobytes()), componentType=comp),
                values=pygltflib.AccessorSparseValues(bufferView=self.view(d[rows].tobytes())))
        if minmax:
            acc.min = [float(v) for v in kept.min(axis=0)]
            acc.max = [float(v) for v in kept.max(axis=0)]
        return self._append(acc)

    def morph(self, delta: np.ndarray, rows: np.ndarray) -> int:
        """Append morph deltas, sparse when that is smaller than a dense VEC3 accessor.

        A sparse row costs 16 bytes (a 4-byte index and 12 bytes of values), a dense
        one 12 bytes; no rows give :meth:`zeros`.

        Args:
            delta: (N, 3) float morph deltas.
            rows: (K,) rows that move.

        Returns:
            The accessor's index, with ``min``/``max``.
        """
        rows = np.asarray(rows)
        if len(rows) == 0:
            return self.zeros(len(delta))
        if len(rows) * 16 < len(delta) * 12:
            return self.sparse(delta, rows)
        return self.accessor(np.asarray(delta, np.float32), FLOAT, ARRAY_BUFFER, minmax=True)

    def finish(self) -> bytes:
        """Store the bytes as the file's binary buffer (padded to 4 bytes) and return them."""
        data = b"".join(self.parts)
        data += b"\0" * ((-len(data)) % 4)
        self.gltf.buffers[0].byteLength = len(data)
        self.gltf.set_binary_blob(data)
        return data

    def _append(self, acc) -> int:
        self.gltf.accessors.append(acc)
        return len(self.gltf.accessors) - 1
