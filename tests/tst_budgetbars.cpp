// Dragging a budget bar over a 405B-class index (Llama-3.1-405B shape, index
// only) must keep up with the mouse: each QTest mouse move re-plans and the
// placement map repaints. The test prints the move-to-repaint time (median
// and 95th percentile; the target is 16 ms at p95) and asserts only a hang
// guard far above it; it checks that every move changed the budget and that
// the plan and the map followed.
#include "budgetbar.h"
#include "budgetbarsview.h"
#include "budgetmodel.h"
#include "display.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "placementmap.h"
#include "plancontrols.h"
#include "planningpage.h"
#include "stowage/planner.h"

#include <QAction>
#include <QHelpEvent>
#include <QMenu>
#include <QLabel>
#include <QLineEdit>
#include <QScreen>
#include <QSignalSpy>
#include <QtTest>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

using namespace stowage;

class TestBudgetBars : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
private slots:
    void dragOver405bKeepsUpWithTheMouse();
    void smallBudgetDraggableAndImpossibleOnesSaid();
    void toolTipStaysInTheWindow();
    void gpuFilledFirstOrLeftOut();
};

void TestBudgetBars::dragOver405bKeepsUpWithTheMouse()
{
    QApplication::setOrganizationName("StowageTest");
    const std::string dir = m_tmp.path().toStdString() + "/llama405b";
    std::filesystem::create_directories(dir);
    fixtures::LlamaShape s{128256, 16384, 53248, 126, 128, 8, false};
    fixtures::writeSharded(dir, fixtures::llamaTensors(s, DType::BF16), 191, true, /*writeShards=*/false);
    fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(s, DType::BF16));

    MainWindow w(MainWindow::Options{false, false, {}, false});
    w.resize(1600, 1000);
    w.show();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint(QString::fromStdString(dir));
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 60000);
    QVERIFY(opened[0][0].toBool());
    BudgetModel* m = w.budgetModel();
    // Four simulated H200s and 512 GiB of RAM: the 810 GB model spreads over all.
    for (int i = 0; i < 4; ++i)
        QVERIFY(w.planningPage()->budgetBars()->addPresetGpu("h200"));
    m->setBudget(m->rowOf(Device::cpu()), 512ull << 30);
    QVERIFY(QTest::qWaitForWindowExposed(&w));

    BudgetBar* bar = w.planningPage()->budgetBars()->bar(m->rowOf(Device::gpu(0)));
    PlacementMap* map = w.planningPage()->placementMap();
    QTRY_VERIFY(bar->isVisible() && map->isVisible());
    std::printf("405B-class map: %zu blocks, %zu map entries\n", map->layout().blocks.size(),
                w.planningPage()->plan()->deviceMap.size());
    const int y = bar->trackRect().center().y();
    const int x0 = bar->xForBytes(m->at(0).budget);
    QTest::mousePress(bar, Qt::LeftButton, {}, QPoint(x0, y));

    using clk = std::chrono::steady_clock;
    std::vector<double> ms;
    int changedPlans = 0;
    std::string last = deviceMapToJson(w.planningPage()->plan()->deviceMap);
    const int moves = 120;
    for (int i = 1; i <= moves; ++i) {
        // Sweep left then back right over the bar.
        const int x = i <= moves / 2 ? x0 - i * (x0 - 4) / (moves / 2) : 4 + (i - moves / 2) * (x0 - 4) / (moves / 2);
        const quint64 paints = map->paintCount();
        const quint64 budget = m->at(0).budget;
        const auto t0 = clk::now();
        QTest::mouseMove(bar, QPoint(x, y));
        if (m->at(0).budget == budget)
            continue; // the same snapped step: nothing to re-plan or repaint
        // Until the map has repainted (the update request is a posted event).
        while (map->paintCount() == paints && std::chrono::duration<double>(clk::now() - t0).count() < 5.0)
            QCoreApplication::processEvents();
        const double t = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        ms.push_back(t);
        QVERIFY2(t < 2000.0, "hang guard: a move took over 2 s to repaint"); // > 100x the 16 ms target
        const std::string now = deviceMapToJson(w.planningPage()->plan()->deviceMap);
        changedPlans += now != last;
        last = now;
    }
    QTest::mouseRelease(bar, Qt::LeftButton, {}, QPoint(x0, y));
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    std::printf("drag over a 405B-class index: %d moves, move-to-repainted-map median %.2f ms, p95 %.2f ms, max %.2f ms "
                "(target p95 <= 16 ms); %d moves changed the map\n",
                int(ms.size()), sorted[sorted.size() / 2], sorted[sorted.size() * 95 / 100], sorted.back(), changedPlans);
    QVERIFY(ms.size() > size_t(moves / 2));
    QVERIFY(changedPlans > 5);
    // The final plan is the engine's for the final budgets.
    const Plan expected = planDeviceMap(*w.planningPage()->tree(), w.planningPage()->options());
    QCOMPARE(deviceMapToJson(w.planningPage()->plan()->deviceMap), deviceMapToJson(expected.deviceMap));
    const QString shot = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR"));
    if (!shot.isEmpty())
        w.grab().save(shot + "/llama405b.png");
}

