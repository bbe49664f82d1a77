// Faults while a model runs, against the real worker process: the disk
// filling up while the offload folder is written, a shard truncated after it
// was mapped (between two requests, and racing a running step: SIGBUS), a
// device budget overrun mid-dispatch, a stop during load and generation, a
// worker whose address space runs out, and the window closed mid-run. Each
// must give a clear message, give the memory back, and leave the worker (or
// a new one) usable. docs/reliability.md says what each does.
//
// Kept apart from tst_worker / tst_runpage, which cover the everyday paths
// (stop mid-generation, cancel mid-dispatch with the Cancel button, SIGKILL).
#include "fixtures.h"
#include "mainwindow.h"
#include "runcontroller.h"
#include "runpage.h"
#include "workerclient.h"
#include "workerharness.h"

#include <QApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QtTest>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

using namespace stowage;
using fixtures::WorkerHarness;
namespace fs = std::filesystem;

namespace {

// Anonymous RSS may settle a little after a release; this far from the
// baseline (LibTorch's pools and glibc's arenas wobble by a few MB) is "back".
constexpr qint64 kBaselineSlack = 12 << 20;

void copyFolder(const QString& from, const QString& to)
{
    fs::remove_all(to.toStdString());
    fs::copy(from.toStdString(), to.toStdString(), fs::copy_options::recursive);
}

// The demo's layers 2..5 on "disk", read in place from the memory-mapped
// shards (float32 safetensors need no conversion); the rest in RAM.
DeviceMap demoMapWithDiskLayers()
{
    DeviceMap m{{"model.embed_tokens", Device::cpu()}, {"model.norm", Device::cpu()},
                {"model.rotary_emb", Device::cpu()}, {"lm_head", Device::cpu()}};
    for (int i = 0; i < 6; ++i)
        m.push_back({"model.layers." + std::to_string(i), i < 2 ? Device::cpu() : Device::disk()});
    return m;
}

// The same map as a worker command's "device_map".
QJsonObject demoMapJson()
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(deviceMapToJson(demoMapWithDiskLayers()))).object();
}

// Sets a resource limit of another process of ours (prlimit(2)), as ulimit would have.
bool setLimit(qint64 pid, enum __rlimit_resource resource, rlim_t soft)
{
    struct rlimit old {};
    if (::prlimit(pid_t(pid), resource, nullptr, &old) != 0)
        return false;
    struct rlimit r = old;
    r.rlim_cur = soft;
    return ::prlimit(pid_t(pid), resource, &r, nullptr) == 0;
}

QJsonObject generateIds(const QJsonArray& ids, int tokens)
{
    return {{"cmd", "generate"}, {"prompt_ids", ids}, {"max_new_tokens", tokens}, {"ignore_eos", true}, {"greedy", true}};
}

} // namespace

class TestFaults : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_demo, m_tiny, m_mid, m_slowProfile, m_mediumProfile, m_crawlProfile;

    // Loads `path` into RAM, generates, unloads: LibTorch and OpenBLAS set
    // up their pools on first use and keep them, so baselines come after one.
    bool warmUp(WorkerHarness& h, const QString& path);
    // The mid model whole on a simulated GPU 0 whose copies run at the
    // profile's PCIe speed (the load crawls).
    QJsonObject throttledMidLoad(const QString& profile) const
    {
        return QJsonObject{{"cmd", "load"},
                           {"path", m_mid},
                           {"dtype", "float32"},
                           {"device_map", QJsonObject{{"transformer", 0}, {"lm_head", 0}}},
                           {"simulate_gpus", true},
                           {"hardware", profile},
                           {"throttle", true}};
    }
private slots:
    void initTestCase();
    void diskFullWhileWritingOffloadFolder();
    void shardTruncatedBetweenRequests();
    void shardTruncatedDuringStepEndsWorkerWithMessage();
    void shardTruncatedDuringCliRunEndsWithOneLine();
    void sigbusInManyThreadsWritesOneLine();
    void describeEndSaysWhatHappened();
    void nextCommandRightAfterTheLastEventIsServed();
    void budgetOverrunMidDispatch();
    void cancelDuringLoadGivesMemoryBack();
    void stopDuringThrottledLoadLandsWithinASlice();
    void stopDuringGenerationReleasesFetchedCopies();
    void addressSpaceExhausted();
    void closingWindowDuringRunEndsWorker();
    void destroyingWindowDuringRunEndsWorker();
};

