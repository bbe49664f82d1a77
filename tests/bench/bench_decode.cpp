// CPU decode, memory and offload against bounds measured in the same run, and
// the cost model's prediction against what was measured.
//
// The parent writes Llama-shaped checkpoints in fp32, bf16 and fp16 (tied
// embeddings, so every weight byte is read once per token) in two shapes
// (small: 425 MB fp32; 7B-layer: two layers of Llama-2-7B's shape, 2.1 GB
// fp32), measures the machine, then runs each case in a child process of its
// own (so its peak resident set is its own) and prints one table:
// - GEMV kernels per dtype: GB/s of weights streamed vs the read bandwidth;
// - decode per shape and dtype (checkpoint dtype = weights' dtype) vs the
//   bandwidth bound, with the engine's kernel and with at::mv;
// - load throughput, and peak RSS (anonymous + file-backed) vs the weights
//   that must stay resident;
// - offload on the 7B-layer shape (half on disk, all on disk; page cache warm,
//   and cold once) per policy, and a simulated GPU behind a throttled link;
// - prediction (cost model, this machine's measured profile) vs measured;
// - the goals of docs/PERFORMANCE.md checked against this run.
// Each case's bound is the read bandwidth measured between its decode steps.
//
// bench_decode            the whole table (about 2-4 minutes on 2 cores)
// bench_decode --kernels  the GEMV kernel table only
// bench_decode --case ... one case (used by the parent)
// LibTorch before Qt: Qt's `slots` macro breaks ATen's headers.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/families.h"
#include "stowage/generate.h"
#include "stowage/hardware.h"
#include "stowage/mappedfile.h"
#include "stowage/model.h"
#include "stowage/planner.h"
#include "stowage/runtimeenv.h"

#include "../../engine/runtime/families/gemv.h"

#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace stowage;
using clk = std::chrono::steady_clock;
using json = nlohmann::json;

double readBandwidthBytesPerSecond();                    // bench_bandwidth.cpp
double readBandwidthOf(const at::Tensor& big, int passes); // the same over `big`
double readRate(const void* p, size_t bytes);               // one pass of a plain read, every core
double steppedReadRate(const void* p, size_t bytes);        // the same loop, its address a stepped pointer; 0: no AVX2

namespace {

double since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

// /proc/self/status fields in bytes (RssAnon, RssFile, VmHWM).
std::map<std::string, uint64_t> status()
{
    std::map<std::string, uint64_t> out;
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos)
            continue;
        const std::string key = line.substr(0, colon);
        if (key == "RssAnon" || key == "RssFile" || key == "VmHWM" || key == "VmRSS")
            out[key] = std::strtoull(line.c_str() + colon + 1, nullptr, 10) * 1024;
    }
    return out;
}

// /proc/self/smaps_rollup: Pss, Private_Clean, Private_Dirty, Shared_Clean,
// FilePmdMapped (file pages mapped whole on 2 MiB pages) in bytes.
std::map<std::string, uint64_t> rollup()
{
    std::map<std::string, uint64_t> out;
    std::ifstream in("/proc/self/smaps_rollup");
    std::string line;
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos)
            continue;
        const std::string key = line.substr(0, colon);
        if (key == "Rss" || key == "Pss" || key == "Private_Clean" || key == "Private_Dirty" || key == "Shared_Clean" ||
            key == "FilePmdMapped")
            out[key] = std::strtoull(line.c_str() + colon + 1, nullptr, 10) * 1024;
    }
    return out;
}

// Drops a file's pages from the page cache (nothing maps it now).
void evict(const std::string& file)
{
    int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0)
        return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// A plain read of the whole file into one reused buffer (what "load" costs at least).
double readFileBytesPerSecond(const std::string& file)
{
    int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0)
        return 0;
    std::vector<char> buf(8 << 20);
    uint64_t total = 0;
    const auto t0 = clk::now();
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0)
        total += uint64_t(n);
    const double s = since(t0);
    ::close(fd);
    return s > 0 ? double(total) / s : 0;
}

std::string cpuModel()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line)) {
        if (model.empty() && line.rfind("model name", 0) == 0)
            model = line.substr(line.find(':') + 2);
        if (flags.empty() && line.rfind("flags", 0) == 0)
            flags = line.substr(line.find(':') + 2);
    }
    std::string have;
    std::istringstream f(flags);
    std::string w;
    while (f >> w)
        if (w == "avx2" || w == "avx512f" || w == "avx512_bf16" || w == "avx512_fp16" || w == "amx_bf16" ||
            w == "amx_tile" || w == "avx512_vnni")
            have += " " + w;
    return model + " (" + std::to_string(std::thread::hardware_concurrency()) + " CPUs;" + have + ")";
}

// ---- one case, in its own process ----------------------------------------------

struct CaseSpec {
    std::string dir, map = "ram", policy = "prefetch", gemv;
    double pcie = 0;
    int prompt = 16, steps = 24;
    bool cold = false;
    int64_t ahead = -1; // the kernels' read-ahead hints in bytes (gemv.h); -1: the default
};

