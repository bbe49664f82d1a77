#include "chatoptions.h"
#include "runpage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QRadioButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QStandardPaths>

// What the Run page sends the worker: the load command for the plan it is
// handed, and the generate command from its controls (runpage.cpp builds
// the controls and handles the answers).
namespace stowage {

LoadRequest RunPage::loadRequest(QString* error) const
{
    LoadRequest r = loadRequestFor(m_planning->planState(), error);
    r.policy = m_policy->currentData().toString();
    r.offloadFolder = m_offload->text().trimmed();
    if (r.offloadFolder.isEmpty())
        r.offloadFolder = QDir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation)).filePath("offload");
    r.throttle = m_throttle->isChecked() && r.simulateGpus;
    if (r.simulateGpus && m_hardwareOverride)
        r.hardware = m_hardwareOverride;
    return r;
}

LoadRequest RunPage::loadRequestFor(const PlanState& st, QString* error)
{
    LoadRequest r;
    if (!st.plan) {
        if (error)
            *error = tr("There is no plan to run: open a checkpoint and plan it first.");
        return r;
    }
    r.path = st.modelPath;
    r.dtype = QString::fromLatin1(dtypeTorchName(st.dtype));
    r.deviceMap = st.plan->deviceMap;
    bool usesGpu = false, simulated = false;
    for (const auto& [key, dev] : st.plan->deviceMap)
        usesGpu = usesGpu || dev.kind == Device::Gpu;
    for (const BudgetDevice& d : st.devices) {
        if (d.device.kind != Device::Gpu)
            continue;
        r.maxMemory.push_back({d.device, double(d.budget)});
        simulated = simulated || d.simulated;
    }
    r.simulateGpus = usesGpu && simulated;
    // The simulated GPUs are the ones the prediction describes.
    if (r.simulateGpus)
        r.hardware = st.profile;
    return r;
}

GenerateRequest RunPage::generateRequest() const
{
    GenerateRequest g;
    g.prompt = m_prompt->toPlainText();
    if (!m_hasTokenizer) {
        // Without a tokenizer the prompt box holds token ids: "1, 2, 3".
        static const QRegularExpression separators(QStringLiteral("[^0-9]+"));
        for (const QString& part : g.prompt.split(separators, Qt::SkipEmptyParts))
            g.promptIds.push_back(part.toInt());
        if (g.promptIds.isEmpty())
            g.promptIds.push_back(0);
        g.prompt.clear();
    }
    // The prompt text as one user message through the checkpoint's chat template.
    g.chat = !g.prompt.isEmpty() && m_chat->isOn();
    g.maxNewTokens = m_maxTokens->value();
    g.greedy = m_greedy->isChecked();
    g.temperature = m_temperature->value();
    g.topK = m_topK->value();
    g.topP = m_topP->value();
    g.seed = m_seed->value();
    g.ignoreEos = m_ignoreEos->isChecked();
    return g;
}

} // namespace stowage
