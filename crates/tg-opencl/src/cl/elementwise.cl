// Sources, elementwise ops, casts and copies over strided (broadcast, permuted, negative-stride)
// operands. The output is contiguous; `rank` <= 8 dims (the host merges dims first).

// Fill: `pattern` holds the value already converted to the output type (4 or 1 bytes).
__kernel void tg_fill(__global uchar* o, long obase, long ooff, long n, uint pattern, int esize) {
    long i = get_global_id(0);
    if (i >= n) return;
    __global uchar* p = o + obase;
    if (esize == 4) ((__global uint*)p)[ooff + i] = pattern;
    else p[ooff + i] = (uchar)pattern;
}

// Iota: element i of a contiguous output = (i / inner) % size.
__kernel void tg_iota(__global uchar* o, long obase, long ooff, long n, long inner, long size, int dt) {
    long i = get_global_id(0);
    if (i >= n) return;
    long v = (i / inner) % size;
    __global uchar* p = o + obase;
    if (dt == DT_F32) ((__global float*)p)[ooff + i] = (float)v;
    else ((__global int*)p)[ooff + i] = (int)v;
}

inline float unary_f(int op, float x) {
    switch (op) {
        case 0: return -x;
        case 1: return exp(x);
        case 2: return log(x);
        case 3: return tanh(x);
        case 4: return sqrt(x);
        case 5: return 1.0f / sqrt(x);
        case 6: return 1.0f / x;
        case 7: return sin(x);
        case 8: return cos(x);
        case 10: { float e = exp(-fabs(x)); float r = 1.0f / (1.0f + e); return x < 0.0f ? e * r : r; }
        case 11: { float e = exp(-fabs(x)); float r = 1.0f / (1.0f + e); return x * (x < 0.0f ? e * r : r); }
        case 12: return erf(x);
        default: return fabs(x);
    }
}

__kernel void tg_unary(__global const uchar* a, long abase, long aoff, long8 ast,
                       __global uchar* o, long obase, long ooff,
                       long8 shape, int rank, long n, int op) {
    long i = get_global_id(0);
    if (i >= n) return;
    UNPACK8(sh, shape);
    UNPACK8(sa, ast);
    float x = ((__global const float*)(a + abase))[aoff + at1(i, rank, sh, sa)];
    ((__global float*)(o + obase))[ooff + i] = unary_f(op, x);
}

inline float binary_f(int op, float a, float b) {
    switch (op) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        case 3: return a / b;
        case 4: return fmax(a, b);
        case 5: return fmin(a, b);
        case 6: return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
        default: return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    }
}

// Wrapping integer arithmetic (as Rust's wrapping_*), division by zero gives 0.
inline int binary_i(int op, int a, int b) {
    switch (op) {
        case 0: return as_int(as_uint(a) + as_uint(b));
        case 1: return as_int(as_uint(a) - as_uint(b));
        case 2: return as_int(as_uint(a) * as_uint(b));
        case 3: return b == 0 ? 0 : ((a == INT_MIN && b == -1) ? INT_MIN : a / b);
        case 4: return max(a, b);
        case 5: return min(a, b);
        case 6: return (a != 0 && b != 0) ? 1 : 0;
        default: return (a != 0 || b != 0) ? 1 : 0;
    }
}


// f32 output: f32 operands; i32/bool output: operands read as i32 (Rust's `as`), result != 0 for bool.
__kernel void tg_binary(__global const uchar* a, long abase, long aoff, long8 ast,
                        __global const uchar* b, long bbase, long boff, long8 bst,
                        __global uchar* o, long obase, long ooff,
                        long8 shape, int rank, long n, int op, int dt_in, int dt_out) {
    long i = get_global_id(0);
    if (i >= n) return;
    UNPACK8(sh, shape);
    UNPACK8(sa, ast);
    UNPACK8(sb, bst);
    long ea, eb;
    AT2(i, rank, sh, sa, sb, ea, eb);
    __global const uchar* pa = a + abase;
    __global const uchar* pb = b + bbase;
    __global uchar* po = o + obase;
    if (dt_out == DT_F32) {
        ((__global float*)po)[ooff + i] = binary_f(op, ld_f(pa, dt_in, aoff + ea), ld_f(pb, dt_in, boff + eb));
    } else {
        int v = binary_i(op, ld_i(pa, dt_in, aoff + ea), ld_i(pb, dt_in, boff + eb));
        if (dt_out == DT_I32) ((__global int*)po)[ooff + i] = v;
        else po[ooff + i] = v != 0 ? 1 : 0;
    }
}

inline int cmp_op(int op, int lt, int eq, int gt) {
    switch (op) {
        case 0: return eq;
        case 1: return !eq;
        case 2: return lt;
        case 3: return lt || eq;
        case 4: return gt;
        default: return gt || eq;
    }
}

// f32 operands compare as floats (NaN unordered), i32/bool as integers.
__kernel void tg_compare(__global const uchar* a, long abase, long aoff, long8 ast,
                         __global const uchar* b, long bbase, long boff, long8 bst,
                         __global uchar* o, long obase, long ooff,
                         long8 shape, int rank, long n, int op, int dt_in) {
    long i = get_global_id(0);
    if (i >= n) return;
    UNPACK8(sh, shape);
    UNPACK8(sa, ast);
    UNPACK8(sb, bst);
    long ea, eb;
    AT2(i, rank, sh, sa, sb, ea, eb);
    __global const uchar* pa = a + abase;
    __global const uchar* pb = b + bbase;
    int r;
    if (dt_in == DT_F32) {
        float x = ld_f(pa, dt_in, aoff + ea), y = ld_f(pb, dt_in, boff + eb);
        r = cmp_op(op, x < y, x == y, x > y);
    } else {
        int x = ld_i(pa, dt_in, aoff + ea), y = ld_i(pb, dt_in, boff + eb);
        r = cmp_op(op, x < y, x == y, x > y);
    }
    (o + obase)[ooff + i] = r ? 1 : 0;
}