// Bytes of non-duplicate parameters per device under `map`.
std::map<Device, uint64_t> bytesOn(const ModuleTree& tree, const DeviceMap& map)
{
    std::map<Device, uint64_t> on;
    for (const auto& p : tree.params())
        if (!p.duplicate)
            on[*deviceFor(map, p.name)] += p.numel() * uint64_t(dtypeSize(tree.dtype().value_or(p.stored)));
    return on;
}

// "half-disk": the first half of a Llama's weights (embedding, then layers
// while less than half is placed) in RAM, the rest on disk; "half-gpu": the
// same split between a simulated GPU 0 and RAM. Written out, not planned: the
// planner keeps room for the largest layer beside offloaded ones (as
// Accelerate does), which leaves a two-layer model all on one side.
DeviceMap mapFor(const ModuleTree& tree, const std::string& kind, Budgets* gpuBudgets)
{
    if (kind == "ram")
        return {{"", Device::cpu()}};
    if (kind == "disk")
        return {{"", Device::disk()}};
    if (kind != "half-disk" && kind != "half-gpu")
        throw std::runtime_error("unknown map " + kind);
    const Device first = kind == "half-disk" ? Device::cpu() : Device::gpu(0);
    const Device second = kind == "half-disk" ? Device::disk() : Device::cpu();
    const auto& mods = tree.modules();
    auto bytes = [&](const std::string& name) { return mods[size_t(tree.find(name))].bytes; };
    const uint64_t total = tree.root().bytes;
    DeviceMap map{{"model.embed_tokens", first}};
    uint64_t placed = bytes("model.embed_tokens");
    uint64_t largestAway = 0; // the largest layer the first device must take copies of
    for (int l = 0; tree.find("model.layers." + std::to_string(l)) >= 0; ++l) {
        const std::string name = "model.layers." + std::to_string(l);
        map.emplace_back(name, placed < total / 2 ? first : second);
        if (map.back().second == first)
            placed += bytes(name);
        else
            largestAway = std::max(largestAway, bytes(name));
    }
    for (const char* rest : {"model.norm", "model.rotary_emb", "lm_head"})
        if (tree.find(rest) >= 0)
            map.emplace_back(rest, first); // the tied head stays with the embedding
    if (kind == "half-gpu") // its weights, and copies of two layers in flight (prefetch)
        *gpuBudgets = {{Device::gpu(0), double(placed + 2 * largestAway) * 1.1}};
    return map;
}

