// stowage/gguf.h: a checkpoint written as GGUF for llama.cpp. The layout
// (header, metadata, tensor infos, aligned data) follows ggml's
// docs/gguf.md; names, metadata keys and the q/k permutation follow
// convert_hf_to_gguf.py's LlamaModel / Qwen2Model / Qwen3Model (see
// docs/deploy.md for the version read).
#include "stowage/gguf.h"

#include "ggufvocab.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>

namespace stowage {
namespace {

constexpr uint64_t kAlignment = 32; // general.alignment's default
// ggml_type of the stored types Stowage writes.
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBf16 = 30;
// GGUF metadata value types.
constexpr uint32_t kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9;

struct Family {
    std::string arch;
    bool permuteQk = false; // llama.cpp's llama runs rotary on adjacent pairs, HF on halves
};

std::optional<Family> familyFor(const std::string& modelType)
{
    if (modelType == "llama" || modelType == "mistral" || modelType == "mixtral")
        return Family{"llama", true}; // llama.cpp runs Mixtral as llama with experts
    if (modelType == "qwen2" || modelType == "qwen3")
        return Family{modelType, false};
    if (modelType == "qwen3_moe")
        return Family{"qwen3moe", false};
    return std::nullopt;
}

// One tensor as GGUF names and stores it.
struct OutTensor {
    std::string name;
    // One stored tensor, or a mixture of experts' per-expert matrices stacked
    // in expert order (ffn_gate_exps and the like: ggml's third dimension).
    std::vector<const TensorInfo*> sources;
    std::vector<uint64_t> ne; // ggml order: innermost first
    uint32_t type = kGgmlF32;
    uint64_t bytes = 0;
    uint64_t offset = 0;      // from the start of the data section
    int64_t permuteHeads = 0; // > 0: rows regrouped for interleaved rotary
};

struct GgufName {
    std::string name;
    int64_t expert = -1; // >= 0: this expert's slice of a stacked tensor
};

// HF parameter name -> GGUF tensor name; nullopt for a name llama.cpp does not load.
std::optional<GgufName> ggufName(std::string name, const std::string& arch)
{
    if (name.rfind("model.", 0) == 0)
        name = name.substr(6);
    static const std::map<std::string, std::string> top = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    if (auto it = top.find(name); it != top.end())
        return GgufName{it->second};
    // Experts one by one, as the Hub stores Mixtral (w1 gate, w2 down, w3 up)
    // and Qwen3-MoE.
    static const std::regex expert(
        R"(layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.weight)");
    std::smatch m;
    if (std::regex_match(name, m, expert)) {
        const std::string w = m[3].str();
        const char* part = w == "w1" || w == "gate_proj" ? "ffn_gate_exps" : w == "w3" || w == "up_proj" ? "ffn_up_exps"
                                                                                                         : "ffn_down_exps";
        return GgufName{"blk." + m[1].str() + "." + part + ".weight", std::stoll(m[2].str())};
    }
    static const std::regex layer(R"(layers\.(\d+)\.(.+)\.(weight|bias))");
    if (!std::regex_match(name, m, layer))
        return std::nullopt;
    static const std::map<std::string, std::string> parts = {
        {"input_layernorm", "attn_norm"},      {"post_attention_layernorm", "ffn_norm"},
        {"self_attn.q_proj", "attn_q"},        {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"},
        {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"},         {"self_attn.q_norm", "attn_q_norm"},
        {"self_attn.k_norm", "attn_k_norm"},   {"block_sparse_moe.gate", "ffn_gate_inp"},
        {"mlp.gate", "ffn_gate_inp"},
    };
    auto it = parts.find(m[2].str());
    const bool qkNorm = it != parts.end() && (it->second == "attn_q_norm" || it->second == "attn_k_norm");
    if (it == parts.end() || (qkNorm && arch != "qwen3" && arch != "qwen3moe"))
        return std::nullopt;
    return GgufName{"blk." + m[1].str() + "." + it->second + "." + m[3].str()};
}

// Appends little-endian GGUF values.
struct Writer {
    std::string out;
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v) { raw(&v, 8); }
    void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
    void str(const std::string& s)
    {
        u64(s.size());
        out += s;
    }
    void key(const std::string& k, uint32_t type)
    {
        str(k);
        u32(type);
    }
    void kvU32(const std::string& k, uint32_t v) { key(k, kU32), u32(v); }
    void kvF32(const std::string& k, float v) { key(k, kF32), raw(&v, 4); }
    void kvBool(const std::string& k, bool v)
    {
        key(k, kBool);
        out.push_back(v ? 1 : 0);
    }
    void kvStr(const std::string& k, const std::string& v) { key(k, kString), str(v); }
    void kvStrings(const std::string& k, const std::vector<std::string>& v)
    {
        key(k, kArray), u32(kString), u64(v.size());
        for (const auto& s : v)
            str(s);
    }
    void kvF32s(const std::string& k, const std::vector<float>& v)
    {
        key(k, kArray), u32(kF32), u64(v.size());
        raw(v.data(), v.size() * 4);
    }
    void kvI32s(const std::string& k, const std::vector<int32_t>& v)
    {
        key(k, kArray), u32(kI32), u64(v.size());
        raw(v.data(), v.size() * 4);
    }
};

float halfToFloat(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000 | (mant << 13);
    else if (exp != 0)
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    else if (mant == 0)
        bits = sign;
    else { // subnormal: normalise
        exp = 113;
        while (!(mant & 0x400)) {
            mant <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// The ggml type of a stored F32, F16 or BF16 tensor.
uint32_t ggmlType(DType t) { return t == DType::F32 ? kGgmlF32 : t == DType::F16 ? kGgmlF16 : kGgmlBf16; }

// Whether a tensor's GGUF bytes are its stored bytes (each expert's, in
// order, for a stack): written straight from the mapping.
bool storedAsIs(const OutTensor& t)
{
    const TensorInfo& src = *t.sources.front();
    return t.sources.size() > 1 || (t.permuteHeads == 0 && (t.type != kGgmlF32 || src.dtype == DType::F32));
}

// The bytes of a tensor that is widened (1-D F16/BF16 to F32) or permuted.
std::vector<uint8_t> convertedBytes(const Checkpoint& ck, const OutTensor& t)
{
    std::vector<uint8_t> out(t.bytes);
    const TensorInfo& src = *t.sources.front();
    const uint8_t* data = ck.data(src);
    if (t.type == kGgmlF32 && src.dtype != DType::F32) { // a 1-D F16/BF16 weight, widened
        for (uint64_t i = 0; i < src.numel(); ++i) {
            uint16_t h;
            std::memcpy(&h, data + 2 * i, 2);
            float f;
            if (src.dtype == DType::BF16) {
                const uint32_t bits = uint32_t(h) << 16;
                std::memcpy(&f, &bits, 4);
            } else {
                f = halfToFloat(h);
            }
            std::memcpy(out.data() + 4 * i, &f, 4);
        }
        return out;
    }
    // convert_hf_to_gguf's permute: rows (head, half, j) -> (head, j, half),
    // so each rotary pair sits side by side.
    const uint64_t rows = uint64_t(src.shape[0]), rowBytes = t.bytes / rows;
    const uint64_t perHead = rows / uint64_t(t.permuteHeads), half = perHead / 2;
    for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t head = r / perHead, j = (r % perHead) / 2, which = r % 2;
        const uint64_t from = head * perHead + which * half + j;
        std::memcpy(out.data() + r * rowBytes, data + from * rowBytes, rowBytes);
    }
    return out;
}

// Experts a mixture-of-experts layer holds (0 for a dense model); InputError
// for what llama.cpp's qwen3moe would compute differently.
int64_t moeExperts(const ModelConfig& cfg)
{
    const std::string path = cfg.path();
    if (cfg.modelType() == "mixtral")
        return cfg.positive("num_local_experts");
    if (cfg.modelType() != "qwen3_moe")
        return 0;
    // llama.cpp's qwen3moe makes every layer a mixture of experts whose top-k weights are renormalised.
    if (cfg.has("mlp_only_layers") && cfg.raw()["mlp_only_layers"].is_array() && !cfg.raw()["mlp_only_layers"].empty())
        throw InputError(path, "mlp_only_layers is not empty; llama.cpp's qwen3moe has no dense layers");
    if (cfg.integer("decoder_sparse_step", 1) != 1)
        throw InputError(path, "decoder_sparse_step is not 1; llama.cpp's qwen3moe makes every layer sparse");
    if (!cfg.boolOr("norm_topk_prob", true))
        throw InputError(path, "norm_topk_prob is false; llama.cpp's qwen3moe renormalises the top-k weights");
    return cfg.positive("num_experts");
}

struct Layout {
    Family family;
    gguf::Vocab vocab;
    std::vector<OutTensor> tensors;
    std::string header; // everything before the data section, padded
    uint64_t dataBytes = 0;
};

// Everything the export writes, checked; throws InputError naming the file.
Layout layOut(const Checkpoint& ck)
{
    const std::string cfgPath = ck.folder() + "/config.json";
    if (!ck.config())
        throw InputError(cfgPath, "no config.json, so the architecture to write as GGUF is not known");
    const ModelConfig& cfg = *ck.config();
    const auto family = familyFor(cfg.modelType());
    if (!family)
        throw InputError(cfgPath, "model_type '" + cfg.modelType() +
                                      "': GGUF export covers llama, mistral, mixtral, qwen2, qwen3 and qwen3_moe "
                                      "(llama.cpp's own "
                                      "convert_hf_to_gguf.py converts the others)");
    if (ck.indexOnly())
        throw InputError(ck.weightsPath(), "the weights are not downloaded, so there is nothing to write as GGUF");
    if (cfg.has("quantization_config"))
        throw InputError(cfgPath, "a quantized checkpoint (quantization_config) is not written as GGUF here; "
                                  "llama.cpp's own tools quantize a GGUF");
    if (cfg.has("rope_scaling") && !cfg.raw()["rope_scaling"].is_null())
        throw InputError(cfgPath, "rope_scaling is set; GGUF export writes only plain rotary (rope_theta)");

    const int64_t experts = moeExperts(cfg);
    Layout L{*family, gguf::readVocab(ck), {}, {}, 0};
    const int64_t heads = cfg.positive("num_attention_heads");
    const int64_t kvHeads = cfg.positive("num_key_value_heads", heads);
    std::map<std::string, size_t> stacked; // GGUF name -> index in L.tensors
    for (const TensorInfo& t : ck.tensors()) {
        const auto name = ggufName(t.name, family->arch);
        if (!name) {
            if (t.name.find("rotary_emb.inv_freq") != std::string::npos)
                continue; // a buffer transformers recomputes, as llama.cpp does
            throw InputError(ck.weightsPath(), "tensor '" + t.name + "' has no GGUF name for " + family->arch);
        }
        if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
            throw InputError(ck.weightsPath(), "tensor '" + t.name + "' is " + dtypeCode(t.dtype) +
                                                   "; GGUF export writes F32, F16 and BF16 weights");
        if (t.shape.empty() || t.shape.size() > 2)
            throw InputError(ck.weightsPath(), "tensor '" + t.name + "' has shape " + shapeText(t.shape));
        if (name->expert >= 0) {
            if (name->expert >= experts || t.shape.size() != 2)
                throw InputError(ck.weightsPath(), "tensor '" + t.name + "': expert " + std::to_string(name->expert) +
                                                       " of " + std::to_string(experts) + " in config.json");
            auto [at, added] = stacked.emplace(name->name, L.tensors.size());
            if (added) {
                OutTensor o;
                o.name = name->name;
                o.sources.assign(size_t(experts), nullptr);
                o.ne = {uint64_t(t.shape[1]), uint64_t(t.shape[0]), uint64_t(experts)};
                o.type = ggmlType(t.dtype);
                o.bytes = t.nbytes * uint64_t(experts);
                L.tensors.push_back(o);
            }
            OutTensor& o = L.tensors[at->second];
            if (o.sources[size_t(name->expert)] || t.shape[1] != int64_t(o.ne[0]) || t.shape[0] != int64_t(o.ne[1]) ||
                t.nbytes * uint64_t(experts) != o.bytes)
                throw InputError(ck.weightsPath(), "tensor '" + t.name + "' does not stack with the other experts of " +
                                                       o.name + " (shape " + shapeText(t.shape) + ", " + dtypeCode(t.dtype) + ")");
            o.sources[size_t(name->expert)] = &t;
            continue;
        }
        OutTensor o;
        o.name = name->name;
        o.sources = {&t};
        for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d)
            o.ne.push_back(uint64_t(*d));
        if (t.shape.size() == 1)
            o.type = kGgmlF32; // convert_hf_to_gguf keeps 1-D tensors (norms, biases) in F32
        else
            o.type = ggmlType(t.dtype);
        o.bytes = t.numel() * (o.type == kGgmlF32 ? 4 : 2);
        if (family->permuteQk && t.shape.size() == 2) {
            const bool q = o.name.find(".attn_q.") != std::string::npos, k = o.name.find(".attn_k.") != std::string::npos;
            if (q || k) {
                o.permuteHeads = q ? heads : kvHeads;
                if (t.shape[0] % (2 * o.permuteHeads) != 0)
                    throw InputError(ck.weightsPath(), "tensor '" + t.name + "' has " + std::to_string(t.shape[0]) +
                                                           " rows, not a whole number of heads");
            }
        }
        L.tensors.push_back(o);
    }
    for (const OutTensor& o : L.tensors)
        if (std::find(o.sources.begin(), o.sources.end(), nullptr) != o.sources.end())
            throw InputError(ck.weightsPath(), o.name + ": an expert's weight is missing (config.json says " +
                                                   std::to_string(experts) + " experts)");
    const auto embed = std::find_if(L.tensors.begin(), L.tensors.end(),
                                    [](const OutTensor& o) { return o.name == "token_embd.weight"; });
    if (embed == L.tensors.end())
        throw InputError(ck.weightsPath(), "no embed_tokens.weight tensor");
    gguf::padVocab(L.vocab, int64_t(embed->ne[1]), ck);

    for (auto& o : L.tensors) {
        o.offset = L.dataBytes;
        L.dataBytes += (o.bytes + kAlignment - 1) / kAlignment * kAlignment;
    }

    const std::string& a = family->arch;
    const int64_t hidden = cfg.positive("hidden_size");
    const int64_t headDim = cfg.has("head_dim") && !cfg.raw()["head_dim"].is_null() ? cfg.positive("head_dim")
                                                                                      : hidden / heads;
    Writer w;
    int kvs = 0;
    auto count = [&](auto&& f) { f(), ++kvs; };
    count([&] { w.kvStr("general.architecture", a); });
    count([&] { w.kvStr("general.name", std::filesystem::path(ck.folder()).filename().string()); });
    const bool anyBf16 = std::any_of(L.tensors.begin(), L.tensors.end(), [](auto& o) { return o.type == kGgmlBf16; });
    const bool anyF16 = std::any_of(L.tensors.begin(), L.tensors.end(), [](auto& o) { return o.type == kGgmlF16; });
    count([&] { w.kvU32("general.file_type", anyBf16 ? 32 : anyF16 ? 1 : 0); }); // ALL_F32, MOSTLY_F16, MOSTLY_BF16
    count([&] { w.kvU32(a + ".context_length", uint32_t(cfg.positive("max_position_embeddings"))); });
    count([&] { w.kvU32(a + ".embedding_length", uint32_t(hidden)); });
    count([&] { w.kvU32(a + ".block_count", uint32_t(cfg.positive("num_hidden_layers"))); });
    count([&] { w.kvU32(a + ".feed_forward_length", uint32_t(cfg.positive("intermediate_size"))); });
    count([&] { w.kvU32(a + ".attention.head_count", uint32_t(heads)); });
    count([&] { w.kvU32(a + ".attention.head_count_kv", uint32_t(kvHeads)); });
    count([&] { w.kvU32(a + ".attention.key_length", uint32_t(headDim)); });
    count([&] { w.kvU32(a + ".attention.value_length", uint32_t(headDim)); });
    count([&] { w.kvU32(a + ".rope.dimension_count", uint32_t(headDim)); });
    count([&] { w.kvF32(a + ".rope.freq_base", float(cfg.number("rope_theta", 10000.0))); });
    count([&] { w.kvF32(a + ".attention.layer_norm_rms_epsilon", float(cfg.number("rms_norm_eps", 1e-6))); });
    count([&] { w.kvU32(a + ".vocab_size", uint32_t(L.vocab.tokens.size())); });
    if (experts > 0) {
        count([&] { w.kvU32(a + ".expert_count", uint32_t(experts)); });
        count([&] { w.kvU32(a + ".expert_used_count", uint32_t(cfg.positive("num_experts_per_tok"))); });
        if (cfg.has("moe_intermediate_size"))
            count([&] { w.kvU32(a + ".expert_feed_forward_length", uint32_t(cfg.positive("moe_intermediate_size"))); });
    }
    count([&] { w.kvStr("tokenizer.ggml.model", L.vocab.model); });
    if (!L.vocab.pre.empty())
        count([&] { w.kvStr("tokenizer.ggml.pre", L.vocab.pre); });
    count([&] { w.kvStrings("tokenizer.ggml.tokens", L.vocab.tokens); });
    if (!L.vocab.scores.empty())
        count([&] { w.kvF32s("tokenizer.ggml.scores", L.vocab.scores); });
    count([&] { w.kvI32s("tokenizer.ggml.token_type", L.vocab.types); });
    if (L.vocab.model == "gpt2")
        count([&] { w.kvStrings("tokenizer.ggml.merges", L.vocab.merges); });
    else
        count([&] { w.kvBool("tokenizer.ggml.add_space_prefix", L.vocab.addSpacePrefix); });
    if (L.vocab.unk)
        count([&] { w.kvU32("tokenizer.ggml.unknown_token_id", uint32_t(*L.vocab.unk)); });
    if (L.vocab.bos)
        count([&] { w.kvU32("tokenizer.ggml.bos_token_id", uint32_t(*L.vocab.bos)); });
    if (L.vocab.eos)
        count([&] { w.kvU32("tokenizer.ggml.eos_token_id", uint32_t(*L.vocab.eos)); });
    count([&] { w.kvBool("tokenizer.ggml.add_bos_token", L.vocab.addBos); });
    if (!L.vocab.chatTemplate.empty())
        count([&] { w.kvStr("tokenizer.chat_template", L.vocab.chatTemplate); });

    Writer head;
    head.raw("GGUF", 4);
    head.u32(3);
    head.u64(L.tensors.size());
    head.u64(uint64_t(kvs));
    head.out += w.out;
    for (const auto& o : L.tensors) {
        head.str(o.name);
        head.u32(uint32_t(o.ne.size()));
        for (uint64_t d : o.ne)
            head.u64(d);
        head.u32(o.type);
        head.u64(o.offset);
    }
    head.out.resize((head.out.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
    L.header = std::move(head.out);
    return L;
}

} // namespace

std::string ggufExportProblem(const Checkpoint& ck)
{
    try {
        layOut(ck);
        return {};
    } catch (const InputError& e) {
        return e.what();
    }
}

GgufExport exportGguf(const Checkpoint& ck, const std::string& outPath,
                      const std::function<bool(uint64_t, uint64_t)>& progress)
{
    const Layout L = layOut(ck);
    const uint64_t total = L.header.size() + L.dataBytes;
    const std::string tmp = outPath + ".partial";
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f)
        throw InputError(outPath, std::string("cannot write: ") + std::strerror(errno));
    auto fail = [&](const std::string& why) {
        f.reset();
        std::remove(tmp.c_str());
        throw InputError(outPath, "cannot write: " + why);
    };
    uint64_t written = 0;
    // In pieces of at most 64 MiB, asking `progress` before each: a 2 GB
    // embedding is neither held twice nor written without a chance to cancel.
    auto put = [&](const void* p, uint64_t n) {
        const auto* bytes = static_cast<const uint8_t*>(p);
        for (uint64_t at = 0; at < n;) {
            if (progress && !progress(written, total)) {
                f.reset();
                std::remove(tmp.c_str());
                throw Cancelled();
            }
            const size_t piece = size_t(std::min<uint64_t>(n - at, uint64_t(64) << 20));
            if (std::fwrite(bytes + at, 1, piece, f.get()) != piece)
                fail(std::strerror(errno ? errno : EIO));
            at += piece;
            written += piece;
        }
    };
    put(L.header.data(), L.header.size());
    static const char zeros[kAlignment] = {};
    for (const auto& o : L.tensors) {
        if (storedAsIs(o)) {
            for (const TensorInfo* e : o.sources) // experts stacked as stored, expert 0 first
                put(ck.data(*e), e->nbytes);
        } else {
            const auto bytes = convertedBytes(ck, o);
            put(bytes.data(), bytes.size());
        }
        put(zeros, (kAlignment - o.bytes % kAlignment) % kAlignment);
    }
    if (std::fclose(f.release()) != 0) {
        std::remove(tmp.c_str());
        throw InputError(outPath, std::string("cannot write: ") + std::strerror(errno));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, outPath, ec);
    if (ec) {
        std::remove(tmp.c_str());
        throw InputError(outPath, "cannot write: " + ec.message());
    }
    if (progress)
        progress(total, total);
    return {L.family.arch, L.vocab.pre.empty() ? L.vocab.model : L.vocab.pre, L.tensors.size(), total};
}

} // namespace stowage
