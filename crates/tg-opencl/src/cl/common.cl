// Shared helpers of every Tensor Graphs OpenCL kernel.
//
// Buffers are raw bytes. A tensor is (buffer, byte base, element offset, strides); the byte
// base is where the tensor's buffer starts inside an arena, the element offset and strides are
// the plan's Layout. Element types: DT_F32 / DT_I32 (4 bytes), DT_BOOL (1 byte, 0 or 1).

#define DT_F32 0
#define DT_I32 1
#define DT_BOOL 2

// The status words (see ClKernels::take_error): [0] = error code (0 = none), [1..4] = details.
#define ERR_STORE_ROWS 1
#define ERR_GATHER_ID 2

inline void report_error(__global int* status, int code, int a, int b, int c) {
    if (atomic_cmpxchg(status, 0, code) == 0) {
        status[1] = a;
        status[2] = b;
        status[3] = c;
    }
}

inline float ld_f(__global const uchar* p, int dt, long e) {
    if (dt == DT_F32) return ((__global const float*)p)[e];
    if (dt == DT_I32) return (float)((__global const int*)p)[e];
    return (float)p[e];
}

// As Rust's `as i32` from f32: toward zero, saturating, NaN -> 0.
inline int ld_i(__global const uchar* p, int dt, long e) {
    if (dt == DT_F32) return convert_int_sat(((__global const float*)p)[e]);
    if (dt == DT_I32) return ((__global const int*)p)[e];
    return (int)p[e];
}

// Unpacks a long8 argument into a private array (vector components cannot be indexed at run time).
#define UNPACK8(name, v) long name[8]; vstore8((v), 0, name)

// Element offset of linear index `i` of a row-major `shape` of `rank` dims under `st`.
inline long at1(long i, int rank, const long* sh, const long* st) {
    long off = 0;
    for (int d = rank - 1; d >= 0; --d) {
        long s = sh[d];
        long ix = i % s;
        i /= s;
        off += ix * st[d];
    }
    return off;
}

inline float ld_half(__global const uchar* p) {
    return vload_half(0, (__global const half*)p);
}

inline float ld_bf16(__global const uchar* p) {
    uint b = (uint)p[0] | ((uint)p[1] << 8);
    return as_float(b << 16);
}

inline uint ld_u32(__global const uchar* p) {
    return (uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24);
}

// Multi-operand offsets: one pass over the dims gives every operand's offset.
#define AT2(i, rank, sh, s0, s1, o0, o1) do { \
    long _i = (i); o0 = 0; o1 = 0; \
    for (int _d = (rank) - 1; _d >= 0; --_d) { long _x = _i % sh[_d]; _i /= sh[_d]; o0 += _x * s0[_d]; o1 += _x * s1[_d]; } \
} while (0)
