#include "display.h"

#include <QCoreApplication>
#include <QLocale>

namespace stowage {

QString formatBytes(quint64 bytes)
{
    return QLocale::c().formattedDataSize(static_cast<qint64>(bytes), 2, QLocale::DataSizeIecFormat);
}

QString sizeString(quint64 bytes)
{
    static const struct {
        quint64 unit;
        const char* suffix;
    } units[] = {{1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"},
                 {1000000000000ull, "TB"}, {1000000000ull, "GB"}, {1000000ull, "MB"}};
    if (bytes == 0)
        return QStringLiteral("0");
    // The shortest exact spelling, with up to three decimals ("1.75MiB" for a
    // dragged 1,835,008, which Accelerate's int(float(x) * unit) reads back to
    // the same bytes); a size in a unit is preferred to a bare number of the
    // same length, and binary units win ties.
    QString best = QString::number(bytes);
    bool bare = true;
    for (const auto& u : units)
        for (int decimals = 0; decimals <= 3; ++decimals) {
            QString v = QString::number(double(bytes) / double(u.unit), 'f', decimals);
            if (decimals > 0 && (v.endsWith('0') || v.endsWith('.')))
                continue; // the shorter spelling was tried already
            if (quint64(v.toDouble() * double(u.unit)) != bytes)
                continue;
            const QString s = v + QLatin1String(u.suffix);
            if (s.size() < best.size() || (bare && s.size() == best.size())) {
                best = s;
                bare = false;
            }
            break;
        }
    return best;
}

QString countOf(qint64 n, const QString& one, const QString& many)
{
    return QStringLiteral("%1 %2").arg(QString::number(n), n == 1 ? one : many);
}

QString deviceLabel(const Device& d)
{
    switch (d.kind) {
    case Device::Gpu: return QCoreApplication::translate("stowage", "GPU %1").arg(d.index);
    case Device::Cpu: return QCoreApplication::translate("stowage", "CPU");
    case Device::Disk: return QCoreApplication::translate("stowage", "Disk");
    }
    return {};
}

QColor deviceColor(const Device& d)
{
    // Tableau-like hues with enough contrast against both white and #232323.
    static const QRgb gpus[] = {0x4e79a7, 0x59a14f, 0xb07aa1, 0x76b7b2, 0xedc948, 0xe15759, 0xff9da7, 0x9c755f};
    switch (d.kind) {
    case Device::Gpu: return QColor(gpus[static_cast<unsigned>(d.index) % 8]);
    case Device::Cpu: return QColor(0xf28e2b);
    case Device::Disk: return QColor(0x8c8c8c);
    }
    return {};
}

QString policyLabel(ExecutionPolicy p)
{
    switch (p) {
    case ExecutionPolicy::AccelerateLike: return QCoreApplication::translate("stowage", "Accelerate hooks");
    case ExecutionPolicy::Prefetch: return QCoreApplication::translate("stowage", "Prefetch");
    case ExecutionPolicy::ComputeWhereItLives: return QCoreApplication::translate("stowage", "Compute where it lives");
    }
    return {};
}

QString policyDescription(ExecutionPolicy p)
{
    switch (p) {
    case ExecutionPolicy::AccelerateLike:
        return QCoreApplication::translate("stowage", "Offloaded weights copied to the GPU before each module, "
                                                      "synchronously, from pageable memory (what Accelerate does)");
    case ExecutionPolicy::Prefetch:
        return QCoreApplication::translate("stowage", "Offloaded weights copied from pinned memory while the "
                                                      "previous layer computes");
    case ExecutionPolicy::ComputeWhereItLives:
        return QCoreApplication::translate("stowage", "Layers in RAM run on the CPU instead of being copied");
    }
    return {};
}

QString describeBlock(const ModuleTree& tree, const Plan& plan, const PlacementBlock& block)
{
    const Module& m = tree.modules()[static_cast<size_t>(block.module)];
    QString name = m.name.empty() ? QCoreApplication::translate("stowage", "(model)") : QString::fromStdString(m.name);
    if (block.direct)
        name += QCoreApplication::translate("stowage", " (own tensors)");
    QString where;
    if (block.deviceCode == MixedCode)
        where = QCoreApplication::translate("stowage", "split across devices");
    else if (block.deviceCode == NoDeviceCode)
        where = QCoreApplication::translate("stowage", "not in the map");
    else
        where = QCoreApplication::translate("stowage", "on %1").arg(deviceLabel(deviceFromCode(block.deviceCode)));
    QString text = QStringLiteral("%1 (%2), %3 %4").arg(name, QString::fromStdString(m.className), formatBytes(block.bytes), where);
    if (block.entry >= 0 && block.entry < static_cast<int>(plan.entries.size())) {
        const PlanEntry& e = plan.entries[static_cast<size_t>(block.entry)];
        if (!e.why.empty())
            text += QStringLiteral("\n") +
                    (e.module != m.name ? QCoreApplication::translate("stowage", "%1: ")
                                              .arg(e.module.empty() ? QStringLiteral("(whole model)")
                                                                    : QString::fromStdString(e.module))
                                        : QString()) +
                    QString::fromStdString(e.why);
    }
    return text;
}

} // namespace stowage
