"""OpenGL rendering of avatars (moderngl): in any current context, or headless over EGL.

Importing this package does not create a context; :class:`~avatar_app.render.headless.HeadlessRenderer`
does, when constructed.
"""
from avatar_app.render.renderer import CHROMA_GREEN, LIGHTING_PRESETS, TRANSPARENT, Lighting, Renderer

__all__ = ["CHROMA_GREEN", "LIGHTING_PRESETS", "TRANSPARENT", "Lighting", "Renderer"]
