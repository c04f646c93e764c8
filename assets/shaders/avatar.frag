#version 330 core
// Avatar fragment shader: wrapped Lambert key + fill, hemisphere ambient, Blinn-Phong
// specular (key light), Fresnel-style rim. Linear colours in; output encoded with
// gamma 2.0 (sqrt), a cheap stand-in for sRGB that software rasterisers handle well.
in vec3 v_pos;
in vec3 v_normal;
in vec4 v_color;
in vec2 v_uv;

uniform vec4 u_base_color;
uniform float u_shininess;       // Blinn-Phong exponent, from roughness
uniform float u_spec_scale;      // specular strength x (s + 8) / (8 pi) normalisation
uniform float u_rim_scale;
uniform bool u_has_texture;
uniform sampler2D u_texture;
uniform int u_alpha_mode;        // 0 opaque, 1 mask, 2 blend
uniform float u_alpha_cutoff;
uniform vec3 u_interior_color;

uniform vec3 u_key_dir;          // view space, unit, pointing toward the light
uniform vec3 u_key_color;
uniform vec3 u_fill_dir;
uniform vec3 u_fill_color;
uniform vec3 u_rim_dir;
uniform vec3 u_rim_color;
uniform vec3 u_sky_color;
uniform vec3 u_ground_color;
uniform float u_wrap;

out vec4 f_color;

void main() {
    vec4 base = u_base_color * v_color;
    if (u_has_texture) {
        vec4 t = texture(u_texture, v_uv);
        base *= vec4(t.rgb * t.rgb, t.a);
    }
#ifdef ALPHA_MASK
    if (base.a < u_alpha_cutoff) discard;  // only in the MASK variant: discard disables early depth tests
#endif
    float alpha = (u_alpha_mode == 2) ? base.a : 1.0;
    if (!gl_FrontFacing) {
        f_color = vec4(sqrt(u_interior_color), alpha);
        return;
    }
    vec3 n = normalize(v_normal);
    vec3 v = normalize(-v_pos);
    float inv_wrap = 1.0 / (1.0 + u_wrap);
    float kd = max((dot(n, u_key_dir) + u_wrap) * inv_wrap, 0.0);
    float fd = max((dot(n, u_fill_dir) + u_wrap) * inv_wrap, 0.0);
    vec3 hemi = mix(u_ground_color, u_sky_color, 0.5 + 0.5 * n.y);
    vec3 c = base.rgb * (kd * u_key_color + fd * u_fill_color + hemi);

    vec3 h = normalize(u_key_dir + v);
    float ndh = max(dot(n, h), 0.0);
    c += (u_spec_scale * pow(ndh, u_shininess) * step(0.0, dot(n, u_key_dir))) * u_key_color;

    float f = 1.0 - max(dot(n, v), 0.0);
    c += (f * f * f * max(dot(n, u_rim_dir) * 0.5 + 0.5, 0.0) * u_rim_scale) * u_rim_color * (0.1 + 0.9 * base.rgb);

    c = c / (1.0 + max(max(c.r, c.g), c.b) * 0.15);  // gentle highlight compression
    f_color = vec4(sqrt(clamp(c, 0.0, 1.0)), alpha);
}
