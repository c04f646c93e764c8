"""Authoring: code that makes avatar assets, run by ``training/`` scripts and tests, never per frame.

The procedural default head (:mod:`.default_head` with its skin, parts and morph
targets), deformation transfer (:mod:`.transfer`), the face-model builders
(``face_model_*``), signed-distance and mesh helpers (:mod:`.procedural`), the
``.glb`` writer and the one glTF buffer helper (:mod:`.gltf_buffer`). Several
modules need scipy or mediapipe, which the app needs only when it builds: the
run-time half (mesh, loader, mapping, the face model, the default head's asset
reader) lives in :mod:`avatar_app.avatar` and imports this package lazily, if at all.
"""
