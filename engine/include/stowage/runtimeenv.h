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

} // namespace stowage
