#include "stowage/checkpoint.h"

#include "stowage/error.h"
#include "stowage/fileio.h"
#include "stowage/hubcache.h"
#include "stowage/safetensors.h"
#include "stowage/torchbin.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace stowage {
namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string readText(const fs::path& p) { return readTextFile(p.string()); }

bool isInside(const fs::path& child, const fs::path& root)
{
    auto c = child.lexically_normal().string();
    auto r = root.lexically_normal().string();
    if (!r.empty() && r.back() != '/')
        r += '/';
    return c.rfind(r, 0) == 0;
}

} // namespace

Checkpoint Checkpoint::open(const std::string& pathArg)
{
    Checkpoint ck;
    std::error_code ec;
    fs::path p = fs::absolute(pathArg, ec);
    if (!fs::exists(p, ec))
        throw InputError(pathArg, "no such file or folder");

    fs::path weights;
    if (fs::is_directory(p)) {
        fs::path folder = p;
        ck.m_trustRoot = fs::canonical(p).string();
        // A Hub cache entry opens the snapshot refs/main names (else the newest).
        if (auto snap = hubSnapshot(p.string()))
            folder = *snap;
        else if (p.parent_path().filename() == "snapshots")
            ck.m_trustRoot = fs::canonical(p.parent_path().parent_path()).string();
        for (const char* name : {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
                                 "pytorch_model.bin"}) {
            if (fs::exists(folder / name)) {
                weights = folder / name;
                break;
            }
        }
        if (weights.empty()) {
            // A lone differently named weights file is still unambiguous.
            std::vector<fs::path> found;
            for (const auto& e : fs::directory_iterator(folder))
                if (endsWith(e.path().string(), ".safetensors"))
                    found.push_back(e.path());
            if (found.size() == 1)
                weights = found[0];
            else
                throw InputError(folder.string(),
                                 found.empty() ? "no weights found (expected model.safetensors, an index file or pytorch_model.bin)"
                                               : "several .safetensors files and no index file to say how they fit together");
        }
        ck.m_folder = folder.string();
    } else {
        weights = p;
        ck.m_folder = p.parent_path().string();
        fs::path folder = p.parent_path();
        ck.m_trustRoot = fs::canonical(folder).string();
        if (folder.parent_path().filename() == "snapshots")
            ck.m_trustRoot = fs::canonical(folder.parent_path().parent_path()).string();
    }

    if (fs::exists(fs::path(ck.m_folder) / "config.json")) {
        auto cfgPath = fs::path(ck.m_folder) / "config.json";
        ck.m_config = ModelConfig::parse(readText(cfgPath), cfgPath.string());
    }

    ck.m_weightsPath = weights.string();
    if (endsWith(ck.m_weightsPath, ".json"))
        ck.openIndex(ck.m_weightsPath);
    else
        ck.openSingle(ck.m_weightsPath);
    return ck;
}

bool Checkpoint::mayRead(const std::string& file, const std::string& real) const
{
    // A Hub cache entry's files may also live where its blobs/ links lead (hubEntryMayRead,
    // the rule its scan lists entries by).
    std::error_code ec;
    return isInside(real, m_trustRoot) ||
           (fs::is_directory(fs::path(m_trustRoot) / "snapshots", ec) && hubEntryMayRead(m_trustRoot, file));
}

void Checkpoint::openSingle(const std::string& file)
{
    // In a Hub cache entry the weights follow the entry's rule, as the scan lists them; a
    // file named directly elsewhere is the user's own choice and opens wherever it links.
    std::error_code ec;
    if (fs::is_directory(fs::path(m_trustRoot) / "snapshots", ec)) {
        const fs::path real = fs::canonical(file, ec);
        if (!ec && !mayRead(file, real.string()))
            throw InputError(file, "leads outside the Hub cache entry (to " + real.string() + ")");
    }
    Shard s;
    s.path = file;
    s.format = endsWith(file, ".safetensors") ? WeightFormat::Safetensors : WeightFormat::TorchBin;
    if (!endsWith(file, ".safetensors") && !endsWith(file, ".bin") && !endsWith(file, ".pt") && !endsWith(file, ".pth"))
        throw InputError(file, "not a checkpoint file (expected .safetensors, .bin or an index .json)");
    m_format = s.format;
    s.map = std::make_shared<MappedFile>(file);
    m_shards.push_back(s);
    const auto& m = *m_shards.back().map;
    if (s.format == WeightFormat::Safetensors)
        addShardTensors(0, parseSafetensors(m.data(), m.size(), file).tensors);
    else
        addShardTensors(0, parseTorchBin(m.data(), m.size(), file));
}

