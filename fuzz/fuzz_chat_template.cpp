// Chat templates (engine/tokenizer/chattemplate*.cpp: lexer, parser,
// evaluator): the input is a Jinja template, then optionally the JSON object
// of its variables (kSeparator between). Parsed; rendered with that object
// (when it is one) and as --chat renders it (one user message with the
// generation prompt, special tokens as tokenizer_config.json gives them).
// Anything but InputError is a crash; the evaluator's bounds (steps, output,
// call depth, nesting) keep every input within libFuzzer's time and memory.
#include "common.h"

#include "stowage/chattemplate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const auto parts = fuzz::split(data, size, 2);
    try {
        stowage::ChatTemplate t(parts[0], "chat_template.jinja");
        const auto vars = nlohmann::ordered_json::parse(parts[1], nullptr, false);
        if (vars.is_object()) {
            try {
                (void)t.render(vars);
            } catch (const stowage::InputError&) {
            }
        }
        (void)t.applyToPrompt("Hello <s> wörld\n");
    } catch (const stowage::InputError&) {
    }
    return 0;
}
