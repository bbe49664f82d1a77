// The worker's commands (docs/worker-protocol.md): reading lines and checking
// each command's fields. No LibTorch is needed here beyond two policy names,
// so fuzz/fuzz_worker.cpp builds this file without the runtime; the events
// the worker writes are in workerevents.cpp.
#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "workerprotocol.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unistd.h>

namespace stowage::cli {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace f = wire::f;

constexpr int kMaxDepth = 32; // commands are flat; deeper nesting is refused before parsing

InputError fieldError(const std::string& name, const std::string& expected)
{
    return InputError("", "field \"" + name + "\" must be " + expected);
}

// The deepest bracket nesting outside strings.
int nestingDepth(const std::string& text)
{
    int depth = 0, deepest = 0;
    bool inString = false, escaped = false;
    for (char c : text) {
        if (inString) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return deepest;
}

const json* find(const json& cmd, const char* name)
{
    auto it = cmd.find(name);
    return it == cmd.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::string> stringField(const json& cmd, const char* name)
{
    const json* v = find(cmd, name);
    if (!v)
        return std::nullopt;
    if (!v->is_string())
        throw fieldError(name, "a string");
    return v->get<std::string>();
}

std::optional<bool> boolField(const json& cmd, const char* name)
{
    const json* v = find(cmd, name);
    if (!v)
        return std::nullopt;
    if (!v->is_boolean())
        throw fieldError(name, "true or false");
    return v->get<bool>();
}

std::optional<double> numberField(const json& cmd, const char* name, double lo, double hi, bool whole)
{
    const json* v = find(cmd, name);
    if (!v)
        return std::nullopt;
    const std::string range = " from " + ojson(lo).dump() + " to " + ojson(hi).dump();
    if (!v->is_number())
        throw fieldError(name, std::string(whole ? "a whole number" : "a number") + range);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (whole && std::floor(x) != x))
        throw fieldError(name, std::string(whole ? "a whole number" : "a number") + range + ", got " + v->dump());
    return x;
}

} // namespace

LineReader::Result LineReader::next(std::string& line)
{
    bool tooLong = false;
    while (true) {
        const size_t nl = m_buffer.find('\n', m_scanned);
        if (nl != std::string::npos) {
            if (tooLong || nl > m_max) {
                m_buffer.erase(0, nl + 1);
                m_scanned = 0;
                return TooLong;
            }
            line.assign(m_buffer, 0, nl);
            m_buffer.erase(0, nl + 1);
            m_scanned = 0;
            return Line;
        }
        m_scanned = m_buffer.size();
        if (m_buffer.size() > m_max) {
            tooLong = true; // keep reading to its end, holding nothing
            m_buffer.clear();
            m_scanned = 0;
        }
        if (m_eof) {
            if (m_buffer.empty() && !tooLong)
                return End;
            line.swap(m_buffer); // a last line without a newline
            m_buffer.clear();
            m_scanned = 0;
            return tooLong ? TooLong : Line;
        }
        char chunk[65536];
        const ssize_t n = ::read(m_fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            m_eof = true;
        else
            m_buffer.append(chunk, size_t(n));
    }
}

json parseCommandLine(const std::string& line)
{
    if (nestingDepth(line) > kMaxDepth)
        throw InputError("", "not a command: JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
    json cmd;
    try {
        cmd = json::parse(line);
    } catch (const json::exception& e) { // parse_error, or out_of_range for a number like 1e999
        std::string what = e.what();
        if (auto p = what.find("] "); p != std::string::npos)
            what = what.substr(p + 2); // drop nlohmann's "[json.exception...]" tag
        throw InputError("", "not JSON (" + what + ")");
    }
    if (!cmd.is_object())
        throw InputError("", "a command must be a JSON object with a \"cmd\" field");
    if (!cmd.contains(wire::kCmd) || !cmd[wire::kCmd].is_string())
        throw InputError("", "a command needs a \"cmd\" string (load, generate, step, stop, unload or quit)");
    return cmd;
}

void checkFields(const json& cmd, const std::vector<std::string>& allowed)
{
    for (auto it = cmd.begin(); it != cmd.end(); ++it) {
        const std::string& k = it.key();
        if (k == wire::kCmd || k == wire::kRequest || std::find(allowed.begin(), allowed.end(), k) != allowed.end())
            continue;
        std::string list;
        for (const auto& a : allowed)
            list += (list.empty() ? "" : ", ") + a;
        throw InputError("",
            "unknown field \"" + k + "\" in " + cmd[wire::kCmd].get<std::string>()
                + (list.empty() ? " (it takes none)" : " (it takes " + list + ")"));
    }
}

LoadCommand parseLoad(const json& cmd)
{
    checkFields(cmd,
        { f::Path, f::DType, f::Reference, f::DeviceMap, f::MaxMemory, f::Strategy, f::NoSplit, f::OffloadBuffers,
            f::KvCache, f::OffloadFolder, f::Policy, f::SimulateGpus, f::Hardware, f::Throttle, f::Threads });
    LoadCommand lc;
    lc.path = stringField(cmd, f::Path).value_or("");
    if (auto d = stringField(cmd, f::DType)) {
        auto dt = dtypeFromTorchName(*d);
        if (!dt || !dtypeIsFloating(*dt))
            throw fieldError(f::DType, "one of float32, float16, bfloat16, got \"" + *d + "\"");
        lc.dtype = dt;
    }
    if (auto r = stringField(cmd, f::Reference)) {
        auto ref = referenceFromName(*r);
        if (!ref)
            throw fieldError(f::Reference, "transformers or accelerate, got \"" + *r + "\"");
        lc.plan.reference = *ref;
    }
    if (const json* m = find(cmd, f::DeviceMap)) {
        if (!m->is_object())
            throw fieldError(f::DeviceMap, "an object of module names to devices");
        lc.deviceMap = deviceMapFromJson(m->dump(), "device map");
    }
    if (const json* mm = find(cmd, f::MaxMemory)) {
        if (!mm->is_object())
            throw fieldError(f::MaxMemory, "an object of devices to sizes, e.g. {\"0\": \"20GiB\", \"cpu\": \"64GB\"}");
        Budgets b;
        for (auto it = mm->begin(); it != mm->end(); ++it) {
            const std::string what = std::string(f::MaxMemory) + "[\"" + it.key() + "\"]";
            if (it->is_string()) {
                b.push_back(parseBudget(it.key(), it->get<std::string>(), what));
            } else if (it->is_number() && it->get<double>() >= 0 && std::isfinite(it->get<double>())) {
                DeviceBudget n = parseBudget(it.key(), "0", what); // the device checked as for a size
                n.bytes = std::floor(it->get<double>());
                b.push_back(n);
            } else {
                throw InputError(what, "expected a size such as \"20GiB\" or a number of bytes, got " + it->dump());
            }
        }
        lc.plan.maxMemory = normalizeBudgets(b);
    }
    if (auto s = stringField(cmd, f::Strategy)) {
        auto st = strategyFromName(*s);
        if (!st)
            throw fieldError(f::Strategy, "auto, balanced, balanced_low_0, sequential or experts_in_ram, got \"" + *s + "\"");
        lc.plan.strategy = *st;
    }
    if (const json* ns = find(cmd, f::NoSplit)) {
        if (!ns->is_array())
            throw fieldError(f::NoSplit, "an array of module class names");
        std::vector<std::string> classes;
        for (const auto& c : *ns) {
            if (!c.is_string())
                throw fieldError(f::NoSplit, "an array of module class names");
            classes.push_back(c.get<std::string>());
        }
        lc.plan.noSplit = classes;
    }
    lc.plan.offloadBuffers = boolField(cmd, f::OffloadBuffers).value_or(false);
    if (auto kv = stringField(cmd, f::KvCache))
        lc.kv = parseKvSpec(*kv, f::KvCache);
    lc.load.offloadFolder = stringField(cmd, f::OffloadFolder).value_or("");
    if (auto p = stringField(cmd, f::Policy)) {
        auto pol = policyFromName(*p);
        if (!pol)
            throw fieldError(f::Policy, "accelerate-like, prefetch or compute-where-it-lives, got \"" + *p + "\"");
        lc.load.policy = *pol;
    }
    lc.load.simulateGpus = boolField(cmd, f::SimulateGpus).value_or(false);
    if (const json* h = find(cmd, f::Hardware)) {
        // A preset name, a saved profile FILE.json, or the profile itself:
        // the window sends the one its prediction used.
        if (h->is_string())
            lc.load.profile = hardwareFromSpec(h->get<std::string>());
        else if (h->is_object())
            lc.load.profile = profileFromJson(h->dump(), "the load command's \"hardware\"");
        else
            throw fieldError(f::Hardware, "a preset name, a profile .json file or a hardware profile object");
    }
    if (boolField(cmd, f::Throttle).value_or(false)) {
        if (!lc.load.profile || lc.load.profile->gpus.empty())
            throw InputError("", "\"throttle\" needs a \"hardware\" profile with a GPU, e.g. \"rtx4090\"");
        const GpuProfile& g = lc.load.profile->gpus.front();
        lc.load.simulatedPcieBytesPerSecond
            = lc.load.policy == ExecutionPolicy::AccelerateLike ? g.h2dPageable : g.h2dPinned;
    }
    lc.load.threads = int(numberField(cmd, f::Threads, 0, 4096, true).value_or(0));
    return lc;
}

GenerateCommand parseGenerate(const json& cmd, bool step)
{
    std::vector<std::string> fields { f::Prompt, f::PromptIds, f::Chat, f::Greedy, f::Temperature, f::TopK, f::TopP,
        f::Seed, f::IgnoreEos };
    if (step)
        fields.push_back(f::UnitDelayMs);
    else
        fields.push_back(f::MaxNewTokens);
    checkFields(cmd, fields);
    GenerateCommand g;
    g.prompt = stringField(cmd, f::Prompt);
    if (const json* ids = find(cmd, f::PromptIds)) {
        if (g.prompt)
            throw InputError("", "give \"prompt\" or \"prompt_ids\", not both");
        if (!ids->is_array())
            throw fieldError(f::PromptIds, "an array of token ids");
        std::vector<int32_t> out;
        for (const auto& v : *ids) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0
                || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
                throw fieldError(f::PromptIds, "an array of token ids (whole numbers from 0), got " + v.dump());
            out.push_back(int32_t(v.get<int64_t>()));
        }
        if (out.empty())
            throw fieldError(f::PromptIds, "a non-empty array of token ids");
        g.promptIds = out;
    }
    g.chat = boolField(cmd, f::Chat).value_or(false);
    if (g.chat && !g.prompt)
        throw InputError("", "\"chat\" applies the chat template to \"prompt\" text: give \"prompt\"");
    if (auto n = numberField(cmd, f::MaxNewTokens, 1, 1e6, true))
        g.maxNewTokens = int(*n);
    g.greedy = boolField(cmd, f::Greedy);
    if (auto t = numberField(cmd, f::Temperature, 1e-6, 100, false))
        g.temperature = float(*t);
    if (auto k = numberField(cmd, f::TopK, 0, 1e9, true))
        g.topK = int(*k);
    if (auto p = numberField(cmd, f::TopP, 1e-6, 1, false))
        g.topP = float(*p);
    if (auto s = numberField(cmd, f::Seed, 0, 9e15, true))
        g.seed = uint64_t(*s);
    g.ignoreEos = boolField(cmd, f::IgnoreEos).value_or(false);
    if (auto d = numberField(cmd, f::UnitDelayMs, 0, 10000, false))
        g.unitDelayMs = *d;
    return g;
}

SamplingOptions applySampling(SamplingOptions s, const GenerateCommand& g)
{
    if (g.maxNewTokens)
        s.maxNewTokens = *g.maxNewTokens;
    const bool sampling = g.temperature || g.topK || g.topP || g.seed;
    if (g.greedy)
        s.greedy = *g.greedy;
    else if (sampling)
        s.greedy = false;
    if (g.temperature)
        s.temperature = *g.temperature;
    if (g.topK)
        s.topK = *g.topK;
    if (g.topP)
        s.topP = *g.topP;
    if (g.seed)
        s.seed = *g.seed;
    if (g.ignoreEos)
        s.stopIds.clear();
    return s;
}

} // namespace stowage::cli
