#include "mainwindow.h"
#include "screenshot.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QSettings>

#include <cstdio>

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setOrganizationName("Stowage");
    QApplication::setApplicationName("Stowage");
    QApplication::setApplicationVersion("0.1.0");
    QCommandLineParser parser;
    parser.setApplicationDescription("Plan and run large language models across GPUs, RAM and disk");
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument("path", "Checkpoint folder, index, weights file or Hub cache entry (default: the demo)");
    stowage::addPlanOptions(parser);
    parser.process(app);

    const bool screenshot = parser.isSet("screenshot");
    using Theme = stowage::MainWindow::Theme;
    if (parser.isSet("dark"))
        stowage::MainWindow::applyTheme(Theme::Dark);
    else if (screenshot)
        stowage::MainWindow::applyTheme(Theme::Light);
    else
        stowage::MainWindow::applyTheme(static_cast<Theme>(QSettings().value("view/theme", 0).toInt()));

    // A screenshot shows what the command line asks for, not this user's saved budgets.
    stowage::MainWindow::Options options;
    options.restoreSettings = !screenshot;
    // Budgets given on the command line win over the demo's own.
    options.demoBudgets = !parser.isSet("max-memory") && !parser.isSet("hardware");
    options.timeFixedCosts = !screenshot; // once per CPU, in the background
    stowage::MainWindow w(options);
    QString path = parser.positionalArguments().value(0);
    if (path.isEmpty())
        path = stowage::MainWindow::demoPath();
    if (const QString problem = stowage::applyPlanOptions(w, parser); !problem.isEmpty()) {
        std::fprintf(stderr, "stowage: %s\n", qPrintable(problem));
        return 2;
    }
    if (screenshot)
        return stowage::renderScreenshot(w, path, parser.value("screenshot"), parser);
    w.show();
    w.openCheckpoint(path);
    return app.exec();
}
