// The session: checkpoint, module tree, map, tokenizer and model held
// together, with the prompt rules every front end shares.
#include "stowage/session.h"

#include "stowage/chattemplate.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <malloc.h>

namespace stowage {

struct Session::Impl {
    // Declared in this order so the model (which refers to the checkpoint
    // and the tree) goes first when the session is destroyed.
    std::unique_ptr<Checkpoint> checkpoint;
    std::shared_ptr<const ModuleTree> tree; // the caller's (SessionOptions::tree) or the session's own
    DeviceMap map;
    std::unique_ptr<Tokenizer> tokenizer;
    std::string tokenizerProblem; // why there is none
    std::shared_ptr<Telemetry> telemetry;
    std::atomic<bool> stop{false};
    std::unique_ptr<Model> model;
    double loadSeconds = 0;
    std::vector<int32_t> context;
    size_t promptLength = 0;
    // The text of the generation under way (context after the prompt): made
    // afresh by generate and by a step with a prompt, dropped when generate
    // ends; a step that continues without one makes it from the context.
    std::unique_ptr<StreamDecoder> stream;

    std::optional<nlohmann::json> sideJson(const std::string& name) const
    {
        auto text = checkpoint->readSideFile(name);
        if (!text)
            return std::nullopt;
        auto j = nlohmann::json::parse(*text, nullptr, false);
        if (!j.is_object())
            return std::nullopt; // unreadable side files fall back to the defaults, as transformers warns and goes on
        return j;
    }
    GenerationResult next(const SamplingOptions& sampling, const std::function<void(const TokenPiece&)>& onToken);
    // The chosen token `id` (already in the context) to onToken, with the
    // text it adds and the time it was chosen.
    void emit(int32_t id, int index, const std::function<void(const TokenPiece&)>& onToken)
    {
        const double t = telemetry->now();
        std::string text = stream ? stream->push(id) : std::string();
        if (onToken)
            onToken({id, std::move(text), index, t});
    }

