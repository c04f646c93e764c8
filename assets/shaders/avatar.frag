#version 330 core
// Avatar fragment shader. Diffuse and rim light arrive per vertex (avatar.vert); per
// pixel comes the Blinn-Phong highlight of the key light, which needs it (eyes). The
// viewer is taken as looking straight down -Z (the head spans a few degrees of a ~1 m
// camera), so the half vector is a per-frame constant, and x^s = exp(s ln x) is taken
// as exp(-s (1 - x)) (ln x ~ x - 1 near the highlight, where it matters; saves a log
// per pixel). Linear colours in; output encoded with gamma 2.0 (sqrt), a cheap
// stand-in for sRGB.
// Variants (#define, prepended by the renderer), so that no material pays for what it
// does not use on a software rasteriser: TEXTURED, ALPHA_MASK (the only one with
// `discard`, which turns off early depth tests), DOUBLE_SIDED (back faces drawn flat
// in the interior colour; with BACK_LIT, lit like the front and dimmed: hair, cloth).
in vec3 v_normal;
#ifdef TEXTURED
in vec2 v_uv;
in vec4 v_base;
in vec3 v_diffuse;
in vec3 v_rim;
uniform sampler2D u_texture;
#else
in vec4 v_lit;
#endif

uniform float u_shininess;       // Blinn-Phong exponent, from roughness
uniform float u_spec_scale;      // specular strength x (s + 8) / (8 pi) normalisation
uniform int u_alpha_mode;        // 0 opaque, 1 mask, 2 blend
uniform float u_alpha_cutoff;
uniform vec3 u_interior_color;
uniform vec3 u_key_half;         // normalize(key direction + (0, 0, 1)), view space
uniform vec3 u_key_color;

out vec4 f_color;

void main() {
#ifdef TEXTURED
    vec4 t = texture(u_texture, v_uv);
    vec4 base = v_base * vec4(t.rgb * t.rgb, t.a);
    vec4 lit = vec4(base.rgb * v_diffuse + v_rim * (0.1 + 0.9 * base.rgb), base.a);
#else
    vec4 lit = v_lit;
#endif
#ifdef ALPHA_MASK
    if (lit.a < u_alpha_cutoff) discard;  // only in the MASK variant: discard disables early depth tests
#endif
    float alpha = (u_alpha_mode == 2) ? lit.a : 1.0;
#ifdef DOUBLE_SIDED
    if (!gl_FrontFacing) {
#ifdef BACK_LIT
        f_color = vec4(sqrt(clamp(lit.rgb * 0.6, 0.0, 1.0)), alpha);  // inner side, dimmed
#else
        f_color = vec4(sqrt(u_interior_color), alpha);
#endif
        return;
    }
#endif
    vec3 n = normalize(v_normal);
    float x = dot(n, u_key_half);
    vec3 c = lit.rgb + (u_spec_scale * exp2(u_shininess * 1.442695 * (x - 1.0))) * u_key_color;
    c = c / (1.0 + max(max(c.r, c.g), c.b) * 0.15);  // gentle highlight compression
    f_color = vec4(sqrt(clamp(c, 0.0, 1.0)), alpha);
}