void TestFaults::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    QApplication::setOrganizationName("StowageTest");
    QApplication::setApplicationName("tst_faults");
    m_demo = QStringLiteral(STOWAGE_BUILD_DEMO_DIR);
    QVERIFY2(QFileInfo::exists(m_demo + "/config.json"), qPrintable(m_demo));
    m_tiny = m_tmp.path() + "/tiny";
    fs::create_directories(m_tiny.toStdString());
    fixtures::writeTinyGpt2(m_tiny.toStdString(), DType::F32, 4, 9);
    // ~7.6 M parameters stored as bf16, computed in fp32: 30 MB of copies.
    m_mid = m_tmp.path() + "/mid";
    fs::create_directories(m_mid.toStdString());
    fixtures::Gpt2Shape s{5000, 256, 256, 8};
    fixtures::writeRandomSafetensors(m_mid.toStdString() + "/model.safetensors", fixtures::gpt2Tensors(s, DType::BF16), 3);
    nlohmann::json c = fixtures::gpt2Config(s, DType::BF16);
    c["n_head"] = 8;
    fixtures::writeJson(m_mid.toStdString() + "/config.json", c);
    // GPUs whose PCIe copies crawl, so a load or a step lasts long enough
    // to stop: 20 kB/s (~0.5 s per tiny layer) and 5 MB/s (~6 s for the mid model).
    auto profile = [&](const QString& name, double pcie) {
        nlohmann::json gpu{{"name", "slow test GPU"}, {"memoryBytes", 1000000000}, {"memoryBandwidth", 1e11},
                           {"h2dPinned", pcie}, {"h2dPageable", pcie}, {"flops", 1e12}};
        nlohmann::json p{{"name", "slow test machine"}, {"ramBytes", 1000000000}, {"ramBandwidth", 1e10},
                         {"diskReadBandwidth", 1e9}, {"cpuFlops", 1e11}, {"gpus", {gpu}}};
        const QString path = m_tmp.path() + "/" + name + ".json";
        fixtures::writeJson(path.toStdString(), p);
        return path;
    };
    m_slowProfile = profile("slow", 20000);
    m_mediumProfile = profile("medium", 5e6);
    m_crawlProfile = profile("crawl", 200); // 200 B/s: each tensor of the mid model takes 5 s or more
}

bool TestFaults::warmUp(WorkerHarness& h, const QString& path)
{
    if (h.name(h.request({{"cmd", "load"}, {"path", path}, {"dtype", "float32"}}, {"loaded", "error"})) != "loaded")
        return false;
    if (h.name(h.request(generateIds({1, 2, 3}, 4), {"done", "error"})) != "done")
        return false;
    return h.name(h.request({{"cmd", "unload"}}, {"unloaded"})) == "unloaded";
}

void TestFaults::diskFullWhileWritingOffloadFolder()
{
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    QVERIFY(warmUp(h, m_mid));
    const qint64 baseline = fixtures::rssAnon(pid);
    // RLIMIT_FSIZE on the running worker stands in for a full disk: its
    // writes past 64 kB fail (EFBIG; the worker ignores SIGXFSZ).
    QVERIFY(setLimit(pid, RLIMIT_FSIZE, 64 << 10));
    const QString off = m_tmp.path() + "/off-full";
    const QJsonObject load{{"cmd", "load"}, {"path", m_mid}, {"dtype", "float32"},
                           {"max_memory", QJsonObject{{"cpu", 1000}}}, {"offload_folder", off}};
    const int e = h.request(load, {"loaded", "error"});
    QCOMPARE(h.name(e), QString("error"));
    const QString msg = h.message(e);
    qInfo("disk full: %s", qPrintable(msg));
    QVERIFY2(msg.contains(off) && msg.contains(".dat: cannot write the offload file") && msg.contains("too large"),
             qPrintable(msg));
    QCOMPARE(h.at(e).value("kind").toString(), QString("input"));
    QVERIFY2(!QFileInfo::exists(off + "/index.json"), "a folder whose writing failed must not look complete");
    QVERIFY(h.client.isRunning());
    const qint64 after = fixtures::rssAnon(pid);
    qInfo("anonymous RSS: %.1f MiB before, %.1f MiB after the failed load", baseline / 1048576.0, after / 1048576.0);
    QVERIFY2(std::abs(after - baseline) < kBaselineSlack, "the failed load kept its memory");
    // With room on the disk again the same worker completes the same folder.
    QVERIFY(setLimit(pid, RLIMIT_FSIZE, RLIM_INFINITY));
    const int l = h.request(load, {"loaded", "error"});
    QVERIFY2(h.name(l) == "loaded", qPrintable(h.message(l)));
    QVERIFY(QFileInfo::exists(off + "/index.json"));
    QCOMPARE(h.name(h.request(generateIds({1, 2, 3}, 3), {"done", "error"})), QString("done"));
    QCOMPARE(h.client.processId(), pid);
}

