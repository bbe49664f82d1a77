#pragma once
// Chat templates: the Jinja `chat_template` of tokenizer_config.json (or
// chat_template.jinja beside it), rendered as transformers 5.6
// apply_chat_template renders it (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, `{% generation %}`,
// transformers' own `tojson`, `raise_exception` and `strftime_now`, the
// tokenizer's named special tokens as variables). Only the subset of Jinja
// that real chat templates use is implemented (docs/cli.md lists it); anything
// else is an InputError naming the file and the construct, never a crash.
// Rendering is bounded (steps, output size, call depth). No Qt, no LibTorch.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace stowage {

class ChatTemplate {
public:
    // Parses `source`; `path` names it in every error. Throws InputError.
    ChatTemplate(const std::string& source, const std::string& path);
    ~ChatTemplate();
    ChatTemplate(const ChatTemplate&);
    ChatTemplate& operator=(const ChatTemplate&);

    // The folder's template, as transformers 5.6 picks it: chat_template.jinja
    // when present, else tokenizer_config.json's "chat_template" (a string,
    // or a list of {name, template} of which "default" is used), with the
    // special tokens of tokenizer_config.json (bos_token, eos_token, every
    // other "*_token" key; AddedToken objects give their content), then of
    // special_tokens_map.json where the config lacks them. nullopt when the
    // folder has no template; InputError when a file is malformed.
    static std::optional<ChatTemplate> fromFolder(const std::string& folder);
    // The template fromFolder would use, unparsed, and the file (and key) it
    // came from: what a GGUF export carries as tokenizer.chat_template.
    struct Source {
        std::string text, path;
    };
    static std::optional<Source> sourceInFolder(const std::string& folder);

    // The template with `context` as its variables (a JSON object); the
    // special tokens read by fromFolder come first, `context` overrides them.
    // Throws InputError (raise_exception, an undefined attribute, a type
    // error, a limit passed) naming the file and line.
    std::string render(const nlohmann::ordered_json& context) const;

    // apply_chat_template(messages, add_generation_prompt=...,
    // tokenize=False): `messages` is a list of {role, content}; `tools` and
    // `documents` are none.
    std::string apply(const nlohmann::ordered_json& messages, bool addGenerationPrompt) const;
    // One user message with the generation prompt: what `--chat` sends.
    std::string applyToPrompt(const std::string& userText) const;

    const std::string& path() const;
    const nlohmann::ordered_json& specialTokens() const;

    struct Impl;

private:
    std::shared_ptr<const Impl> m_impl;
    nlohmann::ordered_json m_specialTokens = nlohmann::ordered_json::object();
};

} // namespace stowage
