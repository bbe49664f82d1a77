#pragma once
// The planning choices besides budgets: strategy, dtype, reference, a
// no-split override and KV-cache headroom (context x batch).
#include "stowage/dtype.h"
#include "stowage/planner.h"

#include <QWidget>

#include <optional>

class QCheckBox;
class QComboBox;
class QLineEdit;
class QSpinBox;

namespace stowage {

class PlanControls : public QWidget {
    Q_OBJECT
public:
    explicit PlanControls(QWidget* parent = nullptr);

    Strategy strategy() const;
    void setStrategy(Strategy s);
    // nullopt: the checkpoint's own dtype ("auto").
    std::optional<DType> dtype() const;
    void setDType(std::optional<DType> dt);
    // Shown as "auto (bfloat16)".
    void setAutoDType(DType dt);
    Reference reference() const;
    void setReference(Reference r);
    // nullopt: the model's own no-split classes.
    std::optional<std::vector<std::string>> noSplit() const;
    void setNoSplit(const QString& commaSeparated);
    void setNoSplitPlaceholder(const QString& modelClasses);
    // {context, batch}, or nullopt when the KV reserve is off.
    std::optional<std::pair<int, int>> kvCache() const;
    void setKvCache(std::optional<std::pair<int, int>> kv);

    QComboBox* strategyBox() const { return m_strategy; }
    QComboBox* dtypeBox() const { return m_dtype; }
    QComboBox* referenceBox() const { return m_reference; }

signals:
    // Strategy, no-split or KV cache changed: re-plan.
    void optionsChanged();
    // dtype or reference changed: sizes change, the tree is re-sized first.
    void sizingChanged();

private:
    QComboBox* m_strategy = nullptr;
    QComboBox* m_dtype = nullptr;
    QComboBox* m_reference = nullptr;
    QLineEdit* m_noSplit = nullptr;
    QCheckBox* m_kv = nullptr;
    QSpinBox* m_context = nullptr;
    QSpinBox* m_batch = nullptr;
};

} // namespace stowage