void TestFaults::shardTruncatedBetweenRequests()
{
    const QString copy = m_tmp.path() + "/demo-shrinks";
    copyFolder(m_demo, copy);
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    QVERIFY(warmUp(h, m_demo));
    const qint64 baseline = fixtures::rssAnon(pid);
    const int l = h.request({{"cmd", "load"}, {"path", copy}, {"device_map", demoMapJson()}}, {"loaded", "error"});
    QVERIFY2(h.name(l) == "loaded", qPrintable(h.message(l)));
    QCOMPARE(h.name(h.request(generateIds({0, 5, 6}, 3), {"done", "error"})), QString("done"));

    // Cut the shard holding layers 2 and 3 (read from the mapping every step) in half.
    const QString shard = copy + "/model-00002-of-00004.safetensors";
    const qint64 size = QFileInfo(shard).size();
    QCOMPARE(::truncate(QFile::encodeName(shard).constData(), size / 2), 0);
    const QString expected = QStringLiteral("model-00002-of-00004.safetensors: shrank from %1 to %2 bytes while in use; "
                                            "reopen the checkpoint")
                                 .arg(size)
                                 .arg(size / 2);
    int e = h.request(generateIds({0, 5, 6}, 3), {"done", "error"});
    QCOMPARE(h.name(e), QString("error"));
    QVERIFY2(h.message(e).endsWith(expected), qPrintable(h.message(e)));
    QCOMPARE(h.at(e).value("kind").toString(), QString("input"));
    e = h.request({{"cmd", "step"}, {"prompt_ids", QJsonArray{0, 5}}, {"unit_delay_ms", 0}}, {"done", "error"});
    QCOMPARE(h.name(e), QString("error"));
    QVERIFY2(h.message(e).endsWith(expected), qPrintable(h.message(e)));
    // Usable after unload: the memory is back and an intact checkpoint runs.
    QCOMPARE(h.name(h.request({{"cmd", "unload"}}, {"unloaded"})), QString("unloaded"));
    const qint64 after = fixtures::rssAnon(pid);
    qInfo("anonymous RSS: %.1f MiB before the load, %.1f MiB after the unload", baseline / 1048576.0, after / 1048576.0);
    QVERIFY(std::abs(after - baseline) < kBaselineSlack);
    QCOMPARE(h.name(h.request({{"cmd", "load"}, {"path", m_demo}, {"device_map", demoMapJson()}},
                              {"loaded", "error"})),
             QString("loaded"));
    QCOMPARE(h.name(h.request(generateIds({0, 5, 6}, 3), {"done", "error"})), QString("done"));
    QCOMPARE(h.client.processId(), pid);
}

void TestFaults::shardTruncatedDuringCliRunEndsWithOneLine()
{
    // stowage-cli run in slow motion (50 ms before each unit, ~0.5 s a
    // step); once tokens stream, the shard of layers 4 and 5 (read from the
    // mapping every step) is cut to nothing. Mid-step that read raises
    // SIGBUS; between steps the size check sees it: either way one line
    // naming the file, status 2, no crash.
    const QString copy = m_tmp.path() + "/demo-cli-race";
    copyFolder(m_demo, copy);
    const QString mapFile = m_tmp.path() + "/cli-race-map.json";
    {
        QFile f(mapFile);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(deviceMapToJson(demoMapWithDiskLayers())));
    }
    QProcess p;
    QByteArray out;
    connect(&p, &QProcess::readyReadStandardOutput, this, [&] { out += p.readAllStandardOutput(); });
    p.start(QStringLiteral(STOWAGE_CLI), {"run", copy, "--device-map", mapFile, "--prompt-ids", "0,5,6",
                                          "--max-new-tokens", "400", "--ignore-eos", "--unit-delay", "0.05",
                                          "--policy", "accelerate-like"});
    QVERIFY(p.waitForStarted(10000));
    // The prompt's text comes first, then a piece per token: wait for two tokens.
    QTRY_VERIFY_WITH_TIMEOUT(out.size() > 0, 60000);
    const int promptText = out.size();
    QTRY_VERIFY_WITH_TIMEOUT(out.size() > promptText + 1, 60000);
    const QString shard = copy + "/model-00003-of-00004.safetensors";
    const qint64 size = QFileInfo(shard).size();
    QCOMPARE(::truncate(QFile::encodeName(shard).constData(), 0), 0);
    QVERIFY2(p.waitForFinished(60000), "stowage-cli run went on after its shard was cut");
    const QString err = QString::fromUtf8(p.readAllStandardError());
    qInfo("stowage-cli run: %s", qPrintable(err.trimmed()));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit); // not killed by SIGBUS
    QCOMPARE(p.exitCode(), 2);
    QCOMPARE(err.count(QLatin1Char('\n')), 1);
    QVERIFY2(err.startsWith("stowage-cli: ") && err.contains(shard + ": shrank from " + QString::number(size) +
                                                             " to 0 bytes while in use") &&
                 err.trimmed().endsWith("reopen the checkpoint"),
             qPrintable(err));
}

