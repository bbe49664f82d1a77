#include "calibration.h"

#include "display.h"

#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLocale>
#include <QSettings>

#include <cmath>

namespace stowage {

namespace {
const char* const kSettingsKey = "prediction/calibration";
const ExecutionPolicy kAll[] = {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch,
                                ExecutionPolicy::ComputeWhereItLives};

// Every machine's ratios, as stored: {machine: {policy name: [ratio, ...]}}.
QJsonObject stored()
{
    return QJsonDocument::fromJson(QSettings().value(kSettingsKey).toByteArray()).object();
}
} // namespace

Calibration::Calibration(const QString& machine, QObject* parent) : QObject(parent), m_machine(machine)
{
    const QJsonObject mine = stored().value(machine).toObject();
    for (ExecutionPolicy p : kAll) {
        QVector<double> ratios;
        for (const QJsonValue& v : mine.value(QString::fromLatin1(policyName(p))).toArray()) {
            const double r = v.toDouble();
            if (r > 0 && std::isfinite(r))
                ratios.push_back(r);
        }
        if (ratios.size() > kKeep)
            ratios.erase(ratios.begin(), ratios.end() - kKeep);
        if (!ratios.isEmpty())
            m_ratios.insert(int(p), ratios);
    }
}

Calibration::Factor Calibration::factor(ExecutionPolicy policy) const
{
    const QVector<double> ratios = m_ratios.value(int(policy));
    if (ratios.isEmpty())
        return {};
    double logSum = 0;
    for (double r : ratios)
        logSum += std::log(r);
    return {std::exp(logSum / ratios.size()), int(ratios.size())};
}

int Calibration::totalRuns() const
{
    int n = 0;
    for (const QVector<double>& r : m_ratios)
        n += r.size();
    return n;
}

bool Calibration::record(ExecutionPolicy policy, double predicted, double measured, int decodeTokens)
{
    if (!(predicted > 0) || !(measured > 0) || !std::isfinite(predicted) || !std::isfinite(measured) ||
        decodeTokens < kMinTokens)
        return false;
    QVector<double>& ratios = m_ratios[int(policy)];
    ratios.push_back(measured / predicted);
    if (ratios.size() > kKeep)
        ratios.erase(ratios.begin(), ratios.end() - kKeep);
    save();
    emit changed();
    return true;
}

void Calibration::reset()
{
    if (m_ratios.isEmpty())
        return;
    m_ratios.clear();
    save();
    emit changed();
}

QString Calibration::describe(ExecutionPolicy policy) const
{
    const Factor f = factor(policy);
    if (f.runs == 0)
        return {};
    return QCoreApplication::translate("stowage", "this machine runs %1 at %2× the model's prediction, from %3")
        .arg(policyLabel(policy).toLower(), formatFactor(f.factor),
             countOf(f.runs, QCoreApplication::translate("stowage", "run"), QCoreApplication::translate("stowage", "runs")));
}

QString Calibration::formatFactor(double factor)
{
    return QLocale(QLocale::English).toString(factor, 'f', factor < 0.1 ? 3 : 2);
}

void Calibration::save() const
{
    QJsonObject all = stored();
    QJsonObject mine;
    for (auto it = m_ratios.begin(); it != m_ratios.end(); ++it) {
        QJsonArray a;
        for (double r : it.value())
            a.push_back(r);
        mine.insert(QString::fromLatin1(policyName(ExecutionPolicy(it.key()))), a);
    }
    if (mine.isEmpty())
        all.remove(m_machine);
    else
        all.insert(m_machine, mine);
    QSettings().setValue(kSettingsKey, QJsonDocument(all).toJson(QJsonDocument::Compact));
}

} // namespace stowage
