#pragma once
// Every row of a BudgetModel as a labelled BudgetBar with a size field
// (Accelerate size strings) and, for simulated GPUs, a remove button; under
// them a button that adds simulated GPUs from the hardware presets or of a
// custom size. Rows follow the model's inserts, removes and cell changes.
#include <QPointer>
#include <QVector>
#include <QWidget>

class QGridLayout;
class QLabel;
class QMenu;
class QLineEdit;
class QToolButton;

namespace stowage {

class BudgetBar;
class BudgetModel;

class BudgetBarsView : public QWidget {
    Q_OBJECT
public:
    explicit BudgetBarsView(BudgetModel* model, QWidget* parent = nullptr);
    BudgetBar* bar(int row) const;
    QLineEdit* edit(int row) const;
    // The words under a bar saying why its budget cannot be (larger than the
    // device, a size that does not parse, a disk too small); hidden when none.
    QLabel* problemLabel(int row) const;
    QToolButton* addGpuButton() const { return m_add; }
    // Adds a simulated GPU of a preset ("h100-80gb"); false for an unknown name.
    bool addPresetGpu(const QString& preset);
    // The context menu of a GPU row's bar: fill it first or last, leave it out.
    QMenu* gpuMenu(int row);

signals:
    // The user asked for a simulated GPU of a size they will type.
    void customGpuRequested();

private:
    struct Row {
        QLabel* label = nullptr;
        BudgetBar* bar = nullptr;
        QLineEdit* edit = nullptr;
        QToolButton* remove = nullptr;
        QLabel* problem = nullptr;
        QString textError; // why the field's text is not a size; empty when it is
    };
    void rebuild();
    void refreshRow(int row);
    void applyText(int row);
    void showProblem(int row);

    QPointer<BudgetModel> m_model;
    QGridLayout* m_grid = nullptr;
    QToolButton* m_add = nullptr;
    QVector<Row> m_rows;
};

} // namespace stowage
