#pragma once
// Lists the models in the Hugging Face Hub cache with their size on disk and
// whether the weights are there; models with only config.json and the
// index open too (plan before download). Scans off the GUI thread.
#include <QDialog>

class QComboBox;
class QLabel;
class QPushButton;
class QTableView;

namespace stowage {

class HubCacheModel;

class HubCacheDialog : public QDialog {
    Q_OBJECT
public:
    explicit HubCacheDialog(QWidget* parent = nullptr);
    HubCacheModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    // Scans the chosen root again (also after the root changes).
    void rescan();
    void setRoot(const QString& root);
    bool scanning() const { return m_scanning; }

signals:
    void openRequested(const QString& path);
    void scanned();

private:
    void openSelected();

    QComboBox* m_root = nullptr;
    QTableView* m_view = nullptr;
    QLabel* m_status = nullptr;
    QPushButton* m_open = nullptr;
    HubCacheModel* m_model = nullptr;
    int m_job = 0;
    bool m_scanning = false;
};

} // namespace stowage
