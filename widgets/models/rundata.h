#pragma once
// Plain values of a run, as the run controller parses them from the worker's
// events (docs/worker-protocol.md) and hands them to the models by queued
// signals. No JSON here: models and views never see worker output.
#include <QMetaType>
#include <QString>
#include <QVector>

#include <utility>

namespace stowage {

// One `sample` event: t is seconds since the load began (the worker's clock,
// shared with the trace), cumulative counters as the worker sends them.
struct RunSample {
    double t = 0;
    QVector<std::pair<QString, quint64>> resident; // device name ("0", "cpu", "disk") -> bytes
    quint64 rssBytes = 0;
    quint64 h2dBytes = 0;
    quint64 diskReadBytes = 0;
    quint64 diskPassBytes = 0; // read from disk-placed weights by the last complete forward pass
    bool operator==(const RunSample& o) const
    {
        return t == o.t && resident == o.resident && rssBytes == o.rssBytes && h2dBytes == o.h2dBytes &&
               diskReadBytes == o.diskReadBytes && diskPassBytes == o.diskPassBytes;
    }
};

// One entry of a `trace` event.
struct TraceSpan {
    enum Kind { Fetch, Prefetch, Map, Wait, Compute, Release };
    Kind kind = Compute;
    QString unit;
    QString device;
    int step = 0;
    double t0 = 0, t1 = 0;
    QString tensor;
    quint64 bytes = 0;
    bool operator==(const TraceSpan& o) const
    {
        return kind == o.kind && unit == o.unit && device == o.device && step == o.step && t0 == o.t0 && t1 == o.t1 &&
               tensor == o.tensor && bytes == o.bytes;
    }
    static bool kindFromName(const QString& name, Kind* kind);
    static QString kindName(Kind kind);
    bool isTransfer() const { return kind != Compute && kind != Release; }
};

// An execution unit, in forward order, and the device it computes on.
struct RunUnit {
    QString name;
    QString device;
    bool operator==(const RunUnit& o) const { return name == o.name && device == o.device; }
};

// Planned vs actual bytes after dispatch.
struct DeviceBytes {
    QString device;
    quint64 planned = 0;
    quint64 actual = 0;
    QString description;
    bool operator==(const DeviceBytes& o) const
    {
        return device == o.device && planned == o.planned && actual == o.actual && description == o.description;
    }
};

// A token as it arrived, placed on the worker's clock.
struct TokenMark {
    int index = 0;
    int id = 0;
    QString text;
    double t = 0;
    bool operator==(const TokenMark& o) const { return index == o.index && id == o.id && text == o.text && t == o.t; }
};

struct LoadedInfo {
    QString modelType;
    double loadSeconds = 0;
    QVector<RunUnit> units;
    QVector<DeviceBytes> devices;
    bool hasTokenizer = true; // without one, prompts are token ids
    bool operator==(const LoadedInfo& o) const
    {
        return modelType == o.modelType && loadSeconds == o.loadSeconds && units == o.units && devices == o.devices &&
               hasTokenizer == o.hasTokenizer;
    }
};

struct DoneInfo {
    QVector<int> tokenIds;
    QString text;
    bool stopped = false;
    double prefillSeconds = 0;
    double decodeSeconds = 0;
    double tokensPerSecond = 0;
    bool operator==(const DoneInfo& o) const
    {
        return tokenIds == o.tokenIds && text == o.text && stopped == o.stopped && prefillSeconds == o.prefillSeconds &&
               decodeSeconds == o.decodeSeconds && tokensPerSecond == o.tokensPerSecond;
    }
};

} // namespace stowage

Q_DECLARE_METATYPE(stowage::RunSample)
Q_DECLARE_METATYPE(stowage::TraceSpan)
Q_DECLARE_METATYPE(stowage::LoadedInfo)
Q_DECLARE_METATYPE(stowage::DoneInfo)
Q_DECLARE_METATYPE(stowage::TokenMark)