void TestFaults::sigbusInManyThreadsWritesOneLine()
{
    // The decode kernels read a layer on two threads and the prefetcher on a
    // third, so a shard cut mid-step can fault on several at once (CI once
    // printed the line twice). Four threads released together onto lost
    // pages, 40 times: always exactly one line, status 74.
    const int threads = 4;
    const QString file = m_tmp.path() + "/sigbus-probe.bin";
    for (int round = 0; round < 40; ++round) {
        {
            QFile f(file);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            QVERIFY(f.write(QByteArray(threads * 65536, 'x')) == threads * 65536);
        }
        QProcess p;
        p.start(QStringLiteral(STOWAGE_SIGBUS_PROBE), {file, QString::number(threads)});
        QVERIFY2(p.waitForFinished(60000), "the probe hung");
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QVERIFY2(p.exitCode() == 74, qPrintable(QString("round %1, status %2: %3").arg(round).arg(p.exitCode()).arg(err)));
        QVERIFY2(err.count(QLatin1Char('\n')) == 1 && err.startsWith("probe: " + file + ": shrank from " +
                                                                       QString::number(threads * 65536) + " to 0 bytes"),
                 qPrintable(QString("round %1: %2").arg(round).arg(err)));
    }
}

void TestFaults::shardTruncatedDuringStepEndsWorkerWithMessage()
{
    // The size check runs before the step; the truncation comes while the
    // step crawls through its units (250 ms pause before each), so a disk
    // layer's read from the mapping hits SIGBUS. The worker names the file
    // and exits with its own status; the controller says so in words.
    const QString copy = m_tmp.path() + "/demo-race";
    copyFolder(m_demo, copy);
    RunController c(QStringLiteral(STOWAGE_CLI));
    QSignalSpy loaded(&c, &RunController::loaded);
    QSignalSpy ended(&c, &RunController::workerEnded);
    QSignalSpy done(&c, &RunController::done);
    QSignalSpy failed(&c, &RunController::failed);
    LoadRequest r;
    r.path = copy;
    r.deviceMap = demoMapWithDiskLayers();
    r.policy = "accelerate-like";
    c.dispatch(r);
    QVERIFY(loaded.wait(60000));
    const qint64 pid = c.workerPid();
    int traces = 0;
    connect(&c, &RunController::traceAvailable, this, [&] { ++traces; });
    GenerateRequest g;
    g.promptIds = {0, 5, 6};
    c.step(g, 250);
    // The first unit's trace: the step has passed its size check. Layers 4
    // and 5 (the shard cut below) come over a second later.
    QTRY_VERIFY_WITH_TIMEOUT(traces > 0, 20000);
    QCOMPARE(done.count(), 0);
    const QString shard = copy + "/model-00003-of-00004.safetensors";
    const qint64 size = QFileInfo(shard).size();
    QCOMPARE(::truncate(QFile::encodeName(shard).constData(), 0), 0);
    QVERIFY2(ended.wait(20000), qPrintable(QString("done %1, failed %2; stderr: %3")
                                               .arg(done.count())
                                               .arg(failed.isEmpty() ? QString() : failed[0][0].toString(),
                                                    c.client()->stderrLog())));
    const QString description = ended[0][0].toString();
    qInfo("worker ended: %s", qPrintable(description));
    QVERIFY(!ended[0][1].toBool()); // not the user's doing
    QVERIFY2(description.contains(QStringLiteral("model-00003-of-00004.safetensors shrank from %1 to 0 bytes on disk while "
                                                 "stepping one token")
                                      .arg(size)) &&
                 description.endsWith("reopen the checkpoint") && description.contains("status 74"),
             qPrintable(description));
    QVERIFY2(c.client()->stderrLog().contains("shrank from " + QString::number(size) + " to 0 bytes while in use (SIGBUS"),
             qPrintable(c.client()->stderrLog()));
    QCOMPARE(done.count(), 0);
    QCOMPARE(failed.count(), 0);
    QCOMPARE(c.state(), RunController::State::NoWorker);
    QVERIFY(!fixtures::processRunning(pid));
    // A new worker runs the intact demo.
    r.path = m_demo;
    c.dispatch(r);
    QVERIFY(loaded.wait(60000));
    QVERIFY(c.workerPid() != pid);
    g.maxNewTokens = 3;
    c.generate(g);
    QVERIFY2(done.wait(60000), qPrintable(failed.isEmpty() ? QString() : failed.last()[0].toString()));
    QCOMPARE(done.last()[0].value<DoneInfo>().tokenIds.size(), 3);
}

