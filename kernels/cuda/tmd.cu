// The CUDA kernels of the search (phases 1-3) and of the GPU self-test.
//
// Mirrors kernels/src/numbers/fixed.rs, kernels/src/search/existence.rs (with existence/
// quadratic.rs) and kernels/src/search/phases.rs line by line: every answer must be identical
// to the CPU back end's, so there is no floating point anywhere and every division is an exact
// integer division. Compiled at run time by NVRTC (kernels/src/cuda/compile.rs) once per word width
// TMD_L (64-bit limbs, little-endian) and polynomial degree TMD_DEG, so that the walked
// differences live in registers (every array index is a compile-time constant after unrolling).
//
// Memory layout: lists of words are interleaved by limb (limb k of entry j of a list of capacity
// `cap` sits at [k * cap + j]) so that neighbouring threads read neighbouring addresses.

typedef unsigned long long u64;
typedef unsigned int u32;

#ifndef TMD_L
#define TMD_L 1
#endif
#ifndef TMD_DEG
#define TMD_DEG 1
#endif

// Blocks of 256 threads that must fit on one multiprocessor in phase 1: caps the registers per
// thread (65536 / (256 * TMD_MINBLOCKS)); the rest of the walk state goes to local memory.
#ifndef TMD_MINBLOCKS
#define TMD_MINBLOCKS 2
#endif

#define L TMD_L
// Lengths of the walked difference tables (search/generation.rs: walk_b, walk_slope, walk_r2).
#define NB (TMD_DEG + 1)
#define NS (TMD_DEG)
#define NR (TMD_DEG >= 2 ? TMD_DEG - 1 : 1)
// Exact binomial coefficients C(i0, m), i0 < 2^40, m <= 12: below 2^480.
#define BL 8

#define U64_MAX 0xffffffffffffffffull

// ---------------------------------------------------------------- words mod 2^(64 N)

// a += b mod 2^(64 N): one carry chain of the hardware's add-with-carry, in a single asm
// statement per width (the carry flag does not survive between asm statements).
#ifdef TMD_HOST
// The host build (cuda/host_shim.h) has no PTX: a portable carry chain, the same sums.
template <int N>
__device__ __forceinline__ void w_add(u64 *a, const u64 *b) {
    u64 carry = 0;
    for (int k = 0; k < N; k++) {
        u64 s = a[k] + b[k];
        u64 c1 = s < b[k];
        u64 s2 = s + carry;
        u64 c2 = s2 < s;
        a[k] = s2;
        carry = c1 | c2;
    }
}
#else
template <int N>
__device__ __forceinline__ void w_add(u64 *a, const u64 *b);

template <>
__device__ __forceinline__ void w_add<1>(u64 *a, const u64 *b) {
    a[0] += b[0];
}

template <>
__device__ __forceinline__ void w_add<2>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %2;\n\taddc.u64 %1, %1, %3;"
        : "+l"(a[0]), "+l"(a[1])
        : "l"(b[0]), "l"(b[1]));
}

template <>
__device__ __forceinline__ void w_add<3>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %3;\n\taddc.cc.u64 %1, %1, %4;\n\taddc.u64 %2, %2, %5;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]));
}

template <>
__device__ __forceinline__ void w_add<4>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %4;\n\taddc.cc.u64 %1, %1, %5;\n\taddc.cc.u64 %2, %2, %6;\n\taddc.u64 %3, %3, %7;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2]), "+l"(a[3])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]));
}

template <>
__device__ __forceinline__ void w_add<5>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %5;\n\taddc.cc.u64 %1, %1, %6;\n\taddc.cc.u64 %2, %2, %7;\n\taddc.cc.u64 %3, %3, %8;\n\taddc.u64 %4, %4, %9;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2]), "+l"(a[3]), "+l"(a[4])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]), "l"(b[4]));
}

template <>
__device__ __forceinline__ void w_add<6>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %6;\n\taddc.cc.u64 %1, %1, %7;\n\taddc.cc.u64 %2, %2, %8;\n\taddc.cc.u64 %3, %3, %9;\n\taddc.cc.u64 %4, %4, %10;\n\taddc.u64 %5, %5, %11;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2]), "+l"(a[3]), "+l"(a[4]), "+l"(a[5])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]), "l"(b[4]), "l"(b[5]));
}

template <>
__device__ __forceinline__ void w_add<7>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %7;\n\taddc.cc.u64 %1, %1, %8;\n\taddc.cc.u64 %2, %2, %9;\n\taddc.cc.u64 %3, %3, %10;\n\taddc.cc.u64 %4, %4, %11;\n\taddc.cc.u64 %5, %5, %12;\n\taddc.u64 %6, %6, %13;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2]), "+l"(a[3]), "+l"(a[4]), "+l"(a[5]), "+l"(a[6])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]), "l"(b[4]), "l"(b[5]), "l"(b[6]));
}

template <>
__device__ __forceinline__ void w_add<8>(u64 *a, const u64 *b) {
    asm("add.cc.u64 %0, %0, %8;\n\taddc.cc.u64 %1, %1, %9;\n\taddc.cc.u64 %2, %2, %10;\n\taddc.cc.u64 %3, %3, %11;\n\taddc.cc.u64 %4, %4, %12;\n\taddc.cc.u64 %5, %5, %13;\n\taddc.cc.u64 %6, %6, %14;\n\taddc.u64 %7, %7, %15;"
        : "+l"(a[0]), "+l"(a[1]), "+l"(a[2]), "+l"(a[3]), "+l"(a[4]), "+l"(a[5]), "+l"(a[6]), "+l"(a[7])
        : "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]), "l"(b[4]), "l"(b[5]), "l"(b[6]), "l"(b[7]));
}
#endif

// out = a - b mod 2^(64 N).
template <int N>
__device__ __forceinline__ void w_sub(u64 *out, const u64 *a, const u64 *b) {
    u64 borrow = 0;
#pragma unroll
    for (int k = 0; k < N; k++) {
        u64 d1 = a[k] - b[k];
        u64 b1 = a[k] < b[k];
        u64 d2 = d1 - borrow;
        u64 b2 = d1 < borrow;
        out[k] = d2;
        borrow = b1 | b2;
    }
}

// out = a * m mod 2^(64 N) for a 64-bit m.
template <int N>
__device__ __forceinline__ void w_mul_small(u64 *out, const u64 *a, u64 m) {
    u64 carry = 0;
#pragma unroll
    for (int k = 0; k < N; k++) {
        u64 lo = a[k] * m;
        u64 hi = __umul64hi(a[k], m);
        u64 s = lo + carry;
        hi += s < lo;
        out[k] = s;
        carry = hi;
    }
}

// acc += a * b mod 2^(64 N) (schoolbook, only the limbs below 2^(64 N)).
template <int N>
__device__ __forceinline__ void w_mul_add(u64 *acc, const u64 *a, const u64 *b) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        u64 carry = 0;
#pragma unroll
        for (int j = 0; j < N - i; j++) {
            u64 lo = a[i] * b[j];
            u64 hi = __umul64hi(a[i], b[j]);
            u64 s = acc[i + j] + lo;
            u64 c1 = s < lo;
            u64 s2 = s + carry;
            u64 c2 = s2 < s;
            acc[i + j] = s2;
            // hi <= 2^64 - 2: no overflow.
            carry = hi + c1 + c2;
        }
    }
}

template <int N>
__device__ __forceinline__ u64 w_floor64(const u64 *a) { return a[N - 1]; }

template <int N>
__device__ __forceinline__ bool w_low_nonzero(const u64 *a) {
    u64 acc = 0;
#pragma unroll
    for (int k = 0; k < N - 1; k++) acc |= a[k];
    return acc != 0;
}

// ceil(a 2^64) mod 2^64.
template <int N>
__device__ __forceinline__ u64 w_ceil64(const u64 *a) {
    return a[N - 1] + (w_low_nonzero<N>(a) ? 1ull : 0ull);
}

// floor({-a} 2^64).
template <int N>
__device__ __forceinline__ u64 w_neg_floor64(const u64 *a) {
    return w_low_nonzero<N>(a) ? ~a[N - 1] : (0ull - a[N - 1]);
}

// ---------------------------------------------------------------- 64-bit helpers

__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {
    u64 s = a + b;
    return s < a ? U64_MAX : s;
}

__device__ __forceinline__ u64 sat_mul(u64 a, u64 b) {
    return __umul64hi(a, b) != 0 ? U64_MAX : a * b;
}

// u + v >= n, as the CPU's u128 comparison.
__device__ __forceinline__ bool sum_ge(u64 u, u64 v, u64 n) { return u >= n || v >= n - u; }

__device__ __forceinline__ u64 div_ceil(u64 x, u64 y) { return x / y + (x % y != 0 ? 1ull : 0ull); }

// x / y for y > 0 and x >= 3 y: a single-precision estimate of the quotient, then exact
// integer corrections, so the result is the exact quotient whatever the estimate's error. The
// 64-bit hardware division is a long software sequence on the GPU; the estimate is within a
// few units of the quotient when the quotient is below 2^20 (float's relative error is about
// 2^-22 after the reciprocal), so the corrections run once or twice. Larger quotients take
// the hardware division.
//
// Every rounding of the estimate is downwards (x rounded towards zero, y upwards, the
// reciprocal and the product towards zero), so k <= x / y: k y <= x cannot overflow and only
// upward corrections remain, at most two for a quotient below 2^20 (relative error below
// 2^-21). The remainder comes out with the quotient.
__device__ __forceinline__ u64 div_estimate(u64 x, u64 y, u64 *rem) {
    float qf = __fmul_rz(__ull2float_rz(x), __frcp_rz(__ull2float_ru(y)));
    if (qf >= 1048576.0f) {
        u64 k = x / y;
        *rem = x - k * y;
        return k;
    }
    u64 k = (u64)qf;
    u64 r = x - k * y;
    while (r >= y) {
        r -= y;
        k++;
    }
    *rem = r;
    return k;
}

