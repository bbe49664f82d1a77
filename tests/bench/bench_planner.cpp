// Planning speed for 7B-, 70B- and 405B-class indexes (Llama shapes, nothing
// downloaded): in-process planning against a 5 ms bound, and the whole
// `stowage-cli plan` process against 100 ms. Prints ratios to the
// bounds; these machines are noisy, so it reports the median of many runs.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/planner.h"

#include <QProcess>
#include <QTemporaryDir>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

using namespace stowage;
using clk = std::chrono::steady_clock;

namespace {
double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
} // namespace

int main()
{
    struct Model {
        const char* name;
        fixtures::LlamaShape shape;
        int shards;
    };
    // Llama-2-7B, Llama-3-70B, Llama-3.1-405B shapes; index only, nothing downloaded.
    const std::vector<Model> models{{"7B", {32000, 4096, 11008, 32, 32, 32, false}, 2},
                                    {"70B", {128256, 8192, 28672, 80, 64, 8, false}, 30},
                                    {"405B", {128256, 16384, 53248, 126, 128, 8, false}, 191}};
    QTemporaryDir tmp;
    bool ok = true;
    const double G = 1073741824.0;
    for (const auto& model : models) {
        const std::string dir = tmp.path().toStdString() + "/llama" + model.name;
        std::filesystem::create_directories(dir);
        fixtures::writeSharded(dir, fixtures::llamaTensors(model.shape, DType::BF16), model.shards, true,
                               /*writeShards=*/false);
        fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(model.shape, DType::BF16));

        auto t0 = clk::now();
        Checkpoint ck = Checkpoint::open(dir);
        ModuleTree tree = buildModuleTree(ck, std::nullopt);
        const double openMs = std::chrono::duration<double, std::milli>(clk::now() - t0).count();

        struct Case {
            const char* name;
            Strategy strategy;
            Budgets budgets;
        };
        std::vector<Case> cases{
            {"auto, 8 x 80 GiB + 512 GiB", Strategy::Auto,
             {{Device::gpu(0), 80 * G}, {Device::gpu(1), 80 * G}, {Device::gpu(2), 80 * G}, {Device::gpu(3), 80 * G},
              {Device::gpu(4), 80 * G}, {Device::gpu(5), 80 * G}, {Device::gpu(6), 80 * G}, {Device::gpu(7), 80 * G},
              {Device::cpu(), 512 * G}}},
            {"sequential, 2 x 24 GiB + 64 GiB", Strategy::Sequential,
             {{Device::gpu(0), 24 * G}, {Device::gpu(1), 24 * G}, {Device::cpu(), 64 * G}}},
            {"balanced_low_0, 4 x 141 GiB", Strategy::BalancedLow0,
             {{Device::gpu(0), 141 * G}, {Device::gpu(1), 141 * G}, {Device::gpu(2), 141 * G},
              {Device::gpu(3), 141 * G}, {Device::cpu(), 256 * G}}},
        };
        std::printf("%s-class skeleton: %zu modules, %zu parameters, opened in %.1f ms\n", model.name,
                    tree.modules().size(), tree.params().size(), openMs);
        for (const auto& c : cases) {
            PlanOptions o;
            o.strategy = c.strategy;
            o.maxMemory = c.budgets;
            std::vector<double> ms;
            size_t entries = 0;
            for (int i = 0; i < 30; ++i) {
                auto a = clk::now();
                Plan p = planDeviceMap(tree, o);
                ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - a).count());
                entries = p.deviceMap.size();
            }
            double m = median(ms);
            std::printf("  plan in-process  %-36s %7.3f ms  (%4zu entries)  ratio to 5 ms bound: %.2f\n", c.name, m,
                        entries, m / 5.0);
            ok = ok && m <= 5.0;
        }
        std::vector<double> proc;
        for (int i = 0; i < 15; ++i) {
            QProcess p;
            auto a = clk::now();
            p.start(QStringLiteral(STOWAGE_CLI),
                    {"plan", QString::fromStdString(dir), "--max-memory", "0=80GiB", "--max-memory", "1=80GiB",
                     "--max-memory", "cpu=512GiB", "--json"});
            p.waitForFinished(30000);
            proc.push_back(std::chrono::duration<double, std::milli>(clk::now() - a).count());
            if (p.exitCode() != 0) {
                std::printf("stowage-cli plan failed: %s\n", p.readAllStandardError().constData());
                return 1;
            }
        }
        double pm = median(proc);
        std::printf("  stowage-cli plan process (open index + plan + print)  %7.1f ms  ratio to 100 ms bound: %.2f\n",
                    pm, pm / 100.0);
        ok = ok && pm <= 100.0;
    }
    std::printf("%s\n", ok ? "within bounds" : "OVER A BOUND");
    return ok ? 0 : 1;
}