namespace {

// The index's weight_map in file order, read by SAX: an ordered_json DOM
// checks every new key against all before it, and DeepSeek-V3's 91,000
// entries took 10 s to parse that way. A repeated name keeps its first
// place and its last value, as ordered_json did. `bad` is the first entry
// whose value is not a string.
struct WeightMapReader : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::pair<std::string, std::string>> entries;
    std::unordered_map<std::string, size_t> at;
    std::string bad;   // the first entry whose value is not a string
    std::string error; // the parser's, when the text is not JSON
    bool rootIsObject = false, found = false, isObject = false;

    bool null() override { return scalar(nullptr); }
    bool boolean(bool) override { return scalar(nullptr); }
    bool number_integer(number_integer_t) override { return scalar(nullptr); }
    bool number_unsigned(number_unsigned_t) override { return scalar(nullptr); }
    bool number_float(number_float_t, const string_t&) override { return scalar(nullptr); }
    bool string(string_t& v) override { return scalar(&v); }
    bool binary(binary_t&) override { return scalar(nullptr); }
    bool start_object(std::size_t) override { return open(true); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool key(string_t& k) override
    {
        m_key = k;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override
    {
        error = e.what();
        return false;
    }

private:
    // A value directly inside weight_map (depth 2 while it is open).
    bool scalar(const std::string* text)
    {
        if (!m_inMap || m_depth != 2)
            return true;
        if (!text) {
            if (bad.empty())
                bad = m_key;
            return true;
        }
        auto [it, added] = at.emplace(m_key, entries.size());
        if (added)
            entries.emplace_back(m_key, *text);
        else
            entries[it->second].second = *text;
        return true;
    }
    bool open(bool object)
    {
        scalar(nullptr); // an object or array where a file name belongs
        ++m_depth;
        if (m_depth == 1)
            rootIsObject = object;
        else if (m_depth == 2 && m_key == "weight_map") { // m_key: the root's key for this value
            found = true;
            isObject = object;
            m_inMap = object;
        }
        return true;
    }
    bool close()
    {
        if (m_depth == 2)
            m_inMap = false;
        --m_depth;
        return true;
    }
    int m_depth = 0;
    bool m_inMap = false;
    std::string m_key;
};

} // namespace

void Checkpoint::openIndex(const std::string& indexPath)
{
    WeightMapReader index;
    try {
        if (!nlohmann::json::sax_parse(readText(indexPath), &index))
            throw InputError(indexPath, "not valid JSON: " + index.error);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(indexPath, std::string("not valid JSON: ") + e.what());
    }
    if (!index.rootIsObject || !index.found || !index.isObject)
        throw InputError(indexPath, "index has no \"weight_map\" object");
    if (!index.bad.empty())
        throw InputError(indexPath, "weight_map entry for '" + index.bad + "' is not a file name");
    m_format = endsWith(indexPath, ".bin.index.json") ? WeightFormat::TorchBin : WeightFormat::Safetensors;

    // Shards in first-mention order; every name is checked before anything is opened.
    std::vector<std::string> shardNames;
    std::unordered_map<std::string, int> shardIndex;
    std::vector<std::pair<std::string, int>> listed; // tensor -> shard
    const fs::path folder = fs::path(indexPath).parent_path();
    for (const auto& [tensor, shard] : index.entries) {
        if (!shardIndex.count(shard)) {
            fs::path sp(shard);
            if (shard.empty() || sp.is_absolute())
                throw InputError(indexPath, "shard path '" + shard + "' must be relative to the checkpoint folder");
            for (const auto& part : sp)
                if (part == "..")
                    throw InputError(indexPath, "shard path '" + shard + "' leads outside the checkpoint folder");
            shardIndex[shard] = static_cast<int>(shardNames.size());
            shardNames.push_back(shard);
        }
        listed.emplace_back(tensor, shardIndex[shard]);
    }

    size_t present = 0;
    for (const auto& name : shardNames) {
        // A name the file system refuses (a part over 255 bytes) is the index's fault.
        std::error_code ec;
        if (fs::exists(folder / name, ec))
            ++present;
        else if (ec)
            throw InputError(indexPath, "shard path '" + name + "' cannot be used: " + ec.message());
    }
    m_indexOnly = present == 0 && !shardNames.empty();

    if (m_indexOnly) {
        for (const auto& name : shardNames)
            m_shards.push_back({(folder / name).string(), m_format, nullptr});
        // Shapes and dtypes are filled in from the architecture registry.
        for (const auto& [tensor, shard] : listed) {
            TensorInfo t;
            t.name = tensor;
            t.shard = -1;
            m_byName[t.name] = m_tensors.size();
            m_tensors.push_back(std::move(t));
        }
        return;
    }

    for (size_t i = 0; i < shardNames.size(); ++i) {
        fs::path sp = folder / shardNames[i];
        if (!fs::exists(sp))
            throw InputError(sp.string(), "shard is missing (listed in " + indexPath + " for tensor '" +
                                              [&] {
                                                  for (const auto& [t, s] : listed)
                                                      if (s == static_cast<int>(i))
                                                          return t;
                                                  return std::string();
                                              }() +
                                              "')");
        std::error_code ec;
        fs::path real = fs::canonical(sp, ec);
        if (ec)
            throw InputError(sp.string(), "cannot open the shard: " + ec.message());
        if (!mayRead(sp.string(), real.string()))
            throw InputError(sp.string(), "shard leads outside the checkpoint folder (to " + real.string() + ")");
        Shard s{sp.string(), endsWith(shardNames[i], ".safetensors") ? WeightFormat::Safetensors : WeightFormat::TorchBin,
                std::make_shared<MappedFile>(real.string())};
        m_shards.push_back(s);
        const auto& m = *s.map;
        addShardTensors(static_cast<int>(i), s.format == WeightFormat::Safetensors
                                                 ? parseSafetensors(m.data(), m.size(), s.path).tensors
                                                 : parseTorchBin(m.data(), m.size(), s.path));
    }
    for (const auto& [tensor, shard] : listed) {
        auto it = m_byName.find(tensor);
        if (it == m_byName.end())
            throw InputError(m_shards[static_cast<size_t>(shard)].path,
                             "tensor '" + tensor + "' is listed in " + indexPath + " but absent from this shard");
        if (m_tensors[it->second].shard != shard)
            throw InputError(indexPath, "tensor '" + tensor + "' is listed in " + shardNames[static_cast<size_t>(shard)] +
                                            " but stored in " +
                                            shardNames[static_cast<size_t>(m_tensors[it->second].shard)]);
    }
    if (m_tensors.size() != listed.size())
        m_warnings.push_back(std::to_string(m_tensors.size() - listed.size()) +
                             " tensors in the shards are not listed in " + indexPath);
}

void Checkpoint::addShardTensors(int shard, std::vector<TensorInfo> tensors)
{
    for (auto& t : tensors) {
        t.shard = shard;
        if (m_byName.count(t.name))
            throw InputError(m_shards[static_cast<size_t>(shard)].path, "tensor '" + t.name + "' is stored twice");
        m_byName[t.name] = m_tensors.size();
        m_tensors.push_back(std::move(t));
    }
}

const TensorInfo* Checkpoint::find(const std::string& name) const
{
    auto it = m_byName.find(name);
    return it == m_byName.end() ? nullptr : &m_tensors[it->second];
}

const uint8_t* Checkpoint::data(const TensorInfo& t) const
{
    if (t.shard < 0 || !m_shards[static_cast<size_t>(t.shard)].map)
        return nullptr;
    return m_shards[static_cast<size_t>(t.shard)].map->data() + t.offset;
}

std::optional<std::string> Checkpoint::readSideFile(const std::string& name) const
{
    fs::path p = fs::path(m_folder) / name;
    std::error_code ec;
    if (!fs::exists(p, ec))
        return std::nullopt;
    fs::path real = fs::canonical(p, ec);
    if (ec || !mayRead(p.string(), real.string()))
        throw InputError(p.string(), "leads outside the checkpoint folder");
    return readText(real);
}

} // namespace stowage
