// Spin: keep one GPU thread busy for a given time, to replay an op's duration on a stream.
//
// cupool_spin_ns reads %globaltimer, the GPU's nanosecond wall clock. Its resolution is
// set by the driver (commonly 32 ns to 1 us), so a spin lasts at least `ns` and at most
// about one timer tick more; the clock does not change with the SM clock.
//
// cupool_spin_cycles is the fallback: it counts SM clock cycles with clock64(), which is
// precise but runs at the current SM clock, so cycles = ns * clock_rate_khz / 10**6 is
// only as exact as the clock the GPU actually runs at (boost and throttling move it).
// The Python wrapper uses it when asked to (clock="cycles").
//
// Launch both with one block of one thread. When `elapsed` is not null the kernel
// stores the time it spun there (nanoseconds, or cycles for the fallback).

extern "C" __global__ void cupool_spin_ns(unsigned long long ns, unsigned long long* elapsed) {
    unsigned long long begin;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(begin));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - begin < ns);
    if (elapsed != nullptr) *elapsed = now - begin;
}

extern "C" __global__ void cupool_spin_cycles(unsigned long long cycles,
                                              unsigned long long* elapsed) {
    const long long begin = clock64();
    long long now;
    do {
        now = clock64();
    } while ((unsigned long long)(now - begin) < cycles);
    if (elapsed != nullptr) *elapsed = (unsigned long long)(now - begin);
}
