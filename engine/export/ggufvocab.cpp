#include "ggufvocab.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

namespace stowage::gguf {
namespace {

// The Split regexes of the pre-tokenizers llama.cpp knows by name
// (llama-vocab.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3 and _QWEN2), as the Hub's
// Llama 3 and Qwen2/3 tokenizer.json files write them.
const char* const kLlama3Split = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Split = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// tokenizer.ggml.pre for a tokenizer.json pre_tokenizer; empty when llama.cpp
// has no pre-tokenizer that splits the same way.
std::string preName(const nlohmann::json& pre)
{
    auto is = [](const nlohmann::json& j, const char* type) {
        return j.is_object() && j.value("type", "") == type;
    };
    if (is(pre, "ByteLevel") && pre.value("use_regex", true) && !pre.value("add_prefix_space", false))
        return "gpt-2";
    if (!is(pre, "Sequence") || !pre.contains("pretokenizers") || pre["pretokenizers"].size() != 2)
        return {};
    const auto& split = pre["pretokenizers"][0];
    const auto& bytes = pre["pretokenizers"][1];
    if (!is(split, "Split") || !is(bytes, "ByteLevel") || bytes.value("use_regex", true) ||
        bytes.value("add_prefix_space", false) || split.value("behavior", "") != "Isolated" ||
        split.value("invert", false) || !split.contains("pattern") || !split["pattern"].is_object())
        return {};
    const std::string regex = split["pattern"].value("Regex", "");
    return regex == kLlama3Split ? "llama-bpe" : regex == kQwen2Split ? "qwen2" : "";
}

std::string chatTemplate(const Checkpoint& ck)
{
    if (auto jinja = ck.readSideFile("chat_template.jinja"))
        return *jinja;
    auto text = ck.readSideFile("tokenizer_config.json");
    if (!text)
        return {};
    const auto cfg = nlohmann::json::parse(*text, nullptr, false);
    if (!cfg.is_object() || !cfg.contains("chat_template"))
        return {};
    const auto& t = cfg["chat_template"];
    if (t.is_string())
        return t.get<std::string>();
    if (t.is_array())
        for (const auto& named : t)
            if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
                named["template"].is_string())
                return named["template"].get<std::string>();
    return {};
}

} // namespace

Vocab readVocab(const Checkpoint& ck)
{
    const std::string path = ck.folder() + "/tokenizer.json";
    const auto text = ck.readSideFile("tokenizer.json");
    if (!text)
        throw InputError(path, "missing: GGUF export writes the vocabulary from tokenizer.json");
    const auto tj = nlohmann::json::parse(*text, nullptr, false);
    if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
        throw InputError(path, "not a tokenizer.json object with a \"model\"");
    const auto& model = tj["model"];
    if (model.value("type", "") != "BPE" || model.value("byte_fallback", false))
        throw InputError(path, "GGUF export writes byte-level BPE vocabularies (GPT-2, Llama 3, Qwen); this is " +
                                   (model.value("byte_fallback", false) ? std::string("byte-fallback BPE")
                                                                        : model.value("type", std::string("unknown"))));
    Vocab v;
    v.pre = preName(tj.value("pre_tokenizer", nlohmann::json()));
    if (v.pre.empty())
        throw InputError(path, "its pre_tokenizer splits text in a way llama.cpp has no name for (it knows GPT-2's, "
                               "Llama 3's and Qwen2's)");
    if (!model.contains("vocab") || !model["vocab"].is_object())
        throw InputError(path, "model.vocab is not an object");

    // Ids from the vocabulary and the added tokens; a gap stays "[PAD<id>]".
    std::vector<std::optional<std::string>> byId;
    std::vector<int32_t> types;
    auto put = [&](int64_t id, const std::string& token, int32_t type) {
        if (id < 0 || id > (int64_t(1) << 24))
            throw InputError(path, "token '" + token + "' has id " + std::to_string(id));
        if (size_t(id) >= byId.size())
            byId.resize(size_t(id) + 1), types.resize(size_t(id) + 1, 5);
        byId[size_t(id)] = token;
        types[size_t(id)] = type;
    };
    for (const auto& [token, id] : model["vocab"].items()) {
        if (!id.is_number_integer())
            throw InputError(path, "model.vocab['" + token + "'] is not an integer id");
        put(id.get<int64_t>(), token, 1);
    }
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
        for (const auto& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
                !a["content"].is_string())
                throw InputError(path, "an added_tokens entry without an integer id and a content string");
            put(a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false) ? 3 : 4);
        }
    for (size_t i = 0; i < byId.size(); ++i)
        v.tokens.push_back(byId[i] ? *byId[i] : "[PAD" + std::to_string(i) + "]");
    v.types = std::move(types);

    if (model.contains("merges") && model["merges"].is_array())
        for (const auto& m : model["merges"]) {
            if (m.is_string())
                v.merges.push_back(m.get<std::string>());
            else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
                v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            else
                throw InputError(path, "a model.merges entry is neither \"a b\" nor [\"a\", \"b\"]");
        }

    // BOS/EOS as Stowage's own tokenizer and prompt rules read them.
    const auto tok = Tokenizer::load(ck);
    v.bos = tok->bosId();
    if (const auto eos = tok->eosIds(); !eos.empty())
        v.eos = eos.front();
    v.addBos = addsBos(ck) && v.bos.has_value();
    v.chatTemplate = chatTemplate(ck);
    return v;
}

void padVocab(Vocab& v, int64_t rows, const Checkpoint& ck)
{
    if (int64_t(v.tokens.size()) > rows)
        throw InputError(ck.folder() + "/tokenizer.json", "has " + std::to_string(v.tokens.size()) +
                                                              " tokens but the embedding has " + std::to_string(rows) +
                                                              " rows");
    while (int64_t(v.tokens.size()) < rows) {
        v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
        v.types.push_back(5);
    }
}

} // namespace stowage::gguf