// (x / y, x % y) for y > 0: subtraction when the quotient is below 3 (the common case by
// Gauss-Kuzmin), else the estimate above. Mirrors search/existence.rs `divrem`.
__device__ __forceinline__ u64 divrem(u64 x, u64 y, u64 *rem) {
    if (x < y) {
        *rem = x;
        return 0;
    }
    u64 r = x - y;
    if (r < y) {
        *rem = r;
        return 1;
    }
    u64 r2 = r - y;
    if (r2 < y) {
        *rem = r2;
        return 2;
    }
    return div_estimate(x, y, rem);
}

// ceil(m / u) >= k, i.e. (k - 1) u < m, without a division (m, u > 0).
__device__ __forceinline__ bool ceil_div_ge(u64 m, u64 u, u64 k) {
    if (k == 0) return true;
    u64 t = k - 1;
    return __umul64hi(t, u) == 0 && t * u < m;
}

// ---------------------------------------------------------------- existence tests

// search/existence.rs `flat`: -1 when the points wrap around the circle, else the exact answer.
__device__ __forceinline__ int flat(u64 a, u64 b, u64 n, u64 e) {
    u64 span = n > 0 ? n - 1 : 0;
    if (__umul64hi(a, span) == 0) {
        u64 x = span;
        if (a != 0) {
            u64 q = b / a;
            x = q < span ? q : span;
        }
        return (b - a * x) >= e ? 1 : 0;
    }
    // Here a != 0 (else the first branch was taken), so a_neg != 0.
    u64 an = 0ull - a;
    if (__umul64hi(an, span) == 0) {
        u64 m = b;
        // x_w = ceil((2^64 - b) / an) = floor((2^64 - 1 - b) / an) + 1; x_w <= span.
        u64 xm1 = (~b) / an;
        if (xm1 < span) {
            // b + an x_w lies in [2^64, 2^64 + an): the wrapped sum is the value minus 2^64.
            u64 w = b + an * (xm1 + 1);
            m = w < m ? w : m;
        }
        return m >= e ? 1 : 0;
    }
    return -1;
}

__device__ bool lefevre(u64 a, u64 b, u64 n, u64 e) {
    int f = flat(a, b, n, e);
    if (f >= 0) return f == 1;
    // Not flat: a != 0 and 2^64 - a fits in 64 bits; p, q, d only decrease from here.
    u64 p = a, q = 0ull - a, d = b;
    u64 u = 1, v = 1;
    if (d < e) return false;
    for (;;) {
        if (d < p) {
            if (p == 0) return false;
            // search/existence.rs: the turns with q / p = 0 at once.
            if (q < p) {
                u64 turns_n = sum_ge(u, v, n) ? 0 : (n - 1 - u - v) / u + 1;
                u64 m = (p - d - 1) / q + 1;
                u64 m2 = (p - 1) / q;
                m = m < m2 ? m : m2;
                m = m < turns_n ? m : turns_n;
                if (m > 0) {
                    p -= m * q;
                    v = sat_add(v, sat_mul(m, u));
                    continue;
                }
            }
            u64 k = divrem(q, p, &q);
            u = sat_add(u, sat_mul(k, v));
            if (sum_ge(u, v, n)) return true;
            // Only v would grow from here, to the success above (see search/existence.rs).
            if (q == 0) return true;
            p -= q;
            v = sat_add(v, u);
        } else {
            // Likewise the turns with p / q = 0.
            if (p < q) {
                u64 m = (d - e) / p;
                u64 m2 = (q - 1) / p;
                u64 m3 = (n - 1 > u ? n - 1 - u : 0) / v;
                m = m < m2 ? m : m2;
                m = m < m3 ? m : m3;
                if (m > 0) {
                    d -= m * p;
                    q -= m * p;
                    u = sat_add(u, sat_mul(m, v));
                    continue;
                }
            }
            d -= p;
            if (d < e) return false;
            if (q == 0) return false;
            u64 k = divrem(p, q, &p);
            v = sat_add(v, sat_mul(k, u));
            if (sum_ge(u, v, n)) return true;
            if (p == 0) return true;
            q -= p;
            u = sat_add(u, v);
        }
    }
}

// The regular test for any n (the self-test's and the CPU's range).
__device__ bool regular_general(u64 a, u64 b, u64 n, u64 e) {
    int f = flat(a, b, n, e);
    if (f >= 0) return f == 1;
    u64 p = a;
    // 1 = 2^64 = k p + q: q = 2^64 mod p = (2^64 - p) mod p, as the CPU's corrected k.
    u64 q;
    divrem(0ull - p, p, &q);
    u64 d;
    divrem(b, p, &d);
    u64 u = 1, v = 0;
    for (;;) {
        if (sum_ge(u, v, n)) return d >= e;
        if (q == 0) return false;
        u64 rem;
        u64 kf = divrem(p, q, &rem);
        u64 k;
        // kf <= ceil((n - u - v) / u): the division for the cap only where it applies.
        if (ceil_div_ge(n - u - v, u, kf)) {
            p = rem;
            k = kf;
        } else {
            u64 kn = div_ceil(n - u - v, u);
            p -= kn * q;
            k = kn;
        }
        v = sat_add(v, sat_mul(k, u));
        // d < p + k q, so where d >= p, (d - p) / q < k. The partial quotients follow the
        // slope, which the threads of a warp share to many bits, while d differs from thread
        // to thread: for k <= 2 the reduction is selected without a branch (search/existence.rs).
        if (k <= 2) {
            u64 t = d - p;
            t = t >= q ? t - q : t;
            d = d >= p ? t : d;
        } else if (d >= p) {
            divrem(d - p, q, &d);
        }
        if (sum_ge(u, v, n)) return d >= e;
        if (p == 0) return false;
        kf = divrem(q, p, &rem);
        if (ceil_div_ge(n - u - v, v, kf)) {
            q = rem;
            k = kf;
        } else {
            u64 kn = div_ceil(n - u - v, v);
            q -= kn * p;
            k = kn;
        }
        u = sat_add(u, sat_mul(k, v));
        // d < k p + q: d - k p where that is >= 0, else d mod p, whose quotient is below k.
        u64 kp = k * p;
        if (k <= 2) {
            u64 r = d >= p ? d - p : d;
            d = d < kp ? r : d - kp;
        } else if (d < kp) {
            divrem(d, p, &d);
        } else {
            d = d - kp;
        }
    }
}

// The regular test. Domains have fewer than 2^32 arguments (the phases' n): then u and v stay
// below n (each capped step keeps u + v below n until the last), so they are 32-bit, the cap
// test is a 32 x 32-bit product and the capped quotient a 32-bit division, and no saturation
// can happen: the same values as regular_general, which takes larger n.
__device__ bool regular(u64 a, u64 b, u64 n, u64 e) {
    if (n >> 32) return regular_general(a, b, n, e);
    int f = flat(a, b, n, e);
    if (f >= 0) return f == 1;
    u64 p = a;
    u64 q;
    divrem(0ull - p, p, &q);
    u64 d;
    divrem(b, p, &d);
    u32 nn = (u32)n, u = 1, v = 0;
    for (;;) {
        if ((u64)u + v >= n) return d >= e;
        if (q == 0) return false;
        u64 rem;
        u64 k = divrem(p, q, &rem);
        u32 m = nn - u - v;
        // ceil(m / u) >= k, with u >= 1: k <= m is necessary, then (k - 1) u < m.
        if (k == 0 || (k <= m && (u64)((u32)k - 1) * u < m)) {
            p = rem;
        } else {
            k = m / u + (m % u != 0 ? 1u : 0u);
            p -= k * q;
        }
        // k u < m + u: v stays below n.
        v += (u32)k * u;
        // d < p + k q, so where d >= p, (d - p) / q < k. The partial quotients follow the
        // slope, which the threads of a warp share to many bits, while d differs from thread
        // to thread: for k <= 2 the reduction is selected without a branch (search/existence.rs).
        if (k <= 2) {
            u64 t = d - p;
            t = t >= q ? t - q : t;
            d = d >= p ? t : d;
        } else if (d >= p) {
            divrem(d - p, q, &d);
        }
        if ((u64)u + v >= n) return d >= e;
        if (p == 0) return false;
        k = divrem(q, p, &rem);
        m = nn - u - v;
        // As above with v, which may be 0 (then every k fits and u does not move).
        if (k == 0 || v == 0 || (k <= m && (u64)((u32)k - 1) * v < m)) {
            q = rem;
        } else {
            k = m / v + (m % v != 0 ? 1u : 0u);
            q -= k * p;
        }
        u += v == 0 ? 0u : (u32)k * v;
        // d < k p + q: d - k p where that is >= 0, else d mod p, whose quotient is below k.
        u64 kp = k * p;
        if (k <= 2) {
            u64 r = d >= p ? d - p : d;
            d = d < kp ? r : d - kp;
        } else if (d < kp) {
            divrem(d, p, &d);
        } else {
            d = d - kp;
        }
    }
}

// test: 0 = regular, 1 = Lefevre (search/existence.rs `Test`).
__device__ __forceinline__ bool run_test(int test, u64 a, u64 b, u64 n, u64 e) {
    return test == 1 ? lefevre(a, b, n, e) : regular(a, b, n, e);
}

// The regular test as a state machine, so that one thread can run two domains' tests
// interleaved (search/existence/simd.rs `regular_lanes`): the two lanes' divisions are independent and
// overlap in the pipeline. Each lane goes through exactly the steps of `regular`.
struct Regular {
    u64 p, q, d, u, v;
    bool live, answer;
};

__device__ __forceinline__ void regular_start(Regular &s, u64 a, u64 b, u64 n, u64 e,
                                              bool present) {
    s.u = 1;
    s.v = 0;
    s.p = s.q = s.d = 0;
    s.live = false;
    s.answer = true;
    if (!present) return;
    int f = flat(a, b, n, e);
    if (f >= 0) {
        s.answer = f == 1;
        return;
    }
    s.p = a;
    divrem(0ull - a, a, &s.q);
    divrem(b, a, &s.d);
    s.live = true;
}

