#include "stowage/hubcache.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace stowage {

bool HubCacheEntry::operator==(const HubCacheEntry& o) const
{
    return repoId == o.repoId && folder == o.folder && snapshot == o.snapshot && problem == o.problem &&
           diskBytes == o.diskBytes && linkedBytes == o.linkedBytes && weights == o.weights && shardsPresent == o.shardsPresent &&
           shardsTotal == o.shardsTotal;
}

std::optional<std::string> hubSnapshot(const std::string& entryArg)
{
    const fs::path entry(entryArg);
    if (!fs::is_directory(entry / "snapshots"))
        return std::nullopt;
    const fs::path refMain = entry / "refs" / "main";
    if (fs::exists(refMain)) {
        std::string ref = readTextFile(refMain.string());
        ref.erase(std::remove_if(ref.begin(), ref.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
                  ref.end());
        if (ref.find('/') != std::string::npos || ref.find("..") != std::string::npos || ref.empty())
            throw InputError(refMain.string(), "does not name a snapshot");
        if (!fs::is_directory(entry / "snapshots" / ref))
            throw InputError(refMain.string(), "names snapshot '" + ref + "' which is not in snapshots/");
        return (entry / "snapshots" / ref).string();
    }
    // Modified last; on equal times the first the listing returns.
    std::optional<fs::path> newest;
    fs::file_time_type newestTime;
    for (const auto& d : fs::directory_iterator(entry / "snapshots")) {
        if (!d.is_directory())
            continue;
        auto t = d.last_write_time();
        if (!newest || t > newestTime) {
            newest = d.path();
            newestTime = t;
        }
    }
    if (!newest)
        throw InputError(entry.string(), "Hub cache entry has no snapshot");
    return newest->string();
}

namespace {

bool inside(const fs::path& child, const fs::path& root)
{
    const std::string c = child.string();
    std::string r = root.string();
    if (!r.empty() && r.back() != '/')
        r += '/';
    return c.rfind(r, 0) == 0;
}

} // namespace

bool hubEntryMayRead(const std::string& entryArg, const std::string& fileArg)
{
    std::error_code ec;
    const fs::path entry = fs::canonical(entryArg, ec);
    if (ec)
        return false;
    const fs::path file(fileArg);
    const fs::path real = fs::canonical(file, ec);
    if (ec || !fs::is_regular_file(real, ec))
        return false;
    if (inside(real, entry))
        return true;
    // Outside: only through a link into blobs/ (the Hub's relative "../../blobs/<sha>").
    if (!fs::is_symlink(fs::symlink_status(file, ec)))
        return false;
    fs::path hop = fs::read_symlink(file, ec);
    if (ec)
        return false;
    if (hop.is_relative())
        hop = file.parent_path() / hop;
    const fs::path hopFolder = fs::canonical(hop.parent_path(), ec);
    return !ec && hopFolder == fs::canonical(entry / "blobs", ec) && !ec;
}

namespace {

// QDir::cleanPath's rules, which the roots always followed: no "." or
// "..", no doubled or trailing separator.
std::string cleanPath(const std::string& p)
{
    std::string s = fs::path(p).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/')
        s.pop_back();
    return s;
}

std::string lower(std::string s)
{
    for (char& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to)
{
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

// Files directly under blobs/: regular ones, and links to regular files
// (counted in `linked` too: a cache whose blobs were moved elsewhere).
uint64_t blobBytes(const fs::path& blobs, uint64_t& linked)
{
    uint64_t total = 0;
    std::error_code ec;
    fs::directory_iterator it(blobs, ec);
    if (ec)
        return 0;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec)
            break;
        std::error_code sec;
        const fs::file_type own = it->symlink_status(sec).type();
        if (own != fs::file_type::regular && (own != fs::file_type::symlink || !fs::is_regular_file(it->path(), sec)))
            continue;
        const auto size = fs::file_size(it->path(), sec); // follows a link
        if (sec)
            continue;
        total += size;
        if (own == fs::file_type::symlink)
            linked += size;
    }
    return total;
}

// A cache symlink whose blob is absent (an interrupted download) does not count.
bool present(const fs::path& file)
{
    std::error_code ec;
    return fs::is_regular_file(file, ec);
}

// Present and readable under the rule opening uses; a file that is there
// but leads outside the entry says so in `e.problem`.
bool usable(HubCacheEntry& e, const fs::path& file)
{
    if (!present(file))
        return false;
    if (hubEntryMayRead(e.folder, file.string()))
        return true;
    if (e.problem.empty()) {
        std::error_code ec;
        e.problem = file.string() + ": leads outside the cache entry (to " + fs::canonical(file, ec).string() +
                    "), so it cannot be opened";
    }
    return false;
}

// Shard file names an index's weight_map names; nullopt when the index
// cannot be read (the next index name is tried). Unparsable JSON names none.
std::optional<std::set<std::string>> indexShards(const fs::path& index)
{
    if (!present(index))
        return std::nullopt;
    std::ifstream in(index, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    std::set<std::string> shards;
    const auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object())
        return shards;
    const auto map = doc.find("weight_map");
    if (map == doc.end() || !map->is_object())
        return shards;
    // A name that is not a string counts as a shard that is never present.
    for (const auto& [tensor, file] : map->items())
        shards.insert(file.is_string() ? file.get<std::string>() : std::string());
    return shards;
}

void classify(HubCacheEntry& e)
{
    const fs::path snap(e.snapshot);
    for (const char* indexName : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
        const auto shards = indexShards(snap / indexName);
        if (!shards)
            continue;
        e.shardsTotal = static_cast<int>(shards->size());
        for (const std::string& s : *shards)
            e.shardsPresent += usable(e, snap / s) ? 1 : 0;
        e.weights = e.shardsTotal > 0 && e.shardsPresent == e.shardsTotal ? HubCacheEntry::Weights::All
                    : e.shardsPresent > 0                                   ? HubCacheEntry::Weights::Partial
                                                                            : HubCacheEntry::Weights::IndexOnly;
        return;
    }
    for (const char* single : {"model.safetensors", "pytorch_model.bin"})
        if (usable(e, snap / single)) {
            e.shardsTotal = e.shardsPresent = 1;
            e.weights = HubCacheEntry::Weights::All;
            return;
        }
    e.weights = present(snap / "config.json") ? HubCacheEntry::Weights::ConfigOnly : HubCacheEntry::Weights::None;
}

HubCacheEntry scanEntry(const fs::path& folder)
{
    HubCacheEntry e;
    e.folder = folder.string();
    e.repoId = replaceAll(folder.filename().string().substr(8), "--", "/");
    try {
        if (auto snap = hubSnapshot(e.folder))
            e.snapshot = *snap;
    } catch (const std::exception& ex) {
        e.problem = ex.what();
    }
    e.diskBytes = blobBytes(folder / "blobs", e.linkedBytes);
    if (!e.snapshot.empty()) {
        try {
            classify(e);
        } catch (const std::exception&) {
            // Only allocation can throw here; the entry stays listed, unclassified.
        }
    }
    return e;
}

} // namespace

std::vector<std::string> hubCacheRoots()
{
    std::vector<std::string> roots;
    auto add = [&](const std::string& p) {
        if (p.empty())
            return;
        const std::string clean = cleanPath(p);
        if (std::find(roots.begin(), roots.end(), clean) == roots.end())
            roots.push_back(clean);
    };
    if (const char* cache = std::getenv("HF_HUB_CACHE"))
        add(cache);
    if (const char* home = std::getenv("HF_HOME")) // set, even to "", counts
        add(std::string(home) + "/hub");
    const char* user = std::getenv("HOME");
    add(cleanPath(user && *user ? user : "/") + "/.cache/huggingface/hub");
    return roots;
}

std::vector<HubCacheEntry> scanHubCache(const std::string& root)
{
    std::vector<HubCacheEntry> out;
    try {
        std::error_code ec;
        fs::directory_iterator it(root, ec);
        if (ec)
            return out;
        for (; it != fs::directory_iterator(); it.increment(ec)) {
            if (ec)
                break;
            const std::string name = it->path().filename().string();
            // The Hub writes "models--"; the prefix was always matched ignoring case.
            std::error_code dec;
            if (name.size() < 8 || lower(name.substr(0, 8)) != "models--" || !it->is_directory(dec))
                continue;
            out.push_back(scanEntry(it->path()));
        }
        std::sort(out.begin(), out.end(), [](const HubCacheEntry& a, const HubCacheEntry& b) {
            const std::string la = lower(a.repoId), lb = lower(b.repoId);
            return la != lb ? la < lb : a.repoId < b.repoId;
        });
    } catch (const std::exception&) {
        // Allocation only: what was scanned so far is still worth showing.
    }
    return out;
}

} // namespace stowage
