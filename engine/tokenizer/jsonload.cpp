// Loading: tokenizer.json (the whole pipeline), vocab.json + merges.txt (GPT-2
// byte-level BPE), tokenizer.model (SentencePiece), and the BOS/EOS tokens
// from tokenizer_config.json, special_tokens_map.json, generation_config.json
// and config.json.
#include "internal.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace stowage::tok {

namespace {

using nlohmann::json;

json parseJson(const std::string& text, const std::string& path)
{
    try {
        return json::parse(text);
    } catch (const json::exception& e) { // parse_error, or out_of_range for a number like 1e999
        std::string what = e.what();
        auto colon = what.find("]: ");
        throw InputError(path, "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon + 3)) + ")");
    }
}

std::string modelType(const json& m, const std::string& path)
{
    if (m.contains("type")) {
        if (!m["type"].is_string())
            throw InputError(path, "model.type is not a string");
        return m["type"].get<std::string>();
    }
    // Old files have no type: tell the models apart by their fields, as tokenizers does.
    if (m.contains("merges"))
        return "BPE";
    if (m.contains("vocab") && m["vocab"].is_array())
        return "Unigram";
    if (m.contains("max_input_chars_per_word"))
        return "WordPiece";
    if (m.contains("vocab"))
        return "WordLevel";
    throw InputError(path, "model has no \"type\" and is not recognisable");
}

bool flag(const json& t, const char* key, bool def, const std::string& path)
{
    auto it = t.find(key);
    if (it == t.end() || it->is_null())
        return def;
    if (!it->is_boolean())
        throw InputError(path, std::string("added token field '") + key + "' is not true/false");
    return it->get<bool>();
}

AddedToken addedToken(const json& t, int32_t id, const std::string& path)
{
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
        throw InputError(path, "added token " + std::to_string(id) + " has no string \"content\"");
    AddedToken a;
    a.id = id;
    a.content = t["content"].get<std::string>();
    a.special = flag(t, "special", false, path);
    a.singleWord = flag(t, "single_word", false, path);
    a.lstrip = flag(t, "lstrip", false, path);
    a.rstrip = flag(t, "rstrip", false, path);
    a.normalized = flag(t, "normalized", !a.special, path);
    return a;
}

std::optional<json> readJson(const FileSource& src, const std::string& name)
{
    auto text = src.get(name);
    if (!text)
        return std::nullopt;
    json j = parseJson(*text, src.path(name));
    if (!j.is_object())
        throw InputError(src.path(name), "is not a JSON object");
    return j;
}

// "<s>" or {"content": "<s>", ...}; nothing for null or anything else.
std::optional<std::string> tokenText(const json& v)
{
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

void addIds(const json& v, std::vector<int32_t>& out)
{
    auto one = [&](const json& x) {
        if (x.is_number_integer() && std::find(out.begin(), out.end(), x.get<int32_t>()) == out.end())
            out.push_back(x.get<int32_t>());
    };
    if (v.is_array())
        for (const auto& x : v)
            one(x);
    else
        one(v);
}

std::optional<int32_t> lookup(const Tokenizer::Impl& impl, const std::string& token)
{
    if (auto id = impl.added.idOf(token))
        return id;
    return impl.model->tokenToId(token);
}

// Added/special tokens tokenizer_config.json declares, for vocab.json + merges.txt.
void addConfigTokens(Tokenizer::Impl& impl, const std::optional<json>& tc, const std::optional<json>& stm,
                     const std::optional<json>& addedJson, const std::string& tcPath)
{
    if (tc && tc->contains("added_tokens_decoder") && (*tc)["added_tokens_decoder"].is_object()) {
        for (const auto& [key, t] : (*tc)["added_tokens_decoder"].items()) {
            int32_t id = 0;
            try {
                id = std::stoi(key);
            } catch (const std::exception&) {
                throw InputError(tcPath, "added_tokens_decoder key '" + key + "' is not an id");
            }
            impl.added.add(addedToken(t, id, tcPath));
        }
    }
    auto special = [&](const std::string& content) {
        std::optional<int32_t> id = impl.model->tokenToId(content);
        if (!id && addedJson && addedJson->contains(content) && (*addedJson)[content].is_number_integer())
            id = (*addedJson)[content].get<int32_t>();
        if (!id || impl.added.byId(*id))
            return;
        AddedToken a;
        a.id = *id;
        a.content = content;
        a.special = true;
        a.normalized = false;
        impl.added.add(a);
    };
    bool any = false;
    for (const auto* cfg : {tc ? &*tc : nullptr, stm ? &*stm : nullptr}) {
        if (!cfg)
            continue;
        for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"})
            if (cfg->contains(key))
                if (auto t = tokenText((*cfg)[key])) {
                    special(*t);
                    any = true;
                }
        if (cfg->contains("additional_special_tokens") && (*cfg)["additional_special_tokens"].is_array())
            for (const auto& v : (*cfg)["additional_special_tokens"])
                if (auto t = tokenText(v))
                    special(*t);
    }
    if (!any) { // GPT2Tokenizer's default bos/eos/unk
        special("<|endoftext|>");
        if (auto id = impl.model->tokenToId("<|endoftext|>")) {
            impl.bos = *id;
            impl.eos = {*id};
        }
    }
}

void applySpecialConfig(Tokenizer::Impl& impl, const std::optional<json>& tc, const std::optional<json>& stm,
                        const FileSource& src)
{
    auto field = [&](const char* key) -> const json* {
        if (tc && tc->contains(key))
            return &(*tc)[key];
        if (stm && stm->contains(key))
            return &(*stm)[key];
        return nullptr;
    };
    auto gen = readJson(src, "generation_config.json");
    auto cfg = readJson(src, "config.json");
    if (const json* b = field("bos_token")) {
        impl.bos.reset();
        if (auto t = tokenText(*b))
            impl.bos = lookup(impl, *t);
    } else {
        for (const auto* c : {gen ? &*gen : nullptr, cfg ? &*cfg : nullptr})
            if (!impl.bos && c && c->contains("bos_token_id") && (*c)["bos_token_id"].is_number_integer())
                impl.bos = (*c)["bos_token_id"].get<int32_t>();
    }
    std::vector<int32_t> eos;
    if (const json* e = field("eos_token"))
        if (auto t = tokenText(*e))
            if (auto id = lookup(impl, *t))
                eos.push_back(*id);
    for (const auto* c : {gen ? &*gen : nullptr, cfg ? &*cfg : nullptr})
        if (c && c->contains("eos_token_id"))
            addIds((*c)["eos_token_id"], eos);
    if (!eos.empty())
        impl.eos = eos;
}

std::vector<std::pair<std::string, std::string>> parseMerges(const std::string& text, const std::string& path)
{
    std::vector<std::pair<std::string, std::string>> merges;
    std::istringstream in(text);
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0)
            continue;
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            throw InputError(path, "line " + std::to_string(n) + " is not two tokens separated by a space");
        merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    return merges;
}

} // namespace