// What both halves of an iteration of `regular` share: settles the lane when its counts reached
// n or the dividing gap y is 0 (false), else splits the gap x by y, the quotient capped so that
// the counts stay within n, grows the other count by k w and gives the quotient k (true).
// The first half splits p by q (w = u, grows v); the second q by p (w = v, grows u).
__device__ __forceinline__ bool regular_split(Regular &s, u64 &x, u64 y, u64 w, u64 &grown,
                                              u64 n, u64 e, u64 *k) {
    if (sum_ge(s.u, s.v, n)) {
        s.answer = s.d >= e;
        s.live = false;
        return false;
    }
    if (y == 0) {
        s.answer = false;
        s.live = false;
        return false;
    }
    u64 rem;
    u64 kf = divrem(x, y, &rem);
    if (ceil_div_ge(n - s.u - s.v, w, kf)) {
        x = rem;
        *k = kf;
    } else {
        u64 kn = div_ceil(n - s.u - s.v, w);
        x -= kn * y;
        *k = kn;
    }
    grown = sat_add(grown, sat_mul(*k, w));
    return true;
}

// The first half of an iteration of `regular` (the p-gaps split), then the offset d reduced
// by the new p modulo q.
__device__ __forceinline__ void regular_half1(Regular &s, u64 n, u64 e) {
    u64 k;
    if (!s.live || !regular_split(s, s.p, s.q, s.u, s.v, n, e, &k)) return;
    if (s.d >= s.p) divrem(s.d - s.p, s.q, &s.d);
}

// The second half (the q-gaps split), then d less k p, or reduced modulo p where it is smaller.
__device__ __forceinline__ void regular_half2(Regular &s, u64 n, u64 e) {
    u64 k;
    if (!s.live || !regular_split(s, s.q, s.p, s.v, s.u, n, e, &k)) return;
    if (s.d < k * s.p) {
        divrem(s.d, s.p, &s.d);
    } else {
        s.d = s.d - k * s.p;
    }
}

// `regular` on two inputs at once (the second only if `second`); same answers lane by lane.
__device__ __forceinline__ void regular2(u64 a0, u64 b0, u64 n0, u64 a1, u64 b1, u64 n1,
                                         bool second, u64 e, bool *ok0, bool *ok1) {
    Regular s0, s1;
    regular_start(s0, a0, b0, n0, e, true);
    regular_start(s1, a1, b1, n1, e, second);
    while (s0.live || s1.live) {
        regular_half1(s0, n0, e);
        regular_half1(s1, n1, e);
        regular_half2(s0, n0, e);
        regular_half2(s1, n1, e);
    }
    *ok0 = s0.answer;
    *ok1 = s1.answer;
}

// ---------------------------------------------------------------- exact packet start

// c[m * BL + k] = limb k of C(i0, m) for m = 0..M-1, exact (i0 < 2^40, m <= 12: below
// 2^480). Takes C(i0, m) = C(i0, m-1) (i0 - m + 1) / m; the division is exact. The loop over
// m is kept rolled (local memory): this runs once per thread, and unrolling it made NVRTC take
// minutes on the widest modules.
__device__ void binomials(u64 i0, int M, u64 *c) {
#pragma unroll
    for (int k = 0; k < BL; k++) c[k] = 0;
    c[0] = 1;
#pragma unroll 1
    for (int m = 1; m < M; m++) {
        u64 prev[BL], t[BL];
#pragma unroll
        for (int k = 0; k < BL; k++) prev[k] = c[(m - 1) * BL + k];
        // Once C(i0, m) = 0 (m > i0) it stays 0, whatever the wrapped factor.
        w_mul_small<BL>(t, prev, i0 - (u64)(m - 1));
        u64 rem = 0, mm = (u64)m;
#pragma unroll
        for (int k = BL - 1; k >= 0; k--) {
            // rem < m < 2^32: each 96-bit step fits in 64 bits.
            u64 hi = (rem << 32) | (t[k] >> 32);
            u64 qh = hi / mm;
            rem = hi - qh * mm;
            u64 lo = (rem << 32) | (t[k] & 0xffffffffull);
            u64 ql = lo / mm;
            rem = lo - ql * mm;
            c[m * BL + k] = (qh << 32) | ql;
        }
    }
}

// Difference l of a walked polynomial of n differences at domain i0 (search/generation.rs
// `Generated::shift`) into w (L limbs): sum_m C(i0, m) rho[l + m] mod 2^(64 L). rho holds packed
// words (word l, limb k at [l * L + k]), c the binomials as `binomials` writes them.
__device__ void shifted_word(u64 *w, int n, int l, const u64 *rho, const u64 *c) {
    u64 acc[L];
#pragma unroll
    for (int k = 0; k < L; k++) acc[k] = 0;
#pragma unroll 1
    for (int m = 0; m < n - l; m++) {
        u64 r[L], cm[L];
#pragma unroll
        for (int k = 0; k < L; k++) {
            r[k] = __ldg(&rho[(l + m) * L + k]);
            cm[k] = c[m * BL + k];
        }
        w_mul_add<L>(acc, cm, r);
    }
#pragma unroll
    for (int k = 0; k < L; k++) w[k] = acc[k];
}

// The n differences of a walked polynomial at domain i0, packed into w (`shifted_word`).
__device__ void shift_state(u64 *w, int n, const u64 *rho, const u64 *c) {
#pragma unroll 1
    for (int l = 0; l < n; l++) shifted_word(w + l * L, n, l, rho, c);
}

// Phase 1's threads walk their domains in stripes (TMD_STRIPE): lane l of a warp whose 32
// packets cover the domains [D, D + 32 packet) walks D + l + 32 j, j < packet, instead of its
// own packet's consecutive domains. The lanes of a warp then test neighbouring domains at each
// step, whose slopes agree to many more bits than those of domains a packet apart, so their
// partial quotients, branches and iteration counts agree: less divergence. Each domain is
// still walked and tested exactly once, from the same exact words.
#ifndef TMD_STRIPE
#define TMD_STRIPE 1
#endif
// Stride differences exactly in 64-bit multipliers only up to 11 differences (below): degree 10
// walks, which steep screened pieces use (exp in binary64 near 512: degree 9, 10 differences).
#define STRIPE_MAX_N 11

// The differences of step s from those of step 1, in place: Delta_s = (1 + Delta)^s - 1, so
// Delta_s^l = sum_(r >= l) T[l][r] Delta^r with T[l][r] the coefficient of x^r in
// ((1 + x)^s - 1)^l, a nonnegative integer at most C(s l, r) <= C(320, 10) < 2^62 for s = 32
// and l, r < 11 (every partial sum below is a part of such a coefficient): exact in 64 bits,
// so the words mod 2^(64 L) are exactly the step-s differences the walk needs. Row l of T is
// row l - 1 times (1 + x)^s - 1, truncated at degree n - 1; rows go upwards, and row l reads
// only w[r] for r >= l, which lower rows have not yet overwritten.
__device__ void stride_state(u64 *w, int n, u64 s) {
    u64 poly[STRIPE_MAX_N], row[STRIPE_MAX_N], next[STRIPE_MAX_N];
    // poly = (1 + x)^s - 1 = sum_(r >= 1) C(s, r) x^r, truncated.
    poly[0] = 0;
    u64 c = 1;
#pragma unroll 1
    for (int r = 1; r < n; r++) {
        c = c * (s - (u64)(r - 1)) / (u64)r;
        poly[r] = c;
    }
    row[0] = 1;
#pragma unroll 1
    for (int r = 1; r < n; r++) row[r] = 0;
#pragma unroll 1
    for (int l = 1; l < n; l++) {
        // row <- row * poly, truncated; then w[l] = sum_(r >= l) row[r] w[r].
#pragma unroll 1
        for (int r = 0; r < n; r++) {
            u64 t = 0;
#pragma unroll 1
            for (int j = 1; j <= r; j++) t += row[r - j] * poly[j];
            next[r] = t;
        }
#pragma unroll 1
        for (int r = 0; r < n; r++) row[r] = next[r];
        u64 acc[L];
#pragma unroll
        for (int k = 0; k < L; k++) acc[k] = 0;
#pragma unroll 1
        for (int r = l; r < n; r++) {
            u64 t[L], x[L];
#pragma unroll
            for (int k = 0; k < L; k++) x[k] = w[r * L + k];
            w_mul_small<L>(t, x, row[r]);
            w_add<L>(acc, t);
        }
#pragma unroll
        for (int k = 0; k < L; k++) w[l * L + k] = acc[k];
    }
}

// A striped warp's start states: lane s of the warp whose first domain
// is D starts at D + s, and Delta^l f(D + s) = sum_m C(s, m) Delta^(l+m) f(D). The differences
// at D need the products of L-limb binomials C(D, m) (shift_state), the costliest part of a
// thread's start (a fifth of the screen kernel's instructions near 512 with packets of 64), so
// each word at D is computed once per warp, by one lane (word j of the tables laid end to end:
// NB + NS + NR = 3 TMD_DEG <= 30 words where NB <= STRIPE_MAX_N), and shared; each lane then
// shifts them by its own s < 32, whose binomials C(s, m) <= C(31, 15) < 2^29 are single words
// (lane_shift). The words are those of shift_state at D + s, exactly, mod 2^(64 L).
#define WARP_WORDS (NB + NS + NR)
static_assert(NB > STRIPE_MAX_N || WARP_WORDS <= 32, "one lane per word of a striped warp");

// Word j of the tables (b: NB words, then s: NS, then r: nr <= NR) at D into sh[j * L ..]: one
// lane per word, lanes past the last word idle. c holds the binomials C(D, m) (`binomials`).
__device__ void warp_words(u64 *sh, u32 lane, const u64 *c, const u64 *rho_b, const u64 *rho_s,
                           const u64 *rho_r, int nr) {
    const u64 *rho;
    int n, l;
    if ((int)lane < NB) {
        rho = rho_b, n = NB, l = (int)lane;
    } else if ((int)lane < NB + NS) {
        rho = rho_s, n = NS, l = (int)lane - NB;
    } else if ((int)lane < NB + NS + nr) {
        rho = rho_r, n = nr, l = (int)lane - NB - NS;
    } else {
        return;
    }
    shifted_word(sh + lane * L, n, l, rho, c);
}