void TestFaults::describeEndSaysWhatHappened()
{
    const QString stderrTail = "some LibTorch warning\n"
                               "stowage-cli worker: /models/x/model-00002-of-00004.safetensors: shrank from 1478536 to 0 "
                               "bytes while in use (SIGBUS reading byte 4096); the worker stopped; reopen the checkpoint\n";
    QCOMPARE(WorkerClient::describeEnd(74 /* docs/worker-protocol.md */, QProcess::NormalExit, false,
                                       "generating (token 3)", stderrTail),
             QString("the worker stopped (status 74): /models/x/model-00002-of-00004.safetensors shrank from 1478536 to 0 "
                     "bytes on disk while generating (token 3); reopen the checkpoint"));
    // Without the line (stderr lost): still says what kind of fault it was.
    QVERIFY(WorkerClient::describeEnd(74, QProcess::NormalExit, false, "loading", {})
                .contains("a memory-mapped checkpoint file shrank on disk while loading"));
    // An allocation that failed where no request could report it.
    QCOMPARE(WorkerClient::describeEnd(75, QProcess::NormalExit, false, "generating (token 2)",
                                       "stowage-cli worker: out of memory (an allocation failed outside any request: "
                                       "std::bad_alloc); the worker stopped\n"),
             QString("the worker ran out of memory (status 75: an allocation failed; a memory limit such as ulimit -v or "
                     "a cgroup's, or RAM itself, is too small for this plan) while generating (token 2)"));
    // Other endings are as before.
    QVERIFY(WorkerClient::describeEnd(9, QProcess::CrashExit, false, "generating", stderrTail).contains("SIGKILL"));
    QCOMPARE(WorkerClient::describeEnd(1, QProcess::NormalExit, false, {}, stderrTail),
             QString("the worker exited with status 1"));
}

void TestFaults::nextCommandRightAfterTheLastEventIsServed()
{
    // A client may answer `loaded` or `done` at once, as RunController does
    // for the window: the worker is idle by the time it writes them, never
    // "busy" (it was, now and then, until the last event went out last).
    RunController c(QStringLiteral(STOWAGE_CLI));
    QStringList errors;
    int rounds = 0;
    LoadRequest r;
    r.path = m_demo;
    r.deviceMap = demoMapWithDiskLayers();
    r.policy = "accelerate-like";
    GenerateRequest g;
    g.promptIds = {0, 5, 6};
    g.maxNewTokens = 1;
    bool stepped = false;
    connect(&c, &RunController::failed, this, [&](const QString& m) { errors << m; });
    connect(&c, &RunController::loaded, this, [&] {
        stepped = false;
        c.generate(g);
    });
    connect(&c, &RunController::done, this, [&] {
        if (!stepped) {
            stepped = true;
            c.step(g, 0);
        } else {
            c.unload();
        }
    });
    connect(&c, &RunController::unloaded, this, [&] {
        if (++rounds < 6)
            c.dispatch(r);
    });
    c.dispatch(r);
    QTRY_VERIFY_WITH_TIMEOUT(rounds == 6 || !errors.isEmpty() || c.state() == RunController::State::NoWorker, 120000);
    QVERIFY2(errors.isEmpty(), qPrintable(errors.join("; ")));
}

