"""Avatar model at run time: mesh, glTF/VRM loader, blendshape mapping, face model, default head.

Code that makes avatar assets (the procedural default head, deformation transfer, the
face-model builders, the .glb writer) is in :mod:`avatar_app.avatar.authoring`.
"""
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals

__all__ = ["AvatarMesh", "Joint", "Material", "MeshPrimitive", "Skeleton", "compute_normals"]
