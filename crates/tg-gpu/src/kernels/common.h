// What every Tensor Graphs GPU kernel shares, written in the kernel dialect: the dialect
// header of the target (dialect_opencl.h or dialect_cuda.h) comes first and defines
//   KERNEL, DEVICE_FN                 kernel and helper-function qualifiers
//   GLOBAL, LOCAL                     address spaces of pointers (empty on CUDA)
//   LOCAL_ARRAY(T, name, n)           a work-group-shared array declared in a kernel
//   LID(), LSIZE(), GROUP(d), NGROUPS(d), BARRIER()
//                                     1-D work-groups on a grid of up to 3 axes
//   i8 u8 i16 u16 i32 u32 i64 u64     fixed-width integers; dims8 and UNPACK8 for 8 i64
//   AS_F32, AS_U32, ATOMIC_CAS, F_INF, F_NAN and the f_* math functions
// and, on CUDA only, TG_WARP with warp_sum / warp_max / warp_min (shuffles), for which the
// reductions below keep a local-memory twin: the twin is what PoCL runs in CI.
//
// Buffers are raw bytes. A tensor is (buffer, byte base, element offset[, strides]); the byte
// base is where the tensor's buffer starts inside an arena, the element offset and strides are
// the plan's Layout. Element types: DT_F32 / DT_I32 (4 bytes), DT_BOOL (1 byte, 0 or 1).

#define DT_F32 0
#define DT_I32 1
#define DT_BOOL 2

// The status words (the device's run-time error report): [0] = error code (0 = none),
// [1..4] = details.
#define ERR_STORE_ROWS 1
#define ERR_GATHER_ID 2

DEVICE_FN void report_error(GLOBAL i32* status, i32 code, i32 a, i32 b, i32 c) {
    if (ATOMIC_CAS(status, 0, code) == 0) {
        status[1] = a;
        status[2] = b;
        status[3] = c;
    }
}

// Every work-item of every group over [0, n) (grid-stride along axis 0).
#define FOR_EACH(i, n) for (i64 i = GROUP(0) * LSIZE() + LID(); i < (n); i += NGROUPS(0) * LSIZE())

// Unrolls the next loop (constant trip counts: keeps small arrays in registers on GPUs).
#define UNROLL _Pragma("unroll")
// The same for loops whose bound is a parameter that inlining makes constant (the tile sizes
// of the tiled products): NVRTC unrolls them after inlining; clang (PoCL) unrolls them before,
// into runtime-count loops that made the tiled products 2.7x slower there, so only CUDA.
#ifdef TG_CUDA
#define UNROLL_TILE _Pragma("unroll")
#else
#define UNROLL_TILE
#endif

DEVICE_FN i64 min64(i64 a, i64 b) { return a < b ? a : b; }

// As Rust's `as i32` from f32: toward zero, saturating, NaN -> 0.
DEVICE_FN i32 f2i_sat(float x) {
    if (x != x) return 0;
    if (x >= 2147483648.0f) return 2147483647;
    if (x <= -2147483648.0f) return -2147483647 - 1;
    return (i32)x;
}

DEVICE_FN float ld_f(GLOBAL const u8* p, i32 dt, i64 e) {
    if (dt == DT_F32) return ((GLOBAL const float*)p)[e];
    if (dt == DT_I32) return (float)((GLOBAL const i32*)p)[e];
    return (float)p[e];
}

DEVICE_FN i32 ld_i(GLOBAL const u8* p, i32 dt, i64 e) {
    if (dt == DT_F32) return f2i_sat(((GLOBAL const float*)p)[e]);
    if (dt == DT_I32) return ((GLOBAL const i32*)p)[e];
    return (i32)p[e];
}

// Element offset of linear index `i` of a row-major `shape` of `rank` dims under `st`.
DEVICE_FN i64 at1(i64 i, i32 rank, const i64* sh, const i64* st) {
    // One merged dim (contiguous and broadcast operands): no division (64-bit divisions cost
    // tens of cycles per element).
    if (rank <= 1) return rank == 1 ? i * st[0] : 0;
    i64 off = 0;
    for (i32 d = rank - 1; d >= 0; --d) {
        i64 s = sh[d];
        i64 q = i / s;
        off += (i - q * s) * st[d];
        i = q;
    }
    return off;
}

// Little-endian loads from byte pointers (quantized blocks are only 2-byte aligned).
DEVICE_FN u32 ld_u16(GLOBAL const u8* p) { return (u32)p[0] | ((u32)p[1] << 8); }
DEVICE_FN u32 ld_u32(GLOBAL const u8* p) { return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24); }

// IEEE half (bits in the low 16 of `h`) to f32, exactly.
DEVICE_FN float f16_to_f32(u32 h) {
    u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f; // m · 2^-24
        return sign ? -f : f;
    }
    if (e == 31) return AS_F32(sign | 0x7f800000u | (m << 13));
    return AS_F32(sign | ((e + 112u) << 23) | (m << 13));
}

