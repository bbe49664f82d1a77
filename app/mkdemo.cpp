// Writes a GPT-2-shaped checkpoint with seeded random weights in the exact
// Hugging Face layout, for checks on machines without the test fixtures (a GPU
// box: tests/gpu/device_check.sh); the demo the app ships is resources/demo.
#include "stowage/families.h"
#include "stowage/safetensorswriter.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <algorithm>

using namespace stowage;

namespace {

// Norm weights 1, biases 0, everything else N(0, 0.02), as GPT-2 initialises.
TensorBlob randomTensor(const SavedTensor& spec, std::mt19937& rng)
{
    auto endsWith = [&](const char* suffix) {
        const std::string sfx = suffix;
        return spec.name.size() >= sfx.size() && spec.name.compare(spec.name.size() - sfx.size(), sfx.size(), sfx) == 0;
    };
    const bool bias = endsWith(".bias"), norm = !bias && spec.shape.size() == 1;
    TensorBlob t{spec.name, DType::F32, spec.shape, {}};
    size_t n = 1;
    for (auto d : spec.shape)
        n *= static_cast<size_t>(d);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    t.bytes.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
        float v = bias ? 0.0f : norm ? 1.0f : dist(rng);
        std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
    return t;
}

// UTF-8 of one code point.
std::string utf8(uint32_t cp)
{
    std::string o;
    if (cp < 0x80) {
        o += char(cp);
    } else if (cp < 0x800) {
        o += char(0xC0 | (cp >> 6));
        o += char(0x80 | (cp & 0x3F));
    } else {
        o += char(0xE0 | (cp >> 12));
        o += char(0x80 | ((cp >> 6) & 0x3F));
        o += char(0x80 | (cp & 0x3F));
    }
    return o;
}

// A byte-level BPE tokenizer.json with the 256 byte tokens in GPT-2's order
// and no merges, plus <|endoftext|> = 256: any text encodes, byte by byte.
void writeTokenizer(const std::filesystem::path& dir)
{
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b)
        bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b)
        bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b)
        bs.push_back(b);
    std::vector<uint32_t> cs(bs.begin(), bs.end());
    for (int b = 0, n = 0; b < 256; ++b)
        if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
            bs.push_back(b);
            cs.push_back(uint32_t(256 + n++));
        }
    std::ofstream out(dir / "tokenizer.json");
    out << R"({"version": "1.0", "truncation": null, "padding": null,
"added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true}],
"normalizer": null,
"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
"post_processor": null,
"decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
"model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
"fuse_unk": false, "byte_fallback": false, "vocab": {)";
    for (size_t i = 0; i < cs.size(); ++i) {
        std::string tok = utf8(cs[i]);
        std::string esc;
        for (char c : tok)
            esc += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
        out << (i ? ", " : "") << '"' << esc << "\": " << i;
    }
    out << R"(, "<|endoftext|>": 256}, "merges": []}}
)";
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2 && argc != 5) {
        std::fprintf(stderr, "usage: stowage-mkdemo FOLDER [LAYERS EMBD VOCAB]\n");
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    // Bigger shapes are for benchmarks on machines without the test fixtures (a GPU box).
    const int64_t layers = argc == 5 ? std::atoll(argv[2]) : 4, embd = argc == 5 ? std::atoll(argv[3]) : 64,
                  vocab = argc == 5 ? std::atoll(argv[4]) : 512, pos = 128;
    if (layers < 1 || embd < 4 || embd % 4 || vocab < 2) {
        std::fprintf(stderr, "stowage-mkdemo: LAYERS >= 1, EMBD a multiple of 4, VOCAB >= 2\n");
        return 2;
    }
    const std::string config = R"({
  "architectures": ["GPT2LMHeadModel"],
  "model_type": "gpt2",
  "vocab_size": )" + std::to_string(vocab) + R"(,
  "n_positions": )" + std::to_string(pos) + R"(,
  "n_embd": )" + std::to_string(embd) + R"(,
  "n_layer": )" + std::to_string(layers) + R"(,
  "n_head": 4,
  "activation_function": "gelu_new",
  "layer_norm_epsilon": 1e-05,
  "bos_token_id": 256,
  "eos_token_id": 256,
  "tie_word_embeddings": true,
  "torch_dtype": "float32"
}
)";
    std::ofstream(dir / "config.json") << config;
    // The tensors are the ones the engine's GPT-2 skeleton expects: one statement of the layout.
    std::mt19937 rng(1234);
    std::vector<TensorBlob> ts;
    for (const SavedTensor& spec : savedTensors(ModelConfig::parse(config, (dir / "config.json").string()), DType::F32))
        ts.push_back(randomTensor(spec, rng));
    writeSafetensors((dir / "model.safetensors").string(), ts, {{"format", "pt"}});
    std::ofstream(dir / "generation_config.json") << "{\n  \"bos_token_id\": 256,\n  \"eos_token_id\": 256\n}\n";
    writeTokenizer(dir);
    return 0;
}
