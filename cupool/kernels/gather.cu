// Gather / compaction: copy segments inside one arena, used when a replan moves live blocks.
//
// Segment k copies arena[src_offsets[k] .. + nbytes[k]) to arena[dst_offsets[k] .. + nbytes[k]).
// All segments are copied concurrently, so the result is defined only when no destination
// range overlaps another destination or any source range (sources may overlap each other).
// The Python wrapper (cupool.kernels.gather) checks that rule, and the arena bounds, before
// launching; a move onto an overlapping place needs two launches through a scratch area.
//
// Launch: a 1-D grid of any size (blocks take segments in a grid-stride loop) and a 1-D
// block (its threads share a segment's bytes). A segment whose source address, destination
// address and length are all multiples of 8 is copied in 8-byte words, else byte by byte.

extern "C" __global__ void cupool_gather(unsigned char* arena,
                                         const unsigned long long* src_offsets,
                                         const unsigned long long* dst_offsets,
                                         const unsigned long long* nbytes,
                                         unsigned long long segments) {
    for (unsigned long long k = blockIdx.x; k < segments; k += gridDim.x) {
        const unsigned char* src = arena + src_offsets[k];
        unsigned char* dst = arena + dst_offsets[k];
        const unsigned long long n = nbytes[k];
        if ((((unsigned long long)src | (unsigned long long)dst | n) & 7ULL) == 0ULL) {
            const unsigned long long* src_words = reinterpret_cast<const unsigned long long*>(src);
            unsigned long long* dst_words = reinterpret_cast<unsigned long long*>(dst);
            for (unsigned long long w = threadIdx.x; w < n / 8ULL; w += blockDim.x) {
                dst_words[w] = src_words[w];
            }
        } else {
            for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) {
                dst[i] = src[i];
            }
        }
    }
}
