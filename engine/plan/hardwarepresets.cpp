// Hardware presets (vendor datasheet figures, labelled as such) and the
// JSON form users save and edit profiles in.
#include "stowage/hardware.h"

#include "fixedcosts.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

namespace stowage {

namespace {

using Json = nlohmann::ordered_json;

// Vendor datasheet figures. Sizes are in GB = 1e9 bytes because that is how
// vendors state them ("H200 141 GB" = 141e9 bytes); bandwidths in bytes/s.
struct GpuSpec {
    const char* key;
    const char* name;
    double memoryGB;
    double bandwidthGBs;
    int pcieGen;
    double tflops; // dense fp16/bf16 tensor-core
    double computeCapability; // CUDA's, from NVIDIA's CUDA GPUs list
};
constexpr GpuSpec kGpus[] = {
    {"rtx3090", "NVIDIA GeForce RTX 3090", 24, 936, 4, 71, 8.6},
    {"rtx4090", "NVIDIA GeForce RTX 4090", 24, 1008, 4, 165, 8.9},
    {"l4", "NVIDIA L4", 24, 300, 4, 121, 8.9},
    {"a100-40gb", "NVIDIA A100 40GB", 40, 1555, 4, 312, 8.0},
    {"a100-80gb", "NVIDIA A100 80GB", 80, 2039, 4, 312, 8.0},
    {"h100-80gb", "NVIDIA H100 80GB", 80, 3350, 5, 989, 9.0},
    {"h200", "NVIDIA H200", 141, 4800, 5, 989, 9.0},
    {"t4", "NVIDIA T4", 16, 320, 3, 65, 7.5},
};

// Achievable host->device copy rates for an x16 link. Pageable copies go
// through a driver staging buffer, so they reach about half the pinned rate.
void setPcie(GpuProfile& g, int gen)
{
    const double pinnedGBs = gen >= 5 ? 50 : gen == 4 ? 24 : 12;
    const double pageableGBs = gen >= 5 ? 20 : gen == 4 ? 12 : 6;
    g.h2dPinned = pinnedGBs * 1e9;
    g.h2dPageable = pageableGBs * 1e9;
}

GpuProfile gpuFromSpec(const GpuSpec& s)
{
    GpuProfile g;
    g.name = s.name;
    g.memoryBytes = static_cast<uint64_t>(s.memoryGB * 1e9);
    g.memoryBandwidth = s.bandwidthGBs * 1e9;
    setPcie(g, s.pcieGen);
    g.flops = s.tflops * 1e12;
    g.computeCapability = s.computeCapability;
    return g;
}

std::string lower(std::string s)
{
    for (char& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string knownList()
{
    std::string out;
    for (const auto& n : hardwarePresetNames())
        out += (out.empty() ? "" : ", ") + n;
    return out;
}

} // namespace

std::vector<std::string> hardwarePresetNames()
{
    std::vector<std::string> out;
    for (const auto& s : kGpus)
        out.emplace_back(s.key);
    out.emplace_back("this-machine");
    return out;
}

HardwareProfile hardwarePreset(const std::string& raw)
{
    const std::string name = lower(raw);
    if (name == "this-machine")
        return measureThisMachine();
    // "NxNAME": a GPU count, then the single-GPU preset.
    size_t digits = 0;
    while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits])))
        ++digits;
    int count = 1;
    std::string key = name;
    if (digits > 0 && digits < name.size() && name[digits] == 'x') {
        count = digits <= 3 ? std::stoi(name.substr(0, digits)) : 0;
        key = name.substr(digits + 1);
        if (count < 1 || count > 64)
            throw InputError("", "hardware preset '" + raw + "' asks for " + name.substr(0, digits) +
                                     " GPUs; use 1 to 64");
    }
    const auto it = std::find_if(std::begin(kGpus), std::end(kGpus), [&](const GpuSpec& s) { return key == s.key; });
    if (it == std::end(kGpus))
        throw InputError("", "unknown hardware preset '" + raw + "' (known: " + knownList() + ", or NxNAME such as 2xrtx4090)");

    HardwareProfile p;
    p.gpus.assign(static_cast<size_t>(count), gpuFromSpec(*it));
    // A typical host for such a card: dual-channel-plus DDR, one NVMe drive.
    p.ramBytes = 64'000'000'000ULL;
    p.ramBandwidth = 50e9;
    p.diskReadBandwidth = 3e9;
    p.cpuFlops = 1e12;
    p.simulated = true;
    p.sources = "datasheet: the GPU's; assumed: a typical host for it (64 GB, 50 GB/s RAM, 3 GB/s NVMe, 1 TFLOP/s)";
    p.name = (count > 1 ? std::to_string(count) + "x " : std::string()) + it->name + " + 64 GB RAM";
    return p;
}

