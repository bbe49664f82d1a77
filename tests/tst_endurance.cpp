// Endurance: the same work many times over must not make the process grow.
// 1,000 plan -> export -> import cycles in-process (open the demo, build its
// module tree, plan it under budgets that change every cycle, write the
// device-map JSON, read it back and check it), and, where the worker is
// built, 50 load -> generate -> unload cycles in ONE worker process. Each
// prints the resident set as a slope (bytes per cycle, least squares over the
// cycles after a warm-up) and fails only on a slope no allocator noise
// reaches but a real leak would: a module tree kept per plan cycle, a copy
// of the weights kept per load. Mapped files and descriptors must come back
// exactly.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/mappedfile.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"
#ifdef STOWAGE_TEST_WORKER
#include "workerharness.h"

#include <QJsonArray>
#endif

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QtTest>

#include <cmath>

using namespace stowage;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true; // its quarantine holds freed memory: RSS says nothing
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

qint64 statusBytes(const QByteArray& field, qint64 pid = 0)
{
    QFile f(pid ? QStringLiteral("/proc/%1/status").arg(pid) : QStringLiteral("/proc/self/status"));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray& line : f.readAll().split('\n'))
        if (line.startsWith(field + ':'))
            return line.mid(field.size() + 1).trimmed().split(' ').value(0).toLongLong() * 1024;
    return -1;
}

int openDescriptors() { return int(QDir("/proc/self/fd").entryList(QDir::NoDotAndDotDot | QDir::System).size()); }

// Least-squares slope of ys over 0, 1, 2, ... (units of y per step).
double slope(const std::vector<double>& ys)
{
    const double n = double(ys.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
        const double x = double(i);
        sx += x;
        sy += ys[i];
        sxx += x * x;
        sxy += x * ys[i];
    }
    const double d = n * sxx - sx * sx;
    return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

} // namespace

class TestEndurance : public QObject {
    Q_OBJECT
private slots:
    void planExportImportCycles();
#ifdef STOWAGE_TEST_WORKER
    void loadGenerateUnloadCyclesInOneWorker();
#endif
};

void TestEndurance::planExportImportCycles()
{
    const std::string demo = STOWAGE_DEMO_SOURCE_DIR;
    constexpr int kCycles = 1000, kWarmUp = 100;
    // A module tree of the demo kept per cycle would add ~30 kB; noise is a
    // few hundred bytes a cycle at most.
    constexpr double kLeakBytesPerCycle = 4096;
    const size_t mapsBefore = mappedFileCount();
    const int fdsBefore = openDescriptors();
    std::vector<double> rss;
    QElapsedTimer t;
    t.start();
    std::string lastJson;
    for (int i = 0; i < kCycles; ++i) {
        Checkpoint ck = Checkpoint::open(demo);
        const ModuleTree tree = buildModuleTree(ck, std::nullopt);
        PlanOptions o;
        // Budgets that move every cycle, so the maps differ: GPU 0 from 0.5 to
        // 4.5 MB, RAM 1 to 3 MB, the rest on disk.
        o.maxMemory = Budgets{{Device::gpu(0), 500000.0 + 4000.0 * (i % 1000)},
                              {Device::cpu(), 1000000.0 + 2000.0 * (i % 1000)}};
        const Plan plan = planDeviceMap(tree, o);
        const std::string json = deviceMapToJson(plan.deviceMap);
        const DeviceMap back = deviceMapFromJson(json, "cycle.json");
        if (back != plan.deviceMap)
            QFAIL(qPrintable(QString("cycle %1: the imported map differs from the exported one").arg(i)));
        const MapCheck check = validateDeviceMap(tree, back);
        if (!check.errors.empty())
            QFAIL(qPrintable(QString("cycle %1: %2").arg(i).arg(QString::fromStdString(check.errors.front()))));
        lastJson = json;
        if (i >= kWarmUp)
            rss.push_back(double(statusBytes("VmRSS")));
    }
    const double s = slope(rss);
    qInfo("%d plan -> export -> import cycles of the demo in %.1f s; RSS %.1f MiB -> %.1f MiB, slope %.1f bytes/cycle "
          "over the last %zu (a leak: > %.0f)",
          kCycles, t.elapsed() / 1000.0, rss.front() / 1048576.0, rss.back() / 1048576.0, s, rss.size(),
          kLeakBytesPerCycle);
    QVERIFY(lastJson.find("disk") != std::string::npos);
    QCOMPARE(mappedFileCount(), mapsBefore);
    QCOMPARE(openDescriptors(), fdsBefore);
    if (kAddressSanitizer)
        qInfo("AddressSanitizer build: the slope is printed, not checked (freed memory sits in its quarantine; "
              "LeakSanitizer checks leaks at exit instead)");
    else
        QVERIFY2(s < kLeakBytesPerCycle, qPrintable(QString("RSS grows by %1 bytes per cycle").arg(s)));
}

