// GGML weight formats read in place (block layouts as in tg-quant's blocks.rs), the f32 batched
// matmul, the quantized matmuls in both numerics, and row gathers.
//
// Type codes are GGML's: F32 0, F16 1, Q4_0 2, Q5_0 6, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30.

#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q5_0 6
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30

// Activation-row tile of the quantized matmuls (rows sharing one pass over a weight row).
#define MT 4

inline float hsum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

inline int ihsum16(int16 v) {
    int8 a = v.lo + v.hi;
    int4 b = a.lo + a.hi;
    int2 c = b.lo + b.hi;
    return c.x + c.y;
}

inline int is_plain(int ty) { return ty == T_F32 || ty == T_F16 || ty == T_BF16; }

// Element e of a plain-typed (F32/F16/BF16) row.
inline float deq_plain(int ty, __global const uchar* row, long e) {
    if (ty == T_F32) return as_float(ld_u32(row + 4 * e));
    if (ty == T_F16) return ld_half(row + 2 * e);
    return ld_bf16(row + 2 * e);
}

// The 6-bit (scale, min) of sub-block j of a Q4_K/Q5_K block (`s` = its 12 scale bytes).
inline int2 scale_min_k4(int j, __global const uchar* s) {
    if (j < 4) return (int2)(s[j] & 63, s[j + 4] & 63);
    return (int2)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4));
}

// The signed integer quants of 32-element chunk `ch` of a quantized row, without scales:
// Q4_0 q-8, Q5_0 q-16, Q8_0 q, Q4_K/Q5_K q (unsigned), Q6_K q-32.
inline void quants32(int ty, __global const uchar* row, long ch, char* q) {
    if (ty == T_Q8_0) {
        __global const uchar* b = row + ch * 34 + 2;
        for (int t = 0; t < 32; ++t) q[t] = (char)b[t];
    } else if (ty == T_Q4_0) {
        __global const uchar* b = row + ch * 18 + 2;
        for (int t = 0; t < 16; ++t) {
            q[t] = (char)(b[t] & 0x0F) - 8;
            q[t + 16] = (char)(b[t] >> 4) - 8;
        }
    } else if (ty == T_Q5_0) {
        __global const uchar* b = row + ch * 22;
        uint qh = ld_u32(b + 2);
        for (int t = 0; t < 16; ++t) {
            q[t] = (char)((b[6 + t] & 0x0F) | (((qh >> t) & 1) << 4)) - 16;
            q[t + 16] = (char)((b[6 + t] >> 4) | (((qh >> (t + 16)) & 1) << 4)) - 16;
        }
    } else if (ty == T_Q4_K || ty == T_Q5_K) {
        int s = (int)(ch % 8);
        __global const uchar* b = row + (ch / 8) * (ty == T_Q4_K ? 144 : 176);
        __global const uchar* qs = b + (ty == T_Q4_K ? 16 : 48) + 32 * (s / 2);
        int sh = 4 * (s % 2);
        for (int t = 0; t < 32; ++t) q[t] = (char)((qs[t] >> sh) & 0x0F);
        if (ty == T_Q5_K) {
            __global const uchar* qh = b + 16;
            for (int t = 0; t < 32; ++t) q[t] |= (char)(((qh[t] >> s) & 1) << 4);
        }
    } else { // Q6_K
        int s = (int)(ch % 8);
        __global const uchar* b = row + (ch / 8) * 210;
        int h = s / 4, r0 = 32 * (s % 4);
        for (int t = 0; t < 32; ++t) {
            int r = r0 + t;
            int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
            int hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
            q[t] = (char)((lo | (hi << 4)) - 32);
        }
    }
}

