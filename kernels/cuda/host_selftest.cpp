// The device self-test's existence-test kernel on the host (kernels/src/cuda/host.rs): reads
// count and the inputs a, b, n, e (u64, native order) from argv[1], runs tmd_selftest_tests
// for every index as its thread would, and writes out (3 u32 per case) then hits (3 u64 per
// case) to argv[2].
#include "host_shim.h"
#include <cstdio>
#include <vector>
#include "tmd.cu"

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    FILE *in = std::fopen(argv[1], "rb");
    if (!in) return 2;
    u64 count = 0;
    if (std::fread(&count, 8, 1, in) != 1) return 2;
    std::vector<u64> a(count), b(count), n(count), e(count);
    for (auto *v : {&a, &b, &n, &e})
        if (std::fread(v->data(), 8, count, in) != count) return 2;
    std::fclose(in);
    std::vector<u32> out(3 * count);
    std::vector<u64> hits(3 * count);
    blockDim.x = 256;
    for (u64 i = 0; i < count; i++) {
        blockIdx.x = (unsigned)(i / 256);
        threadIdx.x = (unsigned)(i % 256);
        tmd_selftest_tests(a.data(), b.data(), n.data(), e.data(), out.data(), hits.data(), count);
    }
    FILE *o = std::fopen(argv[2], "wb");
    if (!o) return 2;
    std::fwrite(out.data(), 4, out.size(), o);
    std::fwrite(hits.data(), 8, hits.size(), o);
    return std::fclose(o) == 0 ? 0 : 2;
}
