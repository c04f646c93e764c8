"""Avatar model: in-memory mesh representation and the built-in default head."""
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals

__all__ = ["AvatarMesh", "Joint", "Material", "MeshPrimitive", "Skeleton", "compute_normals"]
