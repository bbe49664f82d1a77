#include "mainwindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>

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
    parser.process(app);

    stowage::MainWindow w;
    w.show();
    QString path = parser.positionalArguments().value(0);
    if (path.isEmpty()) {
        QString installed = QDir(QCoreApplication::applicationDirPath()).filePath("../share/stowage/demo");
        path = QFileInfo::exists(installed + "/config.json") ? installed : QStringLiteral(STOWAGE_BUILD_DEMO_DIR);
    }
    w.openCheckpoint(path);
    return app.exec();
}
