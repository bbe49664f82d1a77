#pragma once
// How devices and sizes look everywhere in the window: one label, one
// colour per device, one byte format, so the bars, the map, the module tree
// and the totals agree at a glance.
#include "stowage/costmodel.h"
#include "stowage/device.h"

#include <QColor>
#include <QString>

namespace stowage {

// "1.50 GiB" (IEC, two decimals).
QString formatBytes(quint64 bytes);
// The shortest exact Accelerate size string: "8GiB", "512MiB", "1500000000".
QString sizeString(quint64 bytes);
// "GPU 0", "CPU", "Disk".
QString deviceLabel(const Device& d);
// Fill colour of a device: GPUs cycle through eight hues, the CPU is
// orange, the disk grey. Readable on light and dark palettes.
QColor deviceColor(const Device& d);
// Stable code for a device (GPU index, or CpuCode / DiskCode) and back.
constexpr int CpuCode = 1 << 20;
constexpr int DiskCode = CpuCode + 1;
int deviceCode(const Device& d);
Device deviceFromCode(int code);
// "Accelerate hooks", "Prefetch", "Compute where it lives".
QString policyLabel(ExecutionPolicy p);
QString policyDescription(ExecutionPolicy p);

} // namespace stowage