// ---- JSON ------------------------------------------------------------------

std::string profileToJson(const HardwareProfile& p)
{
    Json j;
    j["name"] = p.name;
    j["simulated"] = p.simulated;
    j["ramBytes"] = p.ramBytes;
    j["ramBandwidth"] = p.ramBandwidth;
    j["diskReadBandwidth"] = p.diskReadBandwidth;
    j["cpuFlops"] = p.cpuFlops;
    if (p.pageCacheReadBandwidth > 0)
        j["pageCacheReadBandwidth"] = p.pageCacheReadBandwidth;
    if (p.freshCopyBandwidth > 0)
        j["freshCopyBandwidth"] = p.freshCopyBandwidth;
    if (p.cpuGemvF32 > 0)
        j["cpuGemvF32"] = p.cpuGemvF32;
    if (p.cpuGemvBf16 > 0)
        j["cpuGemvBf16"] = p.cpuGemvBf16;
    if (p.cpuCacheBytes > 0)
        j["cpuCacheBytes"] = p.cpuCacheBytes;
    if (!p.fixedCosts.empty())
        j["fixedCosts"] = detail::fixedCostsToJson(p.fixedCosts);
    if (!p.sources.empty())
        j["sources"] = p.sources;
    j["gpus"] = Json::array();
    for (const auto& g : p.gpus) {
        Json o;
        o["name"] = g.name;
        o["memoryBytes"] = g.memoryBytes;
        o["memoryBandwidth"] = g.memoryBandwidth;
        o["h2dPinned"] = g.h2dPinned;
        o["h2dPageable"] = g.h2dPageable;
        o["flops"] = g.flops;
        if (g.computeCapability > 0)
            o["computeCapability"] = g.computeCapability;
        j["gpus"].push_back(std::move(o));
    }
    return j.dump(2) + "\n";
}

namespace {

// Reads one object of a profile; `m_where` ("", "gpus[1]: ") prefixes every
// problem so a user editing a long file finds the bad entry.
class ObjectReader {
public:
    ObjectReader(const Json& obj, const std::string& path, std::string where,
                 std::initializer_list<const char*> allowed)
        : m_obj(obj), m_path(path), m_where(std::move(where))
    {
        if (!m_obj.is_object())
            fail("must be a JSON object");
        // Unknown fields are rejected so a misspelt optional field is not
        // silently ignored.
        for (const auto& item : m_obj.items())
            if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return item.key() == a; }))
                fail("unknown field \"" + item.key() + "\"");
    }

    [[noreturn]] void fail(const std::string& problem) const
    {
        throw InputError(m_path, (m_where.empty() ? "hardware profile " : m_where) + problem);
    }

    const Json& field(const char* key) const
    {
        auto it = m_obj.find(key);
        if (it == m_obj.end())
            fail(std::string("is missing field \"") + key + "\"");
        return *it;
    }
    std::string text(const char* key) const
    {
        const Json& v = field(key);
        if (!v.is_string())
            fail(std::string("field \"") + key + "\" must be a string");
        return v.get<std::string>();
    }
    double positive(const char* key) const
    {
        const Json& v = field(key);
        if (!v.is_number())
            fail(std::string("field \"") + key + "\" must be a number");
        const double d = v.get<double>();
        if (!(d > 0))
            fail(std::string("field \"") + key + "\" must be positive, got " + v.dump());
        return d;
    }
    uint64_t bytes(const char* key) const
    {
        const Json& v = field(key);
        if (v.is_number_unsigned())
            return v.get<uint64_t>();
        // 24e9 is a float in JSON; accept it when it is a whole byte count.
        const double d = v.is_number() ? v.get<double>() : -1;
        if (!v.is_number() || d < 0 || d >= 1.8e19 || std::floor(d) != d)
            fail(std::string("field \"") + key + "\" must be a non-negative whole number of bytes, got " + v.dump());
        return static_cast<uint64_t>(d);
    }

