// vocab.json + merges.txt (GPT-2 byte-level BPE, engine/tokenizer/jsonload.cpp
// and bpe.cpp), with the tokenizer_config.json that adds tokens and names
// BOS/EOS. The input is
//   vocab.json <sep> merges.txt <sep> text <sep> tokenizer_config.json <sep> ids
// written to a scratch folder and loaded as Tokenizer::fromFolder does; an
// empty tokenizer_config.json part means no such file.
#include "common.h"
#include "tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const auto parts = fuzz::split(data, size, 5);
    const auto& scratch = fuzz::Scratch::get();
    scratch.write("vocab.json", parts[0]);
    scratch.write("merges.txt", parts[1]);
    if (parts[3].empty())
        scratch.remove("tokenizer_config.json");
    else
        scratch.write("tokenizer_config.json", parts[3]);
    try {
        auto tok = stowage::Tokenizer::fromFolder(scratch.dir());
        fuzz::exercise(*tok, parts[2], fuzz::idsFrom(parts[4]));
    } catch (const stowage::InputError&) {
    }
    return 0;
}
