#pragma once
// The Hugging Face Hub cache on this machine: which models are there, how
// much they take on disk, whether their weights were downloaded or only
// config.json and the index (enough to plan before downloading), and which
// snapshot of an entry is the one to open.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

struct HubCacheEntry {
    enum class Weights { All, Partial, IndexOnly, ConfigOnly, None };
    std::string repoId;   // "meta-llama/Llama-3.1-8B"
    std::string folder;   // .../models--meta-llama--Llama-3.1-8B
    std::string snapshot; // hubSnapshot(folder); empty when it has none or fails
    std::string problem;  // why `snapshot` is empty when hubSnapshot threw (a broken refs/main), or
                          // why a weights file does not count: it leads outside the entry (hubEntryMayRead)
    uint64_t diskBytes = 0; // files under blobs/ (what the entry takes on disk), links to files followed
    uint64_t linkedBytes = 0; // the part of diskBytes in blobs that are links to files elsewhere
    Weights weights = Weights::None;
    int shardsPresent = 0, shardsTotal = 0;
    bool operator==(const HubCacheEntry& o) const;
};

// The snapshot folder of a Hub cache entry (models--org--name) that opening
// it reads: the one refs/main names; without refs/main, the one modified
// last. nullopt when `entry` has no snapshots/ folder (not a cache entry).
// Throws InputError naming refs/main when it names no snapshot in
// snapshots/, and naming the entry when snapshots/ is empty.
std::optional<std::string> hubSnapshot(const std::string& entry);

// The one rule for reading a file of a Hub cache entry, which the scan and
// Checkpoint::open share: `file` (a path in one of the entry's snapshots)
// may be read when it exists and resolves inside `entry`, or when it links
// into the entry's blobs/ folder, whose blobs may themselves be links to
// files elsewhere (a cache whose blobs were moved to a bigger disk: only the
// user makes those; the Hub writes real files there). A snapshot file that
// links anywhere else may not. Paths need not be canonical.
bool hubEntryMayRead(const std::string& entry, const std::string& file);

// HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub: those set, cleaned,
// without duplicates, in that order (whether they exist or not).
std::vector<std::string> hubCacheRoots();

// Every models--* entry under `root`, sorted by repo id ignoring case.
// Reads only directory listings, file sizes, refs/main and the (small)
// index files. Never throws: an unreadable root gives no entries, an entry
// whose snapshot cannot be resolved has none (and says why in `problem`).
std::vector<HubCacheEntry> scanHubCache(const std::string& root);

} // namespace stowage