// Chunk `ch` (32 elements) of a quantized row dequantized exactly as tg-quant's reference does
// (every partial product is exact in f32, so the result is bit-identical).
inline void decode32(int ty, __global const uchar* row, long ch, float* w) {
    char q[32];
    quants32(ty, row, ch, q);
    if (ty == T_Q8_0 || ty == T_Q4_0 || ty == T_Q5_0) {
        float d = ld_half(row + ch * (ty == T_Q8_0 ? 34 : ty == T_Q4_0 ? 18 : 22));
        for (int t = 0; t < 32; ++t) w[t] = d * (float)q[t];
    } else if (ty == T_Q4_K || ty == T_Q5_K) {
        __global const uchar* b = row + (ch / 8) * (ty == T_Q4_K ? 144 : 176);
        int2 sm = scale_min_k4((int)(ch % 8), b + 4);
        float dl = ld_half(b) * (float)sm.x, ml = ld_half(b + 2) * (float)sm.y;
        for (int t = 0; t < 32; ++t) w[t] = dl * (float)q[t] - ml;
    } else {
        __global const uchar* b = row + (ch / 8) * 210;
        float d = ld_half(b + 208);
        int e0 = 32 * (int)(ch % 8);
        float d0 = d * (float)(char)b[192 + e0 / 16], d1 = d * (float)(char)b[192 + e0 / 16 + 1];
        for (int t = 0; t < 16; ++t) w[t] = d0 * (float)q[t];
        for (int t = 16; t < 32; ++t) w[t] = d1 * (float)q[t];
    }
}

// Optional epilogue addend: cmode 0 none, 1 one row of n, 2 the output's shape.
inline float addend(__global const uchar* c, long cbase, long coff, int cmode, long i, long j, long n) {
    if (cmode == 0) return 0.0f;
    __global const float* cp = (__global const float*)(c + cbase) + coff;
    return cmode == 1 ? cp[j] : cp[i * n + j];
}

// Quants (q - 32) of 32-element chunk s (0..8) of a Q6_K block, as two 16-lane vectors:
// element 32s + t has low bits from ql[64h + 32(s%2) + t] >> 4((s%4)/2) and high bits from
// qh[32h + t] >> 2(s%4), h = s/4 (the element order of tg-quant's BlockQ6K).
inline void q6k_chunk(__global const uchar* blk, int s, int16* a, int16* b) {
    int h = s / 4;
    __global const uchar* ql = blk + 64 * h + 32 * (s % 2);
    __global const uchar* qh = blk + 128 + 32 * h;
    uchar shl = (uchar)(4 * ((s % 4) / 2)), shh = (uchar)(2 * (s % 4));
    uchar16 l0 = (vload16(0, ql) >> shl) & (uchar)15, l1 = (vload16(1, ql) >> shl) & (uchar)15;
    uchar16 h0 = (vload16(0, qh) >> shh) & (uchar)3, h1 = (vload16(1, qh) >> shh) & (uchar)3;
    *a = convert_int16(l0 | (h0 << (uchar)4)) - 32;
    *b = convert_int16(l1 | (h1 << (uchar)4)) - 32;
}