int runCase(const CaseSpec& c)
{
    if (!c.gemv.empty())
        for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf})
            for (auto k : arch::gemvKernels(dt))
                if (c.gemv == arch::gemvKernelName(k))
                    arch::overrideGemvKernel(dt, k);
    if (c.ahead >= 0)
        arch::overrideGemvReadAhead(c.ahead);
    // Every case starts with its checkpoint off the page cache, as when a
    // model is opened from the drive: the warm-up pass then reads it through
    // the weight store's mapping (2 MiB pages, mappedfile.cpp), and "warm" is
    // what that pass left in the cache. Pages the writer left behind would
    // be 4 KiB ones, which decode reads 15-20% slower.
    for (const auto& e : std::filesystem::directory_iterator(c.dir))
        if (e.path().extension() == ".safetensors")
            evict(e.path().string());
    { std::ofstream("/proc/self/clear_refs") << "5"; } // VmHWM starts again from here
    std::atomic<bool> done{false};
    std::atomic<uint64_t> peakAnon{0}, peakFile{0};
    std::thread sampler([&] {
        while (!done) {
            auto s = status();
            peakAnon = std::max<uint64_t>(peakAnon, s["RssAnon"]);
            peakFile = std::max<uint64_t>(peakFile, s["RssFile"]);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });
    const auto before = status();
    json out;
    {
        const auto t0 = clk::now();
        Checkpoint ck = Checkpoint::open(c.dir);
        ModuleTree tree = buildModuleTree(ck, std::nullopt);
        LoadOptions lo;
        lo.dtype = tree.dtype();
        lo.deviceMap = mapFor(tree, c.map, &lo.gpuBudgets);
        lo.policy = *policyFromName(c.policy);
        lo.simulateGpus = true;
        lo.simulatedPcieBytesPerSecond = c.pcie;
        if (c.map == "half-gpu") {
            HardwareProfile hw = measureThisMachine();
            hw.gpus = {GpuProfile{"simulated", 0, hw.ramBandwidth, c.pcie, c.pcie, hw.cpuFlops}};
            lo.profile = hw;
        }
        auto m = Model::load(ck, tree, lo);
        out["load_s"] = since(t0);
        out["anon_after_load"] = status()["RssAnon"] - before.at("RssAnon");
        std::vector<int32_t> ids(size_t(c.prompt));
        for (int i = 0; i < c.prompt; ++i)
            ids[size_t(i)] = (i * 37) % 1000;
        SamplingOptions so;
        so.maxNewTokens = 3;
        const auto t1 = clk::now();
        GenerationResult first = generate(*m, ids, so); // warm-up (cold: reads the drive)
        out["first_s"] = since(t1);
        out["first_prefill_s"] = first.prefillSeconds;
        // Timed for its prefill (decode is timed below, beside its bound);
        // its decode steps are in the memory figures.
        GenerationResult r = generate(*m, ids, so);
        out["prefill_tok_s"] = double(c.prompt) / r.prefillSeconds;
        out["first_decode_tok_s"] = first.decodeTokensPerSecond();
        out["weights"] = tree.root().bytes;
        const auto roll = rollup();
        out["pss_end"] = roll.count("Pss") ? roll.at("Pss") : 0;
        // How much of the checkpoint the mapping holds on 2 MiB pages: where
        // the kernel found no free 2 MiB blocks it stays on 4 KiB ones, which
        // decode reads slower (docs/PERFORMANCE.md).
        out["file_pmd"] = roll.count("FilePmdMapped") ? roll.at("FilePmdMapped") : 0;
        // The memory figures end here: the read probe below is not the model's.
        done = true;
        sampler.join();
        const auto after = status();
        out["peak_rss"] = after.at("VmHWM");
        out["peak_anon"] = peakAnon.load();
        out["peak_file"] = peakFile.load();
        out["base_anon"] = before.at("RssAnon");
        out["base_file"] = before.at("RssFile");
        // Decode and its bound, interleaved: one decode step, one pass of a
        // read over 512 MiB, and again. This VM's read bandwidth switches
        // between two levels (about 31 and 48 GB/s here) for seconds at a
        // time; a bound read before and after the case (the best of a few
        // short passes) caught the high level while decode ran through both,
        // so every ratio was low by up to 1.7x. Interleaved, the steps and the
        // passes share the same seconds.
        // The pass reads the checkpoint's own bytes, through its mapping
        // (2 MiB pages where the weights have them): a buffer of fresh
        // memory measured its own pages, and on the Intel Xeon of 2026-12-04
        // those read 26 GB/s in the 7B-layer cases and 34 in the small ones,
        // in the same run, where a plain read of any buffer read 29
        // (docs/PERFORMANCE.md). Read whole: the bound is that of these bytes.
        uint64_t probeBytes = 0;
        for (const Shard& sh : ck.shards())
            probeBytes += sh.map ? sh.map->size() : 0;
        const auto readProbe = [&] { // seconds
            double s = 0;
            for (const Shard& sh : ck.shards())
                if (sh.map)
                    s += double(sh.map->size()) / readRate(sh.map->data(), sh.map->size());
            return s;
        };
        readProbe(); // maps the pages in
        // The positions the steps below can reach, as generate() tells the
        // model (its cache is then taken once, not grown and copied: growing
        // cost the small bf16 case 50 us a step more than `stowage-cli`'s
        // decode, Intel Xeon 2026-12-05).
        m->resetCache(c.prompt + 20 * c.steps + 1);
        std::vector<float> logits = m->forward(ids);
        // At least `steps` steps and 2 s in all (the small shape's 24 steps
        // took 0.3 s: one level of the VM's bandwidth, or a switch, decided it).
        // A pass after every fourth step, with nothing being fetched: the
        // prefetcher works on the next token's first offloaded unit once a
        // step ends, so a pass right after a step ran beside those copies (a
        // simulated GPU's half-GPU case read a third of the rate) and lent
        // them its time, which decoding back to back does not have. settle()
        // waits for that fetch, counted as decoding time (the next step would
        // have waited for it where the copies are the bottleneck), and what
        // it fetched stays for the next step.
        // Each pass starts 2 ms after the step (untimed) and reads for at
        // least 40 ms. Right after a step, the pass's second thread started
        // beside the engine's helper (which spins 200 us before it sleeps),
        // and a pass of the small bf16 model lasts 6 ms: such passes read 19-31
        // GB/s where these read 31-37 (the plain read over 1 GiB at the start:
        // 34-35), so the bound was low and the ratios high by up to a fifth
        // (Intel Xeon, 2026-12-05). A longer pause is worse: after 150 ms
        // idle, a short pass read 20 GB/s (the VM's CPU had been given up).
        // The LibTorch-kernel cases (gemv "none") still read their bound
        // beside OpenBLAS's workers, which spin for 2^28 cycles after each
        // call: their bound is low (those rows are for comparison).
        constexpr int kStepsPerPass = 4;
        double stepSeconds = 0, probeSeconds = 0, positionsRead = 0;
        int stepsRun = 0, passes = 0;
        const auto pass = [&] {
            const auto s0 = clk::now();
            m->settle();
            stepSeconds += since(s0);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const auto p0 = clk::now();
            do {
                probeSeconds += readProbe();
                ++passes;
            } while (since(p0) < 0.04);
        };
        for (; stepsRun < c.steps || (stepSeconds + probeSeconds < 2.0 && stepsRun < 20 * c.steps); ++stepsRun) {
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            const auto s0 = clk::now();
            logits = m->forward({next});
            stepSeconds += since(s0);
            positionsRead += double(ids.size()) + stepsRun + 1; // attention reads every cached position
            if ((stepsRun + 1) % kStepsPerPass == 0)
                pass();
        }
        if (stepsRun % kStepsPerPass != 0 || passes == 0)
            pass();
        out["decode_tok_s"] = double(stepsRun) / stepSeconds;
        out["bw_during"] = double(passes) * double(probeBytes) / probeSeconds;
        out["decode_steps"] = stepsRun;
        // Bytes of keys and values a step reads, on average over the steps:
        // the bound counts them beside the weights (at a context of 128-250
        // they are 2-7% of the small model's weights). The CPU keeps the
        // cache in the checkpoint's dtype, fp16 too (runner.h), but where
        // fp16 weights were widened at load (no kernel: fp32 throughout).
        const DType stored = tree.dtype().value_or(DType::F32);
        const bool widened = stored == DType::F16 && arch::gemvKernelFor(at::kHalf) == arch::GemvKernel::None;
        const ModelConfig& cfg = ck.config().value();
        const AttentionShape shape = attentionShape(cfg).value(); // the family registry's reading of config.json
        const double perPosition = 2.0 * double(cfg.integer("num_hidden_layers") * shape.kvHeads * shape.headDim) *
                                   double(widened ? 4 : dtypeSize(stored));
        out["kv_bytes_per_step"] = perPosition * positionsRead / double(std::max(1, stepsRun));
    }
    std::printf("RESULT %s\n", out.dump().c_str());
    return 0;
}

