// The cost model's formulas, one per link a weight byte can cross, checked
// against hand-computed datasheet figures; presets, profile JSON and the
// self-test of this machine.
#include "fixtures.h"
#include "costfixtures.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/runtimeenv.h"

#include <QtTest>

#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <dlfcn.h>

#include <chrono>
#include <functional>

using namespace stowage;
using fixtures::errorOf;
using fixtures::kGB;
using fixtures::near;
using fixtures::Placement;
using fixtures::profileWith;

namespace {

const DeviceShare* shareOf(const CostEstimate& e, Device d)
{
    for (const auto& s : e.devices)
        if (s.device == d)
            return &s;
    return nullptr;
}

Placement split(uint64_t gpu, uint64_t cpu) { return {{Device::gpu(0), gpu}, {Device::cpu(), cpu}}; }

} // namespace

// Slots are declared here and defined below: moc misreads raw strings in a class body.
class TestCostModel : public QObject {
    Q_OBJECT
private slots:
    void allGpuIsBytesOverHbmBandwidth();
    void computeBoundWhenFlopsDominate();
    void cpuOffloadCostsPageableCopy();
    void policiesOrderAsExpected();
    void prefetchCopiesOverlapResidentCompute();
    void cpuOnlyUsesRamBandwidth();
    void cpuStreamsAtItsGemvRate();
    void diskIsSlowest();
    void diskFromWarmPageCache();
    void cpuReadsDiskInPlace();
    void sharesSumToOneInDeviceOrder();
    void emptyPlacementIsZero();
    void gpuBeyondProfileCostsLikeLast();
    void gpuWithoutProfileGpuIsAssumed();
    void presetsResolve();
    void multiGpuPresetAndTimesAdd();
    void unknownPresetNamesIt();
    void jsonRoundTrip();
    void jsonErrors();
    void runtimeEnvironmentLeavesTheUsersAlone();
    void pinnedAllocatorKeepsCopiesInTheHeap();
    void measuresThisMachinePlausibly();
    void timesFileReads();
    void detectsMachineMemory();
};

void TestCostModel::allGpuIsBytesOverHbmBandwidth()
{
    const uint64_t bytes = 14 * kGB;
    auto e = estimateDecode({{Device::gpu(0), bytes}}, 2 * 7 * kGB, hardwarePreset("h100-80gb"));
    QVERIFY2(near(e.secondsPerToken, double(bytes) / 3.35e12), qPrintable(QString::number(e.secondsPerToken)));
    QVERIFY(near(e.tokensPerSecond, 3.35e12 / double(bytes)));
    QCOMPARE(e.devices.size(), size_t(1));
    QCOMPARE(e.devices[0].bottleneck, std::string("HBM read"));
    QCOMPARE(e.devices[0].weightBytes, bytes);
    QCOMPARE(e.devices[0].share, 1.0);
}

void TestCostModel::computeBoundWhenFlopsDominate()
{
    // 1 byte per 1e6 FLOPs: far past the H100's ridge point (~300 FLOP/byte).
    auto e = estimateDecode({{Device::gpu(0), kGB}}, 1'000'000 * kGB, hardwarePreset("h100-80gb"));
    QCOMPARE(e.devices[0].bottleneck, std::string("compute"));
    QVERIFY(near(e.secondsPerToken, 1e15 / 989e12));
}

void TestCostModel::cpuOffloadCostsPageableCopy()
{
    const auto p = hardwarePreset("h100-80gb");
    const uint64_t gpu = 10 * kGB, cpu = 4 * kGB;
    auto allGpu = estimateDecode({{Device::gpu(0), gpu + cpu}}, 0, p);
    auto offload = estimateDecode(split(gpu, cpu), 0, p, ExecutionPolicy::AccelerateLike);
    // Each step copies the CPU part over PCIe (pageable), then reads it from HBM.
    const double extra = double(cpu) / 20e9;
    QVERIFY2(near(offload.secondsPerToken, allGpu.secondsPerToken + extra),
             qPrintable(QString("%1 vs %2").arg(offload.secondsPerToken).arg(allGpu.secondsPerToken + extra)));
    const DeviceShare* c = shareOf(offload, Device::cpu());
    QVERIFY(c);
    QCOMPARE(c->bottleneck, std::string("PCIe pageable copy"));
    QVERIFY(near(c->seconds, double(cpu) / 20e9 + double(cpu) / 3.35e12));
}

void TestCostModel::policiesOrderAsExpected()
{
    // RTX 4090 host: pageable 12 GB/s < pinned 24 GB/s < RAM 50 GB/s.
    const auto p = hardwarePreset("rtx4090");
    const uint64_t cpu = 6 * kGB;
    auto seconds = [&](ExecutionPolicy policy) {
        return shareOf(estimateDecode(split(20 * kGB, cpu), 0, p, policy), Device::cpu())->seconds;
    };
    const double accelerate = seconds(ExecutionPolicy::AccelerateLike);
    const double prefetch = seconds(ExecutionPolicy::Prefetch);
    const double where = seconds(ExecutionPolicy::ComputeWhereItLives);
    QVERIFY(prefetch < accelerate);
    QVERIFY(near(accelerate, double(cpu) / 12e9 + double(cpu) / 1008e9));
    QVERIFY(near(prefetch, double(cpu) / 24e9)); // copy overlaps the HBM read
    QVERIFY(near(where, double(cpu) / 50e9));    // the CPU reads its own RAM
    auto pe = estimateDecode(split(20 * kGB, cpu), 0, p, ExecutionPolicy::Prefetch);
    QCOMPARE(shareOf(pe, Device::cpu())->bottleneck, std::string("PCIe pinned copy"));
    auto we = estimateDecode(split(20 * kGB, cpu), 0, p, ExecutionPolicy::ComputeWhereItLives);
    QCOMPARE(shareOf(we, Device::cpu())->bottleneck, std::string("RAM read"));
}

