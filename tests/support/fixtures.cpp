#include "fixtures.h"

#include "stowage/safetensorswriter.h"

#include <QFile>
#include <QProcess>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

namespace fixtures {

using stowage::DType;

std::vector<Tensor> gpt2Tensors(const Gpt2Shape& s, DType dt, const std::string& prefix, bool maskBuffers)
{
    std::vector<Tensor> t;
    t.push_back({prefix + "wte.weight", dt, {s.vocab, s.embd}});
    t.push_back({prefix + "wpe.weight", dt, {s.positions, s.embd}});
    for (int64_t i = 0; i < s.layers; ++i) {
        std::string p = prefix + "h." + std::to_string(i) + ".";
        t.push_back({p + "ln_1.weight", dt, {s.embd}});
        t.push_back({p + "ln_1.bias", dt, {s.embd}});
        if (maskBuffers) {
            t.push_back({p + "attn.bias", DType::F32, {1, 1, s.positions, s.positions}});
            t.push_back({p + "attn.masked_bias", DType::F32, {}});
        }
        t.push_back({p + "attn.c_attn.weight", dt, {s.embd, 3 * s.embd}});
        t.push_back({p + "attn.c_attn.bias", dt, {3 * s.embd}});
        t.push_back({p + "attn.c_proj.weight", dt, {s.embd, s.embd}});
        t.push_back({p + "attn.c_proj.bias", dt, {s.embd}});
        t.push_back({p + "ln_2.weight", dt, {s.embd}});
        t.push_back({p + "ln_2.bias", dt, {s.embd}});
        t.push_back({p + "mlp.c_fc.weight", dt, {s.embd, 4 * s.embd}});
        t.push_back({p + "mlp.c_fc.bias", dt, {4 * s.embd}});
        t.push_back({p + "mlp.c_proj.weight", dt, {4 * s.embd, s.embd}});
        t.push_back({p + "mlp.c_proj.bias", dt, {s.embd}});
    }
    t.push_back({prefix + "ln_f.weight", dt, {s.embd}});
    t.push_back({prefix + "ln_f.bias", dt, {s.embd}});
    return t;
}

nlohmann::json gpt2Config(const Gpt2Shape& s, DType dt)
{
    return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", s.vocab},
            {"n_positions", s.positions}, {"n_embd", s.embd}, {"n_layer", s.layers},
            {"n_head", s.embd % 12 == 0 ? 12 : s.embd % 4 == 0 ? 4 : 1},
            {"activation_function", "gelu_new"}, {"torch_dtype", stowage::dtypeTorchName(dt)}};
}

