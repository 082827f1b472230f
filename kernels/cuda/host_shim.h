// CUDA's intrinsics on the host, so that tmd.cu's device functions run under a C++ compiler
// (kernels/src/cuda/host.rs): the existence tests' device code checked against the CPU in CI,
// where no GPU is. Each intrinsic gives the device's result exactly (the float ones rounded as
// their names say); threads run one at a time, so atomics and warp syncs are plain.
#pragma once
#include <cmath>
#include <cstdint>

// tmd.cu takes its portable carry chain instead of the PTX one.
#define TMD_HOST 1
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(threads, blocks)
#define __shared__ static

struct HostDim {
    unsigned x, y, z;
};
static HostDim blockIdx, threadIdx, blockDim;

static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

// x rounded to float's 24 bits towards zero (up: away from zero), exactly.
static inline float host_round24(unsigned long long x, bool up) {
    if (x == 0) return 0.0f;
    int shift = 64 - __builtin_clzll(x) - 24;
    if (shift <= 0) return (float)x;
    unsigned long long m = x >> shift;
    if (up && (x & ((1ull << shift) - 1)) != 0) m += 1;
    return std::ldexp((float)m, shift);
}
static inline float __ull2float_rz(unsigned long long x) { return host_round24(x, false); }
static inline float __ull2float_ru(unsigned long long x) { return host_round24(x, true); }

// The product of two floats is exact in double (24 + 24 bits): rounded towards zero from there.
static inline float __fmul_rz(float a, float b) {
    double d = (double)a * (double)b;
    float f = (float)d;
    if (std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    return f;
}
// The largest float f with f y <= 1 (y > 0 here): checked by exact double products.
static inline float __frcp_rz(float y) {
    float f = (float)(1.0 / (double)y);
    while ((double)f * (double)y > 1.0) f = std::nextafter(f, 0.0f);
    while ((double)std::nextafter(f, INFINITY) * (double)y <= 1.0) f = std::nextafter(f, INFINITY);
    return f;
}

template <class T>
static inline T __ldg(const T *p) {
    return *p;
}
static inline void __syncwarp() {}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    *p += v;
    return old;
}
