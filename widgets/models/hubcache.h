#pragma once
// The Hugging Face Hub cache on this machine: which models are there, how
// much they take on disk, and whether their weights were downloaded or only
// config.json and the index (enough to plan before downloading).
#include <QString>
#include <QStringList>
#include <QVector>

namespace stowage {

struct HubCacheEntry {
    enum class Weights { All, Partial, IndexOnly, ConfigOnly, None };
    QString repoId;       // "meta-llama/Llama-3.1-8B"
    QString folder;       // .../models--meta-llama--Llama-3.1-8B
    QString snapshot;     // the snapshot folder refs/main names (else the newest)
    quint64 diskBytes = 0;// files under blobs/ (what the entry takes on disk)
    Weights weights = Weights::None;
    int shardsPresent = 0, shardsTotal = 0;
    bool operator==(const HubCacheEntry& o) const;
};

// HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub: those set or
// present, without duplicates, in that order.
QStringList hubCacheRoots();
// Every models--* entry under `root`, sorted by repo id. Reads only
// directory listings, file sizes and the (small) index files. Entries
// from `cancel`-led early returns are partial; never throws.
QVector<HubCacheEntry> scanHubCache(const QString& root);
QString weightsLabel(const HubCacheEntry& e);

} // namespace stowage
