#version 330 core
// Avatar vertex shader: morph targets (from a float texture) then linear blend skinning.
// Morph layout: texel (target * u_vertex_total + vertex) * 2 holds the position delta,
// the next texel the normal delta; texels run row by row, u_morph_width per row.
#define MAX_ACTIVE 64
#define MAX_JOINTS 64

in vec3 in_position;
in vec3 in_normal;
in vec4 in_color;
in vec2 in_uv;
in vec4 in_joints;
in vec4 in_weights;

uniform mat4 u_view;
uniform mat4 u_proj;
uniform sampler2D u_morph;
uniform int u_morph_width;
uniform int u_vertex_base;
uniform int u_vertex_total;
uniform int u_num_active;
uniform int u_active_target[MAX_ACTIVE];
uniform float u_active_weight[MAX_ACTIVE];
uniform bool u_skinned;
uniform mat4 u_joints[MAX_JOINTS];

out vec3 v_pos;
out vec3 v_normal;
out vec4 v_color;
out vec2 v_uv;

void main() {
    vec3 p = in_position;
    vec3 n = in_normal;
    int vid = u_vertex_base + gl_VertexID;
    for (int i = 0; i < u_num_active; ++i) {
        int texel = (u_active_target[i] * u_vertex_total + vid) * 2;
        ivec2 c = ivec2(texel % u_morph_width, texel / u_morph_width);
        float w = u_active_weight[i];
        p += w * texelFetch(u_morph, c, 0).xyz;
        n += w * texelFetch(u_morph, c + ivec2(1, 0), 0).xyz;
    }
    if (u_skinned) {
        mat4 skin = in_weights.x * u_joints[int(in_joints.x)]
                  + in_weights.y * u_joints[int(in_joints.y)]
                  + in_weights.z * u_joints[int(in_joints.z)]
                  + in_weights.w * u_joints[int(in_joints.w)];
        p = (skin * vec4(p, 1.0)).xyz;
        n = mat3(skin) * n;
    }
    vec4 pv = u_view * vec4(p, 1.0);
    v_pos = pv.xyz;
    v_normal = mat3(u_view) * n;
    v_color = in_color;
    v_uv = in_uv;
    gl_Position = u_proj * pv;
}
