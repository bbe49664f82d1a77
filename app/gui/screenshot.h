#pragma once
// Plan options on the GUI's command line, as stowage-cli plan takes them,
// and `--screenshot FILE`: render the main window after planning to a PNG
// and exit (README images, tests).
#include <QString>

class QCommandLineParser;

namespace stowage {

class MainWindow;

void addPlanOptions(QCommandLineParser& parser);
// Applies --max-memory, --hardware, --strategy, --dtype, --reference,
// --no-split and --kv-cache to the window; GPUs this machine lacks become
// simulated ones. Returns the first problem, or an empty string.
QString applyPlanOptions(MainWindow& window, const QCommandLineParser& parser);
// Opens `path`, imports --device-map if given, waits for the plan, grabs the
// window into `file`. Returns the exit code (0, 2 on bad input, 1 on failure).
int renderScreenshot(MainWindow& window, const QString& path, const QString& file, const QCommandLineParser& parser);

} // namespace stowage