std::string FileSource::path(const std::string& name) const
{
    if (folder.empty())
        return name;
    return folder.back() == '/' ? folder + name : folder + "/" + name;
}

std::unique_ptr<Tokenizer::Impl> loadTokenizerJson(const std::string& text, const std::string& path)
{
    json root = parseJson(text, path);
    if (!root.is_object())
        throw InputError(path, "is not a JSON object");
    auto mit = root.find("model");
    if (mit == root.end() || !mit->is_object())
        throw InputError(path, "has no \"model\" object");
    auto impl = std::make_unique<Tokenizer::Impl>();
    impl->source = path;
    std::string type = modelType(*mit, path);
    if (type == "BPE")
        impl->model = makeBpeModel(*mit, path);
    else if (type == "Unigram" || type == "WordPiece" || type == "WordLevel")
        throw InputError(path, "model type '" + type + "' is not supported (Stowage reads BPE tokenizer.json files "
                               "and SentencePiece tokenizer.model files)");
    else
        throw InputError(path, "unknown model type '" + type + "'");
    impl->normalizer = makeNormalizer(root.value("normalizer", json()), path);
    impl->preTokenizer = makePreTokenizer(root.value("pre_tokenizer", json()), path);
    impl->decoder = makeDecoder(root.value("decoder", json()), path);
    const json& added = root.value("added_tokens", json::array());
    if (!added.is_array())
        throw InputError(path, "\"added_tokens\" is not a list");
    for (const auto& t : added) {
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0)
            throw InputError(path, "an added token has no non-negative integer \"id\"");
        impl->added.add(addedToken(t, t["id"].get<int32_t>(), path));
    }
    impl->added.build(impl->normalizer.get());
    return impl;
}

std::unique_ptr<Tokenizer::Impl> loadFromSource(const FileSource& src)
{
    std::unique_ptr<Tokenizer::Impl> impl;
    auto tc = readJson(src, "tokenizer_config.json");
    auto stm = readJson(src, "special_tokens_map.json");
    if (auto text = src.get("tokenizer.json")) {
        impl = loadTokenizerJson(*text, src.path("tokenizer.json"));
    } else if (auto vocabText = src.get("vocab.json")) {
        auto mergesText = src.get("merges.txt");
        if (!mergesText)
            throw InputError(src.path("merges.txt"), "missing (vocab.json needs merges.txt beside it)");
        json v = parseJson(*vocabText, src.path("vocab.json"));
        if (!v.is_object())
            throw InputError(src.path("vocab.json"), "is not an object of token -> id");
        std::unordered_map<std::string, int32_t> vocab;
        vocab.reserve(v.size());
        for (auto it = v.begin(); it != v.end(); ++it) {
            if (!it.value().is_number_integer())
                throw InputError(src.path("vocab.json"), "id of '" + it.key() + "' is not an integer");
            vocab[it.key()] = it.value().get<int32_t>();
        }
        impl = std::make_unique<Tokenizer::Impl>();
        impl->source = src.path("vocab.json");
        impl->model = makeBpe(std::move(vocab), parseMerges(*mergesText, src.path("merges.txt")), BpeOptions{},
                              src.path("merges.txt"));
        bool prefixSpace = tc && tc->contains("add_prefix_space") && (*tc)["add_prefix_space"].is_boolean() &&
                           (*tc)["add_prefix_space"].get<bool>();
        impl->preTokenizer = makeByteLevelPreTokenizer(prefixSpace);
        impl->decoder = makeByteLevelDecoder();
        addConfigTokens(*impl, tc, stm, readJson(src, "added_tokens.json"), src.path("tokenizer_config.json"));
        impl->added.build(nullptr);
    } else if (auto model = src.get("tokenizer.model")) {
        impl = std::make_unique<Tokenizer::Impl>();
        impl->source = src.path("tokenizer.model");
        loadSentencePiece(*model, impl->source, *impl);
    } else {
        throw InputError(src.folder, "no tokenizer: expected tokenizer.json, vocab.json + merges.txt, or tokenizer.model");
    }
    applySpecialConfig(*impl, tc, stm, src);
    return impl;
}

} // namespace stowage::tok
