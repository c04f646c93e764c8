#version 330 core
// Avatar fragment shader: wrapped Lambert key + fill, hemisphere ambient, Blinn-Phong
// specular, Fresnel-style rim; linear colours in, sRGB out (gamma 2.2 approximation).
in vec3 v_pos;
in vec3 v_normal;
in vec4 v_color;
in vec2 v_uv;

uniform vec4 u_base_color;
uniform float u_roughness;
uniform float u_specular;
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
        base *= vec4(pow(t.rgb, vec3(2.2)), t.a);
    }
    if (u_alpha_mode == 1 && base.a < u_alpha_cutoff) discard;
    float alpha = (u_alpha_mode == 2) ? base.a : 1.0;
    if (!gl_FrontFacing) {
        f_color = vec4(pow(u_interior_color, vec3(1.0 / 2.2)), alpha);
        return;
    }
    vec3 n = normalize(v_normal);
    vec3 v = normalize(-v_pos);
    float shininess = clamp(2.0 / (pow(u_roughness, 4.0) + 1e-4) - 2.0, 2.0, 2048.0);
    float norm = (shininess + 8.0) / 25.1327;  // (s + 8) / (8 pi), Blinn-Phong normalisation

    float kd = max((dot(n, u_key_dir) + u_wrap) / (1.0 + u_wrap), 0.0);
    float fd = max((dot(n, u_fill_dir) + u_wrap) / (1.0 + u_wrap), 0.0);
    vec3 hemi = mix(u_ground_color, u_sky_color, 0.5 + 0.5 * n.y);
    vec3 diffuse = base.rgb * (kd * u_key_color + fd * u_fill_color + hemi);

    vec3 h = normalize(u_key_dir + v);
    float ks = pow(max(dot(n, h), 0.0), shininess) * norm * step(0.0, dot(n, u_key_dir));
    vec3 hf = normalize(u_fill_dir + v);
    float fs = pow(max(dot(n, hf), 0.0), shininess) * norm * step(0.0, dot(n, u_fill_dir));
    vec3 spec = u_specular * 0.25 * (ks * u_key_color + fs * u_fill_color);

    float fres = pow(1.0 - max(dot(n, v), 0.0), 3.0);
    // rim: Fresnel-like, tinted by the surface and weaker on matte materials
    vec3 rim = fres * max(dot(n, u_rim_dir) * 0.5 + 0.5, 0.0) * u_rim_color
             * (0.1 + 0.9 * base.rgb) * (0.3 + 0.7 * min(u_specular * 4.0, 1.0));

    vec3 c = diffuse + spec + rim;
    c = c / (1.0 + max(max(c.r, c.g), c.b) * 0.15);  // gentle highlight compression
    f_color = vec4(pow(clamp(c, 0.0, 1.0), vec3(1.0 / 2.2)), alpha);
}
