#include "hubcache.h"

#include <QCoreApplication>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>

#include <algorithm>

namespace stowage {

bool HubCacheEntry::operator==(const HubCacheEntry& o) const
{
    return repoId == o.repoId && folder == o.folder && snapshot == o.snapshot && diskBytes == o.diskBytes &&
           weights == o.weights && shardsPresent == o.shardsPresent && shardsTotal == o.shardsTotal;
}

QStringList hubCacheRoots()
{
    QStringList roots;
    auto add = [&](const QString& p) {
        if (p.isEmpty())
            return;
        const QString clean = QDir::cleanPath(p);
        if (!roots.contains(clean))
            roots << clean;
    };
    add(qEnvironmentVariable("HF_HUB_CACHE"));
    if (qEnvironmentVariableIsSet("HF_HOME"))
        add(qEnvironmentVariable("HF_HOME") + QStringLiteral("/hub"));
    add(QDir::homePath() + QStringLiteral("/.cache/huggingface/hub"));
    return roots;
}

namespace {

QString snapshotOf(const QDir& entry)
{
    QFile ref(entry.filePath(QStringLiteral("refs/main")));
    if (ref.open(QIODevice::ReadOnly)) {
        const QString hash = QString::fromUtf8(ref.readAll()).trimmed();
        if (!hash.isEmpty() && QFileInfo(entry.filePath(QStringLiteral("snapshots/") + hash)).isDir())
            return entry.filePath(QStringLiteral("snapshots/") + hash);
    }
    QDir snaps(entry.filePath(QStringLiteral("snapshots")));
    const QFileInfoList list = snaps.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time);
    return list.isEmpty() ? QString() : list.front().filePath();
}

quint64 blobBytes(const QString& blobs)
{
    quint64 total = 0;
    QDirIterator it(blobs, QDir::Files | QDir::Hidden | QDir::NoSymLinks);
    while (it.hasNext()) {
        it.next();
        total += static_cast<quint64>(it.fileInfo().size());
    }
    return total;
}

// A cache symlink whose blob is absent (an interrupted download) does not count.
bool present(const QDir& dir, const QString& name)
{
    const QFileInfo fi(dir.filePath(name));
    return fi.exists() && fi.isFile();
}

void classify(HubCacheEntry& e)
{
    const QDir snap(e.snapshot);
    const bool config = present(snap, QStringLiteral("config.json"));
    for (const char* indexName : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
        QFile f(snap.filePath(QLatin1String(indexName)));
        if (!f.exists() || !f.open(QIODevice::ReadOnly))
            continue;
        const QJsonObject map = QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("weight_map")).toObject();
        QSet<QString> shards;
        for (auto it = map.begin(); it != map.end(); ++it)
            shards.insert(it.value().toString());
        e.shardsTotal = shards.size();
        for (const QString& s : shards)
            e.shardsPresent += present(snap, s) ? 1 : 0;
        e.weights = e.shardsTotal > 0 && e.shardsPresent == e.shardsTotal ? HubCacheEntry::Weights::All
                    : e.shardsPresent > 0                                   ? HubCacheEntry::Weights::Partial
                                                                            : HubCacheEntry::Weights::IndexOnly;
        return;
    }
    for (const char* single : {"model.safetensors", "pytorch_model.bin"})
        if (present(snap, QLatin1String(single))) {
            e.shardsTotal = e.shardsPresent = 1;
            e.weights = HubCacheEntry::Weights::All;
            return;
        }
    e.weights = config ? HubCacheEntry::Weights::ConfigOnly : HubCacheEntry::Weights::None;
}

} // namespace

QVector<HubCacheEntry> scanHubCache(const QString& root)
{
    QVector<HubCacheEntry> out;
    const QDir dir(root);
    for (const QFileInfo& fi : dir.entryInfoList({QStringLiteral("models--*")}, QDir::Dirs | QDir::NoDotAndDotDot)) {
        HubCacheEntry e;
        e.folder = fi.filePath();
        e.repoId = fi.fileName().mid(8).replace(QStringLiteral("--"), QStringLiteral("/"));
        const QDir entry(e.folder);
        e.snapshot = snapshotOf(entry);
        e.diskBytes = blobBytes(entry.filePath(QStringLiteral("blobs")));
        if (!e.snapshot.isEmpty())
            classify(e);
        out.push_back(e);
    }
    std::sort(out.begin(), out.end(), [](const HubCacheEntry& a, const HubCacheEntry& b) {
        return a.repoId.compare(b.repoId, Qt::CaseInsensitive) < 0;
    });
    return out;
}

QString weightsLabel(const HubCacheEntry& e)
{
    switch (e.weights) {
    case HubCacheEntry::Weights::All: return QCoreApplication::translate("stowage", "weights downloaded");
    case HubCacheEntry::Weights::Partial:
        return QCoreApplication::translate("stowage", "%1 of %2 shards").arg(e.shardsPresent).arg(e.shardsTotal);
    case HubCacheEntry::Weights::IndexOnly: return QCoreApplication::translate("stowage", "index and config only");
    case HubCacheEntry::Weights::ConfigOnly: return QCoreApplication::translate("stowage", "config only");
    case HubCacheEntry::Weights::None: return QCoreApplication::translate("stowage", "no snapshot");
    }
    return {};
}

} // namespace stowage
