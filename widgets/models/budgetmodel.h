#pragma once
// The devices a plan may use and the budget the user gives each: this
// machine's GPUs, simulated GPUs (hardware presets or a custom size), the
// CPU's RAM and the disk that would hold the offload folder. The typed
// fields and the draggable bars both edit this one model; each edit changes
// one cell (dataChanged on that cell, never a reset), and each plan updates
// only the rows whose totals moved.
#include "stowage/planner.h"

#include <QAbstractTableModel>
#include <QColor>
#include <QVector>

namespace stowage {

struct BudgetDevice {
    Device device;         // GPUs are numbered by row order: real ones first
    QString hardware;      // "NVIDIA GeForce RTX 4090", "RAM", "/home/me (ext4)"
    QString preset;        // hardware preset key of a simulated GPU; empty for a custom size
    bool simulated = false;
    quint64 capacity = 0;  // total memory, or free disk space; 0 = unknown
    quint64 free = 0;      // free now, for this machine's devices
    quint64 budget = 0;
    // From the last plan:
    quint64 used = 0;      // weights placed there
    quint64 reserved = 0;  // kept free for the largest layer and the KV cache
    quint64 kvReserved = 0;// the KV-cache part of `reserved`
    // GPUs only: left out of the plan (no budget given), and the rank in
    // which GPUs are filled (lower first; ties by index).
    bool excluded = false;
    int fillRank = 0;
    bool operator==(const BudgetDevice& o) const;
};

class BudgetModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { DeviceColumn, HardwareColumn, CapacityColumn, BudgetColumn, UsedColumn, ReservedColumn, ColumnCount };
    enum Role {
        DeviceNameRole = Qt::UserRole + 1, // "0", "cpu", "disk"
        BudgetRole,                        // quint64
        CapacityRole,
        FreeRole,
        UsedRole,
        ReservedRole,
        KvReservedRole,
        SimulatedRole,
        ColorRole,
        ScaleRole, // the full width of the row's bar, in bytes
        OverBudgetRole,
        ProblemRole, // QString: problem(row), empty when none
        ExcludedRole,
    };

    explicit BudgetModel(QObject* parent = nullptr);

    // Replaces every device: `gpus` are this machine's (device index by
    // order), then the CPU and the disk. Simulated GPUs are dropped.
    void setMachine(const QVector<BudgetDevice>& gpus, const BudgetDevice& cpu, const BudgetDevice& disk);
    // Appends a simulated GPU after the last GPU; returns its row.
    int addSimulatedGpu(const QString& hardware, const QString& preset, quint64 capacity);
    // Removes a simulated GPU (GPUs after it are renumbered); false for other rows.
    bool removeSimulatedGpu(int row);
    // Names a device and its memory once they are known (NVML answers late).
    void setHardware(int row, const QString& hardware, quint64 capacity);
    // Changes one budget; false when unchanged or the row does not exist.
    bool setBudget(int row, quint64 bytes);
    // Parses an Accelerate size string ("8GiB", "500MB", "1Gb", bytes);
    // returns the parser's message and changes nothing when it does not parse.
    QString setBudgetText(int row, const QString& text);
    // Takes used/reserved and the KV-cache part of the reserve per device from
    // a plan; `extraKvPerDevice` (device code -> bytes, may be empty) adds what
    // the plan keeps outside its totals, the room for the largest activation.
    void setPlanTotals(const Plan& plan, const QHash<int, quint64>& extraKvPerDevice = {});

    const BudgetDevice& at(int row) const { return m_rows[row]; }
    int rowOf(const Device& d) const; // -1 when absent
    int gpuCount() const;
    int simulatedGpuCount() const;
    // max_memory for the planner: GPUs and the CPU (the planner keeps the
    // disk unlimited, as Accelerate does; the disk row only warns).
    // Excluded GPUs are left out.
    Budgets budgets() const;
    // A GPU left out of the plan, or back in; false for other rows or no change.
    bool setExcluded(int row, bool excluded);
    // The GPU filled before (after) every other; false for other rows.
    bool fillFirst(int row);
    bool fillLast(int row);
    // The planned GPUs' indices in the order they are filled (gpuorder.h).
    std::vector<int> gpuOrder() const;
    // Why a row's budget cannot be what the user meant, in words for the
    // bar; empty when it can. (Drag steps and the bar's scale: budgetscale.h.)
    QString problem(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

signals:
    // A budget, or the set of devices, changed: time to re-plan.
    void budgetsChanged();

private:
    bool rankGpu(int row, int side);
    void renumberGpus(int fromRow);
    quint64 scaleOf(const BudgetDevice& d) const;
    QVector<BudgetDevice> m_rows;
};

} // namespace stowage