// y[i, j] = Σ_e x[i, e] · W[j, e] (+ c), f32 activations, weights dequantized exactly, f32
// accumulation (one partial sum per 32-element chunk). One work-item: weight row j, up to MT rows.
__kernel void tg_mmq_f32(__global const uchar* x, long xbase, long xoff,
                         __global const uchar* w, long wbase, long row_bytes, int ty,
                         __global uchar* o, long obase, long ooff,
                         __global const uchar* c, long cbase, long coff, int cmode,
                         long m, long n, long k) {
    long j = get_global_id(0), r0 = get_global_id(1) * MT;
    if (j >= n || r0 >= m) return;
    int mt = (int)min((long)MT, m - r0);
    __global const float* xr = (__global const float*)(x + xbase) + xoff + r0 * k;
    __global const uchar* wr = w + wbase + j * row_bytes;
    float acc[MT] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (ty == T_Q8_0) {
        // Explicit 16-lane vectors: one weight block is two char16 loads.
        float16 av[MT];
        for (int r = 0; r < MT; ++r) av[r] = (float16)(0.0f);
        for (long b = 0; b < k / 32; ++b) {
            __global const uchar* blk = wr + b * 34;
            float d = ld_half(blk);
            float16 w0 = convert_float16(vload16(0, (__global const char*)(blk + 2))) * d;
            float16 w1 = convert_float16(vload16(0, (__global const char*)(blk + 18))) * d;
            for (int r = 0; r < mt; ++r) {
                __global const float* xc = xr + r * k + b * 32;
                av[r] = fma(w0, vload16(0, xc), av[r]);
                av[r] = fma(w1, vload16(1, xc), av[r]);
            }
        }
        for (int r = 0; r < mt; ++r) acc[r] = hsum16(av[r]);
    } else if (ty == T_Q4_K) {
        float16 av[MT];
        for (int r = 0; r < MT; ++r) av[r] = (float16)(0.0f);
        for (long b = 0; b < k / 256; ++b) {
            __global const uchar* blk = wr + b * 144;
            float d = ld_half(blk), dmin = ld_half(blk + 2);
            for (int s = 0; s < 8; ++s) {
                int2 sm = scale_min_k4(s, blk + 4);
                float dl = d * (float)sm.x, ml = dmin * (float)sm.y;
                __global const uchar* qs = blk + 16 + 32 * (s / 2);
                uchar sh = (uchar)(4 * (s % 2));
                float16 w0 = convert_float16((vload16(0, qs) >> sh) & (uchar)15) * dl - ml;
                float16 w1 = convert_float16((vload16(1, qs) >> sh) & (uchar)15) * dl - ml;
                for (int r = 0; r < mt; ++r) {
                    __global const float* xc = xr + r * k + b * 256 + 32 * s;
                    av[r] = fma(w0, vload16(0, xc), av[r]);
                    av[r] = fma(w1, vload16(1, xc), av[r]);
                }
            }
        }
        for (int r = 0; r < mt; ++r) acc[r] = hsum16(av[r]);
    } else if (ty == T_Q6_K) {
        float16 av[MT];
        for (int r = 0; r < MT; ++r) av[r] = (float16)(0.0f);
        for (long b = 0; b < k / 256; ++b) {
            __global const uchar* blk = wr + b * 210;
            float d = ld_half(blk + 208);
            for (int s = 0; s < 8; ++s) {
                int16 qa, qb;
                q6k_chunk(blk, s, &qa, &qb);
                float16 w0 = convert_float16(qa) * (d * (float)(char)blk[192 + 2 * s]);
                float16 w1 = convert_float16(qb) * (d * (float)(char)blk[193 + 2 * s]);
                for (int r = 0; r < mt; ++r) {
                    __global const float* xc = xr + r * k + b * 256 + 32 * s;
                    av[r] = fma(w0, vload16(0, xc), av[r]);
                    av[r] = fma(w1, vload16(1, xc), av[r]);
                }
            }
        }
        for (int r = 0; r < mt; ++r) acc[r] = hsum16(av[r]);
    } else if (is_plain(ty)) {
        for (long e = 0; e < k; ++e) {
            float wv = deq_plain(ty, wr, e);
            for (int r = 0; r < mt; ++r) acc[r] = fma(wv, xr[r * k + e], acc[r]);
        }
    } else {
        long nch = k / 32;
        for (long ch = 0; ch < nch; ++ch) {
            float wv[32];
            decode32(ty, wr, ch, wv);
            for (int r = 0; r < mt; ++r) {
                __global const float* xc = xr + r * k + ch * 32;
                acc[r] += hsum16(fma(vload16(0, wv), vload16(0, xc), vload16(1, wv) * vload16(1, xc)));
            }
        }
    }
    __global float* op = (__global float*)(o + obase) + ooff;
    for (int r = 0; r < mt; ++r) op[(r0 + r) * n + j] = acc[r] + addend(c, cbase, coff, cmode, r0 + r, j, n);
}

