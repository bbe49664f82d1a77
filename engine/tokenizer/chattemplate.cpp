// Chat templates: a lexer, a parser into an AST and an evaluator over JSON
// values for the subset of Jinja2 that chat templates use, with jinja2's
// whitespace rules (trim_blocks, lstrip_blocks, "-" and "+" markers, one
// trailing newline dropped) and Python's semantics for the values (truth,
// `+`, comparisons, str(), slicing by code point, string methods). What is not
// implemented is refused by name when the template is parsed (an unknown tag,
// filter or test) or when it is rendered (a method, an operand type).
//
// This file holds the public entry points (ChatTemplate: reading a model
// folder's template and special tokens, rendering); the stages live in
// chattemplate_text.cpp (UTF-8 and Python formatting), chattemplate_lexer.cpp,
// chattemplate_parser.cpp and the Renderer's chattemplate_values.cpp,
// chattemplate_render.cpp, chattemplate_methods.cpp and chattemplate_filters.cpp,
// sharing chattemplate_internal.h.
#include "stowage/chattemplate.h"

#include "chattemplate_internal.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <filesystem>

namespace stowage {

namespace {

using jinja::J;

J readJsonFile(const std::string& path)
{
    std::string text = readTextFile(path);
    try {
        return J::parse(text);
    } catch (const J::exception& e) {
        std::string what = e.what();
        auto colon = what.find("]: ");
        throw InputError(path, "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon + 3)) + ")");
    }
}

// A special token's text: a string, or an AddedToken object's content.
std::optional<std::string> tokenText(const J& v)
{
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

void addSpecialTokens(const J& cfg, J& out)
{
    if (!cfg.is_object())
        return;
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
        const std::string& k = it.key();
        if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0 && !out.contains(k))
            if (auto t = tokenText(it.value()))
                out[k] = *t;
    }
    auto extra = cfg.find("extra_special_tokens");
    if (extra != cfg.end() && extra->is_object())
        for (auto it = extra->begin(); it != extra->end(); ++it)
            if (!out.contains(it.key()))
                if (auto t = tokenText(it.value()))
                    out[it.key()] = *t;
}

} // namespace

ChatTemplate::ChatTemplate(const std::string& source, const std::string& path)
{
    auto impl = std::make_shared<Impl>();
    impl->path = path;
    impl->body = jinja::parse(jinja::lex(source, path), path);
    m_impl = std::move(impl);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

namespace {

// The folder's template source, as transformers 5.6 picks it (fromFolder);
// `cfg` is its tokenizer_config.json (an empty object when absent).
std::optional<ChatTemplate::Source> sourceIn(const std::string& folder, const J& cfg)
{
    namespace fs = std::filesystem;
    const std::string cfgPath = (fs::path(folder) / "tokenizer_config.json").string();
    const std::string jinjaPath = (fs::path(folder) / "chat_template.jinja").string();
    std::error_code ec;
    if (fs::is_regular_file(jinjaPath, ec))
        return ChatTemplate::Source{readTextFile(jinjaPath), jinjaPath};
    if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null())
        return std::nullopt;
    const J& ct = cfg["chat_template"];
    if (ct.is_string())
        return ChatTemplate::Source{ct.get<std::string>(), cfgPath + " (chat_template)"};
    if (!ct.is_array())
        throw InputError(cfgPath, "chat_template is neither a string nor a list of {name, template}");
    std::optional<ChatTemplate::Source> found;
    for (const auto& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
            !e["template"].is_string())
            throw InputError(cfgPath, "chat_template: a list entry is not {\"name\": ..., \"template\": ...}");
        if (e["name"] == "default")
            found = ChatTemplate::Source{e["template"].get<std::string>(), cfgPath + " (chat_template \"default\")"};
    }
    if (!found)
        throw InputError(cfgPath, "chat_template lists several templates and none is named \"default\"");
    return found;
}

J tokenizerConfig(const std::string& folder)
{
    namespace fs = std::filesystem;
    const std::string cfgPath = (fs::path(folder) / "tokenizer_config.json").string();
    std::error_code ec;
    return fs::is_regular_file(cfgPath, ec) ? readJsonFile(cfgPath) : J::object();
}

} // namespace

std::optional<ChatTemplate::Source> ChatTemplate::sourceInFolder(const std::string& folder)
{
    return sourceIn(folder, tokenizerConfig(folder));
}

std::optional<ChatTemplate> ChatTemplate::fromFolder(const std::string& folder)
{
    namespace fs = std::filesystem;
    const J cfg = tokenizerConfig(folder);
    const auto source = sourceIn(folder, cfg);
    if (!source)
        return std::nullopt;
    std::optional<ChatTemplate> t;
    t.emplace(source->text, source->path);
    J tokens = J::object();
    addSpecialTokens(cfg, tokens);
    std::error_code ec;
    const std::string mapPath = (fs::path(folder) / "special_tokens_map.json").string();
    if (fs::is_regular_file(mapPath, ec))
        addSpecialTokens(readJsonFile(mapPath), tokens);
    t->m_specialTokens = std::move(tokens);
    return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const
{
    J ctx = m_specialTokens;
    if (!context.is_null() && !context.is_object())
        throw InputError(m_impl->path, "the template's variables are not a JSON object");
    if (context.is_object())
        for (auto it = context.begin(); it != context.end(); ++it)
            ctx[it.key()] = it.value();
    return jinja::Renderer(*m_impl, ctx).run();
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool addGenerationPrompt) const
{
    J ctx = J::object();
    ctx["messages"] = messages;
    ctx["tools"] = nullptr;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = addGenerationPrompt;
    return render(ctx);
}

std::string ChatTemplate::applyToPrompt(const std::string& userText) const
{
    J messages = J::array();
    messages.push_back(J{{"role", "user"}, {"content", userText}});
    return apply(messages, true);
}

const std::string& ChatTemplate::path() const { return m_impl->path; }
const nlohmann::ordered_json& ChatTemplate::specialTokens() const { return m_specialTokens; }

} // namespace stowage
