#include "runcontroller.h"

#include "workerclient.h"
#include "workerwire.h"

namespace stowage {

RunController::RunController(QString program, QObject* parent) : QObject(parent), m_program(std::move(program))
{
    qRegisterMetaType<RunSample>();
    qRegisterMetaType<TraceSpan>();
    qRegisterMetaType<LoadedInfo>();
    qRegisterMetaType<DoneInfo>();
    qRegisterMetaType<TokenMark>();
    m_stopGuard.setSingleShot(true);
    connect(&m_stopGuard, &QTimer::timeout, this, [this] {
        // The worker did not answer the stop: it may be stuck in a long copy.
        if (m_client && m_client->isRunning() &&
            (m_state == State::Loading || m_state == State::Generating || m_state == State::Stepping))
            m_client->terminate(2000);
    });
    m_clock.start();
}

RunController::~RunController() = default;

qint64 RunController::workerPid() const { return m_client ? m_client->processId() : 0; }

QString RunController::stderrLog() const { return m_client ? m_client->stderrLog() : QString(); }

void RunController::setState(State s)
{
    if (s == m_state)
        return;
    m_state = s;
    emit stateChanged(s);
}

void RunController::ensureWorker()
{
    if (m_client && m_client->isRunning())
        return;
    if (!m_client) {
        m_client = new WorkerClient(m_program, this);
        connect(m_client, &WorkerClient::eventReceived, this, &RunController::handleEvent);
        connect(m_client, &WorkerClient::ended, this, &RunController::handleEnded);
        connect(m_client, &WorkerClient::protocolError, this, &RunController::failed);
    }
    m_helloSeen = false;
    m_loaded = false;
    m_lastSampleAt = -1;
    setState(State::Starting);
    m_client->start();
}

void RunController::send(QJsonObject command, State next)
{
    command[wire::kRequest] = ++m_job;
    ensureWorker();
    if (!m_helloSeen) {
        m_pending.push_back({command, next});
        return;
    }
    m_client->send(command);
    setState(next);
}

void RunController::dispatch(const LoadRequest& request)
{
    m_policy = request.policy;
    send(encodeLoad(request), State::Loading);
}

void RunController::generate(const GenerateRequest& request)
{
    if (!m_loaded)
        return;
    send(encodeGenerate(request, false), State::Generating);
}

void RunController::step(const GenerateRequest& request, int unitDelayMs)
{
    if (!m_loaded)
        return;
    send(encodeGenerate(request, true, unitDelayMs), State::Stepping);
}

void RunController::stop()
{
    if (!m_pending.isEmpty() && !m_helloSeen) {
        // Nothing reached the worker yet: drop the commands.
        m_pending.clear();
        setState(State::Starting);
        emit cancelled();
        return;
    }
    if (!m_client || !m_client->isRunning())
        return;
    if (m_state != State::Loading && m_state != State::Generating && m_state != State::Stepping)
        return;
    m_client->stop();
    m_stopGuard.start(m_stopGraceMs);
}

void RunController::unload()
{
    if (m_client && m_client->isRunning() && m_helloSeen)
        send(encodeUnload(), State::Unloading);
}

void RunController::shutdown()
{
    m_pending.clear();
    if (m_client)
        m_client->shutdown(1000);
}

double RunController::workerTime() const
{
    if (m_lastSampleAt < 0)
        return m_lastSampleT;
    return m_lastSampleT + double(m_clock.elapsed() - m_lastSampleAt) / 1000.0;
}

void RunController::handleEvent(const QJsonObject& e)
{
    const std::optional<DecodedEvent> d = decodeEvent(e);
    if (!d)
        return; // a kind this window does not know
    // Answers to an older command (a stopped job's late error) are dropped;
    // samples and trace belong to the worker, not to a command.
    const bool telemetry = std::holds_alternative<RunSample>(d->event) || std::holds_alternative<worker::Trace>(d->event);
    if (d->request && *d->request != m_job && !telemetry)
        return;
    std::visit([this](const auto& event) { handle(event); }, d->event);
}

void RunController::handle(const RunSample& s)
{
    m_lastSampleT = s.t;
    m_lastSampleAt = m_clock.elapsed();
    emit sampleAvailable(s);
}

void RunController::handle(const worker::Trace& t) { emit traceAvailable(t.spans); }

void RunController::handle(TokenMark t)
{
    if (t.t < 0) // a worker that does not send the token's time
        t.t = workerTime();
    emit tokenAvailable(t);
}

void RunController::handle(const worker::Progress& p) { emit progress(p.permille, p.what); }

void RunController::handle(const LoadedInfo& info)
{
    m_stopGuard.stop();
    m_loaded = true;
    setState(State::Loaded);
    emit loaded(info);
}

void RunController::handle(const DoneInfo& d)
{
    m_stopGuard.stop();
    setState(State::Loaded);
    emit done(d);
}

void RunController::handle(const worker::Cancelled&)
{
    m_stopGuard.stop();
    m_loaded = false;
    setState(State::Idle);
    emit cancelled();
}

void RunController::handle(const worker::Unloaded&)
{
    m_loaded = false;
    // A load replacing a model unloads it first: the load goes on.
    if (m_state != State::Loading)
        setState(State::Idle);
    emit unloaded();
}

void RunController::handle(const worker::Warning& w) { emit warning(w.message); }

void RunController::handle(const worker::Error& e)
{
    m_stopGuard.stop();
    // A failed load leaves nothing loaded; a failed generation keeps the model.
    setState(m_state == State::Loading ? State::Idle : (m_loaded ? State::Loaded : State::Idle));
    if (m_state == State::Idle)
        m_loaded = false;
    emit failed(e.message);
}

void RunController::handle(const worker::Hello& h)
{
    m_helloSeen = true;
    m_runtime = h.runtime;
    setState(State::Idle);
    emit workerStarted(m_runtime);
    const auto pending = std::exchange(m_pending, {});
    for (const auto& [command, next] : pending) {
        m_client->send(command);
        setState(next);
    }
}

void RunController::handleEnded(int, QProcess::ExitStatus, const QString& description)
{
    m_stopGuard.stop();
    m_pending.clear();
    m_loaded = false;
    m_helloSeen = false;
    const bool byUser = m_client && m_client->userStopped();
    setState(State::NoWorker);
    emit workerEnded(description, byUser);
}

} // namespace stowage