void TestFaults::budgetOverrunMidDispatch()
{
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    QVERIFY(warmUp(h, m_mid));
    const qint64 baseline = fixtures::rssAnon(pid);
    // 30 MB of float32 weights for a simulated GPU 0 that may hold 12 MB:
    // the budget runs out part-way, after several layers were placed.
    QJsonObject load{{"cmd", "load"},
                     {"path", m_mid},
                     {"dtype", "float32"},
                     {"device_map", QJsonObject{{"transformer", 0}, {"lm_head", 0}}},
                     {"max_memory", QJsonObject{{"0", 12000000}}},
                     {"simulate_gpus", true}};
    const int e = h.request(load, {"loaded", "error"});
    QCOMPARE(h.name(e), QString("error"));
    const QString msg = h.message(e);
    qInfo("budget overrun: %s", qPrintable(msg));
    QVERIFY2(msg.startsWith("device 0: out of memory while placing transformer.h.") && msg.contains("the budget is 12000000"),
             qPrintable(msg));
    // Several layers were in before it failed.
    double reached = 0;
    for (int i = 0; i < e; ++i)
        if (h.name(i) == "progress")
            reached = std::max(reached, h.at(i).value("fraction").toDouble());
    QVERIFY2(reached > 0.1, qPrintable(QString::number(reached)));
    const qint64 after = fixtures::rssAnon(pid);
    qInfo("anonymous RSS: %.1f MiB before, %.1f MiB after the failed dispatch", baseline / 1048576.0, after / 1048576.0);
    QVERIFY(std::abs(after - baseline) < kBaselineSlack);
    // A bigger budget: the same worker loads and runs it.
    load["max_memory"] = QJsonObject{{"0", 100000000}};
    const int l = h.request(load, {"loaded", "error"});
    QVERIFY2(h.name(l) == "loaded", qPrintable(h.message(l)));
    QCOMPARE(h.name(h.request(generateIds({1, 2, 3}, 3), {"done", "error"})), QString("done"));
    QCOMPARE(h.client.processId(), pid);
}

void TestFaults::cancelDuringLoadGivesMemoryBack()
{
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    QVERIFY(warmUp(h, m_mid));
    const qint64 baseline = fixtures::rssAnon(pid);
    // Every copy to the simulated GPU crawls: the load takes ~6 s unless stopped.
    int from = int(h.events.size());
    h.client.send(throttledMidLoad(m_mediumProfile));
    // Stop once a few tensors are in.
    int p = -1;
    while ((p = h.waitForAny({"progress", "loaded", "error"}, from)) >= 0 && h.name(p) == "progress" &&
           h.at(p).value("fraction").toDouble() < 0.02)
        from = p + 1;
    QCOMPARE(h.name(p), QString("progress"));
    const qint64 peak = fixtures::rssAnon(pid);
    h.client.stop();
    const int c = h.waitForAny({"cancelled", "loaded", "error"}, p, 20000);
    QCOMPARE(h.name(c), QString("cancelled"));
    QCOMPARE(h.at(c).value("what").toString(), QString("load"));
    const qint64 after = fixtures::rssAnon(pid);
    qInfo("anonymous RSS: %.1f MiB before, %.1f MiB when stopped, %.1f MiB after the cancel", baseline / 1048576.0,
          peak / 1048576.0, after / 1048576.0);
    QVERIFY(std::abs(after - baseline) < kBaselineSlack);
    // Nothing is loaded; the same worker loads again.
    QCOMPARE(h.at(h.request({{"cmd", "unload"}}, {"unloaded"})).value("was_loaded").toBool(), false);
    QCOMPARE(h.name(h.request({{"cmd", "load"}, {"path", m_tiny}}, {"loaded", "error"})), QString("loaded"));
    QCOMPARE(h.name(h.request(generateIds({1, 2}, 2), {"done", "error"})), QString("done"));
}

void TestFaults::stopDuringThrottledLoadLandsWithinASlice()
{
    // Copies to the simulated GPU crawl at 200 B/s, so the load sits in the
    // first tensor's copy for seconds. A stop lands within one of the
    // pause's 10 ms slices, not after the copy.
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const int from = int(h.events.size());
    h.client.send(throttledMidLoad(m_crawlProfile));
    const int p = h.waitForAny({"progress", "loaded", "error"}, from);
    QCOMPARE(h.name(p), QString("progress")); // sent as the first tensor's copy starts
    QTest::qWait(200);
    QElapsedTimer t;
    t.start();
    h.client.stop();
    const int c = h.waitForAny({"cancelled", "loaded", "error"}, p, 30000);
    const qint64 latency = t.elapsed();
    QCOMPARE(h.name(c), QString("cancelled"));
    qInfo("stop during a throttled load: cancelled %lld ms later", static_cast<long long>(latency));
    // Hang guard, 50x a slice and a round trip; a copy finished first would take 5 s or more.
    QVERIFY2(latency < 2500, qPrintable(QString::number(latency)));
    QCOMPARE(h.name(h.request({{"cmd", "load"}, {"path", m_tiny}}, {"loaded", "error"})), QString("loaded"));
}

