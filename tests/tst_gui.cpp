// The module tree model under QAbstractItemModelTester, and the main window
// offscreen: opening a checkpoint fills the tree off the GUI thread; a bad
// path shows a message and leaves the window usable.
#include "fixtures.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "stowage/checkpoint.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QMessageBox>
#include <QTreeView>
#include <QtTest>

#include <filesystem>

using namespace stowage;

class TestGui : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;
private slots:
    void initTestCase();
    void modelPassesTheTester();
    void windowOpensCheckpoint();
    void badPathShowsMessageAndStaysUsable();
};

void TestGui::initTestCase()
{
    m_dir = m_tmp.path().toStdString() + "/gpt2";
    std::filesystem::create_directories(m_dir);
    fixtures::writeSafetensorsFile(m_dir + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F16), false);
    fixtures::writeJson(m_dir + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F16));
}

void TestGui::modelPassesTheTester()
{
    ModuleTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto tree = std::make_shared<ModuleTree>(buildModuleTree(Checkpoint::open(m_dir), std::nullopt));
    model.setTree(tree);
    QCOMPARE(model.rowCount(), 1);
    QModelIndex root = model.index(0, 0);
    QCOMPARE(model.data(root).toString(), QString("(model)"));
    QCOMPARE(model.rowCount(root), 2); // transformer, lm_head
    QModelIndex transformer = model.index(0, 0, root);
    QCOMPARE(model.data(transformer).toString(), QString("transformer"));
    QModelIndex h = model.index(3, 0, transformer);
    QCOMPARE(model.data(h).toString(), QString("h"));
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ClassColumn, h)).toString(), QString("GPT2Block"));
    QCOMPARE(model.parent(model.index(0, 0, h)), h);
    QCOMPARE(model.data(root, ModuleTreeModel::BytesRole).toULongLong(), quint64(tree->root().bytes));
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ShareColumn, root)).toString(), QString("100.00 %"));
    model.setTree(nullptr);
    QCOMPARE(model.rowCount(), 0);
}

void TestGui::windowOpensCheckpoint()
{
    MainWindow w;
    w.show();
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(w.moduleModel()->tree() != nullptr, 10000);
    QVERIFY(w.summary().contains("gpt2"));
    QCOMPARE(w.moduleModel()->rowCount(), 1);
    const QString shot = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR"));
    if (!shot.isEmpty())
        w.grab().save(shot + "/main-window.png");
}

void TestGui::badPathShowsMessageAndStaysUsable()
{
    MainWindow w;
    w.show();
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(w.moduleModel()->tree() != nullptr, 10000);
    w.openCheckpoint("/no/such/checkpoint");
    QMessageBox* box = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("openError")) != nullptr, 10000);
    QVERIFY(box->text().contains("/no/such/checkpoint: no such file or folder"));
    QVERIFY(w.moduleModel()->tree() != nullptr); // the open checkpoint is kept
    box->accept();
    w.openCheckpoint(QString::fromStdString(m_dir)); // and the window still works
    QTRY_VERIFY_WITH_TIMEOUT(w.summary().contains("gpt2"), 10000);
}

QTEST_MAIN(TestGui)
#include "tst_gui.moc"