    // Every shard the checkpoint maps still has its mapped size: reading a
    // file that shrank under the mapping raises SIGBUS, so a load,
    // generation or step on one fails first with a message naming it.
    void checkMappedFiles() const
    {
        for (const Shard& s : checkpoint->shards())
            if (s.map)
                s.map->checkSize();
    }
};

Session::Session(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Session::~Session()
{
    m_impl->model.reset();
    m_impl->telemetry->stopSampling();
    m_impl.reset();
    // Hand freed heap pages back to the system, so unloading shows in RSS.
    malloc_trim(0);
}

std::unique_ptr<Session> Session::open(const SessionOptions& options, const ProgressFn& progress)
{
    const auto t0 = std::chrono::steady_clock::now();
    Checkpoint ck = Checkpoint::open(options.path);
    auto session = open(std::move(ck), options, progress);
    session->m_impl->loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return session;
}

std::unique_ptr<Session> Session::open(Checkpoint checkpoint, const SessionOptions& options, const ProgressFn& progress)
{
    const auto t0 = std::chrono::steady_clock::now();
    auto impl = std::make_unique<Impl>();
    impl->checkpoint = std::make_unique<Checkpoint>(std::move(checkpoint));
    impl->tree = options.tree ? options.tree
                              : std::make_shared<const ModuleTree>(
                                    buildModuleTree(*impl->checkpoint, options.dtype, options.plan.reference));
    if (options.deviceMap) {
        const MapCheck check = validateDeviceMap(*impl->tree, *options.deviceMap);
        if (!check.errors.empty())
            throw InputError(options.deviceMapSource, check.errors.front());
        if (options.onWarning)
            for (const auto& w : check.warnings)
                options.onWarning(w);
        impl->map = *options.deviceMap;
    } else {
        impl->map = planDeviceMap(*impl->tree, options.plan).deviceMap;
    }
    try {
        impl->tokenizer = Tokenizer::load(*impl->checkpoint);
    } catch (const InputError& e) {
        impl->tokenizerProblem = e.what();
    }

    LoadOptions lo = options.load;
    lo.deviceMap = impl->map;
    lo.dtype = impl->tree->dtype();
    if (options.plan.maxMemory)
        for (const auto& b : *options.plan.maxMemory)
            if (b.device.kind == Device::Gpu)
                lo.gpuBudgets.push_back(b);
    impl->telemetry = lo.telemetry ? lo.telemetry : std::make_shared<Telemetry>();
    impl->telemetry->startSampling(20); // samples during the load too
    lo.telemetry = impl->telemetry;
    try {
        impl->checkMappedFiles();
        impl->model = Model::load(*impl->checkpoint, *impl->tree, lo, progress);
        impl->checkMappedFiles(); // shrunk while loading, where nothing happened to read the lost part
    } catch (...) {
        // Nothing is loaded: the samples stop with the failure (the caller may hold the telemetry).
        impl->model.reset();
        impl->telemetry->stopSampling();
        impl.reset();
        malloc_trim(0); // as an unload does, so a failed load shows in RSS
        throw;
    }
    impl->model->setInterrupt(&impl->stop);
    impl->loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

const Checkpoint& Session::checkpoint() const { return *m_impl->checkpoint; }
const ModuleTree& Session::tree() const { return *m_impl->tree; }
const DeviceMap& Session::deviceMap() const { return m_impl->map; }
const Tokenizer* Session::tokenizer() const { return m_impl->tokenizer.get(); }
Model& Session::model() { return *m_impl->model; }
Telemetry& Session::telemetry() { return *m_impl->telemetry; }
double Session::loadSeconds() const { return m_impl->loadSeconds; }
const std::vector<int32_t>& Session::context() const { return m_impl->context; }
void Session::requestStop() { m_impl->stop = true; }

std::vector<DevicePlacement> Session::placement() const
{
    std::map<Device, DevicePlacement> by;
    for (const auto& [key, device] : m_impl->map)
        by[device].device = device.name();
    // Parameters only, as the runtime counts what it holds: buffers are computed there.
    for (const auto& [device, bytes] : bytesPerDevice(*m_impl->tree, m_impl->map, /*buffers=*/false))
        by[device].plannedBytes = bytes;
    const auto resident = m_impl->telemetry->resident();
    for (auto& [device, pl] : by)
        if (auto it = resident.find(pl.device); it != resident.end())
            pl.actualBytes = it->second;
    const auto descriptions = m_impl->model->deviceDescriptions();
    std::vector<DevicePlacement> out;
    for (auto& [device, pl] : by) {
        pl.description = pl.device;
        for (const auto& d : descriptions)
            if (d == pl.device || d.rfind(pl.device + " ", 0) == 0)
                pl.description = d;
        out.push_back(pl);
    }
    return out;
}

std::vector<int32_t> Session::encodePrompt(const std::string& text) const
{
    const Tokenizer* tok = m_impl->tokenizer.get();
    if (!tok)
        throw InputError("prompt", "this checkpoint has no tokenizer to encode text with (" + m_impl->tokenizerProblem +
                                       "); give token ids instead");
    std::vector<int32_t> ids = tok->encode(text);
    const bool addBos = addsBos(*m_impl->checkpoint);
    if (tok->bosId() && addBos)
        ids.insert(ids.begin(), *tok->bosId());
    if (ids.empty() && tok->bosId())
        ids.push_back(*tok->bosId());
    if (ids.empty())
        throw InputError("prompt", "the prompt is empty and the tokenizer has no BOS token to start from");
    return ids;
}

std::vector<int32_t> Session::encodeChatPrompt(const std::string& text) const
{
    const Tokenizer* tok = m_impl->tokenizer.get();
    if (!tok)
        throw InputError("prompt", "this checkpoint has no tokenizer to encode text with (" + m_impl->tokenizerProblem +
                                       "); give token ids instead");
    auto t = ChatTemplate::fromFolder(m_impl->checkpoint->folder());
    if (!t)
        throw InputError(m_impl->checkpoint->folder(), "no chat template (neither chat_template.jinja nor "
                                                       "\"chat_template\" in tokenizer_config.json): run without --chat");
    std::vector<int32_t> ids = tok->encode(t->applyToPrompt(text));
    if (ids.empty())
        throw InputError(t->path(), "the chat template rendered nothing to start from");
    return ids;
}

SamplingOptions Session::samplingDefaults() const
{
    SamplingOptions s;
    auto ids = [](const nlohmann::json& v) {
        std::vector<int32_t> out;
        if (v.is_number_integer())
            out.push_back(v.get<int32_t>());
        else if (v.is_array())
            for (const auto& x : v)
                if (x.is_number_integer())
                    out.push_back(x.get<int32_t>());
        return out;
    };
    const auto gen = m_impl->sideJson("generation_config.json");
    if (gen) {
        const nlohmann::json& g = *gen;
        if (g.contains("do_sample") && g["do_sample"].is_boolean())
            s.greedy = !g["do_sample"].get<bool>();
        if (g.contains("temperature") && g["temperature"].is_number() && g["temperature"].get<double>() > 0)
            s.temperature = g["temperature"].get<float>();
        if (g.contains("top_k") && g["top_k"].is_number_integer() && g["top_k"].get<int64_t>() >= 0)
            s.topK = int(std::min<int64_t>(g["top_k"].get<int64_t>(), 1 << 30));
        if (g.contains("top_p") && g["top_p"].is_number() && g["top_p"].get<double>() > 0 && g["top_p"].get<double>() <= 1)
            s.topP = g["top_p"].get<float>();
        if (g.contains("eos_token_id"))
            s.stopIds = ids(g["eos_token_id"]);
    }
    if (s.stopIds.empty() && m_impl->checkpoint->config() && m_impl->checkpoint->config()->raw().contains("eos_token_id"))
        s.stopIds = ids(m_impl->checkpoint->config()->raw()["eos_token_id"]);
    return s;
}

GenerationResult Session::generate(const std::vector<int32_t>& prompt, const SamplingOptions& sampling,
                                   const std::function<void(const TokenPiece&)>& onToken)
{
    m_impl->stop = false;
    m_impl->checkMappedFiles();
    m_impl->model->setUnitDelay(0);
    m_impl->context = prompt;
    m_impl->promptLength = prompt.size();
    m_impl->stream.reset();
    if (m_impl->tokenizer)
        m_impl->stream = std::make_unique<StreamDecoder>(*m_impl->tokenizer, /*skipSpecial=*/true);
    int index = 0;
    SamplingOptions o = sampling;
    o.stop = &m_impl->stop;
    GenerationResult r = stowage::generate(*m_impl->model, prompt, o, [&](int32_t id) {
        m_impl->context.push_back(id);
        m_impl->emit(id, index++, onToken);
        return true;
    });
    if (m_impl->stream && onToken) {
        // Text still held back (an unfinished UTF-8 sequence) as a last piece without a token.
        if (std::string rest = m_impl->stream->finish(); !rest.empty())
            onToken({-1, rest, -1, m_impl->telemetry->now()});
    }
    m_impl->stream.reset(); // its text is all out: a step that continues starts from the context
    return r;
}

GenerationResult Session::step(const std::optional<std::vector<int32_t>>& prompt, const SamplingOptions& sampling,
                               double unitDelay, const std::function<void(const TokenPiece&)>& onToken)
{
    Impl& d = *m_impl;
    d.stop = false;
    d.checkMappedFiles();
    if (prompt) {
        d.context = *prompt;
        d.promptLength = prompt->size();
        d.model->resetCache();
        d.stream.reset();
    }
    if (d.context.empty())
        throw InputError("prompt", "there is nothing to continue: give a prompt for the first step");
    if (!d.stream && d.tokenizer)
        d.stream = std::make_unique<StreamDecoder>(
            *d.tokenizer, /*skipSpecial=*/true,
            std::vector<int32_t>(d.context.begin() + long(d.promptLength), d.context.end()));
    d.model->setUnitDelay(unitDelay);
    SamplingOptions o = sampling;
    o.stop = &d.stop;
    GenerationResult r = d.next(o, onToken);
    d.model->setUnitDelay(0);
    return r;
}

GenerationResult Session::Impl::next(const SamplingOptions& o, const std::function<void(const TokenPiece&)>& onToken)
{
    GenerationResult r;
    const size_t generated = context.size() - promptLength;
    const auto t0 = std::chrono::steady_clock::now();
    telemetry->setStep(int64_t(generated));
    std::vector<float> logits;
    try {
        if (generated > 0 && size_t(model->cachedTokens()) + 1 == context.size()) {
            logits = model->forward({context.back()}); // the cache holds all but the newest token
        } else {
            model->resetCache();
            logits = model->forward(context);
        }
    } catch (const Stopped&) {
        r.stopped = true;
        return r;
    }
    const int32_t id = sampleToken(logits, o, uint64_t(generated));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (generated == 0 ? r.prefillSeconds : r.decodeSeconds) = seconds;
    r.tokens.push_back(id);
    context.push_back(id);
    emit(id, int(generated), onToken);
    return r;
}

} // namespace stowage
