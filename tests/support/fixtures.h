#pragma once
// Test support: tiny checkpoints in the exact Hugging Face layout, written at
// test time, and a way to run stowage-cli.
#include "stowage/dtype.h"

#include <nlohmann/json.hpp>

#include <QByteArray>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <string>
#include <vector>

namespace fixtures {

struct Tensor {
    std::string name;
    stowage::DType dtype = stowage::DType::F32;
    std::vector<int64_t> shape;
};

struct Gpt2Shape {
    int64_t vocab = 50257, positions = 1024, embd = 768, layers = 6;
};
struct LlamaShape {
    int64_t vocab = 128256, hidden = 2048, intermediate = 8192, layers = 16, heads = 32, kvHeads = 8;
    bool tied = true;
};
// Phi-3 / Phi-4-mini (model_type phi3): fused qkv_proj and gate_up_proj.
// `partialRotary` and a longrope dict (short/long factors of rotary/2) make
// it Phi-4-mini-like; `tied` true omits lm_head.weight, as save_pretrained does.
struct Phi3Shape {
    int64_t vocab = 32064, hidden = 3072, intermediate = 8192, layers = 32, heads = 32, kvHeads = 32;
    bool tied = false;
    double partialRotary = 1.0;
    bool longrope = false;
};

// Tensor lists as transformers saves them. `prefix` is "transformer." for a
// GPT2LMHeadModel save and "" for a GPT2Model save; `maskBuffers` adds the
// attn.bias / attn.masked_bias buffers old GPT-2 checkpoints store.
std::vector<Tensor> gpt2Tensors(const Gpt2Shape& s, stowage::DType dt, const std::string& prefix = "transformer.",
                                bool maskBuffers = false);
nlohmann::json gpt2Config(const Gpt2Shape& s, stowage::DType dt);
std::vector<Tensor> llamaTensors(const LlamaShape& s, stowage::DType dt);
nlohmann::json llamaConfig(const LlamaShape& s, stowage::DType dt);
std::vector<Tensor> phi3Tensors(const Phi3Shape& s, stowage::DType dt);
nlohmann::json phi3Config(const Phi3Shape& s, stowage::DType dt);

// Data is deterministic pseudo-random bytes; with `sparse`, zeros written as a
// sparse file, so a 160 MB checkpoint costs nothing.
void writeSafetensorsFile(const std::string& path, const std::vector<Tensor>& tensors, bool sparse);
// Floating tensors filled with seeded normal values (std `scale`), for
// checkpoints that are actually run.
void writeRandomSafetensors(const std::string& path, const std::vector<Tensor>& tensors, uint32_t seed,
                            float scale = 0.2f);
// A runnable tiny GPT-2 checkpoint folder (config.json + model.safetensors).
void writeTinyGpt2(const std::string& dir, stowage::DType dt, int64_t layers = 3, uint32_t seed = 1);
// model-0000i-of-0000n.safetensors + model.safetensors.index.json; with
// `writeShards` false only the index (plan before download).
void writeSharded(const std::string& dir, const std::vector<Tensor>& tensors, int shards, bool sparse,
                  bool writeShards = true);
void writeJson(const std::string& path, const nlohmann::json& j);
void writeBytes(const std::string& path, const QByteArray& bytes);

struct CliResult {
    int exitCode = -1;
    QByteArray out, err;
};
CliResult runCli(const QStringList& args, int timeoutMs = 60000);
// What is wrong with `r` as the CLI's answer to bad input (exit 2, one line
// on stderr containing `message`, nothing on stdout); empty when all is right.
QString badInputProblem(const CliResult& r, const QString& message);
// The keys of a JSON object, in order.
std::vector<std::string> keysOf(const nlohmann::ordered_json& j);

// The bundled demo (resources/demo, a Llama whose tokenizer_config.json says
// add_bos_token and bos_token "<s>") copied into `dir`, its
// tokenizer_config.json given "chat_template": `chatTemplate`.
void writeDemoWithChatTemplate(const std::string& dir, const std::string& chatTemplate);

} // namespace fixtures
