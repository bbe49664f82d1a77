// tokenizer.model through the SentencePiece library. Text between special
// tokens is encoded by SentencePiece as it is (pieces -> ids, no BOS/EOS), so
// each segment gets SentencePiece's dummy prefix, like the "legacy" Llama
// tokenizers. Decoding uses the decoder Hugging Face's converter gives Llama:
// ▁ -> space, byte pieces -> bytes, one leading space dropped.
#include "internal.h"

#include "stowage/error.h"

#include <sentencepiece_processor.h>

namespace stowage::tok {

namespace {

class SentencePieceModel : public Model {
public:
    SentencePieceModel(const std::string& bytes, const std::string& file)
    {
        auto status = m_sp.LoadFromSerializedProto(bytes);
        if (!status.ok())
            throw InputError(file, "not a SentencePiece model: " + status.ToString());
        int n = m_sp.GetPieceSize();
        m_pieces.reserve(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            m_pieces.push_back(m_sp.IdToPiece(i));
            m_ids.emplace(m_pieces.back(), i);
        }
    }

    void tokenize(const std::string& word, std::vector<int32_t>& out) const override
    {
        std::vector<int> ids;
        auto status = m_sp.Encode(word, &ids);
        if (!status.ok())
            throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
        out.insert(out.end(), ids.begin(), ids.end());
    }
    std::optional<int32_t> tokenToId(const std::string& token) const override
    {
        auto it = m_ids.find(token);
        if (it == m_ids.end())
            return std::nullopt;
        return it->second;
    }
    const std::string* idToToken(int32_t id) const override
    {
        return id >= 0 && static_cast<size_t>(id) < m_pieces.size() ? &m_pieces[static_cast<size_t>(id)] : nullptr;
    }
    int32_t size() const override { return static_cast<int32_t>(m_pieces.size()); }

    const sentencepiece::SentencePieceProcessor& sp() const { return m_sp; }

private:
    sentencepiece::SentencePieceProcessor m_sp;
    std::vector<std::string> m_pieces;
    std::unordered_map<std::string, int32_t> m_ids;
};

} // namespace

void loadSentencePiece(const std::string& bytes, const std::string& file, Tokenizer::Impl& impl)
{
    auto model = std::make_unique<SentencePieceModel>(bytes, file);
    const auto& sp = model->sp();
    for (int i = 0; i < sp.GetPieceSize(); ++i) {
        if (!sp.IsControl(i) && !sp.IsUnknown(i))
            continue;
        AddedToken t;
        t.id = i;
        t.content = sp.IdToPiece(i);
        t.special = true;
        t.normalized = false;
        impl.added.add(std::move(t));
    }
    impl.added.build(nullptr);
    if (sp.bos_id() >= 0)
        impl.bos = sp.bos_id();
    if (sp.eos_id() >= 0)
        impl.eos = {sp.eos_id()};
    impl.decoder = makeLlamaDecoder();
    impl.model = std::move(model);
}

} // namespace stowage::tok