private:
    const Json& m_obj;
    const std::string& m_path;
    std::string m_where;
};

} // namespace

HardwareProfile profileFromJson(const std::string& text, const std::string& path)
{
    Json j;
    try {
        j = Json::parse(text);
    } catch (const Json::exception& e) { // parse_error, or out_of_range for a number like 1e999
        // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
        std::string msg = e.what();
        const size_t cut = msg.find("] ");
        throw InputError(path, "not valid JSON: " + (cut == std::string::npos ? msg : msg.substr(cut + 2)));
    }
    const ObjectReader top(j, path, "",
                           {"name", "simulated", "ramBytes", "ramBandwidth", "diskReadBandwidth", "cpuFlops", "gpus",
                            "pageCacheReadBandwidth", "freshCopyBandwidth", "cpuGemvF32", "cpuGemvBf16", "cpuCacheBytes",
                            "fixedCosts", "sources"});
    HardwareProfile p;
    p.name = top.text("name");
    p.ramBytes = top.bytes("ramBytes");
    p.ramBandwidth = top.positive("ramBandwidth");
    p.diskReadBandwidth = top.positive("diskReadBandwidth");
    p.cpuFlops = top.positive("cpuFlops");
    if (j.contains("pageCacheReadBandwidth"))
        p.pageCacheReadBandwidth = top.positive("pageCacheReadBandwidth");
    if (j.contains("freshCopyBandwidth"))
        p.freshCopyBandwidth = top.positive("freshCopyBandwidth");
    if (j.contains("cpuGemvF32"))
        p.cpuGemvF32 = top.positive("cpuGemvF32");
    if (j.contains("cpuGemvBf16"))
        p.cpuGemvBf16 = top.positive("cpuGemvBf16");
    if (j.contains("cpuCacheBytes"))
        p.cpuCacheBytes = top.bytes("cpuCacheBytes");
    if (j.contains("fixedCosts"))
        p.fixedCosts = detail::fixedCostsFromJson(j["fixedCosts"], path, "");
    if (j.contains("sources"))
        p.sources = top.text("sources");
    // Optional: a profile a user wrote by hand describes some machine, but
    // not necessarily this one; absent means "not simulated", as measured.
    if (auto it = j.find("simulated"); it != j.end()) {
        if (!it->is_boolean())
            top.fail("field \"simulated\" must be true or false");
        p.simulated = it->get<bool>();
    }
    const Json& gpus = top.field("gpus");
    if (!gpus.is_array())
        top.fail("field \"gpus\" must be an array");
    for (size_t i = 0; i < gpus.size(); ++i) {
        const ObjectReader r(gpus[i], path, "gpus[" + std::to_string(i) + "] ",
                             {"name", "memoryBytes", "memoryBandwidth", "h2dPinned", "h2dPageable", "flops",
                              "computeCapability"});
        GpuProfile g;
        g.name = r.text("name");
        g.memoryBytes = r.bytes("memoryBytes");
        g.memoryBandwidth = r.positive("memoryBandwidth");
        g.h2dPinned = r.positive("h2dPinned");
        g.h2dPageable = r.positive("h2dPageable");
        g.flops = r.positive("flops");
        if (gpus[i].contains("computeCapability"))
            g.computeCapability = r.positive("computeCapability");
        p.gpus.push_back(std::move(g));
    }
    return p;
}

QuantTarget quantTargetOf(const HardwareProfile& p)
{
    QuantTarget t;
    t.cuda = !p.gpus.empty();
    t.computeCapability = t.cuda ? p.gpus[0].computeCapability : 0;
    return t;
}

HardwareProfile hardwareFromSpec(const std::string& spec)
{
    const std::string ext = ".json";
    if (spec.size() > ext.size() && spec.compare(spec.size() - ext.size(), ext.size(), ext) == 0)
        return profileFromJson(readTextFile(spec), spec);
    return hardwarePreset(spec);
}

} // namespace stowage
