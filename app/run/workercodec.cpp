#include "workercodec.h"

#include "workerwire.h"

#include <QJsonArray>
#include <QJsonDocument>

#include <string_view>

namespace stowage {
namespace f = wire::f;

namespace {

QJsonObject command(const char* name) { return QJsonObject{{wire::kCmd, name}}; }

QJsonObject objectFromJson(const std::string& text)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}

quint64 bytes(const QJsonValue& v) { return quint64(v.toDouble()); }

QStringList strings(const QJsonValue& v)
{
    QStringList out;
    for (const auto& s : v.toArray())
        out << s.toString();
    return out;
}

// One decoder per event kind; the table below is the only place a kind's
// name meets its value type.
WorkerEvent hello(const QJsonObject& e)
{
    worker::Hello h;
    h.protocol = e.value(f::Protocol).toInt();
    h.runtime = e.value(f::Runtime).toString();
    h.cuda = e.value(f::Cuda).toBool();
    h.families = strings(e.value(f::Families));
    h.policies = strings(e.value(f::Policies));
    h.pid = qint64(e.value(f::Pid).toDouble());
    return h;
}

WorkerEvent progress(const QJsonObject& e)
{
    return worker::Progress{qBound(0, qRound(e.value(f::Fraction).toDouble() * 1000), 1000),
                            e.value(f::What).toString()};
}

WorkerEvent warning(const QJsonObject& e) { return worker::Warning{e.value(f::Message).toString()}; }

WorkerEvent loaded(const QJsonObject& e)
{
    LoadedInfo info;
    info.modelType = e.value(f::ModelType).toString();
    info.loadSeconds = e.value(f::LoadS).toDouble();
    info.hasTokenizer = e.value(f::Tokenizer).toBool(true);
    for (const auto& v : e.value(f::Units).toArray())
        info.units.push_back({v.toObject().value(f::Name).toString(), v.toObject().value(f::Device).toString()});
    for (const auto& v : e.value(f::Devices).toArray()) {
        const QJsonObject o = v.toObject();
        info.devices.push_back({o.value(f::Device).toString(), bytes(o.value(f::PlannedBytes)),
                                bytes(o.value(f::ActualBytes)), o.value(f::Description).toString()});
    }
    return info;
}

WorkerEvent token(const QJsonObject& e)
{
    TokenMark t;
    t.id = e.value(f::Token).toInt();
    t.text = e.value(f::Text).toString();
    t.index = e.value(f::Index).toInt();
    t.t = e.value(f::T).toDouble(-1);
    return t;
}

WorkerEvent sample(const QJsonObject& e)
{
    RunSample s;
    s.t = e.value(f::T).toDouble();
    const QJsonObject r = e.value(f::Resident).toObject();
    for (auto it = r.begin(); it != r.end(); ++it)
        s.resident.push_back({it.key(), bytes(it.value())});
    s.rssBytes = bytes(e.value(f::RssBytes));
    s.h2dBytes = bytes(e.value(f::H2dBytes));
    s.diskReadBytes = bytes(e.value(f::DiskReadBytes));
    s.diskPassBytes = bytes(e.value(f::DiskPassBytes));
    return s;
}

WorkerEvent trace(const QJsonObject& e)
{
    worker::Trace t;
    const QJsonArray a = e.value(f::Events).toArray();
    t.spans.reserve(a.size());
    for (const auto& v : a) {
        const QJsonObject o = v.toObject();
        TraceSpan s;
        if (!TraceSpan::kindFromName(o.value(f::Kind).toString(), &s.kind))
            continue;
        s.unit = o.value(f::Unit).toString();
        s.device = o.value(f::Device).toString();
        s.step = o.value(f::StepIndex).toInt();
        s.t0 = o.value(f::T0).toDouble();
        s.t1 = o.value(f::T1).toDouble();
        s.tensor = o.value(f::Tensor).toString();
        s.bytes = bytes(o.value(f::Bytes));
        t.spans.push_back(s);
    }
    t.missed = bytes(e.value(f::Missed));
    return t;
}

WorkerEvent done(const QJsonObject& e)
{
    DoneInfo d;
    for (const auto& v : e.value(f::TokenIds).toArray())
        d.tokenIds.push_back(v.toInt());
    d.text = e.value(f::Text).toString();
    d.stopped = e.value(f::Stopped).toBool();
    const QJsonObject t = e.value(f::Timings).toObject();
    d.prefillSeconds = t.value(f::PrefillS).toDouble();
    d.decodeSeconds = t.value(f::DecodeS).toDouble();
    d.tokensPerSecond = t.value(f::DecodeTokensPerS).toDouble();
    return d;
}

WorkerEvent cancelled(const QJsonObject& e) { return worker::Cancelled{e.value(f::What).toString()}; }

WorkerEvent unloaded(const QJsonObject& e)
{
    return worker::Unloaded{e.value(f::WasLoaded).toBool(), bytes(e.value(f::RssBytes))};
}

WorkerEvent error(const QJsonObject& e)
{
    return worker::Error{e.value(f::Kind).toString(), e.value(f::Message).toString()};
}

struct Decoder {
    const char* kind;
    WorkerEvent (*decode)(const QJsonObject&);
};
constexpr Decoder kDecoders[] = {
    {wire::ev::Hello, hello},     {wire::ev::Progress, progress},   {wire::ev::Warning, warning},
    {wire::ev::Loaded, loaded},   {wire::ev::Token, token},         {wire::ev::Sample, sample},
    {wire::ev::Trace, trace},     {wire::ev::Done, done},           {wire::ev::Cancelled, cancelled},
    {wire::ev::Unloaded, unloaded}, {wire::ev::Error, error},
};
static_assert(std::size(kDecoders) == std::size(wire::ev::All), "one decoder per event kind");
static_assert(std::size(kDecoders) == std::variant_size_v<WorkerEvent>, "one value type per event kind");

} // namespace

