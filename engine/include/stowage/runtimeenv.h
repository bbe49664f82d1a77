#pragma once
// The environment LibTorch's thread pools and its BLAS read once, when they
// load: set before the runtime is loaded (stowage-cli sets it before it
// dlopens the runtime plugin; a program linked with LibTorch sets it and
// executes itself again). Free of LibTorch, like every public header.
#include <string>
#include <vector>

namespace stowage {

// What prepareRuntimeEnvironment() sets where the user has set nothing
// (NAME=value each), for this CPU. A variable the user set is left alone:
//  - GOMP_SPINCOUNT=5000 (unless OMP_WAIT_POLICY is set): LibTorch's OpenMP
//    threads spin a short while after each parallel region, not ~300 ms.
//  - OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS's threads sleep right after a prefill
//    matrix product instead of spinning with sched_yield for ~0.1 s beside
//    decode's own GEMV threads (on 2 cores the bundled demo decoded at
//    500-900 tok/s with them spinning, 2,000-2,600 without; docs/PERFORMANCE.md).
//  - OPENBLAS_CORETYPE=SkylakeX on a CPU with AVX-512 F/CD/BW/DQ/VL: OpenBLAS
//    0.3.21 picks its kernels by CPU model, and one it does not know gets
//    "Prescott" (SSE3) kernels; a 200-token prefill of a 424 MB fp32 Llama
//    took 1.0-1.2 s with them and 0.34-0.37 s with SkylakeX's.
std::vector<std::string> runtimeEnvironment();
// Sets runtimeEnvironment() in this process's environment; true when it set
// anything (a program already linked with LibTorch then executes itself
// again for it to take effect).
bool prepareRuntimeEnvironment();

// Fixes glibc's malloc thresholds for this process, once (the runtime calls
// it when it loads a model; a no-op elsewhere, or where the user set
// GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_):
//  - mmap threshold 32 MiB, the largest glibc's dynamic threshold reaches
//    on 64-bit: an allocation up to 32 MiB comes from the heap;
//  - trim threshold 512 MiB: freed heap stays for the next allocation
//    rather than going back to the kernel (an unload still trims it,
//    malloc_trim).
// Left dynamic, the two move with the process's earlier allocations, and
// accelerate-like's copies of disk weights (a new tensor every token) land
// either in reused memory or in fresh pages faulted in at the VM's 0.5 GB/s:
// a 440 MB Llama half on disk ran 4.7-16.1 tok/s in five runs (an AMD EPYC
// VM, 2026-12-08), and 31-35 with these thresholds; the other policies ran
// the same either way (docs/PERFORMANCE.md). Returns whether it set them.
bool pinAllocator();

} // namespace stowage