// The n differences at D + s from those at D (packed words W, shared): w[l] = sum_m C(s, m)
// W[l + m], with the single-word binomials cs[m] = C(s, m).
__device__ void lane_shift(u64 *w, int n, const u64 *W, const u64 *cs) {
#pragma unroll 1
    for (int l = 0; l < n; l++) {
        u64 acc[L];
#pragma unroll
        for (int k = 0; k < L; k++) acc[k] = 0;
#pragma unroll 1
        for (int m = 0; m < n - l; m++) {
            u64 x[L], t[L];
#pragma unroll
            for (int k = 0; k < L; k++) x[k] = W[(l + m) * L + k];
            w_mul_small<L>(t, x, cs[m]);
            w_add<L>(acc, t);
        }
#pragma unroll
        for (int k = 0; k < L; k++) w[l * L + k] = acc[k];
    }
}

// C(s, m) for m < NB (0 once m > s), exact in 64 bits for s < 32.
__device__ __forceinline__ void small_binomials(u64 s, u64 *cs) {
    cs[0] = 1;
#pragma unroll 1
    for (int m = 1; m < NB; m++) {
        u64 f = s >= (u64)(m - 1) ? s - (u64)(m - 1) : 0;
        cs[m] = cs[m - 1] * f / (u64)m;
    }
}

// The top WL limbs of packed words (local memory) into a register array: every index a
// compile-time constant. WL = L keeps the whole words.
template <int N, int WL>
__device__ __forceinline__ void to_registers(u64 (*w)[WL], const u64 *packed) {
#pragma unroll
    for (int l = 0; l < N; l++)
#pragma unroll
        for (int k = 0; k < WL; k++) w[l][k] = packed[l * L + (L - WL) + k];
}

// A striped warp's start (warp_words, lane_shift, stride_state): the top WL limbs of the
// step-32 differences at D + lane of the tables b, s and, with R, r. Every lane of the warp
// calls it (the shared words are the warp's: one row per warp of a block of at most 256
// threads, the kernels' launch bound and the host's BLOCK).
template <int WL, bool R>
__device__ void striped_start(u64 (*wb)[WL], u64 (*ws)[WL], u64 (*wr)[WL], u64 d, u32 lane,
                              const u64 *rho_b, const u64 *rho_s, const u64 *rho_r) {
    __shared__ u64 sh_words[8][WARP_WORDS * L];
    u64 *sh = sh_words[threadIdx.x >> 5];
    {
        u64 c[NB * BL];
        binomials(d, NB, c);
        warp_words(sh, lane, c, rho_b, rho_s, rho_r, R ? NR : 0);
    }
    __syncwarp();
    u64 cs[NB], scratch[NB * L];
    small_binomials(lane, cs);
    lane_shift(scratch, NB, sh, cs);
    stride_state(scratch, NB, 32);
    to_registers<NB, WL>(wb, scratch);
    lane_shift(scratch, NS, sh + NB * L, cs);
    stride_state(scratch, NS, 32);
    to_registers<NS, WL>(ws, scratch);
    if (R) {
        lane_shift(scratch, NR, sh + (NB + NS) * L, cs);
        stride_state(scratch, NR, 32);
        to_registers<NR, WL>(wr, scratch);
    }
}

// One step of tabulated differences: w[l] += w[l + 1], low l first.
template <int N, int WL>
__device__ __forceinline__ void step(u64 (*w)[WL]) {
#pragma unroll
    for (int l = 0; l < N - 1; l++) w_add<WL>(w[l], w[l + 1]);
}

// ---------------------------------------------------------------- phase 1

// One thread per packet of `packet` domains: exact start state, then walk and test each
// domain; the indices of the failing ones are appended to a compacted list through an atomic
// counter (counters[0]); tmd_phase1_words then evaluates their words exactly, so the walk keeps
// nothing but its differences. One launch covers the packets [first_packet, end_packet), so the
// host can cut a piece with many failing domains into ranges whose lists fit its memory budget.
// Entries past `cap` are counted but not written: the host sees the overflow and runs that range
// again with a larger list or in smaller ranges. With TMD_LANES=2 the regular test runs on two
// consecutive domains at once.
#ifndef TMD_LANES
#define TMD_LANES 1
#endif

__device__ __forceinline__ void emit_failure(u64 i, u64 *out_index, u64 cap, u64 *counters) {
    u64 j = atomicAdd(&counters[0], 1ull);
    if (j < cap) out_index[j] = i;
}

// The walk of one packet. WL = L: exact words. WL = 2 < L (tmd_phase1_top): only the top two
// limbs of each word are walked, which drops the carries from the limbs below, so a walked
// word is below the true one's top 128 bits by at most the host's `slack` (its bound on the
// dropped carries over a packet). Where the second limb of the walked value lies in
// [1, 2^64 - 1 - slack], the true top limb is the walked one and the limbs below it are not all
// zero, so a = ~top and b = top + 1 exactly as from the whole word; elsewhere (about slack /
// 2^64 of the domains) the domain's index goes to the `exact` list (counters[5]), which
// tmd_phase1_exact tests from exact words. Two limbs instead of L keep the walk in registers
// with room to spare: the occupancy that phase 1 lacked.
template <int WL>
__device__ __forceinline__ void phase1_walk(const u64 *rho_b, const u64 *rho_s, u64 domains,
                                            u64 count, u32 domain_bits, u64 packet,
                                            u64 first_packet, u64 end_packet, u64 e1, int test,
                                            u64 *out_index, u64 cap, u64 *counters,
                                            u64 slack_b, u64 slack_s, u64 *exact,
                                            u64 exact_cap) {
    u64 u = first_packet + (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // Striped (see stride_state): the warp's 32 packets are all in the launch's range and
    // full, the same answer for every lane of the warp (blocks are whole warps).
    u32 lane = threadIdx.x & 31u;
    u64 u0 = u - lane;
    bool striped = TMD_STRIPE && NB <= STRIPE_MAX_N && !(WL == L && TMD_LANES == 2) &&
                   u0 + 32 <= end_packet && (u0 + 32) * packet <= domains;
    u64 i0, i1, di;
    if (striped) {
        i0 = u0 * packet + lane;
        i1 = i0 + 32 * packet;
        di = 32;
    } else {
        if (u >= end_packet) return;
        i0 = u * packet;
        if (i0 >= domains) return;
        i1 = i0 + packet < domains ? i0 + packet : domains;
        di = 1;
    }

    u64 wb[NB][WL], ws[NS][WL];
    if (striped) {
        striped_start<WL, false>(wb, ws, ws, u0 * packet, lane, rho_b, rho_s, rho_s);
    } else {
        u64 c[NB * BL], scratch[NB * L];
        binomials(i0, NB, c);
        shift_state(scratch, NB, rho_b, c);
        to_registers<NB, WL>(wb, scratch);
        shift_state(scratch, NS, rho_s, c);
        to_registers<NS, WL>(ws, scratch);
    }

    u64 big_n = 1ull << domain_bits;
    if (WL == L && TMD_LANES == 2 && test == 0) {
        for (u64 i = i0; i < i1; i += 2) {
            bool second = i + 1 < i1;
            u64 a0 = w_neg_floor64<WL>(ws[0]);
            u64 b0 = w_ceil64<WL>(wb[0]);
            u64 rest = count - i * big_n;
            u64 n0 = rest < big_n ? rest : big_n;
            step<NB, WL>(wb);
            step<NS, WL>(ws);
            u64 a1 = w_neg_floor64<WL>(ws[0]);
            u64 b1 = w_ceil64<WL>(wb[0]);
            u64 n1 = 0;
            if (second) {
                rest = count - (i + 1) * big_n;
                n1 = rest < big_n ? rest : big_n;
                step<NB, WL>(wb);
                step<NS, WL>(ws);
            }
            bool ok0, ok1;
            regular2(a0, b0, n0, a1, b1, n1, second, e1, &ok0, &ok1);
            if (!ok0) emit_failure(i, out_index, cap, counters);
            if (!ok1) emit_failure(i + 1, out_index, cap, counters);
        }
        return;
    }
    for (u64 i = i0; i < i1; i += di) {
        u64 a, b;
        bool sure = true;
        if (WL == L) {
            a = w_neg_floor64<WL>(ws[0]);
            b = w_ceil64<WL>(wb[0]);
        } else {
            u64 lo_b = wb[0][WL - 2], lo_s = ws[0][WL - 2];
            sure = lo_b != 0 && lo_b <= ~slack_b && lo_s != 0 && lo_s <= ~slack_s;
            b = wb[0][WL - 1] + 1;
            a = ~ws[0][WL - 1];
        }
        u64 rest = count - i * big_n;
        u64 n = rest < big_n ? rest : big_n;
        if (!sure) {
            u64 j = atomicAdd(&counters[5], 1ull);
            if (j < exact_cap) exact[j] = i;
        } else if (!run_test(test, a, b, n, e1)) {
            emit_failure(i, out_index, cap, counters);
        }
        step<NB, WL>(wb);
        step<NS, WL>(ws);
    }
}

extern "C" __global__ void __launch_bounds__(256, TMD_MINBLOCKS)
    tmd_phase1(const u64 *rho_b, const u64 *rho_s, u64 domains, u64 count, u32 domain_bits,
               u64 packet, u64 first_packet, u64 end_packet, u64 e1, int test, u64 *out_index,
               u64 cap, u64 *counters) {
    phase1_walk<L>(rho_b, rho_s, domains, count, domain_bits, packet, first_packet, end_packet,
                   e1, test, out_index, cap, counters, 0, 0, 0, 0);
}

// Phase 1 with the two-limb walk (see phase1_walk); the host uses it only where L > 2 and the
// slack is small. More blocks per multiprocessor fit than with whole words.
#ifndef TMD_TOP_MINBLOCKS
#define TMD_TOP_MINBLOCKS 4
#endif
#define TOP_WL (L > 2 ? 2 : L)
extern "C" __global__ void __launch_bounds__(256, TMD_TOP_MINBLOCKS)
    tmd_phase1_top(const u64 *rho_b, const u64 *rho_s, u64 domains, u64 count,
                   u32 domain_bits, u64 packet, u64 first_packet, u64 end_packet, u64 e1,
                   int test, u64 *out_index, u64 cap, u64 *counters, u64 slack_b, u64 slack_s,
                   u64 *exact, u64 exact_cap) {
    phase1_walk<TOP_WL>(rho_b, rho_s, domains, count, domain_bits, packet, first_packet,
                        end_packet, e1, test, out_index, cap, counters, slack_b, slack_s, exact,
                        exact_cap);
}

// C(i0, m) for m < M, exact, as `binomials`, with the loop over m unrolled so that each
// division is by a compile-time constant (a multiplication after compilation).
template <int M>
__device__ __forceinline__ void binomials_const(u64 i0, u64 (*c)[BL]) {
#pragma unroll
    for (int k = 0; k < BL; k++) c[0][k] = 0;
    c[0][0] = 1;
#pragma unroll
    for (int m = 1; m < M; m++) {
        u64 t[BL];
        w_mul_small<BL>(t, c[m - 1], i0 - (u64)(m - 1));
        u64 rem = 0;
#pragma unroll
        for (int k = BL - 1; k >= 0; k--) {
            u64 hi = (rem << 32) | (t[k] >> 32);
            u64 qh = hi / (u64)m;
            rem = hi - qh * (u64)m;
            u64 lo = (rem << 32) | (t[k] & 0xffffffffull);
            u64 ql = lo / (u64)m;
            rem = lo - ql * (u64)m;
            c[m][k] = (qh << 32) | ql;
        }
    }
}

// The value at domain i of a walked polynomial: sum_m C(i, m) rho[m] mod 2^(64 L) (the
// differences `Generated::shift` gives, l = 0), from binomials computed by `binomials_const`.
template <int N>
__device__ __forceinline__ void value_at(u64 *out, const u64 *rho, const u64 (*c)[BL]) {
#pragma unroll
    for (int k = 0; k < L; k++) out[k] = 0;
#pragma unroll
    for (int m = 0; m < N; m++) {
        u64 r[L];
#pragma unroll
        for (int k = 0; k < L; k++) r[k] = __ldg(&rho[m * L + k]);
        w_mul_add<L>(out, c[m], r);
    }
}

// One thread per failed domain of phase 1: its b, slope and r2 words, exactly the values the
// walk holds at that domain, into the list's three fields.
extern "C" __global__ void tmd_phase1_words(const u64 *rho_b, const u64 *rho_s,
                                            const u64 *rho_r, const u64 *index, u64 *words,
                                            u64 cap, u64 n) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    u64 c[NB][BL];
    binomials_const<NB>(index[j], c);
    u64 w[L];
    value_at<NB>(w, rho_b, c);
#pragma unroll
    for (int k = 0; k < L; k++) words[(0 * L + k) * cap + j] = w[k];
    value_at<NS>(w, rho_s, c);
#pragma unroll
    for (int k = 0; k < L; k++) words[(1 * L + k) * cap + j] = w[k];
    value_at<NR>(w, rho_r, c);
#pragma unroll
    for (int k = 0; k < L; k++) words[(2 * L + k) * cap + j] = w[k];
}

