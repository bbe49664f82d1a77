#include "snippets.h"

#include "display.h"

#include <QJsonDocument>
#include <QJsonArray>

namespace stowage {

namespace {
QString pyString(const QString& s)
{
    // JSON string escaping is valid Python string syntax.
    const QByteArray j = QJsonDocument(QJsonArray{s}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(j.mid(1, j.size() - 2));
}

QString pyDevice(const Device& d)
{
    return d.kind == Device::Gpu ? QString::number(d.index) : pyString(QString::fromStdString(d.name()));
}

QString torchDtype(DType t) { return QStringLiteral("torch.") + QLatin1String(dtypeTorchName(t)); }
} // namespace

QString pythonMaxMemory(const Budgets& budgets)
{
    QStringList parts;
    for (const DeviceBudget& b : budgets) {
        const auto bytes = static_cast<quint64>(b.bytes);
        const QString size = sizeString(bytes);
        const bool plain = size == QString::number(bytes);
        parts << pyDevice(b.device) + QStringLiteral(": ") + (plain ? size : pyString(size));
    }
    return QStringLiteral("{") + parts.join(QStringLiteral(", ")) + QStringLiteral("}");
}

QString pythonDeviceMap(const DeviceMap& map)
{
    QString out = QStringLiteral("{\n");
    for (const auto& [key, dev] : map)
        out += QStringLiteral("    %1: %2,\n").arg(pyString(QString::fromStdString(key)), pyDevice(dev));
    return out + QStringLiteral("}");
}

QString transformersSnippet(const SnippetInput& in)
{
    return QStringLiteral(
               "# Planned with Stowage: transformers 5.6 from_pretrained with an explicit device map.\n"
               "import torch\n"
               "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
               "\n"
               "model_path = %1\n"
               "device_map = %2\n"
               "max_memory = %3\n"
               "\n"
               "model = AutoModelForCausalLM.from_pretrained(\n"
               "    model_path,\n"
               "    device_map=device_map,\n"
               "    max_memory=max_memory,\n"
               "    dtype=%4,\n"
               "    offload_folder=%5,\n"
               ")\n"
               "tokenizer = AutoTokenizer.from_pretrained(model_path)\n"
               "inputs = tokenizer(\"The quick brown fox\", return_tensors=\"pt\").to(model.device)\n"
               "print(tokenizer.decode(model.generate(**inputs, max_new_tokens=20)[0]))\n")
        .arg(pyString(in.modelPath), pythonDeviceMap(in.map), pythonMaxMemory(in.budgets), torchDtype(in.dtype),
             pyString(in.offloadFolder));
}

QString accelerateSnippet(const SnippetInput& in)
{
    QStringList classes;
    for (const QString& c : in.noSplit)
        classes << pyString(c);
    return QStringLiteral(
               "# Planned with Stowage: Accelerate 1.13 load_checkpoint_and_dispatch with an explicit device map.\n"
               "import torch\n"
               "from accelerate import init_empty_weights, load_checkpoint_and_dispatch\n"
               "from transformers import AutoConfig, AutoModelForCausalLM\n"
               "\n"
               "model_path = %1\n"
               "device_map = %2\n"
               "max_memory = %3\n"
               "\n"
               "config = AutoConfig.from_pretrained(model_path)\n"
               "with init_empty_weights():\n"
               "    model = AutoModelForCausalLM.from_config(config, dtype=%4)\n"
               "model.tie_weights()\n"
               "model = load_checkpoint_and_dispatch(\n"
               "    model,\n"
               "    checkpoint=model_path,\n"
               "    device_map=device_map,\n"
               "    max_memory=max_memory,\n"
               "    no_split_module_classes=[%5],\n"
               "    dtype=%4,\n"
               "    offload_folder=%6,\n"
               ")\n")
        .arg(pyString(in.modelPath), pythonDeviceMap(in.map), pythonMaxMemory(in.budgets), torchDtype(in.dtype),
             classes.join(QStringLiteral(", ")), pyString(in.offloadFolder));
}

} // namespace stowage