#ifdef STOWAGE_TEST_WORKER
void TestEndurance::loadGenerateUnloadCyclesInOneWorker()
{
    // The demo (6.5 MB of float32) with a 3 MB RAM budget: part in RAM, the
    // rest on disk read from the mapped shards every step. A copy of the
    // weights kept per cycle would add 3 to 6.5 MB a cycle.
    constexpr int kCycles = 50, kWarmUp = 5;
    constexpr double kLeakBytesPerCycle = 1 << 20;
    fixtures::WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    const QJsonObject load{{"cmd", "load"}, {"max_memory", QJsonObject{{"cpu", "3MB"}}}}; // path: the demo
    const QJsonObject generate{{"cmd", "generate"}, {"prompt", "In the beginning"}, {"max_new_tokens", 8},
                               {"greedy", true}, {"ignore_eos", true}};
    std::vector<double> anon, rss;
    QJsonArray firstTokens;
    QElapsedTimer t;
    t.start();
    for (int i = 0; i < kCycles; ++i) {
        const int l = h.request(load, {"loaded", "error"});
        if (h.name(l) != "loaded")
            QFAIL(qPrintable(QString("cycle %1: %2 %3").arg(i).arg(h.name(l), h.message(l))));
        if (i == 0)
            QVERIFY(QJsonDocument(h.at(l).value("device_map").toObject()).toJson().contains("disk"));
        const int d = h.request(generate, {"done", "error"});
        if (h.name(d) != "done")
            QFAIL(qPrintable(QString("cycle %1: %2 %3").arg(i).arg(h.name(d), h.message(d))));
        // The same tokens every time: nothing carries over from one cycle to the next.
        const QJsonArray tokens = h.at(d).value("token_ids").toArray();
        if (i == 0)
            firstTokens = tokens;
        else if (tokens != firstTokens)
            QFAIL(qPrintable(QString("cycle %1 generated other tokens").arg(i)));
        const int u = h.request({{"cmd", "unload"}}, {"unloaded"});
        if (u < 0)
            QFAIL(qPrintable(QString("cycle %1: no unloaded").arg(i)));
        if (i >= kWarmUp) {
            anon.push_back(double(statusBytes("RssAnon", pid)));
            rss.push_back(h.at(u).value("rss_bytes").toDouble());
        }
        h.events.clear(); // what a long session keeps is the worker's business, not the harness's
    }
    const double s = slope(anon), sRss = slope(rss);
    qInfo("%d load -> generate -> unload cycles in worker %lld in %.1f s; anonymous RSS after unload %.1f MiB -> %.1f MiB, "
          "slope %.0f bytes/cycle (RSS %.0f bytes/cycle) over the last %zu (a leak: > %.0f)",
          kCycles, static_cast<long long>(pid), t.elapsed() / 1000.0, anon.front() / 1048576.0, anon.back() / 1048576.0,
          s, sRss, anon.size(), kLeakBytesPerCycle);
    QVERIFY2(s < kLeakBytesPerCycle, qPrintable(QString("anonymous RSS grows by %1 bytes per cycle").arg(s)));
    QVERIFY2(sRss < kLeakBytesPerCycle, qPrintable(QString("RSS grows by %1 bytes per cycle").arg(sRss)));
    QCOMPARE(h.client.processId(), pid); // one worker throughout
}
#endif

QTEST_GUILESS_MAIN(TestEndurance)
#include "tst_endurance.moc"