namespace {
// A CPU of 16 GiB, a disk of 100 GiB, and one simulated GPU of `gpu` bytes.
void machine(BudgetModel& m, quint64 gpu)
{
    BudgetDevice cpu, disk;
    cpu.capacity = cpu.budget = 16ull << 30;
    disk.capacity = disk.budget = 100ull << 30;
    m.setMachine({}, cpu, disk);
    m.addSimulatedGpu("GPU", QString(), gpu);
}
} // namespace

void TestBudgetBars::smallBudgetDraggableAndImpossibleOnesSaid()
{
    constexpr quint64 MiB = 1ull << 20;
    BudgetModel m;
    machine(m, 24ull << 30);
    QWidget top;
    top.resize(900, 300);
    BudgetBarsView view(&m, &top);
    view.resize(900, 300);
    top.show();
    QVERIFY(QTest::qWaitForWindowExposed(&top));
    BudgetBar* bar = view.bar(0);
    m.setBudget(0, 3 * MiB);
    // 3 MiB of 24 GiB: 8.7 % along the bar (ln(1 + 3 MiB / k) / ln(10001), k = 24 GiB / 10000), not a hairline.
    const QRect t = bar->trackRect();
    const int x3 = bar->xForBytes(3 * MiB);
    QVERIFY2(x3 - t.left() >= int(0.08 * t.width()), qPrintable(QString::number(x3 - t.left())));
    // Dragging there lands near 3 MiB on an exact size, written as one.
    const int y = t.center().y();
    QTest::mousePress(bar, Qt::LeftButton, {}, QPoint(t.left() + t.width() / 2, y));
    QTest::mouseMove(bar, QPoint(x3, y));
    QTest::mouseRelease(bar, Qt::LeftButton, {}, QPoint(x3, y));
    const quint64 b = m.at(0).budget;
    QVERIFY2(b > 2 * MiB && b < 4 * MiB, qPrintable(QString::number(b)));
    QCOMPARE(parseSize(sizeString(b).toStdString()), b);
    QCOMPARE(view.edit(0)->text(), sizeString(b));
    QVERIFY(view.problemLabel(0)->isHidden());

    // More than the device: said in words under the bar.
    BudgetModel small;
    machine(small, 8 * MiB);
    BudgetBarsView v2(&small, &top);
    v2.show();
    small.setBudget(0, 20'000'000'000);
    QVERIFY(v2.problemLabel(0)->isVisible());
    QCOMPARE(v2.problemLabel(0)->text(), QString("The budget (18.63 GiB) is more than this simulated GPU's memory (8.00 MiB): "
                                                 "weights planned past it cannot be loaded there."));
    // Text that is not a size: the words say so and which budget stays.
    small.setBudget(0, 4 * MiB);
    QVERIFY(v2.problemLabel(0)->isHidden());
    QLineEdit* edit = v2.edit(0);
    edit->setFocus();
    edit->selectAll();
    QTest::keyClicks(edit, "abc");
    QVERIFY(v2.problemLabel(0)->isVisible());
    QTest::keyClick(edit, Qt::Key_Return);
    QCOMPARE(small.at(0).budget, 4 * MiB);
    QCOMPARE(v2.problemLabel(0)->text(),
             QString("GPU 0: 'abc' is not a valid size (use bytes, or a number with a unit like 5GB, 5GiB or 5Gb); "
                     "the budget stays 4.00 MiB."));
    edit->selectAll();
    QTest::keyClicks(edit, "2MiB");
    QTest::keyClick(edit, Qt::Key_Return);
    QCOMPARE(small.at(0).budget, 2 * MiB);
    QVERIFY(v2.problemLabel(0)->isHidden());
}

void TestBudgetBars::toolTipStaysInTheWindow()
{
    // A window narrower than the screen, so Qt's own keep-on-screen rule leaves the tip past the window's edge.
    BudgetModel m;
    machine(m, 8ull << 30);
    BudgetBarsView view(&m);
    view.setGeometry(0, 0, 420, 200);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QVERIFY(view.window()->screen()->geometry().width() > 420 + 200);
    BudgetBar* bar = view.bar(0);
    const QPoint local(bar->trackRect().right() - 2, bar->trackRect().center().y());
    QHelpEvent help(QEvent::ToolTip, local, bar->mapToGlobal(local));
    QApplication::sendEvent(bar, &help);
    QWidget* tip = nullptr;
    for (QWidget* w : QApplication::topLevelWidgets())
        if (w->objectName() == QLatin1String("qtooltip_label") && w->isVisible())
            tip = w;
    QVERIFY(tip);
    const QRect win(view.mapToGlobal(QPoint(0, 0)), view.size());
    QVERIFY2(tip->frameGeometry().right() <= win.right() && tip->frameGeometry().left() >= win.left(),
             qPrintable(QStringLiteral("tip %1..%2, window %3..%4")
                            .arg(tip->geometry().left()).arg(tip->geometry().right()).arg(win.left()).arg(win.right())));
    QVERIFY(tip->width() > 150); // a real tooltip, not an empty one
}

void TestBudgetBars::gpuFilledFirstOrLeftOut()
{
    // The demo (6.2 MiB) on two simulated GPUs of 64 MiB, planned
    // sequentially: all of it on GPU 0, the first filled. "Fill this GPU first" on GPU 1 puts it all there;
    // "Leave this GPU out" on GPU 1 then plans without it (its budget is not
    // in max_memory): all on GPU 0 again, and its bar says so.
    MainWindow w(MainWindow::Options{false, false, {}, false});
    w.resize(1400, 900);
    w.show();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint(MainWindow::demoPath());
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 20000);
    QVERIFY(opened[0][0].toBool());
    BudgetModel* m = w.budgetModel();
    for (int r = m->rowCount() - 1; r >= 0; --r)
        m->removeSimulatedGpu(r);
    m->addSimulatedGpu("GPU", QString(), 64ull << 20);
    m->addSimulatedGpu("GPU", QString(), 64ull << 20);
    PlanningPage* page = w.planningPage();
    page->controls()->setStrategy(Strategy::Sequential); // auto would balance the demo over both GPUs
    const auto onlyDevice = [&] {
        std::set<std::string> used;
        for (const auto& [k, d] : page->plan()->deviceMap)
            used.insert(d.name());
        return used;
    };
    QCOMPARE(onlyDevice(), std::set<std::string>{"0"});
    const int gpu1 = m->rowOf(Device::gpu(1));
    BudgetBarsView* bars = page->budgetBars();
    QMenu* menu = bars->gpuMenu(gpu1);
    QCOMPARE(menu->actions()[0]->text(), QString("Fill this GPU first"));
    menu->actions()[0]->trigger();
    delete menu;
    QCOMPARE(m->gpuOrder(), (std::vector<int>{1, 0}));
    QCOMPARE(onlyDevice(), std::set<std::string>{"1"});
    menu = bars->gpuMenu(gpu1);
    QAction* leaveOut = menu->actions().last();
    QVERIFY(leaveOut->isCheckable() && !leaveOut->isChecked());
    leaveOut->trigger();
    delete menu;
    QCOMPARE(m->gpuOrder(), std::vector<int>{0});
    for (const DeviceBudget& b : m->budgets())
        QVERIFY(b.device != Device::gpu(1));
    QCOMPARE(onlyDevice(), std::set<std::string>{"0"});
    QVERIFY(!bars->bar(gpu1)->isEnabled());
    // and back in: filled first again
    QVERIFY(m->setExcluded(gpu1, false));
    QCOMPARE(onlyDevice(), std::set<std::string>{"1"});
    QVERIFY(bars->bar(gpu1)->isEnabled());
    // the CPU row has no such menu's effect
    QVERIFY(!m->setExcluded(m->rowOf(Device::cpu()), true));
    QVERIFY(!m->fillFirst(m->rowOf(Device::cpu())));
}

QTEST_MAIN(TestBudgetBars)
#include "tst_budgetbars.moc"
