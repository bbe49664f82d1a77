#pragma once
// The run page: dispatch the map on screen to the worker process, generate
// with streaming text and live tokens/s, stop, unload; live graphs of
// memory and traffic; the execution timeline of the last (or a scrubbed-to)
// token; and teaching mode, one token in slow motion with the running unit
// outlined on the placement map and a caption per stage. The page only
// shows what the RunController reports; it never waits for the worker.
#include "planningpage.h"
#include "rundata.h"
#include "workercodec.h"

#include <QHash>
#include <QWidget>

#include <memory>
#include <optional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTableView;
class QTabWidget;

namespace stowage {

class ChatOptions;
class PlacementMap;
class PlanningPage;
class RunCharts;
class RunController;
class SamplesModel;
class TimelinePanel;
class TraceModel;

class RunPage : public QWidget {
    Q_OBJECT
public:
    // `program`: the stowage-cli to run the worker with (empty: the default).
    RunPage(PlanningPage* planning, const QString& program = {}, QWidget* parent = nullptr);
    ~RunPage() override;

    RunController* controller() const { return m_controller; }
    SamplesModel* samplesModel() const { return m_samples; }
    TraceModel* traceModel() const { return m_trace; }
    RunCharts* charts() const { return m_charts; }
    QTableView* timelineView() const;
    TimelinePanel* timelinePanel() const { return m_timeline; }
    PlacementMap* teachingMap() const { return m_map; }
    QTabWidget* tabs() const { return m_tabs; }
    ChatOptions* chatOptions() const { return m_chat; }

    // What Dispatch would send for the plan the planning page hands over
    // (PlanState); an empty map and an error when there is no plan.
    LoadRequest loadRequest(QString* error = nullptr) const;
    static LoadRequest loadRequestFor(const PlanState& state, QString* error = nullptr);
    GenerateRequest generateRequest() const;
    // A hardware profile for the simulated GPUs instead of the prediction's (tests).
    void setHardwareOverride(const HardwareProfile& profile) { m_hardwareOverride = profile; }
    void setPrompt(const QString& text);
    void setMaxNewTokens(int n);
    void setGreedy(bool greedy);
    void setIgnoreEos(bool ignore);
    void setThrottle(bool throttle);
    void setOffloadFolder(const QString& folder);
    void setUnitDelayMs(int ms);
    // \"accelerate-like\", \"prefetch\" or \"compute-where-it-lives\"; false for another name.
    bool setPolicy(const QString& name);

    QString outputText() const;
    QString messageText() const; // the message strip, empty when hidden
    QString statusText() const;
    QString captionText() const;
    QString tokensPerSecondText() const;
    // "Predicted 2,038 tok/s · measured 331 tok/s: 0.16× the model · …"; empty before a run.
    QString predictedText() const;
    // Why the worker's state and the page's controls differ, in words: the
    // policy chosen since Dispatch, a plan changed since Dispatch, a model
    // that cannot run here. Empty when Generate runs what the page shows.
    QString noteText() const;
    // The policy the worker loaded with (empty: nothing loaded or loading).
    QString loadedPolicy() const;
    // What each control and Run-menu action may do now.
    bool canDispatch() const;
    bool canGenerate() const;
    bool canStop() const;
    bool canUnload() const;
    const DoneInfo& lastDone() const { return m_lastDone; }
    QVector<int> streamedTokens() const { return m_streamed; }

public slots:
    void dispatch();
    void cancel();
    void generate();
    void stop();
    void unload();
    void stepOneToken();
    void updateButtons();
    // Another model was opened: the page resets to it, and a model the worker
    // holds is unloaded. `cannotRun`: why this one cannot run (empty: it can).
    void modelOpened(const QString& cannotRun);

signals:
    void actionsChanged(); // canDispatch() ... may have changed
    void dispatched(bool ok);  // loaded, or failed/cancelled
    void generationDone(const DoneInfo& info);

private:
    QWidget* buildControls();
    QWidget* buildOutput();
    void showMessage(const QString& text, bool error = true);
    QString messageBarStyle(const QPalette& p) const;
    void onLoaded(const LoadedInfo& info);
    void onToken(const TokenMark& token);
    void onTrace(const QVector<TraceSpan>& spans);
    void onDone(const DoneInfo& info);
    void showCaption(const TraceSpan& span);
    // After a generation: the dispatched plan's prediction for the loaded
    // policy next to what was measured, and the run added to the calibration.
    void showPredictedAgainstMeasured(const DoneInfo& info);
    void resetTeaching();
    void onPlanChanged();
    void showPreview();

    PlanningPage* m_planning;
    RunController* m_controller;
    SamplesModel* m_samples;
    TraceModel* m_trace;
    RunCharts* m_charts = nullptr;
    PlacementMap* m_map = nullptr;
    QTabWidget* m_tabs = nullptr;
    TimelinePanel* m_timeline = nullptr;

    QComboBox* m_policy = nullptr;
    QLineEdit* m_offload = nullptr;
    QCheckBox* m_throttle = nullptr;
    QLabel* m_mapSummary = nullptr;
    QLabel* m_note = nullptr;
    QLabel* m_headroom = nullptr; // the headroom alarm (SamplesModel::headroomAlarm)
    QPushButton* m_dispatch = nullptr;
    QPushButton* m_cancel = nullptr;
    QPushButton* m_unload = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_status = nullptr;
    QPlainTextEdit* m_prompt = nullptr;
    ChatOptions* m_chat = nullptr;
    QSpinBox* m_maxTokens = nullptr;
    QRadioButton* m_greedy = nullptr;
    QRadioButton* m_sampling = nullptr;
    QDoubleSpinBox* m_temperature = nullptr;
    QSpinBox* m_topK = nullptr;
    QDoubleSpinBox* m_topP = nullptr;
    QSpinBox* m_seed = nullptr;
    QCheckBox* m_ignoreEos = nullptr;
    QPushButton* m_generate = nullptr;
    QPushButton* m_stop = nullptr;
    QPushButton* m_step = nullptr;
    QSpinBox* m_unitDelay = nullptr;
    QLabel* m_caption = nullptr;
    QLabel* m_speed = nullptr;
    QLabel* m_predicted = nullptr; // the run just made against its prediction
    QPlainTextEdit* m_output = nullptr;
    QWidget* m_messageBar = nullptr;
    bool m_messageIsError = true; // which tint the message bar wears
    QLabel* m_message = nullptr;

    std::optional<HardwareProfile> m_hardwareOverride;
    PlanState m_running; // the plan of the last Dispatch
    QString m_cannotRun;    // why the open model cannot run (index only), or empty
    bool m_stepping = false;
    bool m_runCalibrates = false;       // the dispatched prediction was for this machine as measured
    QVector<DeviceBytes> m_loadedBytes; // planned and resident bytes per device, from the worker
    QHash<QString, TraceSpan> m_moved; // teaching mode: per unit, what the current step moved
    int m_movedStep = -1;
    bool m_hasTokenizer = true;
    bool m_newContext = true;
    DoneInfo m_lastDone;
    QVector<int> m_streamed;
    double m_firstTokenAt = -1;
    qint64 m_generateStarted = 0;
};

} // namespace stowage
