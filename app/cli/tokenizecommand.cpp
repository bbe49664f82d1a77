// stowage-cli tokenize: text <-> ids with the checkpoint's tokenizer, no
// special tokens added (special tokens written in the text are matched).
// --chat first puts the text through the chat template as one user message.
#include "args.h"
#include "commands.h"

#include "stowage/chattemplate.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>

namespace stowage::cli {

int tokenizeCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"--text", "--ids"}, {"--json", "--chat"});
    const auto text = a.value("--text");
    const auto ids = a.value("--ids");
    if (text.has_value() == ids.has_value())
        throw InputError("", "tokenize needs exactly one of --text TEXT or --ids 1,2,3");
    // Tokenizing reads no weights: a folder holding only config.json and the
    // tokenizer files (before a download) works too.
    const std::string path = checkpointPath(a);
    const bool chat = a.flag("--chat");
    if (chat && !text)
        throw InputError("--chat", "applies the chat template to --text");
    std::unique_ptr<Tokenizer> tok;
    std::string folder = path;
    try {
        Checkpoint ck = Checkpoint::open(path);
        tok = Tokenizer::load(ck);
        folder = ck.folder();
    } catch (const InputError&) {
        std::error_code ec;
        if (!std::filesystem::is_directory(path, ec))
            throw;
        tok = Tokenizer::fromFolder(path); // its own error names the tokenizer file
    }
    nlohmann::ordered_json j;
    if (text) {
        std::string input = *text;
        if (chat) {
            auto t = ChatTemplate::fromFolder(folder);
            if (!t)
                throw InputError(folder, "no chat template (neither chat_template.jinja nor \"chat_template\" in "
                                         "tokenizer_config.json)");
            input = t->applyToPrompt(*text);
        }
        std::vector<int32_t> out = tok->encode(input);
        if (a.flag("--json")) {
            if (chat)
                j["text"] = input;
            j["ids"] = out;
            std::cout << j.dump() << '\n';
            return 0;
        }
        for (int32_t id : out)
            std::printf("%d\t%s\n", id, tok->idToToken(id).value_or("?").c_str());
        return 0;
    }
    std::vector<int32_t> in = parseIds(*ids, "--ids");
    for (int32_t id : in)
        if (id >= tok->vocabSize())
            throw InputError("--ids", "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                          std::to_string(tok->vocabSize() - 1) + ")");
    std::string decoded = tok->decode(in);
    if (a.flag("--json")) {
        j["text"] = decoded;
        std::cout << j.dump() << '\n';
    } else {
        std::cout << decoded << '\n';
    }
    return 0;
}

} // namespace stowage::cli
