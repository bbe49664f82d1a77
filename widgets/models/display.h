#pragma once
// How devices and sizes look everywhere in the window: one label, one
// colour per device, one byte format, so the bars, the map, the module tree
// and the totals agree at a glance.
#include "stowage/costmodel.h"
#include "stowage/device.h"
#include "stowage/moduledevices.h" // deviceCode(), deviceFromCode(): the codes the models and views carry
#include "stowage/placementlayout.h"
#include "stowage/planner.h"

#include <QColor>
#include <QString>

namespace stowage {

// "1.50 GiB" (IEC, two decimals).
QString formatBytes(quint64 bytes);
// The shortest exact Accelerate size string: "8GiB", "512MiB", "1500000000".
QString sizeString(quint64 bytes);
// "1 block", "3 blocks": a count with the word that agrees (no "1 block(s)").
QString countOf(qint64 n, const QString& one, const QString& many);
// "GPU 0", "CPU", "Disk".
QString deviceLabel(const Device& d);
// Fill colour of a device: GPUs cycle through eight hues, the CPU is
// orange, the disk grey. Readable on light and dark palettes.
QColor deviceColor(const Device& d);
// "Accelerate hooks", "Prefetch", "Compute where it lives".
QString policyLabel(ExecutionPolicy p);
QString policyDescription(ExecutionPolicy p);
// A placement map block for its tooltip:
// "model.layers.17 (LlamaDecoderLayer), 6.38 GiB on GPU 1\n<why>".
QString describeBlock(const ModuleTree& tree, const Plan& plan, const PlacementBlock& block);

} // namespace stowage
