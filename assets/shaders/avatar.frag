#version 330 core
// Avatar fragment shader. Diffuse light arrives per vertex (v_diffuse); per pixel come a
// Blinn-Phong highlight of the key light and a Fresnel-style rim. The viewer is taken
// as looking straight down -Z (the head spans a few degrees of a ~1 m camera), so the
// half vector is a per-frame constant, and x^s = exp(s ln x) is taken as exp(-s (1 - x))
// (ln x ~ x - 1 near the highlight, where it matters; saves a log per pixel). Linear
// colours in; output encoded
// with gamma 2.0 (sqrt), a cheap stand-in for sRGB.
// Variants (#define, prepended by the renderer), so that no material pays for what it
// does not use on a software rasteriser: TEXTURED, ALPHA_MASK (the only one with
// `discard`, which turns off early depth tests), DOUBLE_SIDED (back faces drawn flat
// in the interior colour).
in vec3 v_normal;
in vec3 v_diffuse;
in vec4 v_color;
#ifdef TEXTURED
in vec2 v_uv;
#endif

uniform vec4 u_base_color;
uniform float u_shininess;       // Blinn-Phong exponent, from roughness
uniform float u_spec_scale;      // specular strength x (s + 8) / (8 pi) normalisation
uniform float u_rim_scale;
uniform sampler2D u_texture;
uniform int u_alpha_mode;        // 0 opaque, 1 mask, 2 blend
uniform float u_alpha_cutoff;
uniform vec3 u_interior_color;

uniform vec3 u_key_half;         // normalize(key direction + (0, 0, 1)), view space
uniform vec3 u_key_color;
uniform vec3 u_rim_dir;
uniform vec3 u_rim_color;

out vec4 f_color;

void main() {
    vec4 base = u_base_color * v_color;
#ifdef TEXTURED
    vec4 t = texture(u_texture, v_uv);
    base *= vec4(t.rgb * t.rgb, t.a);
#endif
#ifdef ALPHA_MASK
    if (base.a < u_alpha_cutoff) discard;  // only in the MASK variant: discard disables early depth tests
#endif
    float alpha = (u_alpha_mode == 2) ? base.a : 1.0;
#ifdef DOUBLE_SIDED
    if (!gl_FrontFacing) {
        f_color = vec4(sqrt(u_interior_color), alpha);
        return;
    }
#endif
    vec3 n = normalize(v_normal);
    vec3 c = base.rgb * v_diffuse;
    float x = dot(n, u_key_half);
    c += (u_spec_scale * exp2(u_shininess * 1.442695 * (x - 1.0))) * u_key_color;
    float f = 1.0 - max(n.z, 0.0);
    c += (f * f * f * max(dot(n, u_rim_dir) * 0.5 + 0.5, 0.0) * u_rim_scale) * u_rim_color * (0.1 + 0.9 * base.rgb);
    c = c / (1.0 + max(max(c.r, c.g), c.b) * 0.15);  // gentle highlight compression
    f_color = vec4(sqrt(clamp(c, 0.0, 1.0)), alpha);
}