inline float round_f16(float v) {
    ushort h;
    vstore_half_rte(v, 0, (half*)&h);
    return vload_half(0, (const half*)&h);
}

// One Q8_0 activation block as tg-kernels (ggml's x86 rounding): d = f16(amax / 127),
// q = round_half_even(x · (127 / amax)); non-finite blocks get d = NaN and zero quants.
inline void quant_q8_0(__global const float* x, __local char* q, __local float* d) {
    float amax = 0.0f;
    int finite = 1;
    for (int t = 0; t < 32; ++t) {
        finite &= isfinite(x[t]);
        amax = fmax(amax, fabs(x[t]));
    }
    if (!finite) {
        for (int t = 0; t < 32; ++t) q[t] = 0;
        *d = NAN;
        return;
    }
    float dd = round_f16(amax / 127.0f);
    float id = dd == 0.0f ? 0.0f : 127.0f / amax;
    for (int t = 0; t < 32; ++t) q[t] = (char)clamp(rint(x[t] * id), -128.0f, 127.0f);
    *d = dd;
}

// One Q8_K activation block (ggml's reference): the first element `mx` of largest magnitude maps
// to -127: iscale = -127 / mx, q = round_half_even(iscale · x), d = 1 / iscale; sums of each 16.
inline void quant_q8_k(__global const float* x, __local char* q, __local float* d, __local short* sums) {
    float amax = 0.0f;
    int finite = 1;
    for (int t = 0; t < 256; ++t) {
        finite &= isfinite(x[t]);
        amax = fmax(amax, fabs(x[t]));
    }
    if (!finite || amax == 0.0f) {
        for (int t = 0; t < 256; ++t) q[t] = 0;
        for (int g = 0; g < 16; ++g) sums[g] = 0;
        *d = finite ? 0.0f : NAN;
        return;
    }
    float mx = amax;
    for (int t = 0; t < 256; ++t) {
        if (fabs(x[t]) == amax) { mx = x[t]; break; }
    }
    float iscale = -127.0f / mx;
    for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int t = 16 * g; t < 16 * g + 16; ++t) {
            char v = (char)clamp(rint(iscale * x[t]), -128.0f, 127.0f);
            q[t] = v;
            s += v;
        }
        sums[g] = (short)s;
    }
    *d = 1.0f / iscale;
}

inline int idot32(const char* a, __local const char* b) {
    int16 p = convert_int16(vload16(0, a)) * convert_int16(vload16(0, b)) + convert_int16(vload16(1, a)) * convert_int16(vload16(1, b));
    return ihsum16(p);
}

