// tokenizer.model (SentencePiece), without the SentencePiece library: the
// ModelProto is read by protoreader.cpp and encoded here the way SentencePiece
// 0.1.97's SentencePieceProcessor::Encode does (normalizer.cc, bpe_model.cc,
// unigram_model.cc's EncodeOptimized, word_model.cc, char_model.cc and the
// byte fallback / unknown merging of PopulateSentencePieceText). Text between
// special tokens is encoded as it is (no BOS/EOS), so each segment gets the
// dummy prefix, like the "legacy" Llama tokenizers. Decoding uses the decoder
// Hugging Face's converter gives Llama: ▁ -> space, byte pieces -> bytes, one
// leading space dropped.
#include "internal.h"
#include "protoreader.h"
#include "spnormalizer.h"

#include "stowage/error.h"

#include <algorithm>
#include <cfloat>
#include <queue>

namespace stowage::tok {

namespace {

using Sp = SpModelProto;
using EncodeResult = std::vector<std::pair<std::string_view, int32_t>>;
using spm::kSpaceSymbol;
using spm::oneCharLen;

class SentencePieceModel : public Model {
public:
    SentencePieceModel(Sp proto, const std::string& file);

    void tokenize(const std::string& word, std::vector<int32_t>& out) const override;
    std::optional<int32_t> tokenToId(const std::string& token) const override
    {
        auto it = m_ids.find(token);
        if (it == m_ids.end())
            return std::nullopt;
        return it->second;
    }
    const std::string* idToToken(int32_t id) const override
    {
        return id >= 0 && static_cast<size_t>(id) < m_p.pieces.size() ? &m_p.pieces[static_cast<size_t>(id)].piece
                                                                       : nullptr;
    }
    int32_t size() const override { return static_cast<int32_t>(m_p.pieces.size()); }

    int type(int32_t id) const
    {
        return id >= 0 && static_cast<size_t>(id) < m_p.pieces.size() ? m_p.pieces[static_cast<size_t>(id)].type : 0;
    }
    // ModelInterface::PieceToId: control, unknown and byte pieces first, then the others, else unk.
    int32_t pieceToId(std::string_view piece) const
    {
        if (auto it = m_reserved.find(piece); it != m_reserved.end())
            return it->second;
        if (auto it = m_normal.find(piece); it != m_normal.end())
            return it->second;
        return m_unk;
    }
    // As SentencePieceProcessor's bos_id() etc.: the piece's id when it is a control piece.
    std::optional<int32_t> controlId(const std::string& piece) const
    {
        int32_t id = pieceToId(piece);
        return type(id) == Sp::Control ? std::optional<int32_t>(id) : std::nullopt;
    }
    const Sp& proto() const { return m_p; }

private:
    EncodeResult encodeBpe(std::string_view normalized) const;
    EncodeResult encodeUnigram(std::string_view normalized) const;
    float score(int32_t id) const { return m_p.pieces[static_cast<size_t>(id)].score; }