// One thread per domain that the two-limb walk could not decide (tmd_phase1_top's `exact`
// list of n entries): its b and slope words exactly at its index, then the test; failures are
// appended to the phase-1 list as tmd_phase1 does.
extern "C" __global__ void tmd_phase1_exact(const u64 *rho_b, const u64 *rho_s,
                                            const u64 *exact, u64 n, u64 count,
                                            u32 domain_bits, u64 e1, int test, u64 *out_index,
                                            u64 cap, u64 *counters) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    u64 i = exact[j];
    u64 c[NB][BL];
    binomials_const<NB>(i, c);
    u64 wb[L], ws[L];
    value_at<NB>(wb, rho_b, c);
    value_at<NS>(ws, rho_s, c);
    u64 big_n = 1ull << domain_bits;
    u64 rest = count - i * big_n;
    u64 len = rest < big_n ? rest : big_n;
    if (!run_test(test, w_neg_floor64<L>(ws), w_ceil64<L>(wb), len, e1))
        emit_failure(i, out_index, cap, counters);
}

// ---------------------------------------------------------------- phase 1's quadratic screen

// search/existence/quadratic.rs line by line (docs/error-analysis.md §16): the arguments x < n whose
// line value (b - a x) mod 2^64 lies below e, found from a hit of the regular test's turns by
// the two return gaps of the three-gap structure, each checked against the domain's quadratic.
#define SCREEN_MAX_HITS 64u

struct Gap {
    u64 g, disp;
};

// search/existence/quadratic.rs `record`: the first of k single steps value -= step, index += w below e.
__device__ __forceinline__ void screen_record(Gap &gap, u64 value, u64 index, u64 step, u64 w,
                                              u64 k, u64 e) {
    if (gap.g != U64_MAX) return;
    u64 ks = sat_mul(k, step);
    u64 rest = value > ks ? value - ks : 0;
    if (rest >= e) return;
    u64 r;
    u64 j = divrem(value - e, step, &r) + 1;
    gap.g = sat_add(index, sat_mul(j, w));
    gap.disp = value - j * step;
}

// search/existence/quadratic.rs `capped_divrem`: x / y with its remainder (x >= y > 0), the quotient capped at
// ceil(rest / w) as `regular_general` caps its last one (ceil_div_ge), the remainder then
// x - k y.
__device__ __forceinline__ u64 capped_divrem(u64 x, u64 y, u64 w, u64 rest, u64 *rem) {
    u64 k = divrem(x, y, rem);
    if (ceil_div_ge(rest, w, k)) return k;
    k = div_ceil(rest, w);
    *rem = x - k * y;
    return k;
}

// search/existence/quadratic.rs `start`'s `done`: m = jp + jq points reached n, or b's gap holds a hit and both
// gaps are known.
__device__ __forceinline__ bool screen_done(u64 m, u64 n, u64 d, u64 e, const Gap &down,
                                            const Gap &up) {
    return m >= n || (d < e && down.g != U64_MAX && up.g != U64_MAX);
}

// search/existence/quadratic.rs `start`: 0 clear, 1 fail, 2 a hit (x, y) with the gaps. The regular test's
// turns (the first divides 2^64 by a, then the P- and Q-halves alternate with full partial
// quotients), with b's gap kept exactly: its lower point xd at d, and whether it is a Q-gap.
// For n < 2^31 (the host's pieces; the self-test's lengths) the counts jp, jq and xd stay below
// jp + jq < 2 n, so 32 bits hold them: the CPU's 64-bit values, fewer instructions (as in
// `regular`).
__device__ __forceinline__ int screen_start(u64 a, u64 b, u64 n, u64 e, u64 *x_out,
                                            u64 *y_out, Gap &down, Gap &up) {
    u64 q;
    u64 k = divrem(0ull - a, a, &q);
    u64 p = a, d;
    u32 jp = 1, jq = (u32)k + 1;
    u32 xd = (u32)divrem(b, a, &d);
    bool inq = xd == jq;
    down.g = U64_MAX;
    down.disp = 0;
    up.g = U64_MAX;
    up.disp = 0;
    if (p < e) {
        down.g = 1;
        down.disp = p;
    }
    if (0ull - a < e) {
        up.g = 1;
        up.disp = 0ull - a;
    }
    screen_record(up, 0ull - a, 1, a, 1, k, e);
    for (;;) {
        if (screen_done((u64)jp + jq, n, d, e, down, up)) break;
        if (q == 0) return 1;
        // P-gaps split: k new points each at p - j q, the last quotient capped at n points.
        u64 p1;
        k = capped_divrem(p, q, jq, (u32)n - jp - jq, &p1);
        screen_record(down, p, jp, q, jq, k, e);
        if (!inq && d >= p1) {
            u64 r;
            u32 i = (u32)divrem(d - p1, q, &r);
            d = r;
            xd += jp + ((u32)k - i) * jq;
        }
        p = p1;
        jp += (u32)k * jq;
        if (screen_done((u64)jp + jq, n, d, e, down, up)) break;
        if (p == 0) return 1;
        // Q-gaps split: k new points each at j p.
        u64 q1;
        k = capped_divrem(q, p, jp, (u32)n - jp - jq, &q1);
        screen_record(up, q, jq, p, jp, k, e);
        u64 kp = k * p;
        if (d >= kp) {
            d -= kp;
            xd += (u32)k * jp;
            inq = true;
        } else {
            u64 r;
            u32 i = (u32)divrem(d, p, &r);
            d = r;
            xd += i * jp;
            inq = false;
        }
        q = q1;
        jq += (u32)k * jp;
    }
    if (d >= e) return 0;
    if ((down.g != U64_MAX && down.disp == 0) || (up.g != U64_MAX && up.disp == 0)) return 1;
    *x_out = xd;
    *y_out = d;
    return 2;
}

// search/existence/quadratic.rs `next`: the next point forward (back = false) or backward; false past the ends.
__device__ __forceinline__ bool screen_next(u64 &x, u64 &y, Gap down, Gap up, u64 e, u64 n,
                                            bool back) {
    Gap lo = back ? up : down, hi = back ? down : up;
    bool can_lo = lo.g != U64_MAX && y >= lo.disp;
    bool can_hi = hi.g != U64_MAX && hi.disp < e - y;
    u64 g, ny;
    if (can_lo && (!can_hi || lo.g < hi.g)) {
        g = lo.g;
        ny = y - lo.disp;
    } else if (can_hi) {
        g = hi.g;
        ny = y + hi.disp;
    } else if (lo.g != U64_MAX && hi.g != U64_MAX) {
        g = sat_add(lo.g, hi.g);
        ny = hi.disp - (lo.disp - y);
    } else {
        return false;
    }
    if (back) {
        if (g > x) return false;
        x -= g;
    } else {
        u64 nx = sat_add(x, g);
        if (nx >= n) return false;
        x = nx;
    }
    y = ny;
    return true;
}