void TestCostModel::prefetchCopiesOverlapResidentCompute()
{
    // GPU 0: 20 GB resident, read at 100 GB/s (0.2 s); 6 GB in RAM, copied at
    // 50 GB/s pinned (0.12 s) and read there (0.06 s). One layer ahead, the
    // runtime copies the next offloaded layer while the resident ones run:
    // with one 6 GB layer the copy hides under the resident compute
    // (0.2 + 0.06); with six of 1 GB only the first one's copy does
    // (0.2 + 0.12 - (0.02 - 0.01)); the layer size unknown, only each
    // copied layer's own compute (0.2 + 0.12).
    auto p = hardwarePreset("rtx4090");
    p.gpus[0].memoryBandwidth = 100e9;
    p.gpus[0].h2dPinned = 50e9;
    const Placement pl = split(20 * kGB, 6 * kGB);
    auto seconds = [&](ExecutionPolicy policy, uint64_t unit) {
        return estimateDecode(pl, 0, p, policy, unit).secondsPerToken;
    };
    QVERIFY(near(seconds(ExecutionPolicy::Prefetch, 0), 0.2 + 0.12));
    QVERIFY(near(seconds(ExecutionPolicy::Prefetch, 6 * kGB), 0.2 + 0.06));
    QVERIFY(near(seconds(ExecutionPolicy::Prefetch, kGB), 0.2 + 0.12 - 0.01));
    // Copy-bound: 60 GB in RAM take 1.2 s to copy, the GPU's reads 0.8 s
    // (0.2 resident, 0.6 copied). As one 60 GB layer, its copy for the next
    // token starts once it has run, so its own 0.6 s overlap nothing: 1.8 s.
    // As sixty layers of 1 GB, the copies follow the resident compute but
    // for one layer's copy beyond its compute: 0.2 + 1.2 - (1.2 - 0.6) / 60.
    QVERIFY(near(estimateDecode(split(20 * kGB, 60 * kGB), 0, p, ExecutionPolicy::Prefetch, 60 * kGB).secondsPerToken,
                 1.8));
    QVERIFY(near(estimateDecode(split(20 * kGB, 60 * kGB), 0, p, ExecutionPolicy::Prefetch, kGB).secondsPerToken,
                 1.4 - 0.6 / 60));
    // Accelerate-like copies before each layer runs: nothing overlaps.
    QVERIFY(near(seconds(ExecutionPolicy::AccelerateLike, 6 * kGB), seconds(ExecutionPolicy::AccelerateLike, 0)));
    // Shares still split the per-device times.
    const auto e = estimateDecode(pl, 0, p, ExecutionPolicy::Prefetch, 6 * kGB);
    QVERIFY(near(shareOf(e, Device::gpu(0))->share + shareOf(e, Device::cpu())->share, 1.0));
}

void TestCostModel::cpuOnlyUsesRamBandwidth()
{
    const auto p = hardwarePreset("t4");
    auto e = estimateDecode({{Device::cpu(), 5 * kGB}}, 10 * kGB, p, ExecutionPolicy::AccelerateLike);
    QVERIFY(near(e.secondsPerToken, 5e9 / 50e9));
    QCOMPARE(e.devices[0].bottleneck, std::string("RAM read"));
    // CPU-bound when FLOPs outrun the 1 TFLOP/s host.
    auto c = estimateDecode({{Device::cpu(), kGB}}, 1000 * kGB, p);
    QCOMPARE(c.devices[0].bottleneck, std::string("compute"));
    QVERIFY(near(c.secondsPerToken, 1e12 / 1e12));
}

void TestCostModel::cpuStreamsAtItsGemvRate()
{
    // T4 host: 50 GB/s RAM. A measured fp32 GEMV rate below that is what CPU
    // decoding streams; the dtype is read off bytes per parameter.
    auto p = hardwarePreset("t4");
    p.gpus.clear();
    p.cpuGemvF32 = 10e9;
    p.cpuGemvBf16 = 40e9;
    const uint64_t bytes = 4 * kGB;
    // fp32: 1e9 parameters (2e9 FLOPs) in 4 GB
    QVERIFY(near(estimateDecode({{Device::cpu(), bytes}}, 2 * kGB, p).secondsPerToken, 4e9 / 10e9));
    // bf16: 2e9 parameters in 4 GB
    QVERIFY(near(estimateDecode({{Device::cpu(), bytes}}, 4 * kGB, p).secondsPerToken, 4e9 / 40e9));
    // a rate above the RAM read does not make RAM faster
    p.cpuGemvBf16 = 80e9;
    QVERIFY(near(estimateDecode({{Device::cpu(), bytes}}, 4 * kGB, p).secondsPerToken, 4e9 / 50e9));
    // unknown FLOPs (0): the RAM read alone
    QVERIFY(near(estimateDecode({{Device::cpu(), bytes}}, 0, p).secondsPerToken, 4e9 / 50e9));
}

