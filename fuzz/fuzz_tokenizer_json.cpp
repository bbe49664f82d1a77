// tokenizer.json (engine/tokenizer/jsonload.cpp and the normalizers,
// pre-tokenizers, BPE model and decoders it builds): the input is
//   tokenizer.json <separator> text to encode <separator> extra ids
// (common.h's kSeparator; the ids are little-endian int32s). A tokenizer
// that loads encodes the text and decodes the ids (tokenizer_common.h).
#include "common.h"
#include "tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const auto parts = fuzz::split(data, size, 3);
    try {
        auto tok = stowage::Tokenizer::fromTokenizerJson(parts[0], "tokenizer.json");
        fuzz::exercise(*tok, parts[1], fuzz::idsFrom(parts[2]));
    } catch (const stowage::InputError&) {
    }
    return 0;
}