// search/phases.rs `quadratic_at` and `phase3_flags` on words of W limbs: 1 where the quadratic's top
// 64 bits T lie within t3 of an integer ((T + t3) mod 2^64 <= 2 t3), 0 where not. W < L (the
// two-limb walk): the words are the walked top limbs, and the host's `err` bounds how far the
// walked T can be from the true one at any x of the domain (kernels/src/cuda/piece.rs `screen_error`), so
// the answer is the true T's only where every T within `err` gives it; elsewhere 2 (undecided:
// the domain goes to the exact list). The host keeps t3 below 2^62 there.
template <int W>
struct QuadCheck {
    u64 r0[W], r1[W], r2[W];
    u64 t3, err;
    __device__ __forceinline__ int operator()(u64 x) const {
        u64 c2 = x * (x - 1) / 2;
        if (W > 1) {
            // The top limbs alone first: almost every point is far from
            // a breakpoint, and the full evaluation below is most of a step of the walk. The
            // W-limb value's top limb is T1 + delta with T1 the sum of the top limbs' products
            // mod 2^64 and 0 <= delta <= x + C(x, 2) + 1 (the carry out of the lower limbs:
            // r0's is below 1, r1's below x, r2's below C(x, 2)), so where T1 + t3 lies in
            // (2 t3 + err, 2^64 - 1 - err - x - C(x, 2) - 1] every such top limb gives 0 below,
            // without wrapping: the same answer (err = 0 for whole words of W = L limbs; t3
            // below 2^62 so that 2 t3 + err does not wrap either).
            u64 d1 = r0[W - 1] + r1[W - 1] * x + r2[W - 1] * c2 + t3;
            u64 slack = err + x + c2 + 1;
            if (t3 < (1ull << 62) && d1 > 2 * t3 + err && d1 <= ~slack) return 0;
        }
        u64 v[W], t[W];
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = r0[k];
        w_mul_small<W>(t, r1, x);
        w_add<W>(v, t);
        w_mul_small<W>(t, r2, c2);
        w_add<W>(v, t);
        u64 top = v[W - 1];
        if (W < L) {
            u64 d = top + t3, two = 2 * t3;
            if (d >= err && d <= two && two - d >= err) return 1;
            if (d > two && d - two > err && d <= ~err) return 0;
            return 2;
        }
        return (top <= t3 || top >= 0ull - t3) ? 1 : 0;
    }
    // search/phases.rs `domain_polynomial` from the walked b, slope, r2 and eps1's top W limbs.
    __device__ __forceinline__ void set(const u64 *b, const u64 *s, const u64 *r, const u64 *eps1,
                                        u64 k0, u64 k1) {
        u64 t[W];
#pragma unroll
        for (int k = 0; k < W; k++) r2[k] = r[k];
        w_mul_small<W>(t, r, k1);
        w_sub<W>(r1, s, t);
        w_sub<W>(r0, b, eps1);
        w_mul_small<W>(t, r, k0);
        w_add<W>(r0, t);
    }
};

// search/existence/quadratic.rs `screen_with` with MAX_HITS: 0 clear, 1 fail, 2 undecided (a check was).
// `check(x)` answers for each hit x < n as QuadCheck does (the self-test's HitSum counts them).
template <class Check>
__device__ __forceinline__ int screen(u64 a, u64 b, u64 n, u64 e, Check &check) {
    int f = flat(a, b, n, e);
    if (f >= 0) return f == 1 ? 0 : 1;
    u64 x0, y0;
    Gap down, up;
    int s = screen_start(a, b, n, e, &x0, &y0, down, up);
    if (s != 2) return s;
    u32 hits = 0;
    if (x0 < n) {
        hits++;
        int c = check(x0);
        if (c) return c;
    }
    // Forward from the first point, then backward from it, in one loop: the lanes of a warp
    // walk for the most points any lane has in all, not the most forward plus the most
    // backward (the walks' lengths vary from lane to lane).
    bool back = x0 >= n;
    u64 x = x0, y = y0;
#pragma unroll 1
    for (;;) {
        if (!screen_next(x, y, down, up, e, n, back)) {
            if (back) return 0;
            back = true;
            x = x0;
            y = y0;
            continue;
        }
        if (x < n) {
            hits++;
            if (hits > SCREEN_MAX_HITS) return 1;
            int c = check(x);
            if (c) return c;
        }
    }
}

// Phase 1 of a screened piece (Generated::quadratic): phase1_walk with r2 walked as well and
// the screen instead of the line test. WL = L: exact words (tmd_phase1_quad); WL = 2 < L
// (tmd_phase1_top_quad): the two-limb walk, a, b decided as there, and a domain whose screen is
// undecided (a point's check or a, b) goes to the `exact` list for tmd_phase1_exact_quad.
// consts: eps1 (L limbs) first.
template <int WL>
__device__ __forceinline__ void phase1_screen_walk(
    const u64 *rho_b, const u64 *rho_s, const u64 *rho_r, const u64 *consts, u64 domains,
    u64 count, u32 domain_bits, u64 packet, u64 first_packet, u64 end_packet, u64 e1, u64 k0,
    u64 k1, u64 t3, u64 *out_index, u64 cap, u64 *counters, u64 slack_b, u64 slack_s,
    u64 quad_err, u64 *exact, u64 exact_cap) {
    u64 u = first_packet + (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 lane = threadIdx.x & 31u;
    u64 u0 = u - lane;
    bool striped = TMD_STRIPE && NB <= STRIPE_MAX_N && u0 + 32 <= end_packet &&
                   (u0 + 32) * packet <= domains;
    u64 i0, i1, di;
    if (striped) {
        i0 = u0 * packet + lane;
        i1 = i0 + 32 * packet;
        di = 32;
    } else {
        if (u >= end_packet) return;
        i0 = u * packet;
        if (i0 >= domains) return;
        i1 = i0 + packet < domains ? i0 + packet : domains;
        di = 1;
    }
    u64 wb[NB][WL], ws[NS][WL], wr[NR][WL];
    if (striped) {
        striped_start<WL, true>(wb, ws, wr, u0 * packet, lane, rho_b, rho_s, rho_r);
    } else {
        u64 c[NB * BL], scratch[NB * L];
        binomials(i0, NB, c);
        shift_state(scratch, NB, rho_b, c);
        to_registers<NB, WL>(wb, scratch);
        shift_state(scratch, NS, rho_s, c);
        to_registers<NS, WL>(ws, scratch);
        shift_state(scratch, NR, rho_r, c);
        to_registers<NR, WL>(wr, scratch);
    }
    u64 eps1[WL];
#pragma unroll
    for (int k = 0; k < WL; k++) eps1[k] = consts[L - WL + k];
    u64 big_n = 1ull << domain_bits;
    QuadCheck<WL> check;
    check.t3 = t3;
    check.err = quad_err;
    for (u64 i = i0; i < i1; i += di) {
        u64 a, b;
        bool sure = true;
        if (WL == L) {
            a = w_neg_floor64<WL>(ws[0]);
            b = w_ceil64<WL>(wb[0]);
        } else {
            u64 lo_b = wb[0][WL - 2], lo_s = ws[0][WL - 2];
            sure = lo_b != 0 && lo_b <= ~slack_b && lo_s != 0 && lo_s <= ~slack_s;
            b = wb[0][WL - 1] + 1;
            a = ~ws[0][WL - 1];
        }
        u64 rest = count - i * big_n;
        u64 n = rest < big_n ? rest : big_n;
        int answer = 2;
        if (sure) {
            check.set(wb[0], ws[0], wr[0], eps1, k0, k1);
            answer = screen(a, b, n, e1, check);
        }
        if (answer == 2) {
            u64 j = atomicAdd(&counters[5], 1ull);
            if (j < exact_cap) exact[j] = i;
        } else if (answer == 1) {
            emit_failure(i, out_index, cap, counters);
        }
        step<NB, WL>(wb);
        step<NS, WL>(ws);
        step<NR, WL>(wr);
    }
}

extern "C" __global__ void __launch_bounds__(256, TMD_MINBLOCKS)
    tmd_phase1_quad(const u64 *rho_b, const u64 *rho_s, const u64 *rho_r, const u64 *consts,
                    u64 domains, u64 count, u32 domain_bits, u64 packet, u64 first_packet,
                    u64 end_packet, u64 e1, u64 k0, u64 k1, u64 t3, u64 *out_index, u64 cap,
                    u64 *counters) {
    phase1_screen_walk<L>(rho_b, rho_s, rho_r, consts, domains, count, domain_bits, packet,
                          first_packet, end_packet, e1, k0, k1, t3, out_index, cap, counters, 0,
                          0, 0, 0, 0);
}

// Blocks per multiprocessor of the screen's two-limb walk: it holds r2's table and the
// screen's state besides the line's, so more registers than tmd_phase1_top's cap.
#ifndef TMD_QUAD_MINBLOCKS
#define TMD_QUAD_MINBLOCKS 2
#endif
extern "C" __global__ void __launch_bounds__(256, TMD_QUAD_MINBLOCKS)
    tmd_phase1_top_quad(const u64 *rho_b, const u64 *rho_s, const u64 *rho_r,
                        const u64 *consts, u64 domains, u64 count, u32 domain_bits, u64 packet,
                        u64 first_packet, u64 end_packet, u64 e1, u64 k0, u64 k1, u64 t3,
                        u64 *out_index, u64 cap, u64 *counters, u64 slack_b, u64 slack_s,
                        u64 quad_err, u64 *exact, u64 exact_cap) {
    phase1_screen_walk<TOP_WL>(rho_b, rho_s, rho_r, consts, domains, count, domain_bits,
                               packet, first_packet, end_packet, e1, k0, k1, t3, out_index, cap,
                               counters, slack_b, slack_s, quad_err, exact, exact_cap);
}

// tmd_phase1_exact for a screened piece: exact words at each undecided domain, then the screen.
extern "C" __global__ void tmd_phase1_exact_quad(const u64 *rho_b, const u64 *rho_s,
                                                 const u64 *rho_r, const u64 *consts,
                                                 const u64 *exact, u64 n, u64 count,
                                                 u32 domain_bits, u64 e1, u64 k0, u64 k1,
                                                 u64 t3, u64 *out_index, u64 cap,
                                                 u64 *counters) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    u64 i = exact[j];
    u64 c[NB][BL];
    binomials_const<NB>(i, c);
    u64 wb[L], ws[L], wr[L];
    value_at<NB>(wb, rho_b, c);
    value_at<NS>(ws, rho_s, c);
    value_at<NR>(wr, rho_r, c);
    u64 big_n = 1ull << domain_bits;
    u64 rest = count - i * big_n;
    u64 len = rest < big_n ? rest : big_n;
    QuadCheck<L> check;
    check.t3 = t3;
    check.err = 0;
    check.set(wb, ws, wr, consts, k0, k1);
    if (screen(w_neg_floor64<L>(ws), w_ceil64<L>(wb), len, e1, check) != 0)
        emit_failure(i, out_index, cap, counters);
}

