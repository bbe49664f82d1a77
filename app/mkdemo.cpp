// Writes the tiny demo checkpoint the build ships until a trained one exists:
// a GPT-2-shaped model in the exact Hugging Face layout, seeded random weights.
#include "stowage/safetensorswriter.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace stowage;

namespace {

TensorBlob randomTensor(const std::string& name, std::vector<int64_t> shape, std::mt19937& rng, float std, float mean = 0)
{
    TensorBlob t{name, DType::F32, shape, {}};
    size_t n = 1;
    for (auto d : shape)
        n *= static_cast<size_t>(d);
    std::normal_distribution<float> dist(mean, std);
    t.bytes.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
        float v = std > 0 ? dist(rng) : mean;
        std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
    return t;
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
    std::mt19937 rng(1234);
    std::vector<TensorBlob> ts;
    ts.push_back(randomTensor("transformer.wte.weight", {vocab, embd}, rng, 0.02f));
    ts.push_back(randomTensor("transformer.wpe.weight", {pos, embd}, rng, 0.01f));
    for (int64_t i = 0; i < layers; ++i) {
        std::string p = "transformer.h." + std::to_string(i) + ".";
        ts.push_back(randomTensor(p + "ln_1.weight", {embd}, rng, 0, 1));
        ts.push_back(randomTensor(p + "ln_1.bias", {embd}, rng, 0));
        ts.push_back(randomTensor(p + "attn.c_attn.weight", {embd, 3 * embd}, rng, 0.02f));
        ts.push_back(randomTensor(p + "attn.c_attn.bias", {3 * embd}, rng, 0));
        ts.push_back(randomTensor(p + "attn.c_proj.weight", {embd, embd}, rng, 0.02f));
        ts.push_back(randomTensor(p + "attn.c_proj.bias", {embd}, rng, 0));
        ts.push_back(randomTensor(p + "ln_2.weight", {embd}, rng, 0, 1));
        ts.push_back(randomTensor(p + "ln_2.bias", {embd}, rng, 0));
        ts.push_back(randomTensor(p + "mlp.c_fc.weight", {embd, 4 * embd}, rng, 0.02f));
        ts.push_back(randomTensor(p + "mlp.c_fc.bias", {4 * embd}, rng, 0));
        ts.push_back(randomTensor(p + "mlp.c_proj.weight", {4 * embd, embd}, rng, 0.02f));
        ts.push_back(randomTensor(p + "mlp.c_proj.bias", {embd}, rng, 0));
    }
    ts.push_back(randomTensor("transformer.ln_f.weight", {embd}, rng, 0, 1));
    ts.push_back(randomTensor("transformer.ln_f.bias", {embd}, rng, 0));
    writeSafetensors((dir / "model.safetensors").string(), ts, {{"format", "pt"}});
    std::ofstream(dir / "config.json") << R"({
  "architectures": ["GPT2LMHeadModel"],
  "model_type": "gpt2",
  "vocab_size": )" << vocab << R"(,
  "n_positions": 128,
  "n_embd": )" << embd << R"(,
  "n_layer": )" << layers << R"(,
  "n_head": 4,
  "activation_function": "gelu_new",
  "layer_norm_epsilon": 1e-05,
  "bos_token_id": 0,
  "eos_token_id": 0,
  "tie_word_embeddings": true,
  "torch_dtype": "float32"
}
)";
    std::ofstream(dir / "generation_config.json") << "{\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 0\n}\n";
    return 0;
}
