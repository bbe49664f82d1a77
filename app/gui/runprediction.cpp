// The Run page's account of the run just made: what the plan predicted for
// the policy the worker loaded, what the worker measured, and the bytes it
// holds per device against the plan's. Runs of a plan that describes this
// machine as measured (no simulated GPUs) teach the calibration the
// planning page applies to later predictions.
#include "calibration.h"
#include "display.h"
#include "planningpage.h"
#include "predictionmodel.h"
#include "runpage.h"
#include "samplesmodel.h"

#include <QLabel>

#include <algorithm>

namespace stowage {

void RunPage::showPredictedAgainstMeasured(const DoneInfo& d)
{
    m_predicted->clear();
    const std::optional<ExecutionPolicy> policy = policyFromName(loadedPolicy().toStdString());
    if (!policy || !m_running.plan || !m_running.tree || !(d.tokensPerSecond > 0))
        return;
    double model = 0;
    try {
        model = estimateDecode(*m_running.plan, *m_running.tree, m_running.profile, *policy).tokensPerSecond;
    } catch (const std::exception& e) {
        m_predicted->setText(tr("No prediction for this run: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    if (!(model > 0))
        return;
    Calibration* calibration = m_planning->calibration();
    const Calibration::Factor before = m_runCalibrates ? calibration->factor(*policy) : Calibration::Factor{};
    QStringList parts;
    parts << (before.runs > 0 ? tr("Predicted %1 (the model's %2 × %3 calibrated)")
                                    .arg(PredictionModel::formatSpeed(model * before.factor),
                                         PredictionModel::formatSpeed(model), Calibration::formatFactor(before.factor))
                              : tr("Predicted %1").arg(PredictionModel::formatSpeed(model)));
    parts << tr("measured %1: %2× the model")
                 .arg(PredictionModel::formatSpeed(d.tokensPerSecond), Calibration::formatFactor(d.tokensPerSecond / model));
    const int decodeTokens = std::max(0, int(d.tokenIds.size()) - 1);
    if (!m_runCalibrates)
        parts << tr("not used to calibrate: the prediction is not for this machine as measured (simulated GPUs, "
                    "or the machine not measured yet)");
    else if (calibration->record(*policy, model, d.tokensPerSecond, decodeTokens))
        parts << tr("now %1").arg(calibration->describe(*policy));
    else
        parts << tr("too short to calibrate (%1 decoded; %2 needed)")
                     .arg(countOf(decodeTokens, tr("token"), tr("tokens")))
                     .arg(Calibration::kMinTokens);
    QString text = parts.join(QStringLiteral(" · ")) + QLatin1Char('.');
    // Disk weights are not held: what counts is what a forward pass read.
    QStringList bytes;
    for (const DeviceBytes& b : m_loadedBytes) {
        const auto device = Device::parse(b.device.toStdString());
        const QString name = device ? deviceLabel(*device) : b.device;
        if (device && device->kind == Device::Disk)
            bytes << tr("%1 read %2 per pass (planned %3)").arg(name, formatBytes(m_samples->diskPassBytes()), formatBytes(b.planned));
        else
            bytes << tr("%1 %2 (planned %3)").arg(name, formatBytes(b.actual), formatBytes(b.planned));
    }
    if (!bytes.isEmpty())
        text += QLatin1Char('\n') + tr("Weights: %1.").arg(bytes.join(QStringLiteral(" · ")));
    m_predicted->setText(text);
}

} // namespace stowage
