// tokenizer.model (SentencePiece's ModelProto, read by our own protobuf
// reader: engine/tokenizer/protoreader.cpp, sentencepiece.cpp and
// spnormalizer.cpp). The input is
//   tokenizer.model <sep> text to encode <sep> extra ids
// written to a scratch folder and loaded as Tokenizer::fromFolder does.
#include "common.h"
#include "tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const auto parts = fuzz::split(data, size, 3);
    const auto& scratch = fuzz::Scratch::get();
    scratch.write("tokenizer.model", parts[0]);
    try {
        auto tok = stowage::Tokenizer::fromFolder(scratch.dir());
        fuzz::exercise(*tok, parts[1], fuzz::idsFrom(parts[2]));
    } catch (const stowage::InputError&) {
    }
    return 0;
}