void TestFaults::stopDuringGenerationReleasesFetchedCopies()
{
    // The tiny model's layers in RAM, copied to a simulated GPU 0 at a crawl
    // before each runs: stopping mid-copy must drop what was fetched.
    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const QJsonObject load{{"cmd", "load"},
                           {"path", m_tiny},
                           {"device_map", QJsonObject{{"transformer.wte", 0},
                                                      {"transformer.wpe", 0},
                                                      {"transformer.h", "cpu"},
                                                      {"transformer.ln_f", 0},
                                                      {"lm_head", 0}}},
                           {"simulate_gpus", true},
                           {"hardware", m_slowProfile},
                           {"throttle", true},
                           {"policy", "accelerate-like"}};
    const int l = h.request(load, {"loaded", "error"});
    QVERIFY2(h.name(l) == "loaded", qPrintable(h.message(l)));
    // GPU 0's resident bytes as the samples report them, once settled.
    auto gpuResident = [&](int from) {
        const int s = h.waitFor("sample", from, 5000);
        return s < 0 ? -1.0 : h.at(s).value("resident").toObject().value("0").toDouble(-1);
    };
    const double loadedBytes = gpuResident(l + 1);
    QVERIFY(loadedBytes > 0);
    const int g = int(h.events.size());
    h.client.send(generateIds({1, 2}, 1000));
    QTest::qWait(700); // inside a slow copy
    QCOMPARE(h.waitFor("done", g, 0), -1);
    // Copies on GPU 0 beyond its own weights while the step runs.
    double during = 0;
    for (int i = g; i < int(h.events.size()); ++i)
        if (h.name(i) == "sample")
            during = std::max(during, h.at(i).value("resident").toObject().value("0").toDouble());
    h.client.stop();
    const int d = h.waitFor("done", g, 20000);
    QVERIFY(d >= 0);
    QVERIFY(h.at(d).value("stopped").toBool());
    const double afterBytes = gpuResident(d + 1);
    qInfo("GPU 0 resident: %.0f bytes loaded, up to %.0f while stepping, %.0f after the stop", loadedBytes, during,
          afterBytes);
    QVERIFY(during > loadedBytes);
    QCOMPARE(afterBytes, loadedBytes);
    QCOMPARE(h.name(h.request({{"cmd", "unload"}}, {"unloaded"})), QString("unloaded"));
}

void TestFaults::addressSpaceExhausted()
{
    // The kernel's OOM killer sends SIGKILL (tst_worker, tst_runpage cover
    // that). Its other face is an allocation that fails: a ulimit -v, set
    // here on the running worker, that leaves room to map the checkpoint but
    // not for its float32 copies. The load fails with an out-of-memory error
    // and the worker goes on, or, where the failure hits outside any request,
    // it ends saying it ran out of memory; either way a new run works.
    const QString big = m_tmp.path() + "/big-sparse";
    fs::create_directories(big.toStdString());
    fixtures::Gpt2Shape s{4000, 256, 512, 8}; // 27 M parameters: 54 MB as bf16 (sparse zeros), 108 MB as float32
    fixtures::writeSafetensorsFile(big.toStdString() + "/model.safetensors", fixtures::gpt2Tensors(s, DType::BF16), true);
    nlohmann::json c = fixtures::gpt2Config(s, DType::BF16);
    c["n_head"] = 8;
    fixtures::writeJson(big.toStdString() + "/config.json", c);
    const qint64 fileBytes = QFileInfo(big + "/model.safetensors").size();

    WorkerHarness h(QStringLiteral(STOWAGE_CLI));
    QVERIFY(h.start() >= 0);
    const qint64 pid = h.client.processId();
    QVERIFY(warmUp(h, m_tiny));
    const qint64 baseline = fixtures::rssAnon(pid);
    const qint64 vm = fixtures::procStatusBytes(pid, "VmSize");
    QVERIFY(setLimit(pid, RLIMIT_AS, rlim_t(vm + fileBytes + (24 << 20))));
    const int e = h.request({{"cmd", "load"}, {"path", big}, {"dtype", "float32"}}, {"loaded", "error"});
    if (e >= 0) {
        QCOMPARE(h.name(e), QString("error"));
        const QString msg = h.message(e);
        qInfo("address space exhausted: %s", qPrintable(msg));
        // The weight store names the device and the tensor it could not
        // hold; an allocation failing elsewhere in the request is "memory".
        const QString kind = h.at(e).value("kind").toString();
        QVERIFY2(kind == "input" || kind == "memory", qPrintable(kind));
        QVERIFY2((msg.startsWith("device cpu: cannot hold transformer.") ||
                  msg.startsWith("out of memory while loading: the worker could not allocate more (")) &&
                     msg.contains("allocate memory") && !msg.contains('\n'),
                 qPrintable(msg));
        const qint64 after = fixtures::rssAnon(pid);
        qInfo("anonymous RSS: %.1f MiB before, %.1f MiB after the failed load", baseline / 1048576.0, after / 1048576.0);
        QVERIFY(std::abs(after - baseline) < kBaselineSlack);
        // Under the same limit, a model that fits loads and runs in the same worker.
        const int l = h.request({{"cmd", "load"}, {"path", m_tiny}}, {"loaded", "error"});
        QVERIFY2(h.name(l) == "loaded", qPrintable(h.message(l)));
        QCOMPARE(h.name(h.request(generateIds({1, 2, 3}, 3), {"done", "error"})), QString("done"));
        QCOMPARE(h.client.processId(), pid);
        return;
    }
    // Ended instead: it must say why.
    QVERIFY(h.ended);
    qInfo("worker ended: %s", qPrintable(h.endedDescription));
    QVERIFY2(h.endedDescription.contains("ran out of memory"), qPrintable(h.endedDescription + h.client.stderrLog()));
    WorkerHarness again(QStringLiteral(STOWAGE_CLI));
    QVERIFY(again.start() >= 0);
    QCOMPARE(again.name(again.request({{"cmd", "load"}, {"path", m_tiny}}, {"loaded", "error"})), QString("loaded"));
}

