#pragma once
// Planning inputs: strategy, GPU count and a max_memory budget per device,
// typed as Accelerate size strings ("8GiB", "500MB", bytes). Text that does
// not parse turns red and is ignored: the last good value stays in force.
#include "stowage/planner.h"

#include <QMetaType>
#include <QWidget>

#include <array>

class QComboBox;
class QFormLayout;
class QLineEdit;
class QSpinBox;

namespace stowage {

class BudgetPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr int MaxGpus = 8;

    explicit BudgetPanel(QWidget* parent = nullptr);

    // What the panel holds now: strategy and max_memory for GPUs 0..count-1 and the CPU.
    PlanOptions options() const;

    void setStrategy(Strategy s);
    Strategy strategy() const;
    void setGpuCount(int count); // clamped to 0..MaxGpus
    int gpuCount() const;
    // GPU `index` (0..MaxGpus-1) or the CPU; anything else is ignored.
    void setBudgetText(const Device& device, const QString& text);
    QString budgetText(const Device& device) const;
    bool budgetValid(const Device& device) const;
    QLineEdit* budgetEdit(const Device& device) const;

signals:
    // After every change that yields a usable set of options.
    void budgetsChanged(const stowage::PlanOptions& options);

private:
    static constexpr int CpuSlot = MaxGpus;
    int slotOf(const Device& device) const; // -1 when the panel has no editor for it
    void budgetEdited(int slot);
    void gpuCountChanged(int count);

    QComboBox* m_strategy = nullptr;
    QSpinBox* m_gpus = nullptr;
    QFormLayout* m_form = nullptr;
    std::array<QLineEdit*, MaxGpus + 1> m_edits{};
    std::array<uint64_t, MaxGpus + 1> m_good{};  // last value that parsed, in bytes
    std::array<bool, MaxGpus + 1> m_valid{};
};

} // namespace stowage

Q_DECLARE_METATYPE(stowage::PlanOptions)
