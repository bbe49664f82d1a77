#pragma once
// Ready-to-run Python that loads the open model with the current map and
// budgets: one for transformers' from_pretrained, one for Accelerate's
// load_checkpoint_and_dispatch.
#include "stowage/dtype.h"
#include "stowage/planner.h"

#include <QString>
#include <QStringList>

namespace stowage {

struct SnippetInput {
    QString modelPath;         // folder (or Hub repo id) as from_pretrained takes it
    DeviceMap map;
    Budgets budgets;           // max_memory
    DType dtype = DType::BF16;
    QStringList noSplit;       // no_split_module_classes (Accelerate)
    QString offloadFolder = QStringLiteral("offload");
};

// `{0: "8GiB", "cpu": "32GiB"}`: Accelerate size strings when exact, else ints.
QString pythonMaxMemory(const Budgets& budgets);
// The device map as a Python dict literal (ints for GPUs, strings otherwise).
QString pythonDeviceMap(const DeviceMap& map);
QString transformersSnippet(const SnippetInput& in);
QString accelerateSnippet(const SnippetInput& in);

} // namespace stowage