// y = x · Wᵀ (+ c) with activation rows quantized first (Q8_0 for the 32-blocks, Q8_K for the
// K-quants; `act` 0 / 1) and integer block dot products, as tg-kernels' matmul_qt_q8: per block
// (super-block for the K-quants) acc += (d_w · d_x) · isum, K-quants Q4_K/Q5_K also
// acc -= (dmin_w · d_x) · Σ m_s · Σ q_x. A work-group shares up to `mtile` quantized rows in
// local memory (xq: mtile·k quants, xd: scales, xs: Q8_K sums of each 16).
__kernel void tg_mmq_q8(__global const uchar* x, long xbase, long xoff,
                        __global const uchar* w, long wbase, long row_bytes, int ty,
                        __global uchar* o, long obase, long ooff,
                        __global const uchar* c, long cbase, long coff, int cmode,
                        long m, long n, long k, int act, int mtile,
                        __local char* xq, __local float* xd, __local short* xs) {
    long j = get_global_id(0), r0 = get_group_id(1) * (long)mtile;
    int mt = (int)min((long)mtile, m - r0);
    int bs = act == 0 ? 32 : 256;
    long nb = k / bs;
    __global const float* xr = (__global const float*)(x + xbase) + xoff + r0 * k;
    for (long t = get_local_id(0); t < mt * nb; t += get_local_size(0)) {
        long r = t / nb, b = t % nb;
        if (act == 0) quant_q8_0(xr + r * k + b * 32, xq + r * k + b * 32, xd + t);
        else quant_q8_k(xr + r * k + b * 256, xq + r * k + b * 256, xd + t, xs + 16 * t);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (j >= n) return;
    __global const uchar* wr = w + wbase + j * row_bytes;
    float acc[MT] = {0.0f, 0.0f, 0.0f, 0.0f};
    char q[32];
    if (ty == T_Q8_0) {
        for (long b = 0; b < nb; ++b) {
            __global const uchar* blk = wr + b * 34;
            int16 w0 = convert_int16(vload16(0, (__global const char*)(blk + 2)));
            int16 w1 = convert_int16(vload16(0, (__global const char*)(blk + 18)));
            float dw = ld_half(blk);
            for (int r = 0; r < mt; ++r) {
                __local const char* xp = xq + r * k + b * 32;
                int16 p = w0 * convert_int16(vload16(0, xp)) + w1 * convert_int16(vload16(1, xp));
                acc[r] += (dw * xd[r * nb + b]) * (float)ihsum16(p);
            }
        }
    } else if (act == 0) {
        int bbytes = ty == T_Q8_0 ? 34 : ty == T_Q4_0 ? 18 : 22;
        for (long b = 0; b < nb; ++b) {
            quants32(ty, wr, b, q);
            float dw = ld_half(wr + b * bbytes);
            for (int r = 0; r < mt; ++r) {
                int is = idot32(q, xq + r * k + b * 32);
                acc[r] += (dw * xd[r * nb + b]) * (float)is;
            }
        }
    } else {
        int bbytes = ty == T_Q4_K ? 144 : ty == T_Q5_K ? 176 : 210;
        for (long b = 0; b < nb; ++b) {
            __global const uchar* blk = wr + b * bbytes;
            int isum[MT] = {0, 0, 0, 0}, msum[MT] = {0, 0, 0, 0};
            for (int s = 0; s < 8; ++s) {
                if (ty == T_Q4_K) {
                    int2 sm = scale_min_k4(s, blk + 4);
                    __global const uchar* qs = blk + 16 + 32 * (s / 2);
                    uchar sh = (uchar)(4 * (s % 2));
                    int16 w0 = convert_int16((vload16(0, qs) >> sh) & (uchar)15);
                    int16 w1 = convert_int16((vload16(1, qs) >> sh) & (uchar)15);
                    for (int r = 0; r < mt; ++r) {
                        __local const char* xp = xq + r * k + b * 256 + 32 * s;
                        __local const short* bsum = xs + 16 * (r * nb + b);
                        isum[r] += sm.x * ihsum16(w0 * convert_int16(vload16(0, xp)) + w1 * convert_int16(vload16(1, xp)));
                        msum[r] += sm.y * ((int)bsum[2 * s] + (int)bsum[2 * s + 1]);
                    }
                    continue;
                }
                if (ty == T_Q6_K) {
                    int16 qa, qb;
                    q6k_chunk(blk, s, &qa, &qb);
                    int sc0 = (char)blk[192 + 2 * s], sc1 = (char)blk[192 + 2 * s + 1];
                    for (int r = 0; r < mt; ++r) {
                        __local const char* xp = xq + r * k + b * 256 + 32 * s;
                        isum[r] += sc0 * ihsum16(qa * convert_int16(vload16(0, xp))) + sc1 * ihsum16(qb * convert_int16(vload16(1, xp)));
                    }
                } else {
                    quants32(ty, wr, b * 8 + s, q);
                    int2 sm = scale_min_k4(s, blk + 4);
                    for (int r = 0; r < mt; ++r) {
                        __local const char* xp = xq + r * k + b * 256 + 32 * s;
                        __local const short* bsum = xs + 16 * (r * nb + b);
                        isum[r] += sm.x * idot32(q, xp);
                        msum[r] += sm.y * ((int)bsum[2 * s] + (int)bsum[2 * s + 1]);
                    }
                }
            }
            float dw = ld_half(blk + (ty == T_Q6_K ? 208 : 0));
            float dmin = ty == T_Q6_K ? 0.0f : ld_half(blk + 2);
            for (int r = 0; r < mt; ++r) {
                float dx = xd[r * nb + b];
                acc[r] += (dw * dx) * (float)isum[r];
                if (ty != T_Q6_K) acc[r] -= (dmin * dx) * (float)msum[r];
            }
        }
    }
    __global float* op = (__global float*)(o + obase) + ooff;
    for (int r = 0; r < mt; ++r) op[(r0 + r) * n + j] = acc[r] + addend(c, cbase, coff, cmode, r0 + r, j, n);
}

// Rows of a [rows, k] table (F32/F16/BF16 or quantized) selected by i32 ids, dequantized to f32.
// One work-item: 32 elements of one output row. An id out of range records an error and writes
// nothing for that row.
__kernel void tg_gather(__global const uchar* tab, long tbase, long row_bytes, int ty, long rows,
                        __global const uchar* ids, long ibase, long ioff,
                        __global uchar* o, long obase, long ooff, long k, long nids,
                        __global int* status) {
    long ch = get_global_id(0), i = get_global_id(1);
    if (ch * 32 >= k || i >= nids) return;
    int id = ((__global const int*)(ids + ibase))[ioff + i];
    if (id < 0 || id >= rows) {
        if (ch == 0) report_error(status, ERR_GATHER_ID, id, (int)i, (int)rows);
        return;
    }
    __global const uchar* row = tab + tbase + (long)id * row_bytes;
    __global float* op = (__global float*)(o + obase) + ooff + i * k + ch * 32;
    if (is_plain(ty)) {
        long end = min(k, ch * 32 + 32);
        for (long e = ch * 32; e < end; ++e) op[e - ch * 32] = deq_plain(ty, row, e);
    } else {
        float wv[32];
        decode32(ty, row, ch, wv);
        for (int t = 0; t < 32; ++t) op[t] = wv[t];
    }
}

// Batched f32 matmul: out[b, i, j] = Σ_e A[b, i, e] · B[b, e, j] with element strides (the host
// swaps B's strides for a transposed rhs); batch dims (`brank` <= 8) with their own strides.
// One work-item per output; 4 partial sums along k.
__kernel void tg_matmul(__global const uchar* a, long abase, long aoff, long a_rs, long a_cs,
                        __global const uchar* b, long bbase, long boff, long b_ks, long b_ns,
                        __global uchar* o, long obase, long ooff,
                        long m, long n, long k, int brank, long8 bshape, long8 bsa, long8 bsb) {
    long j = get_global_id(0), i = get_global_id(1), bt = get_global_id(2);
    if (j >= n || i >= m) return;
    UNPACK8(sh, bshape);
    UNPACK8(sa, bsa);
    UNPACK8(sb, bsb);
    long ea, eb;
    AT2(bt, brank, sh, sa, sb, ea, eb);
    __global const float* ap = (__global const float*)(a + abase) + aoff + ea + i * a_rs;
    __global const float* bp = (__global const float*)(b + bbase) + boff + eb + j * b_ns;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    long e = 0;
    for (; e + 4 <= k; e += 4) {
        s0 = fma(ap[e * a_cs], bp[e * b_ks], s0);
        s1 = fma(ap[(e + 1) * a_cs], bp[(e + 1) * b_ks], s1);
        s2 = fma(ap[(e + 2) * a_cs], bp[(e + 2) * b_ks], s2);
        s3 = fma(ap[(e + 3) * a_cs], bp[(e + 3) * b_ks], s3);
    }
    for (; e < k; ++e) s0 = fma(ap[e * a_cs], bp[e * b_ks], s0);
    ((__global float*)(o + obase))[ooff + (bt * m + i) * n + j] = (s0 + s1) + (s2 + s3);
}