// ---- the parent -------------------------------------------------------------------

json spawn(const char* self, const CaseSpec& c)
{
    QStringList args{"--case", QString::fromStdString(c.dir), QString::fromStdString(c.map),
                     QString::fromStdString(c.policy), QString::number(c.pcie), QString::number(c.prompt),
                     QString::number(c.steps), c.cold ? "cold" : "warm", QString::fromStdString(c.gemv),
                     QString::number(c.ahead)};
    QProcess p;
    p.start(QString::fromLocal8Bit(self), args);
    if (!p.waitForFinished(600000) || p.exitCode() != 0) {
        std::fprintf(stderr, "case failed: %s\n%s\n", args.join(' ').toLocal8Bit().constData(),
                     p.readAllStandardError().constData());
        return json();
    }
    const QString outText = QString::fromLocal8Bit(p.readAllStandardOutput());
    for (const QString& line : outText.split('\n'))
        if (line.startsWith("RESULT "))
            return json::parse(line.mid(7).toStdString());
    return json();
}

double mb(uint64_t b) { return double(b) / 1048576.0; }

} // namespace

int main(int argc, char** argv)
{
    // As stowage-cli does before loading LibTorch (see app/cli/main.cpp); for a
    // process linked with LibTorch the variable must be there before start.
    if (stowage::prepareRuntimeEnvironment())
        execv("/proc/self/exe", argv);
    at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
    if (argc >= 9 && std::string(argv[1]) == "--case") {
        CaseSpec c;
        c.dir = argv[2];
        c.map = argv[3];
        c.policy = argv[4];
        c.pcie = std::atof(argv[5]);
        c.prompt = std::atoi(argv[6]);
        c.steps = std::atoi(argv[7]);
        c.cold = std::string(argv[8]) == "cold";
        c.gemv = argc > 9 ? argv[9] : "";
        c.ahead = argc > 10 ? std::atoll(argv[10]) : -1;
        return runCase(c);
    }
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";

    std::setvbuf(stdout, nullptr, _IOLBF, 0); // lines as they come, also into a file
    QTemporaryDir tmp;
    // STOWAGE_BENCH_MODELS=DIR keeps the checkpoints there (and reuses them),
    // to rerun single cases: bench_decode --case DIR/llama-float32 ram prefetch 0 16 24 warm avx512
    const char* keep = std::getenv("STOWAGE_BENCH_MODELS");
    const std::string root = keep && *keep ? std::string(keep) : tmp.path().toStdString();
    // Two shapes, each in fp32, bf16 and fp16, tied embeddings (every weight
    // byte is read once per token):
    // - "small": hidden 1024, 7 layers, vocab 16000 (425 MB fp32): many small
    //   matrices, so LibTorch's per-operation cost shows; offload cases use it;
    // - "7B-layer": two layers of Llama-2-7B's shape (hidden 4096, MLP 11008,
    //   32 heads) and a 32000 vocabulary (2.1 GB fp32): the regime of real
    //   models, where decode is the weights' read time.
    struct Shape {
        const char* name;
        fixtures::LlamaShape s;
    };
    const Shape shapes[] = {{"small", {16000, 1024, 2816, 7, 16, 16, true}},
                            {"7B-layer", {32000, 4096, 11008, 2, 32, 32, true}}};
    std::map<std::pair<std::string, DType>, std::string> dirs;
    for (const Shape& sh : shapes)
        for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
            const std::string dir = root + "/llama-" + sh.name + "-" + dtypeTorchName(dt);
            std::filesystem::create_directories(dir);
            if (!std::filesystem::exists(dir + "/config.json")) {
                fixtures::writeRandomSafetensors(dir + "/model.safetensors", fixtures::llamaTensors(sh.s, dt), 5,
                                                 0.03f);
                fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(sh.s, dt));
            }
            dirs[{sh.name, dt}] = dir;
        }
    const std::string small32 = dirs[{"small", DType::F32}];
    std::printf("CPU: %s\n", cpuModel().c_str());
    std::printf("load average at start: ");
    {
        std::ifstream la("/proc/loadavg");
        std::string a;
        la >> a;
        std::printf("%s (other work on this machine slows every figure below)\n", a.c_str());
    }

    // ---- bandwidth and the host profile the cost model uses
    const double bwTorch = readBandwidthBytesPerSecond();
    // The drive timed on the checkpoint itself, past the page cache (O_DIRECT).
    HardwareProfile hw = measureThisMachine(small32 + "/model.safetensors");
    const double fileRead = readFileBytesPerSecond(small32 + "/model.safetensors");
    std::printf("read bandwidth: %.1f GB/s (a plain read over 1 GiB), %.1f GB/s (measureThisMachine); copy %.1f GB/s;"
                " file read %.1f GB/s warm, %.2f GB/s cold (O_DIRECT); CPU %.0f GFLOP/s\n%s\n",
                bwTorch / 1e9, hw.ramBandwidth / 1e9, hw.pageCacheReadBandwidth / 1e9, fileRead / 1e9,
                hw.diskReadBandwidth / 1e9, hw.cpuFlops / 1e9, hw.sources.c_str());
    // The GEMV table's bound: the faster of the two reads at the start (the
    // cases below each have their own, read next to them).
    const double bw = std::max(bwTorch, hw.ramBandwidth);

    // ---- GEMV kernels: one 7B-layer MLP matrix [11008, 4096] per copy, at
    // least 360 MB cycled (far past the caches)
    std::printf("\n%-6s %-12s %10s %10s\n", "dtype", "gemv kernel", "GB/s", "of bw");
    for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
        const int64_t n = 11008, k = 4096;
        const int mats = std::max(2, int(360e6 / double(n * k * int64_t(c10::elementSize(dt)))));
        std::vector<at::Tensor> ws;
        for (int i = 0; i < mats; ++i)
            ws.push_back(at::randn({n, k}).to(dt));
        at::Tensor x = at::randn({k}).to(dt == at::kHalf ? at::kFloat : dt); // fp16 weights compute with fp32 x
        for (auto kernel : arch::gemvKernels(dt)) {
            double best = 0;
            for (int rep = 0; rep < 5; ++rep) {
                const auto t0 = clk::now();
                for (const auto& w : ws)
                    arch::gemvWith(kernel, w, x);
                best = std::max(best, double(mats) * double(n * k * int64_t(c10::elementSize(dt))) / since(t0));
            }
            std::printf("%-6s %-12s %10.1f %9.0f%%\n", c10::toString(dt), arch::gemvKernelName(kernel), best / 1e9,
                        100 * best / bw);
        }
    }

    // ---- GEMV by matrix size, fp32, from DRAM: as many matrices of each
    // shape as make 360 MB, multiplied in an order that changes every pass
    // (as routed experts are): what a call costs beyond its bytes, fitted
    // as t = bytes / rate + perCall against the largest shape's rate.
    {
        std::printf("\nGEMV fp32 by matrix size, from DRAM, shuffled (best of 5 passes)\n");
        std::printf("%-14s %8s %10s %10s %12s\n", "shape", "MiB", "calls", "GB/s", "us a call");
        const std::vector<std::pair<int64_t, int64_t>> shapes{{11008, 4096}, {2048, 1024}, {1024, 512}, {512, 1024}, {256, 512}, {512, 256}};
        double bigRate = 0;
        for (const auto& [n, k] : shapes) {
            const double bytes = double(n * k * 4);
            const int mats = std::max(2, int(360e6 / bytes));
            const at::Tensor pool = at::randn({int64_t(mats), n, k});
            std::vector<at::Tensor> ws;
            for (int i = 0; i < mats; ++i)
                ws.push_back(pool[i]);
            const at::Tensor x = at::randn({k});
            std::vector<int> order(static_cast<size_t>(mats), 0);
            std::iota(order.begin(), order.end(), 0);
            double best = 1e30;
            uint32_t seed = 1;
            for (int rep = 0; rep < 5; ++rep) {
                for (int i = mats - 1; i > 0; --i) {
                    seed = seed * 1664525u + 1013904223u;
                    std::swap(order[size_t(i)], order[seed % uint32_t(i + 1)]);
                }
                const auto t0 = clk::now();
                for (int i : order)
                    arch::gemv(ws[size_t(i)], x);
                best = std::min(best, since(t0) / mats);
            }
            if (bigRate == 0)
                bigRate = bytes / best;
            std::printf("%-14s %8.2f %10d %10.1f %12.1f\n", (std::to_string(n) + "x" + std::to_string(k)).c_str(),
                        bytes / 1048576.0, mats, bytes / best / 1e9, 1e6 * (best - bytes / bigRate));
        }
    }

    // ---- Streaming the mapped 7B-layer checkpoints (2 MiB pages where the
    // page cache has them), as decode reads them: the loop each case's
    // bound is read with, the same loop with its address stepped as a
    // pointer, and the dtype's GEMV kernel (gemv(), its threads and chunks)
    // over the same bytes as rows of 4096; one pass of each in turn, nine
    // rounds, medians. What separates decode from its bound in the kernels:
    // on the Intel Xeon with AMX of 2026-12-05 the bound's loop read 12-16%
    // faster than the stepped one, which every kernel form tried matched at
    // best (docs/PERFORMANCE.md).
    std::printf("\nstreaming the mapped 7B-layer checkpoint (medians of 9 rounds of one pass each)\n");
    std::printf("%-9s %-40s %8s %10s\n", "dtype", "loop", "GB/s", "of bound");
    for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
        const MappedFile file(dirs[{"7B-layer", dt}] + "/model.safetensors");
        const at::ScalarType wt = dt == DType::F32 ? at::kFloat : dt == DType::BF16 ? at::kBFloat16 : at::kHalf;
        const int64_t k = 4096, rowBytes = k * int64_t(c10::elementSize(wt));
        const int64_t rows = int64_t(file.size() - 4096) / rowBytes;
        const size_t bytes = size_t(rows * rowBytes);
        void* p = const_cast<uint8_t*>(file.data()) + 4096; // past the header, whatever its length
        const at::Tensor w = at::from_blob(p, {rows, k}, at::TensorOptions().dtype(wt));
        const at::Tensor x = at::randn({k}).to(wt == at::kHalf ? at::kFloat : wt); // as dense() calls it
        readRate(p, bytes); // maps the pages in
        std::vector<double> bound, stepped, kernel;
        for (int round = 0; round < 9; ++round) {
            bound.push_back(readRate(p, bytes));
            stepped.push_back(steppedReadRate(p, bytes));
            const auto t0 = clk::now();
            arch::gemv(w, x);
            kernel.push_back(double(bytes) / since(t0));
        }
        const auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        const double b = median(bound);
        const std::string gemvRow = std::string("GEMV, ") + arch::gemvKernelName(arch::gemvKernelFor(wt));
        for (const auto& [what, rate] : {std::pair<std::string, double>{"the bound's loop (base + index loads)", b},
                                         {"the same loop, a stepped pointer", median(stepped)},
                                         {gemvRow, median(kernel)}})
            if (rate > 0)
                std::printf("%-9s %-40s %8.1f %9.0f%%\n", c10::toString(wt), what.c_str(), rate / 1e9, 100 * rate / b);
    }

    if (argc > 1 && std::string(argv[1]) == "--kernels")
        return 0; // the kernel tables only
    const char* self = "/proc/self/exe";
    std::string selfPath = std::filesystem::read_symlink(self).string();
    const int steps = quick ? 12 : 24;
    // The bound of each case is the read bandwidth measured in its child,
    // interleaved with its decode steps (runCase), and its prediction uses a
    // profile with that figure.
    auto runOne = [&](CaseSpec c) {
        c.steps = c.steps ? c.steps : steps;
        return spawn(selfPath.c_str(), c);
    };
    // This machine's profile at the moment of a case: memory-bound figures
    // scaled by that moment's read bandwidth against the one measured at start.
    auto profileAt = [&](const json& r) {
        HardwareProfile now = hw;
        const double scale = r["bw_during"].get<double>() / hw.ramBandwidth;
        now.ramBandwidth *= scale;
        now.cpuGemvF32 *= scale;
        now.cpuGemvBf16 *= scale;
        now.pageCacheReadBandwidth *= scale;
        return now;
    };

    // ---- decode per shape and dtype, all in RAM: the engine's kernel, then at::mv
    Checkpoint ck32 = Checkpoint::open(small32);
    const ModuleTree t32 = buildModuleTree(ck32, DType::F32);
    const uint64_t w32 = t32.root().bytes;
    std::printf("\n%-9s %-8s %-12s %9s %6s %8s %13s %12s %11s %9s %12s %12s\n", "shape", "dtype", "gemv", "weights",
                "on 2M", "KV/step", "prefill tok/s", "decode tok/s", "bound tok/s", "of bound", "predicted", "pred/meas");
    std::printf("(bound: the read rate measured between the steps over the weights plus the cached keys and values a\n"
                " step reads; over the weights alone it is %% of bound / (1 + KV/weights))\n");
    json ramF32, ramBf16;
    struct Pred {
        std::string what;
        double ratio; // predicted / measured
    };
    std::vector<Pred> preds;
    std::vector<std::pair<std::string, double>> ofBound; // engine kernel, decode / bound
    const bool hinted = arch::gemvReadAhead() > 0; // the kernels' read-ahead hints are on (gemv.h)
    for (const Shape& sh : shapes)
        for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
            const at::ScalarType st = dt == DType::F32 ? at::kFloat : dt == DType::BF16 ? at::kBFloat16 : at::kHalf;
            const auto kernels = arch::gemvKernels(st);
            // The engine's kernel; on the small shape (rows short enough for
            // the one-row kernels) also without their read-ahead hints, as a
            // baseline for them; then at::mv.
            const bool unhinted = hinted && std::string(sh.name) == "small";
            struct Run {
                arch::GemvKernel kernel;
                int64_t ahead;
            };
            std::vector<Run> runs{{kernels.front(), -1}};
            if (unhinted)
                runs.push_back({kernels.front(), 0});
            runs.push_back({arch::GemvKernel::None, -1});
            for (const Run& run : runs) {
                const arch::GemvKernel kernel = run.kernel;
                const bool engine = kernel == kernels.front() && run.ahead < 0;
                CaseSpec c;
                c.dir = dirs[{sh.name, dt}];
                c.prompt = 128;
                c.gemv = arch::gemvKernelName(kernel);
                c.ahead = run.ahead;
                json r = runOne(c);
                if (r.is_null())
                    continue;
                const uint64_t bytes = r["weights"].get<uint64_t>();
                if (engine && std::string(sh.name) == "small" && dt != DType::F16)
                    (dt == DType::F32 ? ramF32 : ramBf16) = r;
                const double kv = r.value("kv_bytes_per_step", 0.0);
                const double bound = r["bw_during"].get<double>() / (double(bytes) + kv);
                const double params = double(bytes) / double(dtypeSize(dt));
                const double pred = estimateDecode({{Device::cpu(), bytes}}, 2 * params, profileAt(r)).tokensPerSecond;
                std::printf("%-9s %-8s %-12s %6.0f MB %5.0f%% %5.1f MB %13.1f %12.2f %11.2f %8.0f%% %12.2f %12.2f\n",
                            sh.name, dtypeTorchName(dt), (c.gemv + (run.ahead == 0 ? "*" : "")).c_str(),
                            double(bytes) / 1e6,
                            100 * r.value("file_pmd", 0.0) / double(bytes), kv / 1e6, r["prefill_tok_s"].get<double>(),
                            r["decode_tok_s"].get<double>(), bound, 100 * r["decode_tok_s"].get<double>() / bound,
                            pred, pred / r["decode_tok_s"].get<double>());
                if (engine) {
                    const std::string what = std::string(sh.name) + " " + dtypeTorchName(dt) + ", all in RAM";
                    ofBound.emplace_back(what, r["decode_tok_s"].get<double>() / bound);
                    preds.push_back({what, pred / r["decode_tok_s"].get<double>()});
                }
            }
        }
    if (hinted) // else there are no * rows
        std::printf("(* the same kernel as without read-ahead hints, STOWAGE_GEMV_AHEAD=0: no hints and the rows split\n"
                    "   as before them, gemv_isa.h; the others ask %lld bytes ahead)\n",
                    static_cast<long long>(arch::gemvReadAhead()));

    // ---- memory: load throughput and peak resident set
    std::printf("\n%-26s %9s %10s %9s %9s %9s %9s %12s\n", "memory (MiB)", "load s", "load GB/s", "peak RSS",
                "peak anon", "peak file", "resident", "anon/copied");
    auto memRow = [&](const char* name, const json& r, uint64_t resident, uint64_t copied) {
        if (r.is_null())
            return;
        const double anon = double(r["peak_anon"].get<uint64_t>()) - double(r["base_anon"].get<uint64_t>());
        std::printf("%-26s %9.2f %10.2f %9.0f %9.0f %9.0f %9.0f %12s\n", name, r["load_s"].get<double>(),
                    double(resident) / r["load_s"].get<double>() / 1e9, mb(r["peak_rss"].get<uint64_t>()),
                    mb(uint64_t(std::max(0.0, anon))), mb(r["peak_file"].get<uint64_t>()), mb(resident),
                    copied ? QString::number(anon / double(copied), 'f', 2).toLatin1().constData() : "(none copied)");
    };
    memRow("all RAM fp32", ramF32, w32, 0);
    memRow("all RAM bf16", ramBf16, w32 / 2, 0);

    // ---- offload and simulated GPU, fp32, per policy, on the 7B-layer shape
    // (few large matrices: what real checkpoints offload)
    const std::string big32 = dirs[{"7B-layer", DType::F32}];
    Checkpoint ckBig = Checkpoint::open(big32);
    const ModuleTree tBig = buildModuleTree(ckBig, DType::F32);
    const uint64_t wBig = tBig.root().bytes;
    const double pcie = hw.ramBandwidth / 4; // a link 4x slower than RAM, as PCIe is to GPU memory
    struct Off {
        const char* name;
        std::string map, policy;
        bool cold;
    };
    std::vector<Off> offs{{"half disk, accelerate-like", "half-disk", "accelerate-like", false},
                          {"half disk, prefetch", "half-disk", "prefetch", false},
                          {"all disk, accelerate-like", "disk", "accelerate-like", false},
                          {"all disk, prefetch", "disk", "prefetch", false},
                          {"all disk, prefetch, cold", "disk", "prefetch", true},
                          {"half GPU, accelerate-like", "half-gpu", "accelerate-like", false},
                          {"half GPU, prefetch", "half-gpu", "prefetch", false},
                          {"half GPU, where-it-lives", "half-gpu", "compute-where-it-lives", false}};
    std::printf("\n7B-layer fp32 offload, %.0f MB (simulated GPU: RAM behind a %.1f GB/s link)\n", double(wBig) / 1e6, pcie / 1e9);
    std::printf("%-28s %12s %12s %9s %12s %10s %9s %9s  %s\n", "map, policy", "decode tok/s", "bound tok/s", "of bound",
                "predicted", "pred/meas", "peak RSS", "peak anon", "MB on GPU/RAM/disk");
    std::map<std::string, double> measured;
    for (const Off& o : offs) {
        CaseSpec c;
        c.dir = big32;
        c.steps = o.policy == "accelerate-like" ? 6 : 0; // it copies 1-2 GB per token
        c.map = o.map;
        c.policy = o.policy;
        c.cold = o.cold;
        c.pcie = o.map == "half-gpu" ? pcie : 0;
        c.prompt = o.cold ? 1 : 16; // cold: the first forward pass reads every weight from the drive
        json r = runOne(c);
        if (r.is_null())
            continue;
        Budgets gb;
        DeviceMap map = mapFor(tBig, o.map, &gb);
        std::map<Device, uint64_t> on = bytesOn(tBig, map);
        std::vector<std::pair<Device, uint64_t>> placement(on.begin(), on.end());
        HardwareProfile phw = profileAt(r);
        phw.gpus = {GpuProfile{"simulated", 0, phw.ramBandwidth, pcie, pcie, hw.cpuFlops}};
        if (o.cold)
            phw.ramBytes = 0; // the model's cold case: the page cache holds nothing
        const uint64_t layer = tBig.modules()[size_t(tBig.find("model.layers.0"))].bytes; // what a plan reserves
        const double pred =
            estimateDecode(placement, 2 * wBig / 4, phw, *policyFromName(o.policy), layer).tokensPerSecond;
        const double tok = o.cold ? 1.0 / r["first_prefill_s"].get<double>() : r["decode_tok_s"].get<double>();
        measured[o.name] = tok;
        preds.push_back({std::string("7B-layer float32, ") + o.name, pred / tok});
        double bound = r["bw_during"].get<double>() / (double(wBig) + r.value("kv_bytes_per_step", 0.0));
        // A simulated GPU that copies its RAM-resident layers in (all but
        // where-it-lives) is bound by the link too: their bytes at its rate.
        if (o.map == "half-gpu" && o.policy != "compute-where-it-lives" && on[Device::cpu()] > 0)
            bound = std::min(bound, pcie / double(on[Device::cpu()]));
        std::printf("%-28s %12.2f %12.2f %8.0f%% %12.2f %10.2f %9.0f %9.0f  %.0f/%.0f/%.0f\n", o.name, tok, bound,
                    100 * tok / bound, pred, pred / tok, mb(r["peak_rss"].get<uint64_t>()),
                    mb(r["peak_anon"].get<uint64_t>() - r["base_anon"].get<uint64_t>()), double(on[Device::gpu(0)]) / 1e6,
                    double(on[Device::cpu()]) / 1e6, double(on[Device::disk()]) / 1e6);
        if (o.map == "half-disk" && o.policy == "prefetch")
            memRow("half disk fp32, prefetch", r, on[Device::cpu()], 0);
    }
    auto ratio = [&](const char* a, const char* b) {
        return measured.count(a) && measured.count(b) && measured[b] > 0 ? measured[a] / measured[b] : 0.0;
    };
    std::printf("\nprefetch / accelerate-like: half disk x%.2f, all disk x%.2f, half GPU x%.2f (where-it-lives x%.2f)\n",
                ratio("half disk, prefetch", "half disk, accelerate-like"),
                ratio("all disk, prefetch", "all disk, accelerate-like"),
                ratio("half GPU, prefetch", "half GPU, accelerate-like"),
                ratio("half GPU, where-it-lives", "half GPU, accelerate-like"));
    std::printf("(cold: one forward pass of a 1-token prompt right after the file left the page cache)\n");

    // ---- the goals of docs/PERFORMANCE.md, checked against this run
    std::printf("\ngoals, this run:\n");
    int met = 0;
    for (const auto& [what, f] : ofBound) {
        std::printf("  decode %-34s %4.0f%% of the bound   %s\n", what.c_str(), 100 * f, f >= 0.8 ? "met (>= 80%)" : "NOT met");
    }
    for (const Pred& p : preds) {
        const bool ok = p.ratio >= 0.75 && p.ratio <= 1.25;
        met += ok;
        std::printf("  prediction %-44s pred/meas %5.2f   %s\n", p.what.c_str(), p.ratio, ok ? "within 25%" : "NOT within 25%");
    }
    std::printf("  predictions within 25%%: %d of %zu maps (goal: at least 6)\n", met, preds.size());
    const double half = ratio("half disk, prefetch", "half disk, accelerate-like"),
                 all = ratio("all disk, prefetch", "all disk, accelerate-like");
    std::printf("  disk offload, prefetch / accelerate-like: half x%.1f, all x%.1f   %s\n", half, all,
                half >= 3 && all >= 3 ? "met (>= 3x)" : "NOT met");
    return 0;
}
