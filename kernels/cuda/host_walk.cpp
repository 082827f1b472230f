// The dense walk's kernels on the host (kernels/src/cuda/host.rs): reads pieces, chunk_bits, the
// narrowed pieces' threads and the inputs of tmd_dense_walk (u64, native order; degrees and
// narrowings as u64) from argv[1], runs tmd_narrow_walk on the narrowed threads and
// tmd_dense_walk on the others, every thread of each launch's blocks as the device would
// (walk.rs), and writes the number of kept entries then the entries to argv[2]. Compiled
// with -DTMD_L for the words' width.
#include "host_shim.h"
#include <cstdio>
#include <vector>
#include "tmd.cu"

static bool read(FILE *f, std::vector<u64> &v, u64 n) {
    v.resize(n);
    return n == 0 || std::fread(v.data(), 8, n, f) == n;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    FILE *in = std::fopen(argv[1], "rb");
    if (!in) return 2;
    u64 head[3];
    if (std::fread(head, 8, 3, in) != 3) return 2;
    u64 pieces = head[0];
    u32 chunk_bits = (u32)head[1];
    u64 narrowed = head[2];
    std::vector<u64> beta, count, first, degree64, narrow64, thr;
    if (!read(in, beta, pieces * DW * L) || !read(in, count, pieces) ||
        !read(in, first, pieces + 1) || !read(in, degree64, pieces) ||
        !read(in, narrow64, pieces) || !read(in, thr, pieces))
        return 2;
    std::fclose(in);
    std::vector<u32> degree(degree64.begin(), degree64.end());
    std::vector<u32> narrow(narrow64.begin(), narrow64.end());
    u64 cap = 1 << 22;
    std::vector<u64> out(cap);
    u64 counters[1] = {0};
    blockDim.x = 256;
    // Whole blocks, as launched: the last block's threads past the launch's range run too.
    auto whole = [](u64 n) { return (n + 255) / 256 * 256; };
    for (u64 i = 0; i < whole(narrowed); i++) {
        blockIdx.x = (unsigned)(i / 256);
        threadIdx.x = (unsigned)(i % 256);
        tmd_narrow_walk(beta.data(), count.data(), first.data(), degree.data(), narrow.data(),
                        thr.data(), pieces, chunk_bits, 0, out.data(), cap, counters);
    }
    u64 rest = first[pieces] > narrowed ? first[pieces] - narrowed : 0;
    for (u64 i = 0; i < whole(rest); i++) {
        blockIdx.x = (unsigned)(i / 256);
        threadIdx.x = (unsigned)(i % 256);
        tmd_dense_walk(beta.data(), count.data(), first.data(), degree.data(), narrow.data(),
                       thr.data(), pieces, chunk_bits, narrowed, out.data(), cap, counters);
    }
    FILE *o = std::fopen(argv[2], "wb");
    if (!o) return 2;
    std::fwrite(counters, 8, 1, o);
    std::fwrite(out.data(), 8, counters[0] < cap ? counters[0] : cap, o);
    return std::fclose(o) == 0 ? 0 : 2;
}