// bfloat16 (bits in the low 16 of `h`) to f32.
DEVICE_FN float bf16_to_f32(u32 h) { return AS_F32(h << 16); }

// `v` rounded to the nearest half (ties to even), as f32: what storing an f16 and loading it
// again gives (v >= 0 and finite where it is used).
DEVICE_FN float round_f16(float v) {
    u32 x = AS_U32(v), sign = x & 0x80000000u, ax = x ^ sign;
    if (ax >= 0x7f800000u) return v;
    if (ax < 0x38800000u) return (sign ? -1.0f : 1.0f) * (f_rint(AS_F32(ax) * 16777216.0f) * 5.9604644775390625e-8f);
    u32 r = (ax + 0xfffu + ((ax >> 13) & 1u)) & ~0x1fffu;
    if (r >= 0x47800000u) r = 0x7f800000u;
    return AS_F32(sign | r);
}

#define TG_ADD(a, b) ((a) + (b))

// Reductions over the whole work-group (`group_*`: 1-D, a power of two from 32 to 1024
// work-items) or over each aligned run of 32 work-items (`seg32_*`); every work-item gets the
// result, combined in the same order in all of them. `s` is local scratch of LSIZE() floats.
// Every work-item of the group must call them (they hold barriers); each begins with a
// barrier, so consecutive calls may share `s`, but any other use of `s` after a call needs a
// barrier first. With TG_WARP (CUDA) they reduce by warp shuffles; otherwise by a tree in
// local memory (PoCL, OpenCL GPUs).
//
// Barriers (and so these reductions) stand only in straight-line code or in loops whose trip
// count is the same for the whole work-group — never under an `if`, a `continue` or a
// `break`, even a uniform one: PoCL 3.1 was seen to write outside the guarded range when a
// reduction sat under `if (r < m)` in a loop of constant bounds.
#ifdef TG_WARP
#define TG_REDUCE(name, warp_op, comb)                                   \
    DEVICE_FN float seg32_##name(float v, LOCAL float* s) {             \
        return warp_op(v);                                               \
    }                                                                    \
    DEVICE_FN float group_##name(float v, LOCAL float* s) {             \
        v = warp_op(v);                                                  \
        i32 nw = LSIZE() >> 5;                                           \
        if (nw <= 1) return v;                                           \
        BARRIER();                                                       \
        if ((LID() & 31) == 0) s[LID() >> 5] = v;                        \
        BARRIER();                                                       \
        float r = s[0];                                                  \
        for (i32 w = 1; w < nw; ++w) r = comb(r, s[w]);                  \
        return r;                                                        \
    }
#else
#define TG_REDUCE(name, warp_op, comb)                                   \
    DEVICE_FN float seg32_##name(float v, LOCAL float* s) {             \
        i32 t = LID();                                                   \
        BARRIER();                                                       \
        s[t] = v;                                                        \
        BARRIER();                                                       \
        for (i32 h = 16; h > 0; h >>= 1) {                               \
            if ((t & 31) < h) s[t] = comb(s[t], s[t + h]);               \
            BARRIER();                                                   \
        }                                                                \
        return s[t & ~31];                                               \
    }                                                                    \
    DEVICE_FN float group_##name(float v, LOCAL float* s) {             \
        i32 t = LID();                                                   \
        BARRIER();                                                       \
        s[t] = v;                                                        \
        BARRIER();                                                       \
        for (i32 h = LSIZE() >> 1; h > 0; h >>= 1) {                     \
            if (t < h) s[t] = comb(s[t], s[t + h]);                      \
            BARRIER();                                                   \
        }                                                                \
        return s[0];                                                     \
    }
#endif

TG_REDUCE(sum, warp_sum, TG_ADD)
TG_REDUCE(max, warp_max, f_fmax)
TG_REDUCE(min, warp_min, f_fmin)

// For a run of 32 work-items each holding 8 partial sums `acc[0..8]`: work-item `lane` of the
// run gets the run's total of acc[lane] (lanes 8..31 get 0). One exchange for all eight sums:
// shuffles with TG_WARP, else one store and one barrier pair through `s` (8 · LSIZE() floats).
DEVICE_FN float seg32_sum8(const float* acc, LOCAL float* s) {
    i32 lane = LID() & 31;
    float r = 0.0f;
#ifdef TG_WARP
    for (i32 q = 0; q < 8; ++q) {
        float v = warp_sum(acc[q]);
        if (lane == q) r = v;
    }
#else
    BARRIER();
    for (i32 q = 0; q < 8; ++q) s[q * LSIZE() + LID()] = acc[q];
    BARRIER();
    if (lane < 8) {
        LOCAL const float* p = s + lane * LSIZE() + (LID() & ~31);
        for (i32 i = 0; i < 32; ++i) r += p[i];
    }
#endif
    return r;
}
