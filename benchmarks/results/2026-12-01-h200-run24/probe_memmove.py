"""Is the copy of a host input's rows into the staging ring slower on some hosts because the ring is cold?
Median ns of one ctypes.memmove of a 6 KB source (bf16 [3, 1024]) and of a 24 B one (int64 [3]) into:
16 ring-sized pinned slots taken in turn (as the ring does), one hot pinned buffer, one pageable buffer."""
import ctypes, time
import torch

SLOT = 136 * 1024  # about the bench's ring buffer
ring = torch.zeros(16 * SLOT, dtype=torch.uint8, pin_memory=True)
hot = torch.zeros(SLOT, dtype=torch.uint8, pin_memory=True)
pageable = torch.zeros(16 * SLOT, dtype=torch.uint8)
big, small = torch.zeros(3, 1024, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.int64)


def median_ns(fn, calls=20000):
    for _ in range(500):
        fn()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def rotating(dst, src, nbytes):
    turn = [0]
    base, addr = dst.data_ptr(), src.data_ptr()

    def call():
        ctypes.memmove(base + (turn[0] % 16) * SLOT + 4096, addr, nbytes)
        turn[0] += 1
    return call


print(open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0])
for name, src in (("6 KB", big), ("24 B", small)):
    n = src.numel() * src.element_size()
    print(f"{name}: ring of 16 pinned slots {median_ns(rotating(ring, src, n))} ns, one hot pinned buffer "
          f"{median_ns(lambda: ctypes.memmove(hot.data_ptr() + 4096, src.data_ptr(), n))} ns, 16 pageable slots "
          f"{median_ns(rotating(pageable, src, n))} ns", flush=True)