__kernel void tg_where(__global const uchar* c, long cbase, long coff, long8 cst,
                       __global const uchar* a, long abase, long aoff, long8 ast,
                       __global const uchar* b, long bbase, long boff, long8 bst,
                       __global uchar* o, long obase, long ooff,
                       long8 shape, int rank, long n, int dt_c, int dt) {
    long i = get_global_id(0);
    if (i >= n) return;
    UNPACK8(sh, shape);
    UNPACK8(sc, cst);
    UNPACK8(sa, ast);
    UNPACK8(sb, bst);
    long ec = 0, ea = 0, eb = 0, r = i;
    for (int d = rank - 1; d >= 0; --d) {
        long x = r % sh[d];
        r /= sh[d];
        ec += x * sc[d];
        ea += x * sa[d];
        eb += x * sb[d];
    }
    int cond = ld_i(c + cbase, dt_c, coff + ec) != 0;
    __global const uchar* p = cond ? a + abase : b + bbase;
    long e = cond ? aoff + ea : boff + eb;
    __global uchar* po = o + obase;
    if (dt == DT_F32) ((__global float*)po)[ooff + i] = ((__global const float*)p)[e];
    else if (dt == DT_I32) ((__global int*)po)[ooff + i] = ((__global const int*)p)[e];
    else po[ooff + i] = (uchar)ld_i(p, DT_BOOL, e);
}

// Cast and Copy: f32 output reads the value as f32, i32 as Rust's `as i32`, bool as `as i32 != 0`.
// A same-type f32/i32 copy moves the bits.
__kernel void tg_cast(__global const uchar* a, long abase, long aoff, long8 ast,
                      __global uchar* o, long obase, long ooff,
                      long8 shape, int rank, long n, int dt_in, int dt_out) {
    long i = get_global_id(0);
    if (i >= n) return;
    UNPACK8(sh, shape);
    UNPACK8(sa, ast);
    long e = aoff + at1(i, rank, sh, sa);
    __global const uchar* pa = a + abase;
    __global uchar* po = o + obase;
    if (dt_in == dt_out && dt_in != DT_BOOL) {
        ((__global uint*)po)[ooff + i] = ((__global const uint*)pa)[e];
    } else if (dt_out == DT_F32) {
        ((__global float*)po)[ooff + i] = ld_f(pa, dt_in, e);
    } else if (dt_out == DT_I32) {
        ((__global int*)po)[ooff + i] = ld_i(pa, dt_in, e);
    } else {
        po[ooff + i] = ld_i(pa, dt_in, e) != 0 ? 1 : 0;
    }
}

// Copies `rows` rows of `row` elements (of `esize` bytes): source rows `spitch` apart, destination
// rows `dpitch` apart (all in elements). Concat runs one per operand.
__kernel void tg_copy_rows(__global const uchar* s, long sbase, long soff, long spitch,
                           __global uchar* d, long dbase, long doff, long dpitch,
                           long row, long rows, int esize) {
    long j = get_global_id(0), r = get_global_id(1);
    if (j >= row || r >= rows) return;
    if (esize == 4) ((__global uint*)(d + dbase))[doff + r * dpitch + j] = ((__global const uint*)(s + sbase))[soff + r * spitch + j];
    else (d + dbase)[doff + r * dpitch + j] = (s + sbase)[soff + r * spitch + j];
}

// StoreRows: rows [outer, k, inner] into the state [outer, ext, inner] at row `off` along the
// axis, `off` read from an i32 at run time. Out of range: nothing is written, an error is recorded.
__kernel void tg_store_rows(__global const uchar* s, long sbase, long soff,
                            __global const uchar* ofs, long ofbase, long ofoff,
                            __global uchar* d, long dbase, long doff,
                            long outer, long k, long ext, long inner, int esize,
                            __global int* status) {
    long j = get_global_id(0), a = get_global_id(1);
    int off = ((__global const int*)(ofs + ofbase))[ofoff];
    if (off < 0 || (long)off + k > ext) {
        if (j == 0 && a == 0) report_error(status, ERR_STORE_ROWS, off, (int)k, (int)ext);
        return;
    }
    long chunk = k * inner;
    if (j >= chunk || a >= outer) return;
    long src = soff + a * chunk + j;
    long dst = doff + (a * ext + off) * inner + j;
    if (esize == 4) ((__global uint*)(d + dbase))[dst] = ((__global const uint*)(s + sbase))[src];
    else (d + dbase)[dst] = (s + sbase)[src];
}

// Reduce along an axis of a contiguous f32 [outer, len, inner]; output [outer, 1, inner].
// op: 0 sum, 1 mean, 2 max (NaN-ignoring like f32::max). Sums use 8 interleaved partial sums.
__kernel void tg_reduce(__global const uchar* x, long xbase, long xoff,
                        __global uchar* o, long obase, long ooff,
                        long outer, long len, long inner, int op) {
    long p = get_global_id(0), ob = get_global_id(1);
    if (p >= inner || ob >= outer) return;
    __global const float* xs = (__global const float*)(x + xbase) + xoff + ob * len * inner + p;
    float r;
    if (op == 2) {
        r = -INFINITY;
        for (long t = 0; t < len; ++t) r = fmax(r, xs[t * inner]);
    } else {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (long t = 0; t < len; ++t) acc[t & 7] += xs[t * inner];
        r = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        if (op == 1) r = r / (float)len;
    }
    ((__global float*)(o + obase))[ooff + ob * inner + p] = r;
}
