#version 330 core
// Copies a resolved image pixel for pixel; optionally turns premultiplied colour
// (what an MSAA resolve over a transparent clear gives) into straight alpha.
uniform sampler2D u_image;
uniform bool u_unpremultiply;
out vec4 f_color;

void main() {
    vec4 c = texelFetch(u_image, ivec2(gl_FragCoord.xy), 0);
    if (u_unpremultiply && c.a > 0.0) c.rgb = min(c.rgb / c.a, vec3(1.0));
    f_color = c;
}
