// CPU decode, memory and offload against bounds measured in the same run, and
// the cost model's prediction against what was measured.
//
// The parent writes a Llama-shaped checkpoint (~425 MB fp32, ~212 MB bf16,
// tied embeddings so every weight byte is read once per token), measures the
// read bandwidth, then runs each case in a child process of its own (so its
// peak resident set is its own) and prints one table:
// - GEMV kernels per dtype: GB/s of weights streamed vs the read bandwidth;
// - decode per dtype (checkpoint dtype = compute dtype) vs the bandwidth
//   bound, with the engine's kernel and with LibTorch's at::mv;
// - load throughput vs a plain page-cache read of the file, and peak RSS
//   (anonymous + file-backed) vs the weights that must stay resident;
// - offload (half on disk, all on disk; page cache warm, and cold once) per
//   policy, and a simulated GPU behind a throttled PCIe link per policy;
// - prediction (cost model, this machine's measured profile) vs measured.
//
// bench_decode            the whole table (about 2-4 minutes on 2 cores)
// bench_decode --case ... one case (used by the parent)
// LibTorch before Qt: Qt's `slots` macro breaks ATen's headers.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"
#include "stowage/runtime.h"

#include "../../engine/runtime/families/gemv.h"

#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace stowage;
using clk = std::chrono::steady_clock;
using json = nlohmann::json;

double readBandwidthBytesPerSecond(); // bench_bandwidth.cpp (LibTorch)

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

// /proc/self/smaps_rollup: Pss, Private_Clean, Private_Dirty, Shared_Clean in bytes.
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
        if (key == "Rss" || key == "Pss" || key == "Private_Clean" || key == "Private_Dirty" || key == "Shared_Clean")
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
};

DeviceMap mapFor(const ModuleTree& tree, const std::string& kind, Budgets* gpuBudgets)
{
    const double total = double(tree.root().bytes);
    PlanOptions po;
    po.strategy = Strategy::Sequential;
    if (kind == "ram")
        return {{"", Device::cpu()}};
    if (kind == "disk")
        return {{"", Device::disk()}};
    if (kind == "half-disk") {
        po.maxMemory = Budgets{{Device::cpu(), total * 0.55}};
        return planDeviceMap(tree, po).deviceMap;
    }
    if (kind == "half-gpu") {
        po.maxMemory = Budgets{{Device::gpu(0), total * 0.55}, {Device::cpu(), total * 4}};
        *gpuBudgets = {{Device::gpu(0), total * 0.6}};
        return planDeviceMap(tree, po).deviceMap;
    }
    throw std::runtime_error("unknown map " + kind);
}

int runCase(const CaseSpec& c)
{
    if (!c.gemv.empty())
        for (auto dt : {at::kFloat, at::kBFloat16})
            for (auto k : arch::gemvKernels(dt))
                if (c.gemv == arch::gemvKernelName(k))
                    arch::overrideGemvKernel(dt, k);
    if (c.cold)
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
        so.maxNewTokens = c.steps;
        GenerationResult r = generate(*m, ids, so);
        out["prefill_tok_s"] = double(c.prompt) / r.prefillSeconds;
        out["decode_tok_s"] = r.decodeTokensPerSecond();
        out["first_decode_tok_s"] = first.decodeTokensPerSecond();
        out["weights"] = tree.root().bytes;
        const auto roll = rollup();
        out["pss_end"] = roll.count("Pss") ? roll.at("Pss") : 0;
    }
    done = true;
    sampler.join();
    const auto after = status();
    out["peak_rss"] = after.at("VmHWM");
    out["peak_anon"] = peakAnon.load();
    out["peak_file"] = peakFile.load();
    out["base_anon"] = before.at("RssAnon");
    out["base_file"] = before.at("RssFile");
    std::printf("RESULT %s\n", out.dump().c_str());
    return 0;
}

// ---- the parent -------------------------------------------------------------------

