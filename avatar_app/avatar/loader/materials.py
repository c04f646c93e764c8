"""glTF materials -> :class:`~avatar_app.avatar.mesh.Material` (glTF 2.0 "Materials").

Read: ``pbrMetallicRoughness.baseColorFactor`` and ``baseColorTexture`` (PNG/JPEG,
decoded with OpenCV), ``roughnessFactor``, ``alphaMode``/``alphaCutoff``,
``doubleSided``, and ``KHR_materials_specular.specularFactor``. Metallic,
normal, occlusion and emissive maps are not drawn.
"""
from __future__ import annotations

import logging

import numpy as np

from avatar_app.avatar.loader.document import GltfDocument
from avatar_app.avatar.mesh import ALPHA_MODES, Material
from avatar_app.core.errors import InputError

logger = logging.getLogger(__name__)


class MaterialReader:
    """Converts and caches the document's materials and decoded images.

    Args:
        doc: the document.
        warnings: list that collects user-facing messages (e.g. a texture that
            cannot be decoded: the material is drawn untextured).
    """

    def __init__(self, doc: GltfDocument, warnings: list[str]):
        self.doc = doc
        self.warnings = warnings
        self._materials: dict[int, Material] = {}
        self._images: dict[int, np.ndarray | None] = {}

    def _raw(self, index: int) -> dict:
        mats = self.doc.raw.get("materials") or []
        return mats[index] if 0 <= index < len(mats) and isinstance(mats[index], dict) else {}

    def texcoords(self) -> dict[int, int]:
        """Material index -> TEXCOORD set of its base colour texture (glTF ``texCoord``, default 0)."""
        out = {}
        for i, m in enumerate(self.doc.raw.get("materials") or []):
            tex = ((m or {}).get("pbrMetallicRoughness") or {}).get("baseColorTexture") or {}
            out[i] = int(tex.get("texCoord", 0)) if isinstance(tex.get("texCoord", 0), int) else 0
        return out

    def material(self, index: int) -> Material:
        """The material ``index`` (-1 or unknown = a default: light grey, matte, opaque)."""
        if index in self._materials:
            return self._materials[index]
        raw = self._raw(index)
        pbr = raw.get("pbrMetallicRoughness") or {}
        # glTF's default is white; a primitive with no material at all gets the app's light
        # grey instead, so an untextured model keeps visible shading under the key light.
        base = pbr.get("baseColorFactor") or ([1.0, 1.0, 1.0, 1.0] if raw else list(Material().base_color))
        base = tuple(float(np.clip(c, 0.0, 1.0)) for c in (list(base) + [1.0] * 4)[:4])
        mode = raw.get("alphaMode", "OPAQUE")
        mode = mode if mode in ALPHA_MODES else "OPAQUE"
        spec = ((raw.get("extensions") or {}).get("KHR_materials_specular") or {}).get("specularFactor", 0.3)
        texture = None
        tex_info = pbr.get("baseColorTexture")
        if isinstance(tex_info, dict) and isinstance(tex_info.get("index"), int):
            texture = self._texture(tex_info["index"], raw.get("name") or f"material {index}")
        double = bool(raw.get("doubleSided", False))
        mat = Material(
            name=str(raw.get("name") or (f"material{index}" if index >= 0 else "default")),
            base_color=base,
            roughness=float(np.clip(pbr.get("roughnessFactor", 1.0), 0.0, 1.0)),
            specular=float(np.clip(spec, 0.0, 1.0)),
            texture=texture,
            alpha_mode=mode,
            alpha_cutoff=float(raw.get("alphaCutoff", 0.5)),
            double_sided=double,
        )
        if double:
            # Back faces of a user's double-sided material (hair, cloth) are lit like the
            # front (see Renderer), not filled with the default head's mouth-interior colour.
            mat.interior_color = None
        self._materials[index] = mat
        return mat

    def _texture(self, tex_index: int, material: str) -> np.ndarray | None:
        textures = self.doc.raw.get("textures") or []
        if not 0 <= tex_index < len(textures):
            self.warnings.append(f"avatar file {self.doc.label}: material '{material}' uses texture {tex_index}, "
                                 "which does not exist; drawn without it")
            return None
        source = textures[tex_index].get("source")
        if not isinstance(source, int):
            self.warnings.append(f"avatar file {self.doc.label}: material '{material}' has a texture in a format "
                                 "this app cannot read (no PNG/JPEG source); drawn without it")
            return None
        if source not in self._images:
            try:
                self._images[source] = self.doc.image(source)
            except InputError as exc:
                self.warnings.append(f"{exc}; material '{material}' is drawn without its texture")
                self._images[source] = None
        return self._images[source]
