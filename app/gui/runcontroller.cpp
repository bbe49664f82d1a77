#include "runcontroller.h"

#include "workerclient.h"

#include <QJsonArray>

namespace stowage {

QJsonObject LoadRequest::toCommand() const
{
    QJsonObject c{{"cmd", "load"}, {"device_map", deviceMap}, {"policy", policy}};
    if (!path.isEmpty())
        c["path"] = path;
    if (!dtype.isEmpty())
        c["dtype"] = dtype;
    if (!maxMemory.isEmpty())
        c["max_memory"] = maxMemory;
    if (simulateGpus)
        c["simulate_gpus"] = true;
    if (!hardware.isEmpty())
        c["hardware"] = hardware;
    if (throttle)
        c["throttle"] = true;
    if (!offloadFolder.isEmpty())
        c["offload_folder"] = offloadFolder;
    return c;
}

QJsonObject GenerateRequest::toCommand(bool step, int unitDelayMs) const
{
    QJsonObject c{{"cmd", step ? "step" : "generate"}};
    if (!promptIds.isEmpty()) {
        QJsonArray ids;
        for (int id : promptIds)
            ids.append(id);
        c["prompt_ids"] = ids;
    } else if (!step || !prompt.isNull()) {
        c["prompt"] = prompt;
    }
    if (step)
        c["unit_delay_ms"] = unitDelayMs;
    else
        c["max_new_tokens"] = maxNewTokens;
    if (greedy) {
        c["greedy"] = true;
    } else {
        c["temperature"] = temperature;
        c["top_k"] = topK;
        c["top_p"] = topP;
        c["seed"] = seed;
    }
    if (ignoreEos)
        c["ignore_eos"] = true;
    return c;
}

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
    command["request"] = ++m_job;
    ensureWorker();
    if (!m_helloSeen) {
        m_pending.push_back({command, next});
        return;
    }
    m_client->send(command);
    setState(next);
}

void RunController::dispatch(const LoadRequest& request) { send(request.toCommand(), State::Loading); }

void RunController::generate(const GenerateRequest& request)
{
    if (!m_loaded)
        return;
    send(request.toCommand(false, 0), State::Generating);
}

void RunController::step(const GenerateRequest& request, int unitDelayMs)
{
    if (!m_loaded)
        return;
    send(request.toCommand(true, unitDelayMs), State::Stepping);
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
        send(QJsonObject{{"cmd", "unload"}}, State::Unloading);
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
    const QString kind = e.value("event").toString();
    // Answers to an older command (a stopped job's late error) are dropped.
    if (e.contains("request") && e.value("request").toInt() != m_job && kind != "sample" && kind != "trace")
        return;
    if (kind == "sample") {
        RunSample s;
        s.t = e.value("t").toDouble();
        const QJsonObject r = e.value("resident").toObject();
        for (auto it = r.begin(); it != r.end(); ++it)
            s.resident.push_back({it.key(), quint64(it.value().toDouble())});
        s.rssBytes = quint64(e.value("rss_bytes").toDouble());
        s.h2dBytes = quint64(e.value("h2d_bytes").toDouble());
        s.diskReadBytes = quint64(e.value("disk_read_bytes").toDouble());
        m_lastSampleT = s.t;
        m_lastSampleAt = m_clock.elapsed();
        emit sampleAvailable(s);
    } else if (kind == "trace") {
        QVector<TraceSpan> spans;
        const QJsonArray a = e.value("events").toArray();
        spans.reserve(a.size());
        for (const auto& v : a) {
            const QJsonObject o = v.toObject();
            TraceSpan s;
            if (!TraceSpan::kindFromName(o.value("kind").toString(), &s.kind))
                continue;
            s.unit = o.value("unit").toString();
            s.device = o.value("device").toString();
            s.step = o.value("step").toInt();
            s.t0 = o.value("t0").toDouble();
            s.t1 = o.value("t1").toDouble();
            s.tensor = o.value("tensor").toString();
            s.bytes = quint64(o.value("bytes").toDouble());
            spans.push_back(s);
        }
        emit traceAvailable(spans);
    } else if (kind == "token") {
        TokenMark t;
        t.id = e.value("token").toInt();
        t.text = e.value("text").toString();
        t.index = e.value("index").toInt();
        t.t = e.contains("t") ? e.value("t").toDouble() : workerTime();
        emit tokenAvailable(t);
    } else if (kind == "progress") {
        emit progress(qBound(0, qRound(e.value("fraction").toDouble() * 1000), 1000), e.value("what").toString());
    } else if (kind == "loaded") {
        m_stopGuard.stop();
        LoadedInfo info;
        info.modelType = e.value("model_type").toString();
        info.loadSeconds = e.value("load_s").toDouble();
        info.hasTokenizer = e.value("tokenizer").toBool(true);
        for (const auto& v : e.value("units").toArray())
            info.units.push_back({v.toObject().value("name").toString(), v.toObject().value("device").toString()});
        for (const auto& v : e.value("devices").toArray()) {
            const QJsonObject o = v.toObject();
            info.devices.push_back({o.value("device").toString(), quint64(o.value("planned_bytes").toDouble()),
                                    quint64(o.value("actual_bytes").toDouble()), o.value("description").toString()});
        }
        m_loaded = true;
        setState(State::Loaded);
        emit loaded(info);
    } else if (kind == "done") {
        m_stopGuard.stop();
        DoneInfo d;
        for (const auto& v : e.value("token_ids").toArray())
            d.tokenIds.push_back(v.toInt());
        d.text = e.value("text").toString();
        d.stopped = e.value("stopped").toBool();
        const QJsonObject t = e.value("timings").toObject();
        d.prefillSeconds = t.value("prefill_s").toDouble();
        d.decodeSeconds = t.value("decode_s").toDouble();
        d.tokensPerSecond = t.value("decode_tokens_per_s").toDouble();
        setState(State::Loaded);
        emit done(d);
    } else if (kind == "cancelled") {
        m_stopGuard.stop();
        m_loaded = false;
        setState(State::Idle);
        emit cancelled();
    } else if (kind == "unloaded") {
        m_loaded = false;
        setState(State::Idle);
        emit unloaded();
    } else if (kind == "warning") {
        emit warning(e.value("message").toString());
    } else if (kind == "error") {
        m_stopGuard.stop();
        // A failed load leaves nothing loaded; a failed generation keeps the model.
        setState(m_state == State::Loading ? State::Idle : (m_loaded ? State::Loaded : State::Idle));
        if (m_state == State::Idle)
            m_loaded = false;
        emit failed(e.value("message").toString());
    } else if (kind == "hello") {
        m_helloSeen = true;
        m_runtime = e.value("runtime").toString();
        setState(State::Idle);
        emit workerStarted(m_runtime);
        const auto pending = std::exchange(m_pending, {});
        for (const auto& [command, next] : pending) {
            m_client->send(command);
            setState(next);
        }
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
