#include "screenshot.h"

#include "budgetmodel.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "plancontrols.h"
#include "runcharts.h"
#include "runpage.h"
#include "deploypanel.h"
#include "shoppanel.h"
#include "rundata.h"
#include "stowage/costmodel.h"
#include "stowage/kvcache.h"

#include <QRegularExpression>
#include <QCommandLineParser>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSpinBox>
#include <QEventLoop>
#include <QPixmap>
#include <QTabWidget>
#include <QTimer>

#include <cstdio>

namespace stowage {

void addPlanOptions(QCommandLineParser& p)
{
    p.addOption({"screenshot", "Render the main window after planning to FILE (PNG) and exit.", "FILE"});
    p.addOption({"max-memory", "Budget for a device, as stowage-cli: 0=20GiB, cpu=64GB (repeatable).", "DEV=SIZE"});
    p.addOption({"hardware", "Simulated GPUs from a hardware preset: h100-80gb, 2xrtx4090, …", "PRESET"});
    p.addOption({"strategy", "auto, balanced, balanced_low_0, sequential or experts_in_ram.", "S"});
    p.addOption({"dtype", "float16, bfloat16 or float32 (default: the checkpoint's).", "DT"});
    p.addOption({"reference", "transformers or accelerate.", "R"});
    p.addOption({"no-split", "A module class never split across devices (repeatable).", "CLASS"});
    p.addOption({"kv-cache", "Keep room for the KV cache: CONTEXT or CONTEXTxBATCH.", "CTX"});
    p.addOption({"device-map", "Show this device-map JSON instead of planning.", "FILE"});
    p.addOption({"size", "Window size for --screenshot, WIDTHxHEIGHT (default 1600x1000).", "WxH"});
    p.addOption({"dark", "Dark palette."});
    p.addOption({"run-tokens", "With --screenshot: dispatch the map, generate N tokens, then capture the Run page.", "N"});
    p.addOption({"prompt", "Prompt for --run-tokens (default: the run page's).", "TEXT"});
    p.addOption({"policy", "Execution policy for --run-tokens: accelerate-like, prefetch, compute-where-it-lives.", "POLICY"});
    p.addOption({"offload-folder", "Offload folder for --run-tokens.", "DIR"});
    p.addOption({"plan-view", "The Plan page's lower tab to capture: speed (default), context, shop or deploy.", "VIEW"});
    p.addOption({"deploy", "With --plan-view deploy: GPU preset, nodes and GPUs a node, and optionally the engine, "
                           "e.g. rtx4090,2,2 or h100-80gb,1,1,llama.cpp.", "G,N,P[,E]"});
    p.addOption({"shop-speed", "With --plan-view shop: the decode speed to reach, tok/s (default 20).", "TOKS"});
    p.addOption({"run-view", "With --run-tokens: the tab to capture, graphs (default) or timeline.", "VIEW"});
    p.addOption({"throttle", "With --run-tokens: simulated GPUs copy at their preset's PCIe speed."});
}

QString applyPlanOptions(MainWindow& w, const QCommandLineParser& p)
{
    PlanningPage* page = w.planningPage();
    BudgetModel* m = w.budgetModel();
    try {
        if (p.isSet("hardware")) {
            const HardwareProfile hw = hardwarePreset(p.value("hardware").toStdString());
            // "2xrtx4090" is two of preset "rtx4090"; "rtx4090" has an x of its own.
            const QString spec = p.value("hardware");
            const QRegularExpressionMatch n = QRegularExpression(QStringLiteral("^\\d+x(.+)$")).match(spec);
            const QString preset = n.hasMatch() ? n.captured(1) : spec;
            for (const GpuProfile& g : hw.gpus)
                m->addSimulatedGpu(QString::fromStdString(g.name), preset, g.memoryBytes);
        }
        for (const QString& spec : p.values("max-memory")) {
            const DeviceBudget b = parseBudgetSpec(spec.toStdString(), "--max-memory " + spec.toStdString());
            const quint64 bytes = quint64(b.bytes);
            // GPUs this machine lacks are simulated, of the budget's size.
            while (b.device.kind == Device::Gpu && m->gpuCount() <= b.device.index)
                m->addSimulatedGpu(QObject::tr("GPU"), QString(), bytes);
            m->setBudget(m->rowOf(b.device), bytes);
        }
        if (p.isSet("kv-cache")) {
            const std::string v = p.value("kv-cache").toStdString();
            const KvSpec kv = parseKvSpec(v, "--kv-cache " + v);
            page->controls()->setKvCache(std::make_pair(kv.context, kv.batch));
        }
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    if (p.isSet("strategy")) {
        const auto s = strategyFromName(p.value("strategy").toStdString());
        if (!s)
            return QStringLiteral("--strategy %1: expected auto, balanced, balanced_low_0, sequential or experts_in_ram").arg(p.value("strategy"));
        page->controls()->setStrategy(*s);
    }
    if (p.isSet("dtype")) {
        const auto d = dtypeFromTorchName(p.value("dtype").toStdString());
        if (!d)
            return QStringLiteral("--dtype %1: expected float16, bfloat16 or float32").arg(p.value("dtype"));
        page->controls()->setDType(*d);
    }
    if (p.isSet("reference")) {
        const auto r = referenceFromName(p.value("reference").toStdString());
        if (!r)
            return QStringLiteral("--reference %1: expected transformers or accelerate").arg(p.value("reference"));
        page->controls()->setReference(*r);
    }
    if (p.isSet("no-split"))
        page->controls()->setNoSplit(p.values("no-split").join(QLatin1Char(',')));
    if (p.isSet("plan-view")) {
        const QString v = p.value("plan-view");
        const QStringList views{"speed", "context", "shop", "deploy"};
        if (!views.contains(v))
            return QStringLiteral("--plan-view %1: expected speed, context, shop or deploy").arg(v);
        if (p.isSet("deploy")) {
            const QStringList f = p.value("deploy").split(QLatin1Char(','));
            DeployPanel* d = page->deployPanel();
            const int gpu = f.size() == 3 || f.size() == 4 ? d->gpuBox()->findData(f[0]) : -1;
            const int engine = f.size() == 4 ? d->engineBox()->findText(f[3]) : d->engineBox()->currentIndex();
            bool okN = false, okP = false;
            const int nodes = f.value(1).toInt(&okN), per = f.value(2).toInt(&okP);
            if (gpu < 0 || engine < 0 || !okN || !okP || nodes < 1 || per < 1)
                return QStringLiteral("--deploy %1: expected PRESET,NODES,GPUS_PER_NODE[,ENGINE] such as rtx4090,2,2 "
                                      "or h100-80gb,1,1,llama.cpp")
                    .arg(p.value("deploy"));
            d->engineBox()->setCurrentIndex(engine);
            d->gpuBox()->setCurrentIndex(gpu);
            d->nodesBox()->setValue(nodes);
            d->gpusPerNodeBox()->setValue(per);
        }
        if (p.isSet("shop-speed")) {
            bool ok = false;
            const double speed = p.value("shop-speed").toDouble(&ok);
            if (!ok || speed <= 0)
                return QStringLiteral("--shop-speed %1: expected a positive number of tokens per second")
                    .arg(p.value("shop-speed"));
            page->shopPanel()->speedBox()->setValue(speed);
        }
        page->outlookTabs()->setCurrentIndex(int(views.indexOf(v)));
    }
    return {};
}

namespace {
// Dispatches the map on screen and generates N tokens, waiting in local event
// loops (a hang guard each); the Run page is shown for the grab.
int runForScreenshot(MainWindow& w, const QCommandLineParser& p)
{
    bool okN = false;
    const int n = p.value("run-tokens").toInt(&okN);
    if (!okN || n <= 0) {
        std::fprintf(stderr, "stowage: --run-tokens %s: expected a positive number of tokens\n", qPrintable(p.value("run-tokens")));
        return 2;
    }
    RunPage* run = w.runPage();
    w.pages()->setCurrentWidget(run);
    if (p.isSet("prompt"))
        run->setPrompt(p.value("prompt"));
    if (p.isSet("offload-folder"))
        run->setOffloadFolder(p.value("offload-folder"));
    if (p.isSet("policy") && !run->setPolicy(p.value("policy"))) {
        std::fprintf(stderr, "stowage: --policy %s: expected accelerate-like, prefetch or compute-where-it-lives\n",
                     qPrintable(p.value("policy")));
        return 2;
    }
    run->setThrottle(p.isSet("throttle"));
    run->setMaxNewTokens(n);
    run->setIgnoreEos(true);
    bool ok = false;
    {
        QEventLoop loop;
        QObject::connect(run, &RunPage::dispatched, &loop, [&](bool success) {
            ok = success;
            loop.quit();
        });
        QTimer::singleShot(600000, &loop, &QEventLoop::quit);
        run->dispatch();
        loop.exec();
    }
    if (!ok) {
        std::fprintf(stderr, "stowage: dispatch failed: %s\n", qPrintable(run->messageText().isEmpty() ? run->statusText() : run->messageText()));
        return 1;
    }
    bool done = false;
    {
        QEventLoop loop;
        QObject::connect(run, &RunPage::generationDone, &loop, [&] {
            done = true;
            loop.quit();
        });
        QObject::connect(run, &RunPage::dispatched, &loop, &QEventLoop::quit); // the worker ended
        QTimer::singleShot(600000, &loop, &QEventLoop::quit);
        run->generate();
        loop.exec();
    }
    if (!done) {
        std::fprintf(stderr, "stowage: generation failed: %s\n", qPrintable(run->messageText()));
        return 1;
    }
    // A few samples after the last token, so the graphs show the idle tail.
    QEventLoop pause;
    QTimer::singleShot(300, &pause, &QEventLoop::quit);
    pause.exec();
    run->charts()->refresh();
    if (p.value("run-view") == QLatin1String("timeline"))
        run->tabs()->setCurrentIndex(1);
    return 0;
}
} // namespace

int renderScreenshot(MainWindow& w, const QString& path, const QString& file, const QCommandLineParser& p)
{
    QSize size(1600, 1000);
    if (p.isSet("size")) {
        const QStringList wh = p.value("size").split(QLatin1Char('x'));
        if (wh.size() != 2 || wh[0].toInt() < 200 || wh[1].toInt() < 200) {
            std::fprintf(stderr, "stowage: --size %s: expected WIDTHxHEIGHT, e.g. 1600x1000\n", qPrintable(p.value("size")));
            return 2;
        }
        size = QSize(wh[0].toInt(), wh[1].toInt());
    }
    w.resize(size);
    w.show();
    QEventLoop loop;
    bool ok = false;
    QString error;
    QObject::connect(&w, &MainWindow::checkpointOpened, &loop, [&](bool success, const QString& e) {
        ok = success;
        error = e;
        loop.quit();
    });
    QTimer::singleShot(120000, &loop, &QEventLoop::quit); // hang guard
    w.openCheckpoint(path);
    loop.exec();
    if (!ok) {
        std::fprintf(stderr, "stowage: %s\n", qPrintable(error.isEmpty() ? QStringLiteral("timed out opening ") + path : error));
        return 2;
    }
    if (p.isSet("device-map") && !w.importDeviceMap(p.value("device-map"))) {
        std::fprintf(stderr, "stowage: --device-map %s: %s\n", qPrintable(p.value("device-map")),
                     qPrintable(w.errorText().isEmpty() ? w.planningPage()->planError() : w.errorText()));
        return 2;
    }
    if (!w.planningPage()->plan()) {
        std::fprintf(stderr, "stowage: %s\n", qPrintable(w.planningPage()->planError()));
        return 2;
    }
    if (p.isSet("run-tokens")) {
        if (const int code = runForScreenshot(w, p); code != 0)
            return code;
    }
    if (ShopPanel* shop = w.planningPage()->shopPanel(); shop->isVisible() && (shop->searching() || shop->setups().empty())) {
        QEventLoop searched; // the shop tab: its search for the inputs on screen
        QObject::connect(shop, &ShopPanel::searched, &searched, &QEventLoop::quit);
        QTimer::singleShot(120000, &searched, &QEventLoop::quit); // hang guard
        searched.exec();
    }
    // Let layouts settle and the views paint once.
    for (int i = 0; i < 5; ++i) {
        QCoreApplication::processEvents();
        QTimer t;
        QEventLoop pause;
        QTimer::singleShot(20, &pause, &QEventLoop::quit);
        pause.exec();
    }
    if (!w.grab().save(file, "PNG")) {
        std::fprintf(stderr, "stowage: --screenshot %s: cannot write the file\n", qPrintable(file));
        return 2;
    }
    return 0;
}

} // namespace stowage
