// Fused kernels (contiguous f32 rows), with tg-kernels' formulas.

// Σ x² over n elements, 8 interleaved partial sums.
inline float sum_sq(__global const float* x, long n) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long t = 0; t < n; ++t) a[t & 7] = fma(x[t], x[t], a[t & 7]);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

inline float inv_rms(float ss, long n, float eps) {
    return 1.0f / sqrt(ss / (float)n + eps);
}

// out = x · (1 / sqrt(mean(x²) + eps)) · w, per row of n; one work-item per row.
__kernel void tg_rms_norm(__global const uchar* x, long xbase, long xoff,
                          __global const uchar* w, long wbase, long woff,
                          __global uchar* o, long obase, long ooff,
                          long rows, long n, float eps) {
    long r = get_global_id(0);
    if (r >= rows) return;
    __global const float* xr = (__global const float*)(x + xbase) + xoff + r * n;
    __global const float* wr = (__global const float*)(w + wbase) + woff;
    __global float* orow = (__global float*)(o + obase) + ooff + r * n;
    float inv = inv_rms(sum_sq(xr, n), n, eps);
    for (long t = 0; t < n; ++t) orow[t] = xr[t] * inv * wr[t];
}

// out[0] = a + b, out[1] = rms_norm(a + b) · w (output [2, rows, n]).
__kernel void tg_add_rms_norm(__global const uchar* a, long abase, long aoff,
                              __global const uchar* b, long bbase, long boff,
                              __global const uchar* w, long wbase, long woff,
                              __global uchar* o, long obase, long ooff,
                              long rows, long n, float eps) {
    long r = get_global_id(0);
    if (r >= rows) return;
    __global const float* ar = (__global const float*)(a + abase) + aoff + r * n;
    __global const float* br = (__global const float*)(b + bbase) + boff + r * n;
    __global const float* wr = (__global const float*)(w + wbase) + woff;
    __global float* sr = (__global float*)(o + obase) + ooff + r * n;
    __global float* nr = sr + rows * n;
    for (long t = 0; t < n; ++t) sr[t] = ar[t] + br[t];
    float inv = inv_rms(sum_sq(sr, n), n, eps);
    for (long t = 0; t < n; ++t) nr[t] = sr[t] * inv * wr[t];
}

// NeoX RoPE of x [seq, heads, d] with cos/sin [seq, d/2], optionally RMS-normalized per head
// first (`w` non-zero `norm`): one work-item per (head, position).
__kernel void tg_rope_neox(__global const uchar* x, long xbase, long xoff,
                           __global const uchar* w, long wbase, long woff, int norm,
                           __global const uchar* cs, long cbase, long coff,
                           __global const uchar* sn, long sbase, long soff,
                           __global uchar* o, long obase, long ooff,
                           long seq, long heads, long d, float eps) {
    long hd = get_global_id(0), p = get_global_id(1);
    if (hd >= heads || p >= seq) return;
    long h = d / 2;
    __global const float* xr = (__global const float*)(x + xbase) + xoff + (p * heads + hd) * d;
    __global const float* wr = (__global const float*)(w + wbase) + woff;
    __global const float* cr = (__global const float*)(cs + cbase) + coff + p * h;
    __global const float* sr = (__global const float*)(sn + sbase) + soff + p * h;
    __global float* orow = (__global float*)(o + obase) + ooff + (p * heads + hd) * d;
    float inv = norm ? inv_rms(sum_sq(xr, d), d, eps) : 1.0f;
    for (long i = 0; i < h; ++i) {
        float x0 = xr[i], x1 = xr[i + h];
        if (norm) {
            x0 = x0 * inv * wr[i];
            x1 = x1 * inv * wr[i + h];
        }
        float c = cr[i], s = sr[i];
        orow[i] = fma(x0, c, -(x1 * s));
        orow[i + h] = fma(x1, c, x0 * s);
    }
}

// GELU (tanh form) as x / (1 + e^{-2t}), t = √(2/π)(x + 0.044715 x³); gated: · up.
inline float gelu(float x) {
    const float m2 = -1.5957691216057308f; // -2·√(2/π)
    float m2t = x * m2 * fma(x * x, 0.044715f, 1.0f);
    return x / (1.0f + exp(m2t));
}

