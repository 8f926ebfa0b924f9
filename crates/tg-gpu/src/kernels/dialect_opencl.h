// The kernel dialect on OpenCL C 1.2 (see common.h for the names every kernel uses).
#define TG_OPENCL 1

#define KERNEL __kernel void
#define DEVICE_FN static inline
#define GLOBAL __global
#define LOCAL __local
#define LOCAL_ARRAY(T, name, n) __local T name[n]

// 1-D work-groups: the work-item's index in its group, the group size, the group's index and
// the number of groups along grid axis d (0, 1, 2).
#define LID() ((i32)get_local_id(0))
#define LSIZE() ((i32)get_local_size(0))
#define GROUP(d) ((i64)get_group_id(d))
#define NGROUPS(d) ((i64)get_num_groups(d))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)

typedef char i8;
typedef uchar u8;
typedef short i16;
typedef ushort u16;
typedef int i32;
typedef uint u32;
typedef long i64;
typedef ulong u64;

// Eight i64 passed by value (shapes and strides of up to 8 dims).
typedef long8 dims8;
#define UNPACK8(name, v) i64 name[8]; vstore8((v), 0, name)

// An IEEE half at a 2-byte aligned address, as f32 (vload_half needs no fp16 extension).
#define LD_HALF(p) vload_half(0, (GLOBAL const half*)(p))
#define AS_F32(u) as_float(u)
#define AS_U32(f) as_uint(f)
#define ATOMIC_CAS(p, cmp, val) atomic_cmpxchg((volatile __global int*)(p), (cmp), (val))

#define F_INF INFINITY
#define F_NAN NAN
#define f_exp(x) exp(x)
#define f_log(x) log(x)
#define f_tanh(x) tanh(x)
#define f_sqrt(x) sqrt(x)
#define f_sin(x) sin(x)
#define f_cos(x) cos(x)
#define f_erf(x) erf(x)
#define f_fabs(x) fabs(x)
#define f_fmax(a, b) fmax(a, b)
#define f_fmin(a, b) fmin(a, b)
#define f_fma(a, b, c) fma(a, b, c)
#define f_rint(x) rint(x)
#define f_isfinite(x) isfinite(x)

// Eight-lane vectors (one weight unit): OpenCL's own vector types, so that PoCL's compiler
// emits SIMD code for each work-item. f32x8 and i32x8 support + - * (lane-wise, or with a
// scalar), i32x8 also & | >> << with an int or lane-wise.
typedef float8 f32x8;
typedef int8 i32x8;
#define F8_SPLAT(x) ((f32x8)(x))
#define I8_SPLAT(x) ((i32x8)(x))
#define I8_IOTA ((i32x8)(0, 1, 2, 3, 4, 5, 6, 7))
#define F8_LOAD(p) vload8(0, (p))
#define F8_STORE(v, p) vstore8((v), 0, (p))
#define F8_FMA(a, b, c) fma((a), (b), (c))
#define I8_LOAD_U8(p) convert_int8(vload8(0, (GLOBAL const uchar*)(p)))
#define I8_LOAD_I8(p) convert_int8(vload8(0, (GLOBAL const char*)(p)))
#define I8_TO_F8(v) convert_float8(v)
DEVICE_FN float f8_sum(f32x8 v) {
    float4 a = v.lo + v.hi;
    float2 b = a.lo + a.hi;
    return b.x + b.y;
}