// ---------------------------------------------------------------- phase 2

// One thread per (failed domain, subdomain): search/phases.rs `domain_polynomial` and one iteration of
// `phase2_domain`. consts: eps1 (L limbs), then eps2 (L limbs). counters[1] counts subdomains,
// counters[2] failures, counters[3] their arguments. The output list holds at most
// `nfailed << kappa_bits` entries, which is its capacity: it cannot overflow.
// Blocks of phase 2 that must fit on a multiprocessor (cuda/compile.rs, PHASE2_MIN_BLOCKS: 4, i.e.
// at most 64 registers); 0 leaves its registers to the compiler (80 at 5 limbs, 37.5%
// occupancy on an H100).
#ifndef TMD_P2_MINBLOCKS
#define TMD_P2_MINBLOCKS 4
#endif
#if TMD_P2_MINBLOCKS > 0
#define TMD_P2_BOUNDS __launch_bounds__(256, TMD_P2_MINBLOCKS)
#else
#define TMD_P2_BOUNDS
#endif
extern "C" __global__ void TMD_P2_BOUNDS tmd_phase2(const u64 *in_index, const u64 *in_words, u64 in_cap,
                                      u64 nfailed, const u64 *consts, u64 k0, u64 k1,
                                      u64 k0_sub, u64 k1_sub, u64 e2, u32 domain_bits,
                                      u32 sub_bits, u64 count, int test, u64 *out_start,
                                      u64 *out_len, u64 *out_words, u64 out_cap,
                                      u64 *counters) {
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 kappa_bits = domain_bits - sub_bits;
    u64 j = t >> kappa_bits;
    if (j >= nfailed) return;
    u64 x0 = (t & ((1ull << kappa_bits) - 1)) << sub_bits;
    u64 index = in_index[j];
    u64 big_n = 1ull << domain_bits;
    u64 rest = count - index * big_n;
    u64 dom_len = rest < big_n ? rest : big_n;
    if (x0 >= dom_len) return;

    u64 wb[L], slope[L], r2[L];
#pragma unroll
    for (int k = 0; k < L; k++) {
        wb[k] = in_words[(0 * L + k) * in_cap + j];
        slope[k] = in_words[(1 * L + k) * in_cap + j];
        r2[k] = in_words[(2 * L + k) * in_cap + j];
    }
    // The line of the subdomain at x0 (search/phases.rs `domain_polynomial`, then `subdomain_line`):
    //   r1 = slope - K1 r2,  r0 = b - eps1 + K0 r2,
    //   s0 = r0 + r1 x0 + r2 C(x0, 2),  s1 = r1 + r2 x0,
    //   c0 = s0 - K0' r2 + eps2,  c1 = s1 + K1' r2,
    // seven products of a word by an integer. In the ring of words mod 2^(64 L) the same c0,
    // c1 are, with the integer factors of r2 gathered,
    //   c1 = slope + (x0 + K1' - K1) r2,
    //   c0 = b + (eps2 - eps1) + x0 slope + (K0 + C(x0, 2) - K0' - K1 x0) r2:
    // three products, and the same words bit for bit (an identity of the ring, no rounding).
    // s0 and s1, which phase 3 needs, are taken back from c0, c1 at the failing subdomains
    // alone (about one in a thousand). The factors are exact u64: x0 < 2^31 (domains of fewer
    // than 2^32 arguments), and the host checks K0, K0' <= 2^58 and K1, K1' < 2^31
    // (`check_supported`), so each sum of positive and of negative terms is below 2^63.
    u64 c0[L], c1[L], tmp[L];
#pragma unroll
    for (int k = 0; k < L; k++) {
        c0[k] = wb[k];
        c1[k] = slope[k];
    }
    {
        u64 up = x0 + k1_sub, down = k1;
        w_mul_small<L>(tmp, r2, up >= down ? up - down : down - up);
        if (up >= down) w_add<L>(c1, tmp);
        else w_sub<L>(c1, c1, tmp);
    }
    w_mul_small<L>(tmp, slope, x0);
    w_add<L>(c0, tmp);
    {
        u64 up = k0 + x0 * (x0 > 0 ? x0 - 1 : 0) / 2, down = k0_sub + k1 * x0;
        w_mul_small<L>(tmp, r2, up >= down ? up - down : down - up);
        if (up >= down) w_add<L>(c0, tmp);
        else w_sub<L>(c0, c0, tmp);
    }
    {
        u64 eps1[L], eps2[L];
#pragma unroll
        for (int k = 0; k < L; k++) {
            eps1[k] = consts[k];
            eps2[k] = consts[L + k];
        }
        w_sub<L>(tmp, eps2, eps1);
        w_add<L>(c0, tmp);
    }
    u64 n_sub = 1ull << sub_bits;
    u64 len = dom_len - x0 < n_sub ? dom_len - x0 : n_sub;
    atomicAdd(&counters[1], 1ull);
    if (!run_test(test, w_neg_floor64<L>(c1), w_ceil64<L>(c0), len, e2)) {
        u64 o = atomicAdd(&counters[2], 1ull);
        atomicAdd(&counters[3], len);
        if (o < out_cap) {
            // s1 = c1 - K1' r2, s0 = c0 + K0' r2 - eps2: the words of the seven-product form.
            u64 s0[L], s1[L];
            w_mul_small<L>(tmp, r2, k1_sub);
            w_sub<L>(s1, c1, tmp);
            w_mul_small<L>(tmp, r2, k0_sub);
#pragma unroll
            for (int k = 0; k < L; k++) s0[k] = c0[k];
            w_add<L>(s0, tmp);
#pragma unroll
            for (int k = 0; k < L; k++) tmp[k] = consts[L + k];
            w_sub<L>(s0, s0, tmp);
            out_start[o] = index * big_n + x0;
            out_len[o] = len;
#pragma unroll
            for (int k = 0; k < L; k++) {
                out_words[(0 * L + k) * out_cap + o] = s0[k];
                out_words[(1 * L + k) * out_cap + o] = s1[k];
                out_words[(2 * L + k) * out_cap + o] = r2[k];
            }
        }
    }
}

// ---------------------------------------------------------------- phase 3

// One thread per chunk of 2^chunk_bits arguments of a failed subdomain (2^chunk_shift chunks
// per subdomain): exact start value and difference at the chunk (mod 2^F the ring arithmetic
// gives the same words as walking from the subdomain start), then every argument.
// Candidates (offsets in the piece) are appended through counters[4]; entries past `cap` are
// counted but not written.
extern "C" __global__ void tmd_phase3(const u64 *in_start, const u64 *in_len,
                                      const u64 *in_words, u64 in_cap, u64 nsubs,
                                      u32 chunk_shift, u32 chunk_bits, u64 t3, u64 *out,
                                      u64 cap, u64 *counters) {
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 j = t >> chunk_shift;
    if (j >= nsubs) return;
    u64 y0 = (t & ((1ull << chunk_shift) - 1)) << chunk_bits;
    u64 len = in_len[j];
    if (y0 >= len) return;
    u64 y1 = y0 + (1ull << chunk_bits) < len ? y0 + (1ull << chunk_bits) : len;
    u64 start = in_start[j];
    u64 v[L], d[L], s2[L], tmp[L];
#pragma unroll
    for (int k = 0; k < L; k++) {
        v[k] = in_words[(0 * L + k) * in_cap + j];
        d[k] = in_words[(1 * L + k) * in_cap + j];
        s2[k] = in_words[(2 * L + k) * in_cap + j];
    }
    // v = s0 + s1 y0 + s2 C(y0, 2), d = s1 + s2 y0
    w_mul_small<L>(tmp, d, y0);
    w_add<L>(v, tmp);
    w_mul_small<L>(tmp, s2, y0 * (y0 > 0 ? y0 - 1 : 0) / 2);
    w_add<L>(v, tmp);
    w_mul_small<L>(tmp, s2, y0);
    w_add<L>(d, tmp);
    u64 low = t3, high = 0ull - t3;
    for (u64 y = y0; y < y1; y++) {
        u64 top = w_floor64<L>(v);
        if (top <= low || top >= high) {
            u64 o = atomicAdd(&counters[4], 1ull);
            if (o < cap) out[o] = start + y;
        }
        w_add<L>(v, d);
        w_add<L>(d, s2);
    }
}

// ---------------------------------------------------------------- dense walk

// The longest difference table a dense walk takes: degree 16 (search/dense.rs DENSE_MAX_DEGREE).
#define DW 17