__kernel void tg_gelu(__global const uchar* g, long gbase, long goff,
                      __global const uchar* u, long ubase, long uoff, int gated,
                      __global uchar* o, long obase, long ooff, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    float y = gelu(((__global const float*)(g + gbase))[goff + i]);
    if (gated) y *= ((__global const float*)(u + ubase))[uoff + i];
    ((__global float*)(o + obase))[ooff + i] = y;
}

// Softmax over rows of n: exp(x - max) / Σ (a row of -inf gives NaN, as the formula does).
__kernel void tg_softmax(__global const uchar* x, long xbase, long xoff,
                         __global uchar* o, long obase, long ooff, long rows, long n) {
    long r = get_global_id(0);
    if (r >= rows) return;
    __global const float* xr = (__global const float*)(x + xbase) + xoff + r * n;
    __global float* orow = (__global float*)(o + obase) + ooff + r * n;
    float mx = -INFINITY;
    for (long t = 0; t < n; ++t) mx = fmax(mx, xr[t]);
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long t = 0; t < n; ++t) {
        float e = exp(xr[t] - mx);
        orow[t] = e;
        a[t & 7] += e;
    }
    float inv = 1.0f / (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
    for (long t = 0; t < n; ++t) orow[t] *= inv;
}

#define ATT_MAXD 256

// Grouped-query attention, one work-item per query row (kv head, query position i, group g):
// an online softmax over the keys of softmax(scale · q·kᵀ + mask) · v. A key whose mask is -inf
// is skipped before its k/v rows are read, so it contributes exactly nothing (NaN rows included);
// a row with every key masked ends with l = 0 and gives 0 · (1/0) = NaN, as tg-kernels does.
// seq_major: q and out are [sq, n_kv, g, d], else [n_kv, g, sq, d]; k/v [n_kv, sk, d].
__kernel void tg_attention(__global const uchar* q, long qbase, long qoff,
                           __global const uchar* kk, long kbase, long koff,
                           __global const uchar* vv, long vbase, long voff,
                           __global const uchar* mk, long mbase, long moff,
                           __global uchar* o, long obase, long ooff,
                           long nkv, long grp, long sq, long sk, long d, float scale, int seq_major) {
    long rr = get_global_id(0), head = get_global_id(1);
    if (rr >= sq * grp || head >= nkv) return;
    long i = rr / grp, g = rr % grp;
    long row = seq_major ? ((i * nkv + head) * grp + g) * d : ((head * grp + g) * sq + i) * d;
    __global const float* qr = (__global const float*)(q + qbase) + qoff + row;
    __global const float* kh = (__global const float*)(kk + kbase) + koff + head * sk * d;
    __global const float* vh = (__global const float*)(vv + vbase) + voff + head * sk * d;
    __global const float* mr = (__global const float*)(mk + mbase) + moff + i * sk;
    float qv[ATT_MAXD], acc[ATT_MAXD];
    for (long t = 0; t < d; ++t) {
        qv[t] = qr[t];
        acc[t] = 0.0f;
    }
    float mx = -INFINITY, l = 0.0f;
    for (long j = 0; j < sk; ++j) {
        float mv = mr[j];
        if (mv == -INFINITY) continue;
        __global const float* kr = kh + j * d;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        long t = 0;
        for (; t + 4 <= d; t += 4) {
            s0 = fma(qv[t], kr[t], s0);
            s1 = fma(qv[t + 1], kr[t + 1], s1);
            s2 = fma(qv[t + 2], kr[t + 2], s2);
            s3 = fma(qv[t + 3], kr[t + 3], s3);
        }
        for (; t < d; ++t) s0 = fma(qv[t], kr[t], s0);
        float s = fma(scale, (s0 + s1) + (s2 + s3), mv);
        __global const float* vr = vh + j * d;
        if (s > mx) {
            float corr = exp(mx - s);
            mx = s;
            l = l * corr + 1.0f;
            for (long u = 0; u < d; ++u) acc[u] = fma(acc[u], corr, vr[u]);
        } else {
            float p = exp(s - mx);
            l += p;
            for (long u = 0; u < d; ++u) acc[u] = fma(p, vr[u], acc[u]);
        }
    }
    float inv = 1.0f / l;
    __global float* orow = (__global float*)(o + obase) + ooff + row;
    for (long t = 0; t < d; ++t) orow[t] = acc[t] * inv;
}