QJsonObject encodeLoad(const LoadRequest& r)
{
    QJsonObject c = command(wire::cmd::Load);
    c[f::DeviceMap] = objectFromJson(deviceMapToJson(r.deviceMap));
    c[f::Policy] = r.policy;
    if (!r.path.isEmpty())
        c[f::Path] = r.path;
    if (!r.dtype.isEmpty())
        c[f::DType] = r.dtype;
    if (!r.maxMemory.empty()) {
        QJsonObject mm;
        for (const DeviceBudget& b : r.maxMemory)
            mm[QString::fromStdString(b.device.name())] = b.bytes;
        c[f::MaxMemory] = mm;
    }
    if (r.simulateGpus)
        c[f::SimulateGpus] = true;
    if (r.hardware)
        c[f::Hardware] = objectFromJson(profileToJson(*r.hardware));
    if (r.throttle)
        c[f::Throttle] = true;
    if (!r.offloadFolder.isEmpty())
        c[f::OffloadFolder] = r.offloadFolder;
    return c;
}

QJsonObject encodeGenerate(const GenerateRequest& g, bool step, int unitDelayMs)
{
    QJsonObject c = command(step ? wire::cmd::Step : wire::cmd::Generate);
    if (!g.promptIds.isEmpty()) {
        QJsonArray ids;
        for (int id : g.promptIds)
            ids.append(id);
        c[f::PromptIds] = ids;
    } else if (!step || !g.prompt.isNull()) {
        c[f::Prompt] = g.prompt;
        if (g.chat)
            c[f::Chat] = true;
    }
    if (step)
        c[f::UnitDelayMs] = unitDelayMs;
    else
        c[f::MaxNewTokens] = g.maxNewTokens;
    if (g.greedy) {
        c[f::Greedy] = true;
    } else {
        c[f::Temperature] = g.temperature;
        c[f::TopK] = g.topK;
        c[f::TopP] = g.topP;
        c[f::Seed] = g.seed;
    }
    if (g.ignoreEos)
        c[f::IgnoreEos] = true;
    return c;
}

QJsonObject encodeStop() { return command(wire::cmd::Stop); }
QJsonObject encodeUnload() { return command(wire::cmd::Unload); }
QJsonObject encodeQuit() { return command(wire::cmd::Quit); }

std::optional<DecodedEvent> decodeEvent(const QJsonObject& e)
{
    const QString kind = e.value(wire::kEvent).toString();
    for (const Decoder& d : kDecoders) {
        if (kind != QLatin1String(d.kind))
            continue;
        DecodedEvent out{std::nullopt, d.decode(e)};
        if (e.contains(wire::kRequest))
            out.request = e.value(wire::kRequest).toInt();
        return out;
    }
    return std::nullopt;
}

} // namespace stowage
