// Pattern fill and verify: integrity checks for bytes that cupool moves around.
//
// The pattern (identical in cupool/kernels/reference.py, the NumPy twin):
//
//   mix(z)   = splitmix64 finaliser:  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//                                     z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
//   key      = mix(mix(mix(seed) ^ buffer_id) ^ iteration)
//   word(w)  = mix(key + (w + 1) * 0x9E3779B97F4A7C15)      (the (w+1)-th splitmix64 output)
//   byte(i)  = (word(i / 8) >> (8 * (i % 8))) & 0xFF         (little-endian bytes of the word)
//
// All arithmetic is modulo 2**64. Byte i depends only on (seed, buffer_id, iteration, i),
// so any byte can be checked on its own. A launch covers pattern bytes
// [start, start + nbytes) stored at dst[0 .. nbytes): `start` lets a caller fill or check
// a piece of a buffer with the bytes the whole buffer would hold there.
//
// Launch: any 1-D grid and block (the loops are grid-stride over pattern words); verify
// needs blockDim.x to be a multiple of 32 and at most 1024 (block reduction).

#define CUPOOL_GOLDEN 0x9E3779B97F4A7C15ULL

__device__ __forceinline__ unsigned long long cupool_mix(unsigned long long z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
}

__device__ __forceinline__ unsigned long long cupool_key(unsigned long long seed,
                                                         unsigned long long buffer_id,
                                                         unsigned long long iteration) {
    return cupool_mix(cupool_mix(cupool_mix(seed) ^ buffer_id) ^ iteration);
}

__device__ __forceinline__ unsigned long long cupool_word(unsigned long long key,
                                                          unsigned long long w) {
    return cupool_mix(key + (w + 1ULL) * CUPOOL_GOLDEN);
}

// Writes pattern bytes [start, start + nbytes) to dst[0 .. nbytes).
extern "C" __global__ void cupool_pattern_fill(unsigned char* dst, unsigned long long nbytes,
                                               unsigned long long start,
                                               unsigned long long seed,
                                               unsigned long long buffer_id,
                                               unsigned long long iteration) {
    if (nbytes == 0) return;
    const unsigned long long key = cupool_key(seed, buffer_id, iteration);
    const unsigned long long first_word = start / 8ULL;
    const unsigned long long last_word = (start + nbytes - 1ULL) / 8ULL;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long w = first_word + (unsigned long long)blockIdx.x * blockDim.x
                                + threadIdx.x;
         w <= last_word; w += stride) {
        const unsigned long long value = cupool_word(key, w);
        const unsigned long long word_start = w * 8ULL;  // pattern index of the word's byte 0
        if (word_start >= start && word_start + 8ULL <= start + nbytes) {
            unsigned char* out = dst + (word_start - start);
            if (((unsigned long long)out & 7ULL) == 0ULL) {
                *reinterpret_cast<unsigned long long*>(out) = value;
                continue;
            }
        }
        for (unsigned int b = 0; b < 8; ++b) {
            const unsigned long long i = word_start + b;
            if (i >= start && i < start + nbytes) {
                dst[i - start] = (unsigned char)(value >> (8 * b));
            }
        }
    }
}

// Counts bytes of src[0 .. nbytes) that differ from pattern bytes [start, start + nbytes).
// Adds the count to *mismatches (atomicAdd, once per block after a block reduction) and
// lowers *first_mismatch (atomicMin) to the smallest mismatching index into src; the
// caller initialises *mismatches = 0 and *first_mismatch = ~0ULL (no mismatch).
extern "C" __global__ void cupool_pattern_verify(const unsigned char* src,
                                                 unsigned long long nbytes,
                                                 unsigned long long start,
                                                 unsigned long long seed,
                                                 unsigned long long buffer_id,
                                                 unsigned long long iteration,
                                                 unsigned long long* mismatches,
                                                 unsigned long long* first_mismatch) {
    __shared__ unsigned long long warp_counts[32];
    unsigned long long count = 0ULL;
    unsigned long long first = ~0ULL;
    if (nbytes != 0ULL) {
        const unsigned long long key = cupool_key(seed, buffer_id, iteration);
        const unsigned long long first_word = start / 8ULL;
        const unsigned long long last_word = (start + nbytes - 1ULL) / 8ULL;
        const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        for (unsigned long long w = first_word + (unsigned long long)blockIdx.x * blockDim.x
                                    + threadIdx.x;
             w <= last_word; w += stride) {
            const unsigned long long value = cupool_word(key, w);
            const unsigned long long word_start = w * 8ULL;
            const unsigned char* in = src + (word_start - start);
            if (word_start >= start && word_start + 8ULL <= start + nbytes
                && ((unsigned long long)in & 7ULL) == 0ULL) {
                // One bit per differing byte (bit 0 of each byte lane), then popcount.
                unsigned long long x = *reinterpret_cast<const unsigned long long*>(in) ^ value;
                x |= x >> 4;
                x |= x >> 2;
                x |= x >> 1;
                x &= 0x0101010101010101ULL;
                if (x != 0ULL) {
                    count += (unsigned long long)__popcll(x);
                    const unsigned long long lane = (unsigned long long)(__ffsll(x) - 1) / 8ULL;
                    const unsigned long long index = word_start - start + lane;
                    first = index < first ? index : first;
                }
                continue;
            }
            for (unsigned int b = 0; b < 8; ++b) {
                const unsigned long long i = word_start + b;
                if (i >= start && i < start + nbytes
                    && src[i - start] != (unsigned char)(value >> (8 * b))) {
                    count += 1ULL;
                    first = (i - start) < first ? (i - start) : first;
                }
            }
        }
    }
    // Block reduction: warp shuffles, then the first warp sums the per-warp totals.
    for (int offset = 16; offset > 0; offset >>= 1) {
        count += __shfl_down_sync(0xFFFFFFFFu, count, offset);
        const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, first, offset);
        first = other < first ? other : first;
    }
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    if (lane == 0u) warp_counts[warp] = count;
    __syncthreads();
    if (warp == 0u) {
        const unsigned int warps = (blockDim.x + 31u) >> 5;
        count = lane < warps ? warp_counts[lane] : 0ULL;
        for (int offset = 16; offset > 0; offset >>= 1) {
            count += __shfl_down_sync(0xFFFFFFFFu, count, offset);
        }
        if (lane == 0u && count != 0ULL) atomicAdd(mismatches, count);
    }
    if (lane == 0u && first != ~0ULL) atomicMin(first_mismatch, first);
}
