// The kernel dialect on CUDA C++ (NVRTC; no headers needed): see common.h for the names.
#define TG_CUDA 1
// Warp shuffles for the reductions (common.h keeps a local-memory twin that PoCL runs).
#define TG_WARP 1

#define KERNEL extern "C" __global__ void
#define DEVICE_FN static __device__ __forceinline__
#define GLOBAL
#define LOCAL
#define LOCAL_ARRAY(T, name, n) __shared__ T name[n]

#define LID() ((i32)threadIdx.x)
#define LSIZE() ((i32)blockDim.x)
#define GROUP(d) ((i64)((d) == 0 ? blockIdx.x : (d) == 1 ? blockIdx.y : blockIdx.z))
#define NGROUPS(d) ((i64)((d) == 0 ? gridDim.x : (d) == 1 ? gridDim.y : gridDim.z))
#define BARRIER() __syncthreads()

typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Eight i64 passed by value: 64 bytes, as OpenCL's long8 (the host passes the same bytes).
struct __align__(8) dims8 { i64 v[8]; };
#define UNPACK8(name, x) const i64* name = (x).v

// An IEEE half at a 2-byte aligned address, as f32 (common.h's exact conversion).
#define LD_HALF(p) f16_to_f32(ld_u16(p))
#define AS_F32(u) __uint_as_float(u)
#define AS_U32(f) __float_as_uint(f)
#define ATOMIC_CAS(p, cmp, val) atomicCAS((int*)(p), (cmp), (val))

#define F_INF __int_as_float(0x7f800000)
#define F_NAN __int_as_float(0x7fc00000)
#define f_exp(x) expf(x)
#define f_log(x) logf(x)
#define f_tanh(x) tanhf(x)
#define f_sqrt(x) sqrtf(x)
#define f_sin(x) sinf(x)
#define f_cos(x) cosf(x)
#define f_erf(x) erff(x)
#define f_fabs(x) fabsf(x)
#define f_fmax(a, b) fmaxf(a, b)
#define f_fmin(a, b) fminf(a, b)
#define f_fma(a, b, c) fmaf(a, b, c)
#define f_rint(x) rintf(x)
#define f_isfinite(x) isfinite(x)

// The CUDA-only pieces: warp-wide reductions by shuffles (32 lanes, all active).
DEVICE_FN float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
DEVICE_FN float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
DEVICE_FN float warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Eight-lane vectors (one weight unit) as structs with the operators the kernels use; each
// work-item runs them as scalar code.
struct f32x8 { float v[8]; };
struct i32x8 { int v[8]; };
#define TG_F8_OP(op)                                                                                  \
    static __device__ __forceinline__ f32x8 operator op(f32x8 a, f32x8 b) { for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] op b.v[i]; return a; } \
    static __device__ __forceinline__ f32x8 operator op(f32x8 a, float b) { for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] op b; return a; }
TG_F8_OP(+)
TG_F8_OP(-)
TG_F8_OP(*)
#define TG_I8_OP(op)                                                                                  \
    static __device__ __forceinline__ i32x8 operator op(i32x8 a, i32x8 b) { for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] op b.v[i]; return a; } \
    static __device__ __forceinline__ i32x8 operator op(i32x8 a, int b) { for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] op b; return a; }
TG_I8_OP(+)
TG_I8_OP(-)
TG_I8_OP(&)
TG_I8_OP(|)
TG_I8_OP(>>)
TG_I8_OP(<<)
DEVICE_FN f32x8 F8_SPLAT(float x) { f32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = x; return r; }
DEVICE_FN i32x8 I8_SPLAT(int x) { i32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = x; return r; }
#define I8_IOTA (i32x8{{0, 1, 2, 3, 4, 5, 6, 7}})
DEVICE_FN f32x8 F8_LOAD(const float* p) { f32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = p[i]; return r; }
DEVICE_FN void F8_STORE(f32x8 v, float* p) { for (int i = 0; i < 8; ++i) p[i] = v.v[i]; }
DEVICE_FN f32x8 F8_FMA(f32x8 a, f32x8 b, f32x8 c) { for (int i = 0; i < 8; ++i) c.v[i] = fmaf(a.v[i], b.v[i], c.v[i]); return c; }
DEVICE_FN i32x8 I8_LOAD_U8(const unsigned char* p) { i32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = p[i]; return r; }
DEVICE_FN i32x8 I8_LOAD_I8(const unsigned char* p) { i32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = (signed char)p[i]; return r; }
DEVICE_FN f32x8 I8_TO_F8(i32x8 a) { f32x8 r; for (int i = 0; i < 8; ++i) r.v[i] = (float)a.v[i]; return r; }
DEVICE_FN float f8_sum(f32x8 v) { return ((v.v[0] + v.v[4]) + (v.v[2] + v.v[6])) + ((v.v[1] + v.v[5]) + (v.v[3] + v.v[7])); }