    Sp m_p;
    std::unordered_map<std::string, int32_t> m_ids; // every piece, the first id of each
    std::unordered_map<std::string_view, int32_t> m_normal, m_reserved;
    spm::SortedVocab m_userDefined, m_vocab; // m_vocab: the unigram trie (normal, user-defined, unused)
    std::optional<spm::Normalizer> m_normalizer;
    int32_t m_unk = -1;
    int32_t m_byteIds[256] = {};
    float m_minScore = FLT_MAX, m_maxScore = FLT_MIN; // as unigram::Model, FLT_MIN included
};

SentencePieceModel::SentencePieceModel(Sp proto, const std::string& file) : m_p(std::move(proto))
{
    auto bad = [&](const std::string& why) { return InputError(file, "not a SentencePiece model: " + why); };
    if (m_p.pieces.empty())
        throw bad("it has no pieces");
    std::fill(std::begin(m_byteIds), std::end(m_byteIds), -1);
    for (size_t i = 0; i < m_p.pieces.size(); ++i) {
        const auto& sp = m_p.pieces[i];
        const auto id = static_cast<int32_t>(i);
        auto where = [i] { return "piece " + std::to_string(i); };
        if (sp.piece.empty())
            throw bad(where() + " is empty");
        m_ids.emplace(sp.piece, id);
        const bool normal = sp.type == Sp::Normal || sp.type == Sp::UserDefined || sp.type == Sp::Unused;
        if (!(normal ? m_normal : m_reserved).emplace(sp.piece, id).second)
            throw bad(where() + " '" + sp.piece + "' is already defined");
        if (sp.type == Sp::UserDefined)
            m_userDefined.add(sp.piece, id);
        if (sp.type == Sp::Unknown) {
            if (m_unk >= 0)
                throw bad(where() + " is a second unknown piece");
            m_unk = id;
        }
        if (sp.type == Sp::Byte) {
            if (!m_p.byteFallback)
                throw bad(where() + " is the byte piece '" + sp.piece + "' although byte_fallback is false");
            auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
            if (sp.piece.size() != 6 || sp.piece.compare(0, 3, "<0x") != 0 || sp.piece[5] != '>' ||
                hex(sp.piece[3]) < 0 || hex(sp.piece[4]) < 0)
                throw bad(where() + " '" + sp.piece + "' is not a valid byte piece");
            m_byteIds[hex(sp.piece[3]) * 16 + hex(sp.piece[4])] = id;
        }
        if (sp.type == Sp::Normal) {
            m_minScore = std::min(m_minScore, sp.score);
            m_maxScore = std::max(m_maxScore, sp.score);
        }
    }
    if (m_unk < 0)
        throw bad("it has no unknown piece");
    if (m_p.byteFallback && std::count(std::begin(m_byteIds), std::end(m_byteIds), -1) > 0)
        throw bad("byte_fallback is true but there are not 256 byte pieces");
    m_userDefined.build();
    if (m_p.modelType == Sp::Unigram) {
        for (const auto& [piece, id] : m_normal)
            m_vocab.add(piece, id);
        if (m_vocab.empty())
            throw bad("the unigram model has no pieces but control, unknown and byte pieces");
        m_vocab.build();
    }
    m_normalizer.emplace(m_p, m_userDefined, file);
}

// bpe::Model::SampleEncode without dropout: start from characters (a
// user-defined symbol is one, frozen), merge the adjacent pair whose
// concatenation is a piece of the highest score, leftmost on ties; unused
// pieces are split back into what they were merged from.
EncodeResult SentencePieceModel::encodeBpe(std::string_view normalized) const
{
    struct Symbol {
        int prev, next;
        bool freeze;
        std::string_view piece;
    };
    struct Pair {
        int left, right;
        float score;
        size_t size;
        bool operator<(const Pair& o) const { return score < o.score || (score == o.score && left > o.left); }
    };
    std::vector<Symbol> symbols;
    std::priority_queue<Pair> agenda;
    std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> revMerge;
    auto addPair = [&](int left, int right) {
        if (left < 0 || right < 0 || symbols[size_t(left)].freeze || symbols[size_t(right)].freeze)
            return;
        const auto& l = symbols[size_t(left)];
        std::string_view piece(l.piece.data(), l.piece.size() + symbols[size_t(right)].piece.size());
        auto it = m_normal.find(piece);
        if (it == m_normal.end())
            return;
        agenda.push({left, right, score(it->second), piece.size()});
        if (type(it->second) == Sp::Unused)
            revMerge[piece] = {l.piece, symbols[size_t(right)].piece};
    };
    for (size_t pos = 0; pos < normalized.size();) {
        Symbol s;
        size_t len = m_userDefined.prefixMatch(normalized.substr(pos), s.freeze);
        s.piece = normalized.substr(pos, len);
        s.prev = static_cast<int>(symbols.size()) - 1;
        pos += len;
        s.next = pos < normalized.size() ? static_cast<int>(symbols.size()) + 1 : -1;
        symbols.push_back(s);
    }
    if (symbols.empty())
        return {};
    for (size_t i = 1; i < symbols.size(); ++i)
        addPair(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!agenda.empty()) {
        const Pair top = agenda.top();
        agenda.pop();
        auto& l = symbols[size_t(top.left)];
        auto& r = symbols[size_t(top.right)];
        if (l.piece.empty() || r.piece.empty() || l.piece.size() + r.piece.size() != top.size)
            continue; // stale
        l.piece = std::string_view(l.piece.data(), top.size);
        l.next = r.next;
        if (r.next >= 0)
            symbols[size_t(r.next)].prev = top.left;
        r.piece = {};
        addPair(l.prev, top.left);
        addPair(top.left, l.next);
    }
    EncodeResult out;
    auto resegment = [&](auto& self, std::string_view w) -> void {
        const int32_t id = pieceToId(w);
        auto it = type(id) == Sp::Unused ? revMerge.find(w) : revMerge.end();
        if (it == revMerge.end()) {
            out.emplace_back(w, id);
            return;
        }
        self(self, it->second.first);
        self(self, it->second.second);
    };
    for (int i = 0; i != -1; i = symbols[size_t(i)].next)
        resegment(resegment, symbols[size_t(i)].piece);
    return out;
}

// unigram::Model::EncodeOptimized: Viterbi over the pieces (unused ones left
// out; user-defined ones scored length * max_score - 0.1), one unknown node
// of min_score - 10 where no piece covers a character, best path ending at
// each byte, ties to the earliest start. Sums in double, as there.
EncodeResult SentencePieceModel::encodeUnigram(std::string_view normalized) const
{
    struct Best {
        int32_t id = -1;
        float score = 0;
        int startsAt = -1;
    };
    const float unkScore = m_minScore - 10.0f;
    std::vector<Best> best(normalized.size() + 1);
    auto offer = [&](size_t end, double candidate, size_t start, int32_t id) {
        auto& t = best[end];
        if (t.startsAt == -1 || candidate > t.score)
            t = {id, static_cast<float>(candidate), static_cast<int>(start)};
    };
    for (size_t start = 0; start < normalized.size();) {
        const float here = best[start].score;
        const size_t mblen = oneCharLen(normalized, start);
        bool single = false;
        m_vocab.prefixes(normalized.substr(start), [&](size_t length, int32_t id) {
            const int t = type(id);
            if (t == Sp::Unused)
                return;
            const double s = t == Sp::UserDefined ? static_cast<float>(length) * m_maxScore - 0.1 : score(id);
            offer(start + length, s + here, start, id);
            single = single || length == mblen;
        });
        if (!single)
            offer(start + mblen, unkScore + here, start, m_unk); // a float sum there
        start += mblen;
    }
    EncodeResult out;
    for (size_t end = normalized.size(); end > 0;) {
        const auto& node = best[end];
        const auto start = static_cast<size_t>(node.startsAt);
        out.emplace_back(normalized.substr(start, end - start), node.id);
        end = start;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

void SentencePieceModel::tokenize(const std::string& word, std::vector<int32_t>& out) const
{
    const std::string normalized = m_normalizer->normalize(word);
    if (normalized.empty())
        return;
    const std::string_view text = normalized;
    EncodeResult result;
    switch (m_p.modelType) {
    case Sp::Bpe: result = encodeBpe(text); break;
    case Sp::Unigram: result = encodeUnigram(text); break;
    case Sp::Word: // SplitIntoWords: a word starts at the beginning and at each ▁
        for (size_t pos = 0; pos < text.size();) {
            size_t end = pos + oneCharLen(text, pos);
            while (end < text.size() && text.substr(end, kSpaceSymbol.size()) != kSpaceSymbol)
                end += oneCharLen(text, end);
            result.emplace_back(text.substr(pos, end - pos), pieceToId(text.substr(pos, end - pos)));
            pos = end;
        }
        break;
    default: // Char: characters, user-defined symbols whole
        for (size_t pos = 0; pos < text.size();) {
            bool found = false;
            const size_t len = m_userDefined.prefixMatch(text.substr(pos), found);
            result.emplace_back(text.substr(pos, len), pieceToId(text.substr(pos, len)));
            pos += len;
        }
    }
    // PopulateSentencePieceText: unknown pieces become their bytes with
    // byte_fallback, else a run of them becomes one unknown id. (A control
    // piece there makes SentencePiece fail; we keep its id.)
    bool prevUnk = false;
    for (const auto& [w, id] : result) {
        const bool unk = type(id) == Sp::Unknown;
        if (unk && m_p.byteFallback) {
            for (char c : w)
                out.push_back(m_byteIds[static_cast<unsigned char>(c)]);
        } else if (!(unk && prevUnk)) {
            out.push_back(id);
        }
        prevUnk = unk;
    }
}

} // namespace

void loadSentencePiece(const std::string& bytes, const std::string& file, Tokenizer::Impl& impl)
{
    Sp proto;
    try {
        proto = parseSpModelProto(bytes);
    } catch (const ProtoError& e) {
        throw InputError(file, std::string("not a SentencePiece model: ") + e.what());
    }
    auto model = std::make_unique<SentencePieceModel>(std::move(proto), file);
    const auto& pieces = model->proto().pieces;
    for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].type != Sp::Control && pieces[i].type != Sp::Unknown)
            continue;
        AddedToken t;
        t.id = static_cast<int32_t>(i);
        t.content = pieces[i].piece;
        t.special = true;
        t.normalized = false;
        impl.added.add(std::move(t));
    }
    impl.added.build(nullptr);
    if (auto bos = model->controlId(model->proto().bosPiece))
        impl.bos = *bos;
    if (auto eos = model->controlId(model->proto().eosPiece))
        impl.eos = {*eos};
    impl.decoder = makeLlamaDecoder();
    impl.model = std::move(model);
}

} // namespace stowage::tok