std::vector<Tensor> llamaTensors(const LlamaShape& s, DType dt)
{
    const int64_t headDim = s.hidden / s.heads;
    std::vector<Tensor> t;
    t.push_back({"model.embed_tokens.weight", dt, {s.vocab, s.hidden}});
    for (int64_t i = 0; i < s.layers; ++i) {
        std::string p = "model.layers." + std::to_string(i) + ".";
        t.push_back({p + "input_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "mlp.down_proj.weight", dt, {s.hidden, s.intermediate}});
        t.push_back({p + "mlp.gate_proj.weight", dt, {s.intermediate, s.hidden}});
        t.push_back({p + "mlp.up_proj.weight", dt, {s.intermediate, s.hidden}});
        t.push_back({p + "post_attention_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "self_attn.k_proj.weight", dt, {s.kvHeads * headDim, s.hidden}});
        t.push_back({p + "self_attn.o_proj.weight", dt, {s.hidden, s.heads * headDim}});
        t.push_back({p + "self_attn.q_proj.weight", dt, {s.heads * headDim, s.hidden}});
        t.push_back({p + "self_attn.v_proj.weight", dt, {s.kvHeads * headDim, s.hidden}});
    }
    t.push_back({"model.norm.weight", dt, {s.hidden}});
    if (!s.tied)
        t.push_back({"lm_head.weight", dt, {s.vocab, s.hidden}});
    return t;
}

nlohmann::json llamaConfig(const LlamaShape& s, DType dt)
{
    return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", s.vocab},
            {"hidden_size", s.hidden}, {"intermediate_size", s.intermediate}, {"num_hidden_layers", s.layers},
            {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kvHeads}, {"tie_word_embeddings", s.tied},
            {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"torch_dtype", stowage::dtypeTorchName(dt)}};
}

std::vector<Tensor> phi3Tensors(const Phi3Shape& s, DType dt)
{
    // The names a Phi3ForCausalLM save holds (microsoft/Phi-3-mini-4k-instruct's index).
    const int64_t headDim = s.hidden / s.heads;
    std::vector<Tensor> t;
    t.push_back({"model.embed_tokens.weight", dt, {s.vocab, s.hidden}});
    for (int64_t i = 0; i < s.layers; ++i) {
        std::string p = "model.layers." + std::to_string(i) + ".";
        t.push_back({p + "input_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "mlp.down_proj.weight", dt, {s.hidden, s.intermediate}});
        t.push_back({p + "mlp.gate_up_proj.weight", dt, {2 * s.intermediate, s.hidden}});
        t.push_back({p + "post_attention_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "self_attn.o_proj.weight", dt, {s.hidden, s.heads * headDim}});
        t.push_back({p + "self_attn.qkv_proj.weight", dt, {(s.heads + 2 * s.kvHeads) * headDim, s.hidden}});
    }
    t.push_back({"model.norm.weight", dt, {s.hidden}});
    if (!s.tied)
        t.push_back({"lm_head.weight", dt, {s.vocab, s.hidden}});
    return t;
}

nlohmann::json phi3Config(const Phi3Shape& s, DType dt)
{
    nlohmann::json c{{"architectures", {"Phi3ForCausalLM"}}, {"model_type", "phi3"}, {"vocab_size", s.vocab},
                     {"hidden_size", s.hidden}, {"intermediate_size", s.intermediate},
                     {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
                     {"num_key_value_heads", s.kvHeads}, {"tie_word_embeddings", s.tied}, {"rms_norm_eps", 1e-5},
                     {"rope_theta", 10000.0}, {"max_position_embeddings", s.longrope ? 131072 : 4096},
                     {"original_max_position_embeddings", 4096}, {"torch_dtype", stowage::dtypeTorchName(dt)}};
    if (s.partialRotary != 1.0)
        c["partial_rotary_factor"] = s.partialRotary;
    if (s.longrope) {
        const auto pairs = int64_t(double(s.hidden / s.heads) * s.partialRotary) / 2;
        c["rope_scaling"] = {{"type", "longrope"},
                             {"short_factor", std::vector<double>(size_t(pairs), 1.0)},
                             {"long_factor", std::vector<double>(size_t(pairs), 2.0)}};
    }
    return c;
}

void writeSafetensorsFile(const std::string& path, const std::vector<Tensor>& tensors, bool sparse)
{
    std::vector<stowage::TensorBlob> blobs;
    uint64_t dataBytes = 0;
    uint32_t state = 12345;
    for (const auto& t : tensors) {
        stowage::TensorBlob b{t.name, t.dtype, t.shape, {}};
        uint64_t n = 1;
        for (auto d : t.shape)
            n *= static_cast<uint64_t>(d);
        uint64_t bytes = n * static_cast<uint64_t>(stowage::dtypeSize(t.dtype));
        dataBytes += bytes;
        if (!sparse) {
            b.bytes.resize(bytes);
            for (auto& x : b.bytes) {
                state = state * 1664525u + 1013904223u;
                x = static_cast<uint8_t>(state >> 24);
            }
        } else {
            b.bytes.resize(bytes); // only used for its size below
        }
        blobs.push_back(std::move(b));
    }
    if (!sparse) {
        stowage::writeSafetensors(path, blobs);
        return;
    }
    auto header = stowage::safetensorsHeader(blobs, {});
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        throw std::runtime_error("cannot write " + path);
    std::fwrite(header.data(), 1, header.size(), f);
    std::fclose(f);
    if (::truncate(path.c_str(), static_cast<off_t>(header.size() + dataBytes)) != 0)
        throw std::runtime_error("cannot extend " + path);
}

namespace {
uint16_t halfBits(float f, DType dt)
{
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (dt == DType::BF16)
        return uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16); // round to nearest even
    // float16, for the small normal values fixtures use
    uint32_t sign = (b >> 16) & 0x8000;
    int32_t exp = int32_t((b >> 23) & 0xFF) - 127 + 15;
    uint32_t mant = b & 0x7FFFFF;
    if (exp <= 0)
        return uint16_t(sign);
    if (exp >= 31)
        return uint16_t(sign | 0x7C00);
    return uint16_t(sign | uint32_t(exp) << 10 | ((mant + 0x1000) >> 13));
}
} // namespace

void writeRandomSafetensors(const std::string& path, const std::vector<Tensor>& tensors, uint32_t seed, float scale)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<stowage::TensorBlob> blobs;
    for (const auto& t : tensors) {
        stowage::TensorBlob b{t.name, t.dtype, t.shape, {}};
        uint64_t n = 1;
        for (auto d : t.shape)
            n *= uint64_t(d);
        b.bytes.resize(n * uint64_t(stowage::dtypeSize(t.dtype)));
        for (uint64_t i = 0; i < n; ++i) {
            float v = dist(rng);
            if (t.dtype == DType::F32) {
                std::memcpy(b.bytes.data() + 4 * i, &v, 4);
            } else if (t.dtype == DType::BF16 || t.dtype == DType::F16) {
                uint16_t h = halfBits(v, t.dtype);
                std::memcpy(b.bytes.data() + 2 * i, &h, 2);
            } else {
                b.bytes[i * uint64_t(stowage::dtypeSize(t.dtype))] = uint8_t(rng());
            }
        }
        blobs.push_back(std::move(b));
    }
    stowage::writeSafetensors(path, blobs);
}

void writeTinyGpt2(const std::string& dir, DType dt, int64_t layers, uint32_t seed)
{
    Gpt2Shape s{97, 32, 16, layers};
    writeRandomSafetensors(dir + "/model.safetensors", gpt2Tensors(s, dt), seed);
    nlohmann::json c = gpt2Config(s, dt);
    c["n_head"] = 4;
    writeJson(dir + "/config.json", c);
}

void writeSharded(const std::string& dir, const std::vector<Tensor>& tensors, int shards, bool sparse, bool writeShards)
{
    nlohmann::ordered_json index;
    uint64_t total = 0;
    auto& wm = index["weight_map"] = nlohmann::ordered_json::object();
    size_t per = (tensors.size() + static_cast<size_t>(shards) - 1) / static_cast<size_t>(shards);
    for (int s = 0; s < shards; ++s) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
        std::vector<Tensor> part(tensors.begin() + static_cast<long>(std::min(tensors.size(), s * per)),
                                 tensors.begin() + static_cast<long>(std::min(tensors.size(), (s + 1) * per)));
        for (const auto& t : part) {
            wm[t.name] = name;
            uint64_t n = 1;
            for (auto d : t.shape)
                n *= static_cast<uint64_t>(d);
            total += n * static_cast<uint64_t>(stowage::dtypeSize(t.dtype));
        }
        if (writeShards)
            writeSafetensorsFile(dir + "/" + name, part, sparse);
    }
    nlohmann::ordered_json out;
    out["metadata"] = {{"total_size", total}};
    out["weight_map"] = wm;
    std::ofstream(dir + "/model.safetensors.index.json") << out.dump(2);
}

void writeJson(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

void writeBytes(const std::string& path, const QByteArray& bytes)
{
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::WriteOnly))
        throw std::runtime_error("cannot write " + path);
    f.write(bytes);
}

CliResult runCli(const QStringList& args, int timeoutMs)
{
    QProcess p;
    p.start(QStringLiteral(STOWAGE_CLI), args);
    CliResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.exitCode = -2;
    } else {
        r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -3;
    }
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

} // namespace fixtures

namespace fixtures {

QString badInputProblem(const CliResult& r, const QString& message)
{
    if (r.exitCode != 2)
        return QString("exit code %1, not 2; stderr: %2").arg(r.exitCode).arg(QString(r.err));
    if (!QString(r.err).contains(message))
        return QString("stderr does not say '%1': %2").arg(message, QString(r.err));
    if (r.err.count('\n') != 1)
        return QString("stderr is not one line: %1").arg(QString(r.err));
    if (!r.out.isEmpty())
        return QString("stdout is not empty: %1").arg(QString(r.out));
    return {};
}

std::vector<std::string> keysOf(const nlohmann::ordered_json& j)
{
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it)
        keys.push_back(it.key());
    return keys;
}

void writeDemoWithChatTemplate(const std::string& dir, const std::string& chatTemplate)
{
    namespace fs = std::filesystem;
    const fs::path demo = fs::path(STOWAGE_TEST_SCRIPTS) / ".." / ".." / "resources" / "demo";
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(demo)) {
        const fs::path to = fs::path(dir) / e.path().filename();
        if (e.path().filename() == "tokenizer_config.json" || fs::exists(to))
            continue;
        fs::copy_file(e.path(), to); // a copy: the checkpoint refuses shards that lead outside its folder
    }
    std::ifstream in(demo / "tokenizer_config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["chat_template"] = chatTemplate;
    writeJson((fs::path(dir) / "tokenizer_config.json").string(), cfg);
}

} // namespace fixtures