void TestCostModel::diskIsSlowest()
{
    // 63 GB on the host side of a 64 GB preset: the page cache cannot hold the
    // disk part, so every token reads it from the drive (3 GB/s).
    const auto p = hardwarePreset("a100-80gb");
    const uint64_t b = 3 * kGB, onDisk = 60 * kGB;
    Placement pl = {{Device::gpu(0), b}, {Device::cpu(), b}, {Device::disk(), onDisk}};
    for (auto policy : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives}) {
        auto e = estimateDecode(pl, 0, p, policy);
        const double g = shareOf(e, Device::gpu(0))->seconds;
        const double c = shareOf(e, Device::cpu())->seconds;
        const double d = shareOf(e, Device::disk())->seconds;
        QVERIFY(g < c);
        QVERIFY(c < d);
        if (policy == ExecutionPolicy::ComputeWhereItLives) {
            // The CPU reads faster than PCIe copies (the RAM part computes on
            // it: no copy), so the disk part is read in place from its mapping,
            // the kernel reading ahead: the drive alone, the reads beside it.
            QCOMPARE(shareOf(e, Device::cpu())->bottleneck, std::string("RAM read"));
            QVERIFY(near(d, double(onDisk) / 3e9));
        } else {
            // Disk bytes pass through RAM: the drive read plus the
            // RAM-resident cost of as many bytes (linear: 20x the CPU part's).
            QVERIFY(near(d, double(onDisk) / 3e9 + c * 20));
        }
        QCOMPARE(shareOf(e, Device::disk())->bottleneck, std::string("disk read"));
        QVERIFY(e.assumptions.empty());
    }
}

void TestCostModel::diskFromWarmPageCache()
{
    // 6 GB on the host side of 64 GB: after the first token the page cache
    // holds the disk part; copying it out costs a RAM copy (half the RAM read
    // rate when the profile has no page-cache figure), not the drive.
    auto p = hardwarePreset("a100-80gb");
    const uint64_t b = 3 * kGB;
    Placement pl = {{Device::gpu(0), b}, {Device::cpu(), b}, {Device::disk(), b}};
    auto e = estimateDecode(pl, 0, p, ExecutionPolicy::AccelerateLike);
    const double c = shareOf(e, Device::cpu())->seconds;
    QVERIFY(near(shareOf(e, Device::disk())->seconds, 3e9 / 25e9 + c));
    p.pageCacheReadBandwidth = 10e9;
    e = estimateDecode(pl, 0, p, ExecutionPolicy::AccelerateLike);
    QVERIFY(near(shareOf(e, Device::disk())->seconds, 3e9 / 10e9 + c));
    QCOMPARE(shareOf(e, Device::disk())->bottleneck, std::string("page-cache read"));
}

