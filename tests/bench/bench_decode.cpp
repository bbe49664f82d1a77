// CPU decode speed of an in-RAM model against the memory-bandwidth bound
// measured in the same run: tokens/s x weight bytes read per token, divided
// by the read bandwidth of a large tensor sum. Also prefill speed, and the
// offload policies (accelerate-like: no prefetch; prefetch) for a map that
// sends half the layers to disk.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/planner.h"
#include "stowage/runtime.h"

#include <QTemporaryDir>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>

using namespace stowage;
using clk = std::chrono::steady_clock;

double readBandwidthBytesPerSecond(); // bench_bandwidth.cpp (LibTorch)

namespace {

struct Result {
    double prefillTokS, decodeTokS;
};

Result measure(const std::string& dir, DType dt, const LoadOptions& base, int prompt, int steps)
{
    Checkpoint ck = Checkpoint::open(dir);
    ModuleTree tree = buildModuleTree(ck, dt);
    LoadOptions lo = base;
    lo.dtype = dt;
    auto m = Model::load(ck, tree, lo);
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int i = 0; i < prompt; ++i)
        ids[size_t(i)] = (i * 37) % 1000;
    SamplingOptions so;
    so.maxNewTokens = 3;
    generate(*m, ids, so); // warm-up
    so.maxNewTokens = steps;
    GenerationResult r = generate(*m, ids, so);
    return {double(prompt) / r.prefillSeconds, r.decodeTokensPerSecond()};
}

} // namespace

int main(int, char** argv)
{
    // As stowage-cli does before loading LibTorch (see app/cli/main.cpp); for a
    // process linked with LibTorch the variable must be there before start.
    if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
        setenv("GOMP_SPINCOUNT", "5000", 1);
        execv("/proc/self/exe", argv);
    }
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/llama-400m";
    std::filesystem::create_directories(dir);
    // ~437 MB in fp32: hidden 1024, 6 layers, vocab 16000, untied.
    fixtures::LlamaShape s{16000, 1024, 2816, 6, 16, 16, false};
    fixtures::writeRandomSafetensors(dir + "/model.safetensors", fixtures::llamaTensors(s, DType::F32), 5, 0.03f);
    fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(s, DType::F32));
    Checkpoint ck = Checkpoint::open(dir);
    const ModuleTree t32 = buildModuleTree(ck, DType::F32);
    // Every weight but the input embedding is read once per token (the
    // embedding is a row lookup).
    const uint64_t embed = t32.modules()[size_t(t32.find("model.embed_tokens"))].bytes;

    const double bw = readBandwidthBytesPerSecond();
    std::printf("read bandwidth (sum over a 1 GiB tensor): %.1f GB/s\n", bw / 1e9);
    std::printf("%-10s %10s %14s %14s %12s %10s\n", "dtype", "weights", "prefill tok/s", "decode tok/s", "bound tok/s",
                "of bound");
    bool ok = true;
    for (DType dt : {DType::F32, DType::BF16}) {
        const uint64_t perToken = (t32.root().bytes - embed) / (dt == DType::F32 ? 1 : 2);
        Result r = measure(dir, dt, LoadOptions{}, 128, 32);
        const double bound = bw / double(perToken);
        std::printf("%-10s %8.0f MB %14.1f %14.2f %12.2f %9.0f%%\n", dtypeTorchName(dt), double(perToken) / 1e6,
                    r.prefillTokS, r.decodeTokS, bound, 100.0 * r.decodeTokS / bound);
        ok = ok && r.decodeTokS >= 0.5 * bound;
    }

    // Offload: half the layers on disk, read from the page cache each token.
    LoadOptions off;
    PlanOptions po;
    po.strategy = Strategy::Sequential;
    po.maxMemory = Budgets{{Device::cpu(), double(t32.root().bytes) * 0.55}};
    off.deviceMap = planDeviceMap(t32, po).deviceMap;
    off.offloadFolder = tmp.path().toStdString() + "/offload";
    off.policy = ExecutionPolicy::AccelerateLike;
    Result accel = measure(dir, DType::F32, off, 16, 16);
    off.policy = ExecutionPolicy::Prefetch;
    Result pre = measure(dir, DType::F32, off, 16, 16);
    std::printf("half on disk, fp32: accelerate-like %.2f tok/s, prefetch %.2f tok/s (x%.2f)\n", accel.decodeTokS,
                pre.decodeTokS, pre.decodeTokS / accel.decodeTokS);
    std::printf("%s\n", ok ? "decode within bound (>= 50% of bandwidth)" : "DECODE BELOW 50% OF THE BANDWIDTH BOUND");
    return ok ? 0 : 1;
}
