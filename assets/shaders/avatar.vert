#version 330 core
// Avatar vertex shader: sparse morph targets, linear blend skinning (glTF 2.0 "Skins"),
// per-vertex diffuse and rim lighting.
//
// Morph deltas are stored sparsely: each vertex has a run of entries (in_morph = first
// entry, count) in u_morph; entry k occupies texels 2k (position delta xyz, target index
// in w) and 2k+1 (normal delta xyz). A vertex no target moves has count 0, so the cost
// is proportional to the (vertex, target) pairs that exist, not to vertices x targets.
// Variants (#define, prepended by the renderer): TEXTURED.
#define MAX_TARGETS 256
#define MAX_JOINTS 64
#define MORPH_WIDTH_LOG2 12

in vec3 in_position;
in vec3 in_normal;
in vec4 in_color;
in vec2 in_uv;
in vec4 in_joints;
in vec4 in_weights;
in ivec2 in_morph;

uniform mat4 u_view;
uniform mat4 u_proj;
uniform sampler2D u_morph;
uniform float u_target_weight[MAX_TARGETS];
uniform bool u_skinned;
uniform mat4 u_joints[MAX_JOINTS];

// material and lights (view space) for the per-vertex terms
uniform vec4 u_base_color;
uniform float u_rim_scale;
uniform vec3 u_key_dir;
uniform vec3 u_key_color;
uniform vec3 u_fill_dir;
uniform vec3 u_fill_color;
uniform vec3 u_rim_dir;
uniform vec3 u_rim_color;
uniform vec3 u_sky_color;
uniform vec3 u_ground_color;
uniform float u_wrap;

out vec3 v_normal;
#ifdef TEXTURED
out vec2 v_uv;
out vec4 v_base;     // material x vertex colour; the texture multiplies it per pixel
out vec3 v_diffuse;
out vec3 v_rim;
#else
out vec4 v_lit;      // base x diffuse + rim, alpha
#endif

void main() {
    vec3 p = in_position;
    vec3 n = in_normal;
    const int mask = (1 << MORPH_WIDTH_LOG2) - 1;
    for (int i = 0; i < in_morph.y; ++i) {
        int e = (in_morph.x + i) * 2;
        ivec2 c = ivec2(e & mask, e >> MORPH_WIDTH_LOG2);
        vec4 d = texelFetch(u_morph, c, 0);
        float w = u_target_weight[int(d.w)];
        p += w * d.xyz;
        n += w * texelFetch(u_morph, ivec2(c.x + 1, c.y), 0).xyz;
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
    vec3 nv = normalize(mat3(u_view) * n);
    v_normal = nv;
    // Diffuse and rim light per vertex (smooth at this mesh density, and far cheaper
    // than per pixel on a software rasteriser): wrapped Lambert key + fill, hemisphere
    // ambient, and a Fresnel-style rim (1 - n.v)^3 with the viewer along +Z.
    float inv_wrap = 1.0 / (1.0 + u_wrap);
    float kd = max((dot(nv, u_key_dir) + u_wrap) * inv_wrap, 0.0);
    float fd = max((dot(nv, u_fill_dir) + u_wrap) * inv_wrap, 0.0);
    vec3 diffuse = kd * u_key_color + fd * u_fill_color + mix(u_ground_color, u_sky_color, 0.5 + 0.5 * nv.y);
    vec4 base = u_base_color * in_color;
    float f = 1.0 - max(nv.z, 0.0);
    vec3 rim = (f * f * f * max(dot(nv, u_rim_dir) * 0.5 + 0.5, 0.0) * u_rim_scale) * u_rim_color;
#ifdef TEXTURED
    v_uv = in_uv;
    v_base = base;
    v_diffuse = diffuse;
    v_rim = rim;
#else
    v_lit = vec4(base.rgb * diffuse + rim * (0.1 + 0.9 * base.rgb), base.a);
#endif
    gl_Position = u_proj * pv;
}