// A narrowed walk (search/narrow.rs): the chunk's first K differences, cut to their top two
// limbs (the exact words' limbs L-2 and L-1), walked over [y0, y1) against the widened
// threshold. Keeps what search/narrow.rs `walk` keeps from the same exact start.
#if L >= 2
template <int K>
__device__ __forceinline__ void narrow_walk(const u64 *exact, u64 y0, u64 y1, u64 low, u64 high,
                                            u64 p, u64 *out, u64 cap, u64 *counters) {
    u64 w[2 * K];
#pragma unroll
    for (int m = 0; m < K; m++) {
        w[2 * m] = exact[m * L + L - 2];
        w[2 * m + 1] = exact[m * L + L - 1];
    }
    // With 1 <= low < 2^32 - 1 a kept T has its top half 0 or 2^32 - 1: one 32-bit test an
    // offset, the two 64-bit comparisons only where it passes. The count fits 32 bits.
    const bool small = low >= 1ull && low < 0xffffffffull;
    const u32 n = (u32)(y1 - y0);
    for (u32 i = 0; i < n; i++) {
        u64 top = w[1];
        if (!small || (u32)(top >> 32) + 1u <= 1u) {
            if (top <= low || top >= high) {
                u64 o = atomicAdd(&counters[0], 1ull);
                if (o < cap) out[o] = (p << 32) | (y0 + i);
            }
        }
#pragma unroll
        for (int m = 0; m < K - 1; m++) w_add<2>(w + 2 * m, w + 2 * m + 2);
    }
}
#endif

// The progression route's pieces (search/progression.rs), walked as search/dense.rs `walk`
// walks them on the host: one thread per chunk of 2^chunk_bits offsets of a piece, thread t0 + i
// for the launch's i-th. Its start differences are exact (sum_m C(t0, m) beta[l + m] mod
// 2^(64 L), `shift_state`), then at every offset t the top 64 bits T of R~(t) are compared
// with the piece's threshold (kept when T <= thr or T >= 2^64 - thr) and every difference
// advanced (ascending, each reads the old one above it): the words are R~'s exactly mod 1, as
// the host's, so the kept offsets are the host's. beta holds DW packed words per piece (word
// l, limb k at [(p DW + l) L + k]); piece p owns the chunks [first[p], first[p + 1]).
// narrow[p] > 0 walks the piece narrowed (narrow_walk, its first narrow[p] differences)
// against thr[p], then the widened threshold. NARROW_ONLY leaves the pieces walked exactly to
// another launch: without their wide words the thread needs a third of the registers, so
// three times the warps fit on a multiprocessor. Kept offsets are appended as (p << 32) | t
// through counters[0]; entries past `cap` are counted but not written.
template <bool NARROW_ONLY>
__device__ __forceinline__ void dense_walk_thread(u64 t, const u64 *beta, const u64 *count,
                                                  const u64 *first, const u32 *degree,
                                                  const u32 *narrow, const u64 *thr, u64 pieces,
                                                  u32 chunk_bits, u64 *out, u64 cap,
                                                  u64 *counters) {
    if (t >= first[pieces]) return;
    // The piece whose chunks hold t: the last p with first[p] <= t.
    u64 lo = 0, hi = pieces;
    while (hi - lo > 1) {
        u64 mid = (lo + hi) / 2;
        if (first[mid] <= t) lo = mid;
        else hi = mid;
    }
    u64 p = lo;
#if L >= 2
    int k = (int)narrow[p];
#else
    int k = 0;
#endif
    if (NARROW_ONLY && k == 0) return;
    u64 y0 = (t - first[p]) << chunk_bits;
    u64 n_args = count[p];
    if (y0 >= n_args) return;
    u64 y1 = n_args - y0 > (1ull << chunk_bits) ? y0 + (1ull << chunk_bits) : n_args;
    int n = (int)degree[p] + 1;
    u64 c[DW * BL];
    u64 scratch[DW * L];
    binomials(y0, n, c);
    u64 low = thr[p], high = 0ull - thr[p];
#if L >= 2
    // Narrowed (search/narrow.rs): only the first K exact differences are needed.
    if (k > 0) {
#pragma unroll 1
        for (int l = 0; l < k; l++) shifted_word(scratch + l * L, n, l, beta + p * DW * L, c);
        switch (k) {
        case 1: narrow_walk<1>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 2: narrow_walk<2>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 3: narrow_walk<3>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 4: narrow_walk<4>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 5: narrow_walk<5>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 6: narrow_walk<6>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 7: narrow_walk<7>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 8: narrow_walk<8>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 9: narrow_walk<9>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 10: narrow_walk<10>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 11: narrow_walk<11>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        case 12: narrow_walk<12>(scratch, y0, y1, low, high, p, out, cap, counters); return;
        default: break;
        }
    }
#endif
    if (NARROW_ONLY) return;
    shift_state(scratch, n, beta + p * DW * L, c);
    // Into registers: every index below is a constant once the loops are unrolled.
    u64 w[DW * L];
#pragma unroll
    for (int x = 0; x < DW * L; x++) w[x] = x < n * L ? scratch[x] : 0;
    for (u64 y = y0; y < y1; y++) {
        u64 top = w_floor64<L>(w);
        if (top <= low || top >= high) {
            u64 o = atomicAdd(&counters[0], 1ull);
            if (o < cap) out[o] = (p << 32) | y;
        }
#pragma unroll
        for (int m = 0; m < DW - 1; m++)
            if (m + 1 < n) w_add<L>(w + m * L, w + (m + 1) * L);
    }
}

// Every piece, narrowed or not (kernels/src/cuda/walk.rs launches it on the exact ones).
extern "C" __global__ void __launch_bounds__(256, 1)
    tmd_dense_walk(const u64 *beta, const u64 *count, const u64 *first, const u32 *degree,
                   const u32 *narrow, const u64 *thr, u64 pieces, u32 chunk_bits, u64 t0,
                   u64 *out, u64 cap, u64 *counters) {
    dense_walk_thread<false>(t0 + (u64)blockIdx.x * blockDim.x + threadIdx.x, beta, count, first,
                             degree, narrow, thr, pieces, chunk_bits, out, cap, counters);
}

// The narrowed pieces only (a thread of an exact piece returns at once): 3 blocks of 256 a
// multiprocessor, about 72 registers a thread without spills at sm_90 (ptxas -v), against one
// block at about 180 for tmd_dense_walk.
extern "C" __global__ void __launch_bounds__(256, 3)
    tmd_narrow_walk(const u64 *beta, const u64 *count, const u64 *first, const u32 *degree,
                    const u32 *narrow, const u64 *thr, u64 pieces, u32 chunk_bits, u64 t0,
                    u64 *out, u64 cap, u64 *counters) {
    dense_walk_thread<true>(t0 + (u64)blockIdx.x * blockDim.x + threadIdx.x, beta, count, first,
                            degree, narrow, thr, pieces, chunk_bits, out, cap, counters);
}

// ---------------------------------------------------------------- self-test kernels

// 64-bit products: lo and hi of x[i] * y[i].
extern "C" __global__ void tmd_selftest_mul(const u64 *x, const u64 *y, u64 *lo, u64 *hi,
                                            u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    lo[i] = x[i] * y[i];
    hi[i] = __umul64hi(x[i], y[i]);
}

// Quotients and remainders through `divrem` (the kernels' method), y[i] > 0.
extern "C" __global__ void tmd_selftest_div(const u64 *x, const u64 *y, u64 *q, u64 *r, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 rem;
    q[i] = divrem(x[i], y[i], &rem);
    r[i] = rem;
}

// Word arithmetic at this module's L: a + b, a - b, a * m, a * b (mod 2^(64 L)), the 64-bit
// reads, and C(i, m) mod 2^(64 L); words packed (entry i at [i * L + k]), out holds 4 words
// then 3 reads per entry.
extern "C" __global__ void tmd_selftest_words(const u64 *a, const u64 *b, const u64 *m,
                                              u64 *out, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 wa[L], wb[L], s[L], d[L], p[L], pr[L];
#pragma unroll
    for (int k = 0; k < L; k++) {
        wa[k] = a[i * L + k];
        wb[k] = b[i * L + k];
        s[k] = wa[k];
        pr[k] = 0;
    }
    w_add<L>(s, wb);
    w_sub<L>(d, wa, wb);
    w_mul_small<L>(p, wa, m[i]);
    w_mul_add<L>(pr, wa, wb);
    u64 *o = out + i * (4 * L + 3);
#pragma unroll
    for (int k = 0; k < L; k++) {
        o[k] = s[k];
        o[L + k] = d[k];
        o[2 * L + k] = p[k];
        o[3 * L + k] = pr[k];
    }
    o[4 * L] = w_floor64<L>(wa);
    o[4 * L + 1] = w_ceil64<L>(wa);
    o[4 * L + 2] = w_neg_floor64<L>(wa);
}

// Exact binomials C(i[j], m) for m = 0..12 (BL limbs each).
extern "C" __global__ void tmd_selftest_binomial(const u64 *i0, u64 *out, u64 n) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    u64 c[13 * BL];
    binomials(i0[j], 13, c);
    for (int m = 0; m < 13 * BL; m++) out[j * 13 * BL + m] = c[m];
}

// The self-test's check of the screen: every hit x < n counted and summed, none flagged.
struct HitSum {
    u64 count, sum;
    __device__ __forceinline__ int operator()(u64 x) {
        count++;
        sum += x;
        return 0;
    }
};

// Both existence tests and `flat`: out[3 i] = regular, out[3 i + 1] = Lefevre,
// out[3 i + 2] = flat (0, 1, or 2 for none). The quadratic screen's hits (docs/error-analysis.md
// §16) with nothing flagged: hits[3 i] its answer (0 clear, 1 fail), hits[3 i + 1] how many it
// visited, hits[3 i + 2] their sum mod 2^64 (cuda/selftest.rs compares them with the CPU's).
extern "C" __global__ void tmd_selftest_tests(const u64 *a, const u64 *b, const u64 *n,
                                              const u64 *e, u32 *out, u64 *hits, u64 count) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    out[3 * i] = regular(a[i], b[i], n[i], e[i]) ? 1 : 0;
    out[3 * i + 1] = lefevre(a[i], b[i], n[i], e[i]) ? 1 : 0;
    int f = flat(a[i], b[i], n[i], e[i]);
    out[3 * i + 2] = f < 0 ? 2 : (u32)f;
    HitSum visit = {0, 0};
    hits[3 * i] = (u64)screen(a[i], b[i], n[i], e[i], visit);
    hits[3 * i + 1] = visit.count;
    hits[3 * i + 2] = visit.sum;
}
