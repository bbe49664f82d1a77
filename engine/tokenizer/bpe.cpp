// The BPE model, as tokenizers' models/bpe: characters (with byte fallback or
// unk), then merges applied lowest rank first, leftmost first among equals.
// Results are cached per word, as tokenizers does.
#include "internal.h"
#include "unicode.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <mutex>
#include <queue>

namespace stowage::tok {

namespace {

using nlohmann::json;

constexpr size_t kCacheCapacity = 10000;
constexpr size_t kCacheMaxWord = 256;
const char kMetaspace[] = "\xE2\x96\x81"; // ▁

uint64_t pairKey(int32_t a, int32_t b)
{
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class Bpe : public Model {
public:
    Bpe(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
        const BpeOptions& opts, const std::string& file)
        : m_vocab(std::move(vocab)), m_opts(opts)
    {
        int32_t maxId = -1;
        for (const auto& [tok, id] : m_vocab) {
            if (id < 0)
                throw InputError(file, "vocab id of '" + tok + "' is negative");
            maxId = std::max(maxId, id);
        }
        // Ids index a table; one id far past the others would allocate
        // gigabytes (found by fuzz_vocab_merges). Real vocabularies are dense.
        if (static_cast<uint64_t>(maxId) >= 16 * static_cast<uint64_t>(m_vocab.size()) + 65536)
            throw InputError(file, "vocab ids reach " + std::to_string(maxId) + " but the vocab has only " +
                                       std::to_string(m_vocab.size()) + " tokens; ids this sparse are not supported");
        m_byId.assign(static_cast<size_t>(maxId + 1), nullptr);
        for (const auto& kv : m_vocab)
            m_byId[static_cast<size_t>(kv.second)] = &kv.first;
        size_t prefixLen = opts.continuingSubwordPrefix ? opts.continuingSubwordPrefix->size() : 0;
        m_merges.reserve(merges.size());
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const auto& [a, b] = merges[rank];
            auto ia = m_vocab.find(a), ib = m_vocab.find(b);
            if (ia == m_vocab.end() || ib == m_vocab.end())
                throw InputError(file, "merge " + std::to_string(rank + 1) + " ('" + a + " " + b +
                                           "') uses a token that is not in the vocab");
            std::string merged = a + (b.size() >= prefixLen ? b.substr(prefixLen) : b);
            auto im = m_vocab.find(merged);
            if (im == m_vocab.end())
                throw InputError(file, "merge " + std::to_string(rank + 1) + " makes '" + merged +
                                           "', which is not in the vocab");
            m_merges[pairKey(ia->second, ib->second)] = {static_cast<int32_t>(rank), im->second};
        }
        if (opts.unkToken && !m_vocab.count(*opts.unkToken))
            throw InputError(file, "unk_token '" + *opts.unkToken + "' is not in the vocab");
        // See tokenize(): safe when ▁ is a token and no token has ▁ after another character.
        m_splitAtMetaspace = !opts.ignoreMerges && m_vocab.count(kMetaspace);
        for (auto it = m_vocab.begin(); m_splitAtMetaspace && it != m_vocab.end(); ++it)
            for (size_t at = it->first.find(kMetaspace, 1); at != std::string::npos && m_splitAtMetaspace;
                 at = it->first.find(kMetaspace, at + 1))
                m_splitAtMetaspace = at >= 3 && it->first.compare(at - 3, 3, kMetaspace) == 0;
        if (opts.byteFallback) {
            char name[8];
            for (int b = 0; b < 256; ++b) {
                std::snprintf(name, sizeof name, "<0x%02X>", b);
                auto it = m_vocab.find(name);
                m_byteIds[static_cast<size_t>(b)] = it == m_vocab.end() ? -1 : it->second;
            }
        }
    }

    void tokenize(const std::string& word, std::vector<int32_t>& out) const override
    {
        if (word.empty())
            return;
        if (m_opts.ignoreMerges) {
            auto it = m_vocab.find(word);
            if (it != m_vocab.end()) {
                out.push_back(it->second);
                return;
            }
        }
        if (m_splitAtMetaspace && word.size() >= kCacheMaxWord) {
            // Llama-style files have no pre-tokenizer, so a whole text is one
            // word. When no token has ▁ after another character, no merge can
            // cross the start of a ▁-run: BPE the parts (cached) separately.
            size_t start = 0;
            for (size_t i = 3; i + 3 <= word.size(); ++i) {
                if (word.compare(i, 3, kMetaspace) == 0 && word.compare(i - 3, 3, kMetaspace) != 0) {
                    cachedMerge(word.substr(start, i - start), out);
                    start = i;
                }
            }
            cachedMerge(word.substr(start), out);
            return;
        }
        cachedMerge(word, out);
    }

    void cachedMerge(const std::string& word, std::vector<int32_t>& out) const
    {
        bool cacheable = word.size() < kCacheMaxWord;
        if (cacheable) {
            std::lock_guard<std::mutex> lock(m_cacheMutex);
            auto it = m_cache.find(word);
            if (it != m_cache.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        std::vector<int32_t> ids = mergeWord(word);
        out.insert(out.end(), ids.begin(), ids.end());
        if (cacheable) {
            std::lock_guard<std::mutex> lock(m_cacheMutex);
            if (m_cache.size() < kCacheCapacity)
                m_cache.emplace(word, std::move(ids));
        }
    }

    std::optional<int32_t> tokenToId(const std::string& token) const override
    {
        auto it = m_vocab.find(token);
        if (it == m_vocab.end())
            return std::nullopt;
        return it->second;
    }
    const std::string* idToToken(int32_t id) const override
    {
        return id >= 0 && static_cast<size_t>(id) < m_byId.size() ? m_byId[static_cast<size_t>(id)] : nullptr;
    }
    int32_t size() const override { return static_cast<int32_t>(m_byId.size()); }

private:
    struct Symbol {
        int32_t id;
        int prev, next;
        bool alive;
    };
    struct Merge {
        int32_t rank;
        int pos;
        int32_t newId;
        bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };

    const std::pair<int32_t, int32_t>* findMerge(int32_t a, int32_t b) const
    {
        auto it = m_merges.find(pairKey(a, b));
        return it == m_merges.end() ? nullptr : &it->second;
    }

    std::vector<int32_t> mergeWord(const std::string& w) const
    {
        std::vector<int32_t> ids;
        std::optional<int32_t> unkId;
        if (m_opts.unkToken)
            unkId = m_vocab.at(*m_opts.unkToken);
        bool pendingUnk = false;
        std::string s;
        for (size_t i = 0; i < w.size();) {
            size_t len;
            uni::decodeAt(w, i, len);
            bool first = i == 0, last = i + len == w.size();
            s.clear();
            if (!first && m_opts.continuingSubwordPrefix)
                s += *m_opts.continuingSubwordPrefix;
            s.append(w, i, len);
            if (last && m_opts.endOfWordSuffix)
                s += *m_opts.endOfWordSuffix;
            i += len;
            auto it = m_vocab.find(s);
            if (it != m_vocab.end()) {
                if (pendingUnk) {
                    ids.push_back(*unkId);
                    pendingUnk = false;
                }
                ids.push_back(it->second);
                continue;
            }
            if (m_opts.byteFallback) {
                bool all = true;
                for (unsigned char b : s)
                    all = all && m_byteIds[b] >= 0;
                if (all) {
                    for (unsigned char b : s)
                        ids.push_back(m_byteIds[b]);
                    continue; // as tokenizers: a pending unk stays pending
                }
            }
            if (unkId) {
                if (pendingUnk && !m_opts.fuseUnk)
                    ids.push_back(*unkId);
                pendingUnk = true;
            }
        }
        if (pendingUnk)
            ids.push_back(*unkId);
        return applyMerges(ids);
    }

    std::vector<int32_t> applyMerges(const std::vector<int32_t>& ids) const
    {
        if (ids.size() < 2)
            return ids;
        std::vector<Symbol> sym(ids.size());
        for (size_t i = 0; i < ids.size(); ++i)
            sym[i] = {ids[i], static_cast<int>(i) - 1, i + 1 < ids.size() ? static_cast<int>(i) + 1 : -1, true};
        std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
        for (size_t i = 0; i + 1 < ids.size(); ++i)
            if (auto m = findMerge(ids[i], ids[i + 1]))
                queue.push({m->first, static_cast<int>(i), m->second});
        while (!queue.empty()) {
            Merge top = queue.top();
            queue.pop();
            Symbol& cur = sym[static_cast<size_t>(top.pos)];
            if (!cur.alive || cur.next < 0)
                continue;
            Symbol& right = sym[static_cast<size_t>(cur.next)];
            auto m = findMerge(cur.id, right.id);
            if (!m || m->second != top.newId)
                continue; // stale entry
            cur.id = top.newId;
            right.alive = false;
            cur.next = right.next;
            if (cur.next >= 0)
                sym[static_cast<size_t>(cur.next)].prev = top.pos;
            if (cur.prev >= 0)
                if (auto pm = findMerge(sym[static_cast<size_t>(cur.prev)].id, cur.id))
                    queue.push({pm->first, cur.prev, pm->second});
            if (cur.next >= 0)
                if (auto nm = findMerge(cur.id, sym[static_cast<size_t>(cur.next)].id))
                    queue.push({nm->first, top.pos, nm->second});
        }
        std::vector<int32_t> out;
        for (const auto& s : sym)
            if (s.alive)
                out.push_back(s.id);
        return out;
    }

    std::unordered_map<std::string, int32_t> m_vocab;
    std::vector<const std::string*> m_byId;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> m_merges; // pair -> (rank, new id)
    BpeOptions m_opts;
    std::array<int32_t, 256> m_byteIds{};
    bool m_splitAtMetaspace = false;
    mutable std::mutex m_cacheMutex;
    mutable std::unordered_map<std::string, std::vector<int32_t>> m_cache;
};

std::optional<std::string> optString(const json& j, const char* key, const std::string& file)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return std::nullopt;
    if (!it->is_string())
        throw InputError(file, std::string("model.") + key + " is not a string");
    return it->get<std::string>();
}

bool optBool(const json& j, const char* key, const std::string& file)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return false;
    if (!it->is_boolean())
        throw InputError(file, std::string("model.") + key + " is not true/false");
    return it->get<bool>();
}

} // namespace

std::unique_ptr<Model> makeBpe(std::unordered_map<std::string, int32_t> vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& opts,
                               const std::string& file)
{
    return std::make_unique<Bpe>(std::move(vocab), merges, opts, file);
}

std::unique_ptr<Model> makeBpeModel(const json& m, const std::string& file)
{
    BpeOptions o;
    o.unkToken = optString(m, "unk_token", file);
    o.continuingSubwordPrefix = optString(m, "continuing_subword_prefix", file);
    o.endOfWordSuffix = optString(m, "end_of_word_suffix", file);
    o.fuseUnk = optBool(m, "fuse_unk", file);
    o.byteFallback = optBool(m, "byte_fallback", file);
    o.ignoreMerges = optBool(m, "ignore_merges", file);
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
        throw InputError(file, "BPE dropout is not supported (encoding would not be deterministic)");

    auto v = m.find("vocab");
    if (v == m.end() || !v->is_object())
        throw InputError(file, "model.vocab is missing or not an object");
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(v->size());
    for (auto it = v->begin(); it != v->end(); ++it) {
        if (!it.value().is_number_integer())
            throw InputError(file, "model.vocab id of '" + it.key() + "' is not an integer");
        vocab[it.key()] = it.value().get<int32_t>();
    }
    auto mg = m.find("merges");
    if (mg == m.end() || !mg->is_array())
        throw InputError(file, "model.merges is missing or not a list");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(mg->size());
    size_t n = 0;
    for (const auto& e : *mg) {
        ++n;
        if (e.is_string()) {
            const std::string& s = e.get_ref<const std::string&>();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                throw InputError(file, "merge " + std::to_string(n) + " ('" + s + "') is not two tokens");
            merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            throw InputError(file, "merge " + std::to_string(n) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    return makeBpe(std::move(vocab), merges, o, file);
}

} // namespace stowage::tok
