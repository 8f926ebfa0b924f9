// Sliding windows over [n, c, h, w] planes (1-D is a plane of height 1): direct convolution,
// im2col and pooling, one work-item per output element. The geometry is the tg-kernels
// Window2d's: input (ih, iw), window (kh, kw), strides (sh, sw), dilations (dh, dw), padding
// before (ph, pw); output (oh, ow). A tap outside the plane reads padding.

// Direct grouped convolution: o [n, m, oh, ow] = Σ_{ci < c/g, jy, jx} w[oc, ci, jy, jx] ·
// x[b, group·(c/g) + ci, oy·sh − ph + jy·dh, ox·sw − pw + jx·dw].
// The activations of the fused epilogues (tg_runtime's Act): 0 none, 1 relu, 2 leaky
// relu (alpha), 3 silu (sigmoid from e^-|y|, as the CPU computes it), 4 leaky relu then at
// least floor.
inline float act_f(int act, float alpha, float floor_, float y) {
    switch (act) {
        case 1: return y < 0.0f ? 0.0f : y;
        case 2: return y < 0.0f ? alpha * y : y;
        case 4: { float l = y < 0.0f ? alpha * y : y; return floor_ < l ? l : floor_; }
        case 3: { float e = exp(-fabs(y)); float r = 1.0f / (1.0f + e); return y * (y < 0.0f ? e * r : r); }
        default: return y;
    }
}

// Direct convolution; with has_bias, the fused epilogue act(conv + bias[oc]).
__kernel void tg_conv(__global const uchar* x, long xbase, long xoff,
                      __global const uchar* w, long wbase, long woff,
                      __global const uchar* bias, long bbase, long boff, int has_bias, int act, float alpha, float floor_,
                      __global const uchar* res, long rbase, long roff, int has_res,
                      __global uchar* o, long obase, long ooff,
                      long n, long c, long ih, long iw, long m, long groups, long oh, long ow,
                      long kh, long kw, long sh, long sw, long dh, long dw, long ph, long pw) {
    long id = get_global_id(0);
    if (id >= n * m * oh * ow) return;
    __global const float* xp = (__global const float*)(x + xbase) + xoff;
    __global const float* wp = (__global const float*)(w + wbase) + woff;
    long ox = id % ow, oy = (id / ow) % oh, oc = (id / (ow * oh)) % m, b = id / (ow * oh * m);
    long cg = c / groups, c0 = (oc / (m / groups)) * cg;
    float acc = 0.0f;
    for (long ci = 0; ci < cg; ++ci) {
        __global const float* plane = xp + (b * c + c0 + ci) * ih * iw;
        __global const float* wk = wp + (oc * cg + ci) * kh * kw;
        for (long jy = 0; jy < kh; ++jy) {
            long iy = oy * sh - ph + jy * dh;
            if (iy < 0 || iy >= ih) continue;
            for (long jx = 0; jx < kw; ++jx) {
                long ix = ox * sw - pw + jx * dw;
                if (ix < 0 || ix >= iw) continue;
                acc = fma(wk[jy * kw + jx], plane[iy * iw + ix], acc);
            }
        }
    }
    // The residual (the output's shape) is added before the activation.
    if (has_res) acc += ((__global const float*)(res + rbase))[roff + id];
    if (has_bias) acc = act_f(act, alpha, floor_, acc + ((__global const float*)(bias + bbase))[boff + oc]);
    ((__global float*)(o + obase))[ooff + id] = acc;
}

// Group normalisation, one work item per (sample, group): x, o [n, c, plane]; gamma, beta [c].
// Two passes for the statistics (mean, then mean squared deviation), then the affine map
// and the activation.
__kernel void tg_group_norm(__global const uchar* x, long xbase, long xoff,
                            __global const uchar* gm, long gbase, long goff,
                            __global const uchar* bt, long bbase, long boff,
                            __global uchar* o, long obase, long ooff,
                            long n, long c, long plane, long groups, long affine_stride, float eps, int act, float alpha, float floor_) {
    long id = get_global_id(0);
    if (id >= n * groups) return;
    // affine_stride: 0 for one γ, β per channel, c for one per image and channel.
    long cg = c / groups, len = cg * plane, g0 = (id % groups) * cg + (id / groups) * affine_stride;
    __global const float* xp = (__global const float*)(x + xbase) + xoff + id * len;
    __global float* op = (__global float*)(o + obase) + ooff + id * len;
    __global const float* gp = (__global const float*)(gm + gbase) + goff;
    __global const float* bp = (__global const float*)(bt + bbase) + boff;
    float s = 0.0f;
    for (long i = 0; i < len; ++i) s += xp[i];
    float mean = s / (float)len;
    float v = 0.0f;
    for (long i = 0; i < len; ++i) { float d = xp[i] - mean; v = fma(d, d, v); }
    float inv = rsqrt(v / (float)len + eps);
    for (long ch = 0; ch < cg; ++ch) {
        float scale = inv * gp[g0 + ch], shift = bp[g0 + ch];
        for (long i = ch * plane; i < (ch + 1) * plane; ++i) op[i] = act_f(act, alpha, floor_, fma(xp[i] - mean, scale, shift));
    }
}

// im2col: o [n, c·kh·kw, oh·ow], row (ch·kh + jy)·kw + jx, column oy·ow + ox.
__kernel void tg_im2col(__global const uchar* x, long xbase, long xoff,
                        __global uchar* o, long obase, long ooff,
                        long n, long c, long ih, long iw, long oh, long ow,
                        long kh, long kw, long sh, long sw, long dh, long dw, long ph, long pw) {
    long id = get_global_id(0);
    long p = oh * ow;
    if (id >= n * c * kh * kw * p) return;
    long col = id % p, row = id / p;
    long ox = col % ow, oy = col / ow;
    long jx = row % kw, jy = (row / kw) % kh, plane = row / (kw * kh);
    long iy = oy * sh - ph + jy * dh, ix = ox * sw - pw + jx * dw;
    float v = 0.0f;
    if (iy >= 0 && iy < ih && ix >= 0 && ix < iw) v = ((__global const float*)(x + xbase))[xoff + plane * ih * iw + iy * iw + ix];
    ((__global float*)(o + obase))[ooff + id] = v;
}

// Pooling: kind 0 max (padding ignored), 1 mean of the taps inside, 2 sum over kh·kw.
__kernel void tg_pool(__global const uchar* x, long xbase, long xoff,
                      __global uchar* o, long obase, long ooff,
                      long planes, long ih, long iw, long oh, long ow,
                      long kh, long kw, long sh, long sw, long dh, long dw, long ph, long pw, int kind) {
    long id = get_global_id(0);
    if (id >= planes * oh * ow) return;
    long ox = id % ow, oy = (id / ow) % oh, pl = id / (ow * oh);
    __global const float* plane = (__global const float*)(x + xbase) + xoff + pl * ih * iw;
    float acc = kind == 0 ? -INFINITY : 0.0f;
    long count = 0;
    for (long jy = 0; jy < kh; ++jy) {
        long iy = oy * sh - ph + jy * dh;
        if (iy < 0 || iy >= ih) continue;
        for (long jx = 0; jx < kw; ++jx) {
            long ix = ox * sw - pw + jx * dw;
            if (ix < 0 || ix >= iw) continue;
            float v = plane[iy * iw + ix];
            acc = kind == 0 ? (acc > v ? acc : v) : acc + v;
            ++count;
        }
    }
    if (kind == 1) acc = count == 0 ? 0.0f : acc / (float)count;
    if (kind == 2) acc = acc / (float)(kh * kw);
    ((__global float*)(o + obase))[ooff + id] = acc;
}