void TestFaults::closingWindowDuringRunEndsWorker()
{
    auto* w = new MainWindow([] {
        MainWindow::Options o;
        o.probeMachine = false;
        o.restoreSettings = false;
        o.workerProgram = QStringLiteral(STOWAGE_CLI);
        return o;
    }());
    w->show();
    RunController* c = w->runPage()->controller();
    QSignalSpy loaded(c, &RunController::loaded);
    QSignalSpy ended(c, &RunController::workerEnded);
    LoadRequest r;
    r.path = m_tiny;
    r.deviceMap = DeviceMap{{"transformer.wte", Device::gpu(0)}, {"transformer.wpe", Device::gpu(0)},
                            {"transformer.h", Device::cpu()}, {"transformer.ln_f", Device::gpu(0)},
                            {"lm_head", Device::gpu(0)}};
    r.simulateGpus = true;
    r.hardware = hardwareFromSpec(m_slowProfile.toStdString());
    r.throttle = true;
    c->dispatch(r);
    QVERIFY(loaded.wait(60000));
    GenerateRequest g;
    g.promptIds = {1, 2};
    g.maxNewTokens = 1000;
    g.ignoreEos = true;
    c->generate(g);
    QTest::qWait(300);
    QCOMPARE(c->state(), RunController::State::Generating);
    const qint64 pid = c->workerPid();
    QVERIFY(fixtures::processRunning(pid));
    QElapsedTimer t;
    t.start();
    QVERIFY(w->close());
    // The worker is asked to quit, stops within a unit and is gone (reaped).
    QTRY_VERIFY_WITH_TIMEOUT(ended.count() == 1, 10000);
    qInfo("window closed mid-generation: worker gone after %lld ms (%s)", static_cast<long long>(t.elapsed()),
          qPrintable(ended[0][0].toString()));
    QVERIFY(!fixtures::processRunning(pid));
    QVERIFY(ended[0][1].toBool()); // the user's doing, not a crash
    delete w;
}

void TestFaults::destroyingWindowDuringRunEndsWorker()
{
    // As the app does on quit: the window closes and is destroyed at once,
    // with no event loop left to wait in. Nothing hangs, the worker is gone.
    // Owned here: a failed check below still destroys it, and its worker.
    auto w = std::make_unique<MainWindow>([] {
        MainWindow::Options o;
        o.probeMachine = false;
        o.restoreSettings = false;
        o.workerProgram = QStringLiteral(STOWAGE_CLI);
        return o;
    }());
    RunController* c = w->runPage()->controller();
    QSignalSpy loaded(c, &RunController::loaded);
    LoadRequest r;
    r.path = m_mid;
    r.dtype = "float32";
    r.deviceMap = DeviceMap{{"transformer", Device::gpu(0)}, {"lm_head", Device::gpu(0)}};
    r.simulateGpus = true;
    r.hardware = hardwareFromSpec(m_mediumProfile.toStdString());
    r.throttle = true;
    c->dispatch(r); // copies to the simulated GPU crawl: ~6 s
    QTRY_VERIFY_WITH_TIMEOUT(c->state() == RunController::State::Loading, 30000);
    QTest::qWait(200);
    QCOMPARE(c->state(), RunController::State::Loading); // still dispatching
    const qint64 pid = c->workerPid();
    QVERIFY(fixtures::processRunning(pid));
    QElapsedTimer t;
    t.start();
    w->close();
    w.reset();
    qInfo("window destroyed mid-dispatch in %lld ms", static_cast<long long>(t.elapsed()));
    QVERIFY(t.elapsed() < 10000);
    QVERIFY(!fixtures::processRunning(pid));
}

QTEST_MAIN(TestFaults)
#include "tst_faults.moc"
