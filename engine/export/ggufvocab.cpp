#include "ggufvocab.h"

#include "stowage/chattemplate.h"
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

// Llama 2's tokenizer.json: "▁" prepended and for every space, as
// SentencePiece's add_dummy_prefix does (normalizer Prepend + Replace, or the
// Metaspace pre-tokenizer of later conversions); Replace alone: no prefix
// (Gemma). nullopt: spaces handled some other way.
std::optional<bool> spacePrefix(const nlohmann::json& tj)
{
    const std::string bar = "\u2581";
    auto isReplace = [&](const nlohmann::json& n) {
        return n.is_object() && n.value("type", "") == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
               n["pattern"].value("String", "") == " " && n.value("content", "") == bar;
    };
    const auto normalizer = tj.value("normalizer", nlohmann::json());
    const auto pre = tj.value("pre_tokenizer", nlohmann::json());
    if (normalizer.is_null() && pre.is_object() && pre.value("type", "") == "Metaspace" &&
        pre.value("replacement", "") == bar && !pre.value("split", true)) {
        const std::string scheme = pre.value("prepend_scheme", "always");
        if (scheme == "first" || scheme == "always")
            return true;
        if (scheme == "never")
            return false;
        return std::nullopt;
    }
    if (!pre.is_null())
        return std::nullopt;
    if (isReplace(normalizer))
        return false;
    if (normalizer.is_object() && normalizer.value("type", "") == "Sequence" && normalizer.contains("normalizers")) {
        const auto& ns = normalizer["normalizers"];
        if (ns.size() == 2 && ns[0].is_object() && ns[0].value("type", "") == "Prepend" &&
            ns[0].value("prepend", "") == bar && isReplace(ns[1]))
            return true;
    }
    return std::nullopt;
}

// The template the window's chat uses (ChatTemplate::sourceInFolder); one
// it cannot read is left out, as llama.cpp then runs without one.
std::string chatTemplate(const Checkpoint& ck)
{
    try {
        if (auto source = ChatTemplate::sourceInFolder(ck.folder()))
            return source->text;
    } catch (const InputError&) {
    }
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
    if (model.value("type", "") != "BPE")
        throw InputError(path, "GGUF export writes BPE vocabularies (GPT-2, Llama 2/3, Mistral, Qwen); this is " +
                                   model.value("type", std::string("unknown")));
    Vocab v;
    const bool spm = model.value("byte_fallback", false);
    if (spm) {
        v.model = "llama";
        const auto prefix = spacePrefix(tj);
        if (!prefix)
            throw InputError(path, "a byte-fallback BPE whose normalizer and pre_tokenizer do not put \u2581 for "
                                   "spaces as SentencePiece does");
        v.addSpacePrefix = *prefix;
    } else {
        v.pre = preName(tj.value("pre_tokenizer", nlohmann::json()));
        if (v.pre.empty())
            throw InputError(path, "its pre_tokenizer splits text in a way llama.cpp has no name for (it knows "
                                   "GPT-2's, Llama 3's and Qwen2's)");
    }
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
    const std::string unk = model.value("unk_token", nlohmann::json()).is_string() ? model["unk_token"].get<std::string>() : "";
    for (const auto& [token, id] : model["vocab"].items()) {
        if (!id.is_number_integer())
            throw InputError(path, "model.vocab['" + token + "'] is not an integer id");
        // SentencePiece's byte pieces <0x00>..<0xFF> and its unknown piece keep their kinds.
        const bool byte = spm && token.size() == 6 && token.rfind("<0x", 0) == 0 && token.back() == '>';
        put(id.get<int64_t>(), token, byte ? 6 : spm && token == unk ? 2 : 1);
        if (spm && token == unk)
            v.unk = int32_t(id.get<int64_t>());
    }
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
        for (const auto& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
                !a["content"].is_string())
                throw InputError(path, "an added_tokens entry without an integer id and a content string");
            const std::string content = a["content"].get<std::string>();
            put(a["id"].get<int64_t>(), content, spm && content == unk ? 2 : a.value("special", false) ? 3 : 4);
        }
    for (size_t i = 0; i < byId.size(); ++i)
        v.tokens.push_back(byId[i] ? *byId[i] : "[PAD" + std::to_string(i) + "]");
    v.types = std::move(types);

    std::vector<std::string> merges;
    if (model.contains("merges") && model["merges"].is_array())
        for (const auto& m : model["merges"]) {
            if (m.is_string())
                merges.push_back(m.get<std::string>());
            else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
                merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            else
                throw InputError(path, "a model.merges entry is neither \"a b\" nor [\"a\", \"b\"]");
        }
    if (spm) {
        // llama.cpp's SentencePiece tokenizer merges the adjacent pair whose
        // joined piece scores highest. The Hub's tokenizer.json lists merges
        // in the order of the SentencePiece scores (transformers'
        // SpmConverter), so a piece scores minus the rank of its first merge;
        // pieces no merge makes never compete (0).
        v.scores.assign(v.tokens.size(), 0.0f);
        std::vector<bool> scored(v.tokens.size(), false);
        for (size_t r = 0; r < merges.size(); ++r) {
            const auto space = merges[r].find(' ');
            if (space == std::string::npos)
                continue;
            const std::string joined = merges[r].substr(0, space) + merges[r].substr(space + 1);
            const auto it = model["vocab"].find(joined);
            if (it == model["vocab"].end() || !it->is_number_integer())
                continue;
            const auto id = size_t(it->get<int64_t>());
            if (id < scored.size() && !scored[id]) {
                scored[id] = true;
                v.scores[id] = -float(r);
            }
        }
    } else {
        v.merges = std::move(merges);
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
        if (!v.scores.empty())
            v.scores.push_back(0.0f);
    }
}

} // namespace stowage::gguf