json spawn(const char* self, const CaseSpec& c)
{
    QStringList args{"--case", QString::fromStdString(c.dir), QString::fromStdString(c.map),
                     QString::fromStdString(c.policy), QString::number(c.pcie), QString::number(c.prompt),
                     QString::number(c.steps), c.cold ? "cold" : "warm", QString::fromStdString(c.gemv)};
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
    if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
        setenv("GOMP_SPINCOUNT", "5000", 1);
        execv("/proc/self/exe", argv);
    }
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
        return runCase(c);
    }
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";

    std::setvbuf(stdout, nullptr, _IOLBF, 0); // lines as they come, also into a file
    QTemporaryDir tmp;
    // STOWAGE_BENCH_MODELS=DIR keeps the checkpoints there (and reuses them),
    // to rerun single cases: bench_decode --case DIR/llama-float32 ram prefetch 0 16 24 warm avx512
    const char* keep = std::getenv("STOWAGE_BENCH_MODELS");
    const std::string root = keep && *keep ? std::string(keep) : tmp.path().toStdString();
    // hidden 1024, 7 layers, vocab 16000, tied: ~425 MB in fp32.
    const fixtures::LlamaShape s{16000, 1024, 2816, 7, 16, 16, true};
    std::map<DType, std::string> dirs;
    for (DType dt : {DType::F32, DType::BF16}) {
        const std::string dir = root + "/llama-" + dtypeTorchName(dt);
        std::filesystem::create_directories(dir);
        if (!std::filesystem::exists(dir + "/config.json")) {
            fixtures::writeRandomSafetensors(dir + "/model.safetensors", fixtures::llamaTensors(s, dt), 5, 0.03f);
            fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(s, dt));
        }
        dirs[dt] = dir;
    }
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
    HardwareProfile hw = measureThisMachine(dirs[DType::F32] + "/model.safetensors");
    const double fileRead = readFileBytesPerSecond(dirs[DType::F32] + "/model.safetensors");
    std::printf("read bandwidth: %.1f GB/s (LibTorch sum over 1 GiB), %.1f GB/s (measureThisMachine); copy %.1f GB/s;"
                " file read %.1f GB/s warm, %.2f GB/s cold (O_DIRECT); CPU %.0f GFLOP/s\n%s\n",
                bwTorch / 1e9, hw.ramBandwidth / 1e9, hw.pageCacheReadBandwidth / 1e9, fileRead / 1e9,
                hw.diskReadBandwidth / 1e9, hw.cpuFlops / 1e9, hw.sources.c_str());
    // The bound: the fastest read seen (at the start, and again before the
    // offload cases); other work on a shared machine only ever lowers it.
    double bw = std::max(bwTorch, hw.ramBandwidth);

    // ---- GEMV kernels: 160 MB of weights per dtype, cycled (far past the caches)
    std::printf("\n%-6s %-12s %10s %10s\n", "dtype", "gemv kernel", "GB/s", "of bw");
    for (auto dt : {at::kFloat, at::kBFloat16}) {
        const int64_t n = 2816, k = 1024;
        const int mats = int(160e6 / double(n * k * int64_t(c10::elementSize(dt))));
        std::vector<at::Tensor> ws;
        for (int i = 0; i < mats; ++i)
            ws.push_back(at::randn({n, k}).to(dt));
        at::Tensor x = at::randn({k}).to(dt);
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

    const char* self = "/proc/self/exe";
    std::string selfPath = std::filesystem::read_symlink(self).string();
    const int steps = quick ? 12 : 24;
    auto runOne = [&](CaseSpec c) {
        c.steps = c.steps ? c.steps : steps;
        return spawn(selfPath.c_str(), c);
    };

    // ---- decode per dtype, all in RAM
    Checkpoint ck32 = Checkpoint::open(dirs[DType::F32]);
    const ModuleTree t32 = buildModuleTree(ck32, DType::F32);
    const uint64_t w32 = t32.root().bytes;
    std::printf("\n%-6s %-12s %9s %13s %12s %11s %9s %12s %12s\n", "dtype", "gemv", "weights", "prefill tok/s",
                "decode tok/s", "bound tok/s", "of bound", "predicted", "pred/meas");
    json ramF32, ramBf16;
    for (DType dt : {DType::F32, DType::BF16}) {
        const uint64_t bytes = dt == DType::F32 ? w32 : w32 / 2;
        const auto kernels = arch::gemvKernels(dt == DType::F32 ? at::kFloat : at::kBFloat16);
        for (auto kernel : {kernels.front(), arch::GemvKernel::None}) {
            CaseSpec c;
            c.dir = dirs[dt];
            c.prompt = 128;
            c.gemv = arch::gemvKernelName(kernel);
            json r = runOne(c);
            if (r.is_null())
                continue;
            if (kernel == kernels.front())
                (dt == DType::F32 ? ramF32 : ramBf16) = r;
            const double bound = bw / double(bytes);
            const double pred = estimateDecode({{Device::cpu(), bytes}}, 2 * bytes / (dt == DType::F32 ? 4 : 2), hw)
                                    .tokensPerSecond;
            std::printf("%-6s %-12s %6.0f MB %13.1f %12.2f %11.2f %8.0f%% %12.2f %12.2f\n", dtypeTorchName(dt),
                        c.gemv.c_str(), double(bytes) / 1e6, r["prefill_tok_s"].get<double>(),
                        r["decode_tok_s"].get<double>(), bound, 100 * r["decode_tok_s"].get<double>() / bound, pred,
                        pred / r["decode_tok_s"].get<double>());
            if (kernel == arch::GemvKernel::None)
                break;
        }
    }

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

    // ---- offload and simulated GPU, fp32, per policy
    {
        const double again = readBandwidthBytesPerSecond();
        std::printf("\nread bandwidth again: %.1f GB/s (bound from here on: the best of the run, %.1f GB/s)\n",
                    again / 1e9, std::max(bw, again) / 1e9);
        bw = std::max(bw, again);
    }
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
    std::printf("\nfp32 offload (simulated GPU: RAM behind a %.1f GB/s link)\n", pcie / 1e9);
    std::printf("%-28s %12s %12s %9s %12s %10s %9s %9s\n", "map, policy", "decode tok/s", "bound tok/s", "of bound",
                "predicted", "pred/meas", "peak RSS", "peak anon");
    std::map<std::string, double> measured;
    for (const Off& o : offs) {
        CaseSpec c;
        c.dir = dirs[DType::F32];
        c.map = o.map;
        c.policy = o.policy;
        c.cold = o.cold;
        c.pcie = o.map == "half-gpu" ? pcie : 0;
        c.prompt = o.cold ? 1 : 16; // cold: the first forward pass reads every weight from the drive
        json r = runOne(c);
        if (r.is_null())
            continue;
        Budgets gb;
        DeviceMap map = mapFor(t32, o.map, &gb);
        std::map<Device, uint64_t> on;
        for (const auto& p : t32.params())
            if (!p.duplicate)
                on[*deviceFor(map, p.name)] += p.numel() * 4;
        std::vector<std::pair<Device, uint64_t>> placement(on.begin(), on.end());
        HardwareProfile phw = hw;
        phw.gpus = {GpuProfile{"simulated", 0, hw.ramBandwidth, pcie, pcie, hw.cpuFlops}};
        if (o.cold)
            phw.ramBytes = 0; // the model's cold case: the page cache holds nothing
        const double pred =
            estimateDecode(placement, 2 * w32 / 4, phw, *policyFromName(o.policy)).tokensPerSecond;
        const double tok = o.cold ? 1.0 / r["first_prefill_s"].get<double>() : r["decode_tok_s"].get<double>();
        measured[o.name] = tok;
        const double bound = bw / double(w32);
        std::printf("%-28s %12.2f %12.2f %8.0f%% %12.2f %10.2f %9.0f %9.0f\n", o.name, tok, bound, 100 * tok / bound,
                    pred, pred / tok, mb(r["peak_rss"].get<uint64_t>()),
                    mb(r["peak_anon"].get<uint64_t>() - r["base_anon"].get<uint64_t>()));
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
    return 0;
}