void TestCostModel::cpuReadsDiskInPlace()
{
    // CPU only (T4 host: 50 GB/s RAM, 3 GB/s drive, 64 GB). Prefetch reads
    // disk weights in place from the mapping: warm, a RAM read; cold, the
    // drive's read overlapping compute. Accelerate-like copies them first.
    auto p = hardwarePreset("t4");
    p.gpus.clear();
    p.pageCacheReadBandwidth = 20e9;
    const Placement pl = {{Device::cpu(), kGB}, {Device::disk(), 2 * kGB}};
    auto disk = [&](ExecutionPolicy policy) { return *shareOf(estimateDecode(pl, 0, p, policy), Device::disk()); };
    QVERIFY(near(disk(ExecutionPolicy::Prefetch).seconds, 2e9 / 50e9));
    QCOMPARE(disk(ExecutionPolicy::Prefetch).bottleneck, std::string("RAM read"));
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 20e9 + 2e9 / 50e9));
    // Copies into fresh memory, where measured slower, cost that rate.
    p.freshCopyBandwidth = 1e9;
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 1e9 + 2e9 / 50e9));
    QCOMPARE(disk(ExecutionPolicy::AccelerateLike).bottleneck, std::string("copy into fresh memory"));
    QVERIFY(near(disk(ExecutionPolicy::Prefetch).seconds, 2e9 / 50e9)); // in place: no copy at all
    // The runtime's own copies, timed by `stowage-cli hardware`, win over the
    // fresh-pages figure; another policy's timing does not apply.
    p.fixedCosts["prefetch"].copyBandwidth = 8e9;
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 1e9 + 2e9 / 50e9));
    p.fixedCosts["accelerate-like"].copyBandwidth = 4e9;
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 4e9 + 2e9 / 50e9));
    // never faster than a copy out of the page cache
    p.fixedCosts["accelerate-like"].copyBandwidth = 40e9;
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 20e9 + 2e9 / 50e9));
    // Timed at three sizes: 256 KiB at 4 GB/s, 4 MiB at 16 GB/s (reused
    // memory), 8 MiB at 1 GB/s (fresh pages). Between two sizes, seconds per
    // byte on the size's logarithm: 1 MiB is half way from 256 KiB to 4 MiB
    // (16 = 4^2), 1 / (0.5 / 4e9 + 0.5 / 16e9) = 6.4 GB/s; beyond the ends,
    // the nearest size's rate.
    FixedCosts two;
    two.copyBandwidth = 1e9;
    two.copyRates = {{256 << 10, 4e9}, {4 << 20, 16e9}, {8 << 20, 1e9}};
    QVERIFY(near(acceleratedCopyRate(two, 100'000), 4e9));
    QVERIFY(near(acceleratedCopyRate(two, 256 << 10), 4e9));
    QVERIFY(near(acceleratedCopyRate(two, 1 << 20), 6.4e9));
    QVERIFY(near(acceleratedCopyRate(two, 4 << 20), 16e9));
    QVERIFY(near(acceleratedCopyRate(two, 6 << 20), 1.0 / ((1 - std::log2(1.5)) / 16e9 + std::log2(1.5) / 1e9)));
    QVERIFY(near(acceleratedCopyRate(two, 64 << 20), 1e9));
    FixedCosts one = two;
    one.copyRates.clear(); // timed on one size only: its rate for all
    QVERIFY(near(acceleratedCopyRate(one, 100'000), 1e9));
    // The step's disk weights by size: 1 GB of 100 kB weights and 1 GB of
    // 8 MiB ones copy in 0.25 + 1 s, 1.6 GB/s over the 2 GB.
    p.fixedCosts["accelerate-like"] = two;
    StepUnits units;
    units.diskWeights = {{100'000, kGB}, {8 << 20, kGB}};
    const DeviceShare mixed = *shareOf(estimateDecode(pl, 0, p, ExecutionPolicy::AccelerateLike, 0, units), Device::disk());
    QVERIFY(near(mixed.seconds, 2e9 / 1.6e9 + 2e9 / 50e9));
    // Weights above glibc's largest mmap threshold (32 MiB) are mapped
    // afresh each time: the profile's fresh-pages rate (1 GB/s above), not
    // the largest timed size's. 1 GB of 100 kB weights and 1 GB of 64 MiB
    // ones: 0.25 + 1 s.
    p.fixedCosts["accelerate-like"].copyRates = {{256 << 10, 4e9}, {4 << 20, 16e9}};
    units.diskWeights = {{100'000, kGB}, {64 << 20, kGB}};
    const DeviceShare huge = *shareOf(estimateDecode(pl, 0, p, ExecutionPolicy::AccelerateLike, 0, units), Device::disk());
    QVERIFY(near(huge.seconds, 2e9 / 1.6e9 + 2e9 / 50e9));
    units.diskWeights = {{100'000, kGB}, {32 << 20, kGB}}; // 32 MiB itself may be reused: the timed 16 GB/s
    const DeviceShare edge = *shareOf(estimateDecode(pl, 0, p, ExecutionPolicy::AccelerateLike, 0, units), Device::disk());
    QVERIFY(near(edge.seconds, 2e9 / (2e9 / (1e9 / 4e9 + 1e9 / 16e9)) + 2e9 / 50e9));
    p.fixedCosts["accelerate-like"] = two;
    // Without them (a placement alone), the rate timed on the larger weights.
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 1e9 + 2e9 / 50e9));
    p.fixedCosts.clear();
    p.freshCopyBandwidth = 0;
    p.ramBytes = 2 * kGB; // 3 GB do not fit: cold
    QVERIFY(near(disk(ExecutionPolicy::Prefetch).seconds, 2e9 / 3e9));
    QCOMPARE(disk(ExecutionPolicy::Prefetch).bottleneck, std::string("disk read"));
    QVERIFY(near(disk(ExecutionPolicy::ComputeWhereItLives).seconds, 2e9 / 3e9));
    QVERIFY(near(disk(ExecutionPolicy::AccelerateLike).seconds, 2e9 / 3e9 + 2e9 / 50e9));
}

void TestCostModel::sharesSumToOneInDeviceOrder()
{
    // Out of order, a duplicate and an empty device: merged, sorted, dropped.
    Placement pl = {{Device::disk(), kGB}, {Device::gpu(1), 5 * kGB}, {Device::cpu(), 2 * kGB},
                    {Device::gpu(0), 4 * kGB}, {Device::gpu(1), kGB},  {Device::gpu(2), 0}};
    auto e = estimateDecode(pl, 26 * kGB, hardwarePreset("2xa100-40gb"));
    QCOMPARE(e.devices.size(), size_t(4));
    QVERIFY(e.devices[0].device == Device::gpu(0));
    QVERIFY(e.devices[1].device == Device::gpu(1));
    QCOMPARE(e.devices[1].weightBytes, 6 * kGB);
    QVERIFY(e.devices[2].device == Device::cpu());
    QVERIFY(e.devices[3].device == Device::disk());
    double shares = 0, seconds = 0;
    for (const auto& d : e.devices) {
        QVERIFY(d.share > 0);
        shares += d.share;
        seconds += d.seconds;
    }
    QVERIFY(std::abs(shares - 1.0) < 1e-12);
    QVERIFY(near(seconds, e.secondsPerToken));
}

void TestCostModel::emptyPlacementIsZero()
{
    auto e = estimateDecode({{Device::gpu(0), 0}}, 100, hardwarePreset("l4"));
    QCOMPARE(e.secondsPerToken, 0.0);
    QCOMPARE(e.tokensPerSecond, 0.0);
    QVERIFY(e.devices.empty());
}

void TestCostModel::gpuBeyondProfileCostsLikeLast()
{
    auto e = estimateDecode({{Device::gpu(3), 2 * kGB}}, 0, hardwarePreset("l4"));
    QVERIFY(near(e.secondsPerToken, 2e9 / 300e9));
    // ...and says so, naming the GPU it stood in for
    QCOMPARE(e.assumptions.size(), size_t(1));
    QVERIFY2(e.assumptions[0].find("GPU 3: not in the profile") == 0, e.assumptions[0].c_str());
    QVERIFY2(e.assumptions[0].find("costed like GPU 0 (NVIDIA L4") != std::string::npos, e.assumptions[0].c_str());
}

void TestCostModel::gpuWithoutProfileGpuIsAssumed()
{
    // Every plan gets a prediction: a map with GPUs on a machine without any
    // is costed on a named, modest PCIe 4.0 card (500 GB/s, 24/12 GB/s copies).
    HardwareProfile p = hardwarePreset("t4");
    p.gpus.clear();
    p.name = "box";
    CostEstimate e;
    QVERIFY(errorOf([&] { e = estimateDecode({{Device::gpu(0), kGB}}, 0, p); }).isEmpty());
    QVERIFY(near(e.secondsPerToken, 1e9 / 500e9));
    QCOMPARE(e.assumptions.size(), size_t(1));
    QVERIFY2(e.assumptions[0].find("GPU 0: the profile 'box' has no GPU; costed as an assumed PCIe 4.0 GPU") == 0,
             e.assumptions[0].c_str());
    // offloaded RAM weights cross its 12 GB/s pageable link under Accelerate's hooks
    e = estimateDecode(split(kGB, kGB), 0, p, ExecutionPolicy::AccelerateLike);
    QVERIFY(near(shareOf(e, Device::cpu())->seconds, 1e9 / 12e9 + 1e9 / 500e9));
    // ...but a CPU-only placement assumes nothing.
    QVERIFY(estimateDecode({{Device::cpu(), kGB}}, 0, p).assumptions.empty());
}

void TestCostModel::presetsResolve()
{
    const auto names = hardwarePresetNames();
    QCOMPARE(names.size(), size_t(9));
    for (const auto& n : names) {
        HardwareProfile p;
        QVERIFY2(errorOf([&] { p = hardwarePreset(n); }).isEmpty(), n.c_str());
        QVERIFY2(p.ramBandwidth > 0 && p.diskReadBandwidth > 0 && p.cpuFlops > 0, n.c_str());
        QCOMPARE(p.simulated, n != "this-machine");
        if (n != "this-machine")
            QCOMPARE(p.gpus.size(), size_t(1));
        for (const auto& g : p.gpus)
            QVERIFY2(g.memoryBandwidth > 0 && g.h2dPinned > g.h2dPageable && g.flops > 0, n.c_str());
    }
    QCOMPARE(hardwarePreset("h200").gpus[0].memoryBytes, uint64_t(141) * kGB);
    QCOMPARE(hardwarePreset("H200").name, hardwarePreset("h200").name); // case-insensitive
}

void TestCostModel::multiGpuPresetAndTimesAdd()
{
    const auto p = hardwarePreset("2xh100-80gb");
    QCOMPARE(p.gpus.size(), size_t(2));
    QCOMPARE(p.gpus[1].name, p.gpus[0].name);
    QVERIFY(p.name.find("2x") == 0);
    QCOMPARE(hardwarePreset("8xrtx3090").gpus.size(), size_t(8));
    // Split across two identical GPUs, run one after the other: no faster.
    auto one = estimateDecode({{Device::gpu(0), 20 * kGB}}, 0, p);
    auto two = estimateDecode({{Device::gpu(0), 10 * kGB}, {Device::gpu(1), 10 * kGB}}, 0, p);
    QVERIFY(near(one.secondsPerToken, two.secondsPerToken));
    QCOMPARE(two.devices.size(), size_t(2));
}

void TestCostModel::unknownPresetNamesIt()
{
    QVERIFY(errorOf([] { hardwarePreset("h900"); }).contains("unknown hardware preset 'h900'"));
    QVERIFY(errorOf([] { hardwarePreset("2xfoo"); }).contains("'2xfoo'"));
    QVERIFY(errorOf([] { hardwarePreset("0xh200"); }).contains("1 to 64"));
    QVERIFY(errorOf([] { hardwarePreset(""); }).contains("unknown hardware preset"));
}

void TestCostModel::jsonRoundTrip()
{
    for (const char* name : {"2xrtx4090", "t4", "h200"}) {
        const auto p = hardwarePreset(name);
        const auto q = profileFromJson(profileToJson(p), "p.json");
        QCOMPARE(q.name, p.name);
        QCOMPARE(q.simulated, p.simulated);
        QCOMPARE(q.ramBytes, p.ramBytes);
        QCOMPARE(q.ramBandwidth, p.ramBandwidth);
        QCOMPARE(q.diskReadBandwidth, p.diskReadBandwidth);
        QCOMPARE(q.cpuFlops, p.cpuFlops);
        QCOMPARE(q.sources, p.sources);
        QVERIFY2(p.sources.find("datasheet") != std::string::npos, p.sources.c_str());
        QCOMPARE(q.gpus.size(), p.gpus.size());
        for (size_t i = 0; i < p.gpus.size(); ++i) {
            QCOMPARE(q.gpus[i].name, p.gpus[i].name);
            QCOMPARE(q.gpus[i].memoryBytes, p.gpus[i].memoryBytes);
            QCOMPARE(q.gpus[i].memoryBandwidth, p.gpus[i].memoryBandwidth);
            QCOMPARE(q.gpus[i].h2dPinned, p.gpus[i].h2dPinned);
            QCOMPARE(q.gpus[i].h2dPageable, p.gpus[i].h2dPageable);
            QCOMPARE(q.gpus[i].flops, p.gpus[i].flops);
        }
        QCOMPARE(profileToJson(q), profileToJson(p));
    }
    // A hand-written profile: float byte counts accepted, "simulated" optional.
    const auto h = profileFromJson(profileWith("memoryBytes", "2.4e10"), "h.json");
    QCOMPARE(h.gpus[0].memoryBytes, 24 * kGB);
    QCOMPARE(h.simulated, false);
    QCOMPARE(h.ramBandwidth, 5e10);
}

void TestCostModel::jsonErrors()
{
    auto err = [](const std::string& text) { return errorOf([&] { profileFromJson(text, "hw.json"); }); };
    QVERIFY(err(profileWith("", "")).isEmpty()); // the base profile is valid
    QVERIFY(err("{\"name\": ").startsWith("hw.json: not valid JSON"));
    QVERIFY(err(profileWith("ramBandwidth", "1e999")).startsWith("hw.json: not valid JSON")); // not an internal error
    QVERIFY(err("[1, 2]").contains("hardware profile must be a JSON object"));
    QVERIFY(err(R"({"name": "x", "ramBytes": 1, "diskReadBandwidth": 1, "cpuFlops": 1, "gpus": []})")
                .contains("missing field \"ramBandwidth\""));
    QVERIFY(err(profileWith("ramBandwidth", "-5e10")).contains("\"ramBandwidth\" must be positive, got -50000000000"));
    QVERIFY(err(profileWith("ramBandwidth", "0")).contains("\"ramBandwidth\" must be positive"));
    QVERIFY(err(profileWith("ramBandwidth", "\"fast\"")).contains("\"ramBandwidth\" must be a number"));
    QVERIFY(err(profileWith("memoryBandwidth", "-1")).contains("gpus[0] field \"memoryBandwidth\" must be positive"));
    QVERIFY(err(profileWith("h2dPageable", "null")).contains("gpus[0] field \"h2dPageable\" must be a number"));
    QVERIFY(err(profileWith("memoryBytes", "-1")).contains("\"memoryBytes\" must be a non-negative whole number"));
    QVERIFY(err(profileWith("ramBytes", "1.5")).contains("\"ramBytes\" must be a non-negative whole number"));
    QVERIFY(err(profileWith("name", "3")).contains("field \"name\" must be a string"));
    QVERIFY(err(profileWith("gpus", "{}")).contains("field \"gpus\" must be an array"));
    QVERIFY(err(profileWith("gpus", "[7]")).contains("gpus[0] must be a JSON object"));
    QVERIFY(err(profileWith("cpuFlops", "1e12, \"ramBandwith\": 1")).contains("unknown field \"ramBandwith\""));
    QVERIFY(err(profileWith("cpuFlops", "1e12, \"simulated\": 1")).contains("\"simulated\" must be true or false"));
}

void TestCostModel::runtimeEnvironmentLeavesTheUsersAlone()
{
    const char* names[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_CORETYPE"};
    std::vector<QByteArray> before;
    for (const char* n : names) {
        before.push_back(qgetenv(n));
        qunsetenv(n);
    }
    // The CPU's flags as the kernel lists them, not as the code under test asks.
    QFile info("/proc/cpuinfo");
    QVERIFY(info.open(QIODevice::ReadOnly));
    QSet<QString> flags;
    for (const QByteArray& line : info.readAll().split('\n'))
        if (line.startsWith("flags")) {
            for (const QString& f : QString::fromLatin1(line.mid(line.indexOf(':') + 1)).split(' ', Qt::SkipEmptyParts))
                flags.insert(f);
            break;
        }
    const bool avx512 = flags.contains("avx512f") && flags.contains("avx512cd") && flags.contains("avx512bw") &&
                        flags.contains("avx512dq") && flags.contains("avx512vl");
    std::vector<std::string> expected = {"GOMP_SPINCOUNT=5000", "OPENBLAS_THREAD_TIMEOUT=4"};
    if (avx512)
        expected.push_back("OPENBLAS_CORETYPE=SkylakeX");
    QCOMPARE(runtimeEnvironment(), expected);
    QVERIFY(prepareRuntimeEnvironment());
    QCOMPARE(qgetenv("OPENBLAS_THREAD_TIMEOUT"), QByteArray("4"));
    QCOMPARE(qgetenv("GOMP_SPINCOUNT"), QByteArray("5000"));
    QVERIFY(runtimeEnvironment().empty()); // set once: a program that executes itself again stops there
    QVERIFY(!prepareRuntimeEnvironment());
    // What a user set stays as it is.
    for (const char* n : names)
        qunsetenv(n);
    qputenv("OMP_WAIT_POLICY", "passive");
    qputenv("OPENBLAS_THREAD_TIMEOUT", "20");
    qputenv("OPENBLAS_CORETYPE", "Haswell");
    QVERIFY(runtimeEnvironment().empty());
    QVERIFY(!prepareRuntimeEnvironment());
    QCOMPARE(qgetenv("OPENBLAS_THREAD_TIMEOUT"), QByteArray("20"));
    QCOMPARE(qgetenv("OPENBLAS_CORETYPE"), QByteArray("Haswell"));
    QVERIFY(qgetenv("GOMP_SPINCOUNT").isNull());
    for (size_t i = 0; i < std::size(names); ++i)
        if (before[i].isNull())
            qunsetenv(names[i]);
        else
            qputenv(names[i], before[i]);
}

// The test is compiled with the same flags as the engine, so this says
// independently whether the self-test ran under instrumentation.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
static constexpr bool kInstrumented = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
static constexpr bool kInstrumented = true;
#else
static constexpr bool kInstrumented = false;
#endif
#else
static constexpr bool kInstrumented = false;
#endif

// Seconds since t0.
static double since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void TestCostModel::pinnedAllocatorKeepsCopiesInTheHeap()
{
    const bool pinned = pinAllocator();
    QCOMPARE(pinAllocator(), pinned); // once per process
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !(defined(__has_feature) && __has_feature(address_sanitizer))
    if (!qEnvironmentVariableIsEmpty("GLIBC_TUNABLES") || !qEnvironmentVariableIsEmpty("MALLOC_MMAP_THRESHOLD_") ||
        !qEnvironmentVariableIsEmpty("MALLOC_TRIM_THRESHOLD_")) {
        QVERIFY(!pinned); // the user's setting stands
        return;
    }
    QVERIFY(pinned);
    // A layer's copies, four of 25 MiB: pinned, they come from the heap
    // (glibc's count of chunks mapped on their own, hblks, does not grow)
    // and once freed the heap keeps them for the next token (its size,
    // arena, does not shrink). Left dynamic, each is mapped on its own
    // until a free raises the threshold, and a free top past twice the
    // threshold (64 MiB at most) is given back.
    malloc_trim(0);
    const size_t mappedBefore = mallinfo2().hblks;
    std::vector<void*> copies;
    for (int i = 0; i < 4; ++i)
        copies.push_back(std::malloc(25u << 20));
    QCOMPARE(mallinfo2().hblks, mappedBefore);
    const size_t heap = mallinfo2().arena;
    for (auto it = copies.rbegin(); it != copies.rend(); ++it)
        std::free(*it);
    QCOMPARE(mallinfo2().arena, heap);
#endif
}

void TestCostModel::measuresThisMachinePlausibly()
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto p = measureThisMachine();
    const double seconds = since(t0);
    qInfo("%s; RAM %.1f GB, RAM read %.1f GB/s, CPU %.1f GFLOP/s, disk %.1f GB/s, %zu GPU(s), %.3f s",
          p.name.c_str(), double(p.ramBytes) / 1e9, p.ramBandwidth / 1e9, p.cpuFlops / 1e9, p.diskReadBandwidth / 1e9,
          p.gpus.size(), seconds);
    // Hang guard only: the self-test takes about 0.3 s; speed is the benchmarks' business.
    QVERIFY2(seconds < 30.0, qPrintable(QString::number(seconds)));
    QVERIFY(!p.simulated);
    if (kInstrumented) {
        // Timing loops under ASan or -O0 measure the instrumentation: the
        // profile must not pass such figures off as this machine's.
        QVERIFY(!p.measured);
        QVERIFY2(p.name.find("instrumented build") != std::string::npos, p.name.c_str());
    } else {
        QVERIFY(p.measured);
        QVERIFY2(p.name.find("not measured") == std::string::npos, p.name.c_str());
    }
    QVERIFY(p.ramBytes > kGB);
    QVERIFY(p.ramBandwidth > 1e9);
    QVERIFY(p.ramBandwidth < 1e13); // 10 TB/s would mean the loop was optimised away
    QVERIFY(p.cpuFlops > 1e9);
    QVERIFY(p.cpuFlops < 1e15);
    QVERIFY(p.diskReadBandwidth > 0);
    // Without a file to time the drive on, its figure is labelled an assumption.
    QVERIFY2(p.sources.find("assumed: ") != std::string::npos &&
                 p.sources.find("disk read 2 GB/s (NVMe datasheet)") != std::string::npos,
             p.sources.c_str());
    if (!kInstrumented) {
        QVERIFY2(p.sources.find("measured here: RAM read, CPU FLOP/s, page-cache read") == 0, p.sources.c_str());
        QVERIFY(p.pageCacheReadBandwidth > 1e8 && p.pageCacheReadBandwidth < 1e13);
        QVERIFY(p.cpuGemvF32 == 0 || (p.cpuGemvF32 > 1e8 && p.cpuGemvF32 < 1e13));
        QVERIFY(p.cpuGemvBf16 == 0 || (p.cpuGemvBf16 > 1e8 && p.cpuGemvBf16 < 1e13));
        const auto q = profileFromJson(profileToJson(p), "this.json");
        QCOMPARE(q.cpuGemvF32, p.cpuGemvF32);
        QCOMPARE(q.cpuGemvBf16, p.cpuGemvBf16);
        QCOMPARE(q.pageCacheReadBandwidth, p.pageCacheReadBandwidth);
        QVERIFY(p.freshCopyBandwidth > 1e7 && p.freshCopyBandwidth < 1e13);
        QCOMPARE(q.freshCopyBandwidth, p.freshCopyBandwidth);
        // Caches, where a set re-read faster than RAM was found: a power of
        // two from 4 MiB up to half the 256 MiB buffer, said in the sources.
        const uint64_t c = p.cpuCacheBytes;
        QVERIFY2(c == 0 || (c >= (4ULL << 20) && c <= (128ULL << 20) && (c & (c - 1)) == 0), qPrintable(QString::number(c)));
        QCOMPARE(p.sources.find("CPU cache size") != std::string::npos, c > 0);
        QCOMPARE(q.cpuCacheBytes, c);
    }
    QVERIFY(p.name.find("GB RAM") != std::string::npos);
    for (const auto& g : p.gpus)
        QVERIFY(!g.name.empty() && g.memoryBytes > 0 && g.memoryBandwidth > 0);
    // The measured profile is usable by the model as is.
    QVERIFY(estimateDecode({{Device::cpu(), kGB}}, 2 * kGB, p).secondsPerToken > 0);
}

void TestCostModel::timesFileReads()
{
    // 8 MiB written here: read warm through the page cache; cold past it
    // (O_DIRECT) where the file system allows, else 0. Plausibility only.
    QTemporaryDir dir;
    const std::string file = dir.filePath("sample.bin").toStdString();
    {
        QFile f(QString::fromStdString(file));
        QVERIFY(f.open(QIODevice::WriteOnly));
        QByteArray chunk(1 << 20, 'x');
        for (int i = 0; i < 8; ++i)
            f.write(chunk);
    }
    const double warm = measureFileReadBandwidth(file, false);
    QVERIFY2(warm > 1e7 && warm < 1e13, qPrintable(QString::number(warm)));
    const double cold = measureFileReadBandwidth(file, true);
    QVERIFY2(cold == 0 || (cold > 1e6 && cold < 1e13), qPrintable(QString::number(cold)));
    QCOMPARE(measureFileReadBandwidth(file + ".missing", false), 0.0);
    if (!kInstrumented && cold > 0) {
        const auto p = measureThisMachine(file);
        QVERIFY2(p.sources.find("disk read (O_DIRECT)") != std::string::npos, p.sources.c_str());
        QVERIFY(p.diskReadBandwidth > 1e6);
    }
    qInfo("page cache %.2f GB/s, past it %.2f GB/s", warm / 1e9, cold / 1e9);
}

void TestCostModel::detectsMachineMemory()
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto m = detectMachineMemory();
    const double seconds = since(t0);
    qInfo("detectMachineMemory: %.4f s", seconds);
    // It reads /proc/meminfo and NVML, no bandwidth test: milliseconds. A
    // hang guard far above that, not a speed goal.
    QVERIFY2(seconds < 10.0, qPrintable(QString::number(seconds)));
    const auto p = measureThisMachine();
    QVERIFY(m.ramAvailableBytes > 0);
    QVERIFY(m.ramAvailableBytes <= p.ramBytes);
    QCOMPARE(m.ramTotalBytes, p.ramBytes); // both MemTotal
    // One entry per GPU the profile sees, none larger than that GPU, with its name and size.
    QCOMPARE(m.gpuFreeBytes.size(), p.gpus.size());
    QCOMPARE(m.gpuTotalBytes.size(), p.gpus.size());
    QCOMPARE(m.gpuNames.size(), p.gpus.size());
    for (size_t i = 0; i < m.gpuFreeBytes.size(); ++i) {
        QVERIFY(m.gpuFreeBytes[i] <= p.gpus[i].memoryBytes);
        QCOMPARE(m.gpuTotalBytes[i], p.gpus[i].memoryBytes);
        QCOMPARE(m.gpuNames[i], p.gpus[i].name);
    }
    // Without a driver there are no GPUs.
    if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))
        dlclose(nvml);
    else
        QVERIFY(m.gpuFreeBytes.empty());
}

QTEST_APPLESS_MAIN(TestCostModel)
#include "tst_costmodel.moc"
