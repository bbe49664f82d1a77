// Quantized checkpoints as transformers 5.6 sizes them (quantization.h); the
// rules and their line references are in docs/planner.md.
#include "stowage/quantization.h"

#include "stowage/error.h"
#include "stowage/moduletree.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <regex>

namespace stowage {

namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::optional<std::vector<std::string>> stringList(const nlohmann::json& q, const char* key, const std::string& path)
{
    auto it = q.find(key);
    if (it == q.end() || it->is_null())
        return std::nullopt;
    if (!it->is_array())
        throw InputError(path, std::string("quantization_config.") + key + " is not a list of module names");
    std::vector<std::string> out;
    for (const auto& v : *it) {
        if (!v.is_string())
            throw InputError(path, std::string("quantization_config.") + key + " is not a list of module names");
        out.push_back(v.get<std::string>());
    }
    return out;
}

bool flag(const nlohmann::json& q, const char* key, const std::string& path)
{
    auto it = q.find(key);
    if (it == q.end() || it->is_null())
        return false;
    if (!it->is_boolean())
        throw InputError(path, std::string("quantization_config.") + key + " is not true or false");
    return it->get<bool>();
}

int64_t number(const nlohmann::json& q, const char* key, int64_t def, const std::string& path)
{
    auto it = q.find(key);
    if (it == q.end() || it->is_null())
        return def;
    if (!it->is_number_integer())
        throw InputError(path, std::string("quantization_config.") + key + " is not a whole number");
    return it->get<int64_t>();
}

// get_keys_to_not_convert (quantizers/base.py:38-62), as module names: the
// tied embeddings on both sides, the last parameter's module and the output
// embeddings (lm_head in every family Stowage knows).
std::vector<std::string> defaultSkips(const ModuleTree& tree)
{
    std::vector<std::string> out;
    auto add = [&](std::string name) {
        if (endsWith(name, ".weight"))
            name.resize(name.size() - 7);
        if (std::find(out.begin(), out.end(), name) == out.end())
            out.push_back(name);
    };
    for (const auto& group : tree.tiedGroups())
        for (const auto& n : group)
            add(n);
    if (!tree.params().empty())
        add(tree.params().back().name);
    if (tree.find("lm_head") >= 0)
        add("lm_head");
    return out;
}

Param* paramOf(ModuleTree& tree, const std::string& name)
{
    const int i = tree.findParam(name);
    return i < 0 ? nullptr : &tree.param(i);
}

// A tensor only the applied quantizer has (a scale), added to module `m`.
void addQuantParam(ModuleTree& tree, int m, const std::string& local, std::vector<int64_t> shape)
{
    // Created float32 explicitly, whatever the load dtype (FP8Linear's
    // torch.float32 scales), so sized at 4 bytes each.
    Param& p = tree.param(tree.addParam(m, local, std::move(shape), DType::F32));
    p.quantOnly = true;
    p.quantBytes = p.numel() * 4;
}

// optimum's GPTQ block: the first of these that prefixes a module name.
std::string gptqBlock(const ModuleTree& tree)
{
    for (const char* b : {"transformer.h", "model.decoder.layers", "gpt_neox.layers", "model.layers",
                          "model.language_model.layers", "h", "decoder.layers", "layers"})
        for (const Module& m : tree.modules())
            if (m.name.rfind(b, 0) == 0)
                return b;
    return {};
}

} // namespace

std::string Quantization::label() const
{
    switch (kind) {
    case Kind::Mxfp4: return "MXFP4";
    case Kind::Fp8:
        return block ? "FP8 (" + std::to_string(block->first) + "x" + std::to_string(block->second) + " blocks)"
                     : "FP8 (per tensor)";
    case Kind::Bnb4: return "bitsandbytes 4-bit";
    case Kind::Bnb8: return "bitsandbytes 8-bit";
    case Kind::Gptq: return "GPTQ " + std::to_string(bits) + "-bit";
    case Kind::Unmodelled: break;
    }
    return method;
}

std::optional<Quantization> quantizationOf(const ModelConfig& config)
{
    const nlohmann::json* q = nullptr;
    if (auto it = config.raw().find("quantization_config"); it != config.raw().end() && !it->is_null())
        q = &*it;
    else if (config.has("text_config")) {
        const auto& text = config.raw()["text_config"];
        if (auto t = text.find("quantization_config"); text.is_object() && t != text.end() && !t->is_null())
            q = &*t;
    }
    if (!q)
        return std::nullopt;
    const std::string& path = config.path();
    if (!q->is_object() || !q->contains("quant_method") || !(*q)["quant_method"].is_string())
        throw InputError(path, "quantization_config has no quant_method");
    Quantization out;
    out.method = (*q)["quant_method"].get<std::string>();
    // auto.py:269-286: load_in_4bit / load_in_8bit name the bitsandbytes quantizer.
    const bool in4 = flag(*q, "load_in_4bit", path), in8 = flag(*q, "load_in_8bit", path);
    if (out.method == "mxfp4") {
        out.kind = Quantization::Kind::Mxfp4;
        out.dequantize = flag(*q, "dequantize", path);
        out.skip = stringList(*q, "modules_to_not_convert", path);
    } else if (out.method == "fp8") {
        out.kind = Quantization::Kind::Fp8;
        out.dequantize = flag(*q, "dequantize", path);
        out.skip = stringList(*q, "modules_to_not_convert", path);
        auto b = q->find("weight_block_size");
        if (b != q->end() && b->is_null())
            out.block = std::nullopt;
        else if (b != q->end()) {
            if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
                (*b)[0].get<int64_t>() < 1 || (*b)[1].get<int64_t>() < 1)
                throw InputError(path, "quantization_config.weight_block_size is not two positive whole numbers");
            out.block = std::make_pair((*b)[0].get<int64_t>(), (*b)[1].get<int64_t>());
        }
        const std::string scheme = q->value("activation_scheme", std::string("dynamic"));
        if (scheme != "dynamic" && scheme != "static")
            throw InputError(path, "quantization_config.activation_scheme '" + scheme +
                                       "' is neither 'dynamic' nor 'static'");
        out.staticActivation = scheme == "static";
    } else if (in4 || in8 || out.method == "bitsandbytes") {
        if (!in4 && !in8)
            return std::nullopt; // loaded unquantized, with a warning
        out.kind = in4 ? Quantization::Kind::Bnb4 : Quantization::Kind::Bnb8;
        out.skip = stringList(*q, "llm_int8_skip_modules", path);
        out.fp32CpuOffload = flag(*q, "llm_int8_enable_fp32_cpu_offload", path);
    } else if (out.method == "gptq") {
        out.kind = Quantization::Kind::Gptq;
        out.bits = int(number(*q, "bits", 4, path));
        if (out.bits != 2 && out.bits != 3 && out.bits != 4 && out.bits != 8)
            throw InputError(path, "quantization_config.bits " + std::to_string(out.bits) + " is not 2, 3, 4 or 8");
        out.groupSize = number(*q, "group_size", 128, path);
        if (out.groupSize == 0 || out.groupSize < -1)
            throw InputError(path, "quantization_config.group_size must be positive or -1");
        if (auto b = q->find("block_name_to_quantize"); b != q->end() && b->is_string())
            out.blockPrefix = b->get<std::string>();
        if (auto m = q->find("modules_in_block_to_quantize"); m != q->end() && m->is_array())
            for (const auto& group : *m)
                for (const auto& n : group.is_array() ? group : nlohmann::json::array({group}))
                    if (n.is_string())
                        out.inBlock.push_back(n.get<std::string>());
    }
    return out;
}

QuantDecision quantDecision(const Quantization& q, const QuantTarget& t)
{
    char cc[40];
    if (t.computeCapability > 0)
        std::snprintf(cc, sizeof cc, "%.1f", t.computeCapability);
    else
        std::snprintf(cc, sizeof cc, "unknown, assumed recent");
    const double capability = t.computeCapability > 0 ? t.computeCapability : 9.0;
    switch (q.kind) {
    case Quantization::Kind::Mxfp4:
        // quantizer_mxfp4.py:65-159 and 178-209.
        if (q.dequantize)
            return {false, "quantization_config.dequantize is true"};
        if (!t.cuda)
            return {false, "no CUDA GPU: on a CPU transformers 5.6 dequantizes MXFP4 unless use_kernels is set"};
        if (capability < 7.5)
            return {false, std::string("GPU 0's compute capability ") + cc + " is below the 7.5 MXFP4 kernels need"};
        return {true, std::string("GPU 0 (compute capability ") + cc +
                          ") runs the MXFP4 kernels (with triton and the kernels package installed)"};
    case Quantization::Kind::Fp8:
        // quantizer_finegrained_fp8.py:30-77.
        if (q.dequantize)
            return {false, "quantization_config.dequantize is true"};
        if (!t.cuda)
            return {false, "no CUDA GPU: transformers 5.6 dequantizes FP8 checkpoints without one"};
        if (capability < 8.9)
            return {false, std::string("GPU 0's compute capability ") + cc + " is below the 8.9 FP8 needs"};
        return {true, std::string("GPU 0 (compute capability ") + cc + ") computes in FP8"};
    case Quantization::Kind::Bnb4:
    case Quantization::Kind::Bnb8:
        return {true, "bitsandbytes never dequantizes at load"};
    case Quantization::Kind::Gptq:
        return {true, "GPTQ never dequantizes at load"};
    case Quantization::Kind::Unmodelled:
        break;
    }
    return {false, "quant_method '" + q.method + "' is not modelled: sized as the unquantized model"};
}

bool quantizationRuns(const Quantization& q)
{
    return q.kind == Quantization::Kind::Mxfp4 || (q.kind == Quantization::Kind::Fp8 && !q.staticActivation);
}

bool quantizerSkips(const std::string& module, const std::vector<std::string>& patterns)
{
    for (const std::string& p : patterns) {
        if (endsWith(module, p))
            return true;
        try {
            // re.match: anchored at the start only.
            const std::regex re(p, std::regex::ECMAScript);
            std::smatch m;
            if (std::regex_search(module, m, re, std::regex_constants::match_continuous))
                return true;
        } catch (const std::regex_error&) {
            if (module.rfind(p, 0) == 0)
                return true;
        }
    }
    return false;
}

std::string quantStoredName(const std::string& param, const Quantization& q)
{
    if (q.kind == Quantization::Kind::Mxfp4 && (endsWith(param, "gate_up_proj") || endsWith(param, "down_proj")))
        return param + "_blocks";
    if (q.kind == Quantization::Kind::Gptq && endsWith(param, ".weight"))
        return param.substr(0, param.size() - 7) + ".qweight";
    return {};
}

std::string quantStateOwner(const std::string& n, const Quantization& q)
{
    auto strip = [&](const std::string& suffix) { return n.substr(0, n.size() - suffix.size()); };
    switch (q.kind) {
    case Quantization::Kind::Mxfp4:
        if (endsWith(n, "_scales"))
            return strip("_scales") + "_blocks";
        break;
    case Quantization::Kind::Fp8:
        for (const char* s : {".weight_scale_inv", ".activation_scale", ".input_scale"})
            if (endsWith(n, s))
                return strip(s) + ".weight";
        for (const char* s : {"_proj_scale_inv", "_proj_activation_scale"})
            if (endsWith(n, s))
                return strip(s) + "_proj";
        break;
    case Quantization::Kind::Bnb4:
        for (const char* s : {".weight.absmax", ".weight.quant_map", ".weight.nested_absmax", ".weight.nested_quant_map"})
            if (endsWith(n, s))
                return strip(s) + ".weight";
        if (auto at = n.find(".weight.quant_state."); at != std::string::npos)
            return n.substr(0, at) + ".weight";
        break;
    case Quantization::Kind::Bnb8:
        for (const char* s : {".SCB", ".weight_format"})
            if (endsWith(n, s))
                return strip(s) + ".weight";
        break;
    case Quantization::Kind::Gptq:
        for (const char* s : {".qzeros", ".scales", ".g_idx"})
            if (endsWith(n, s))
                return strip(s) + ".qweight";
        break;
    case Quantization::Kind::Unmodelled:
        break;
    }
    return {};
}

void addQuantizedForms(ModuleTree& tree, const Quantization& q, const std::vector<std::string>& keepFp32)
{
    tree.setQuantization(q);
    // get_modules_to_not_convert (base.py:233-253): the config's list, or the
    // default skips when it is null, then _keep_in_fp32_modules.
    std::vector<std::string> skip = q.skip ? *q.skip : defaultSkips(tree);
    skip.insert(skip.end(), keepFp32.begin(), keepFp32.end());
    const std::string block = q.blockPrefix.empty() ? gptqBlock(tree) : q.blockPrefix;
    const size_t count = tree.modules().size(); // modules are not added below
    for (size_t i = 0; i < count; ++i) {
        const std::string name = tree.modules()[i].name;
        const std::string cls = tree.modules()[i].className;
        auto p = [&](const char* local) { return paramOf(tree, name + "." + local); };
        switch (q.kind) {
        case Quantization::Kind::Mxfp4: {
            // integrations/mxfp4.py:684-698: exactly GptOssExperts becomes
            // Mxfp4GptOssExperts: uint8 [E, 2I, H/32, 16] and [E, H, I/32, 16]
            // (the scales are no parameters, so never counted) and float32 biases.
            if (cls != "GptOssExperts" || quantizerSkips(name, skip))
                break;
            Param* gu = p("gate_up_proj");
            Param* dn = p("down_proj");
            if (!gu || !dn || gu->shape.size() != 3)
                break;
            const int64_t e = gu->shape[0], h = gu->shape[1], i2 = gu->shape[2];
            gu->quantBytes = uint64_t(e * i2 * (h / 32) * 16);
            dn->quantBytes = uint64_t(e * h * (dn->shape[1] / 32) * 16);
            for (const char* b : {"gate_up_proj_bias", "down_proj_bias"})
                if (Param* bias = p(b))
                    bias->quantBytes = bias->numel() * 4;
            break;
        }
        case Quantization::Kind::Fp8: {
            // integrations/finegrained_fp8.py:725-790: a module named
            // "*.experts" becomes FP8Experts, every Linear an FP8Linear:
            // one-byte weights and float32 inverse scales per block.
            if (quantizerSkips(name, skip))
                break;
            const int64_t b0 = q.block ? q.block->first : 0, b1 = q.block ? q.block->second : 0;
            auto grid = [&](int64_t out, int64_t in) {
                return q.block ? std::vector<int64_t>{cdiv(out, b0), cdiv(in, b1)} : std::vector<int64_t>{};
            };
            if (endsWith(name, ".experts")) {
                for (const char* w : {"gate_up_proj", "up_proj", "down_proj"}) {
                    Param* x = p(w);
                    if (!x || x->shape.size() != 3)
                        continue;
                    x->quantBytes = x->numel();
                    const int64_t e = x->shape[0];
                    std::vector<int64_t> s = grid(x->shape[1], x->shape[2]);
                    s.insert(s.begin(), e);
                    addQuantParam(tree, int(i), std::string(w) + "_scale_inv", s);
                    if (q.staticActivation)
                        addQuantParam(tree, int(i), std::string(w) + "_activation_scale", {e});
                }
                break;
            }
            if (cls != "Linear")
                break;
            Param* w = p("weight");
            if (!w || w->shape.size() != 2)
                break;
            w->quantBytes = w->numel();
            addQuantParam(tree, int(i), "weight_scale_inv", grid(w->shape[0], w->shape[1]));
            if (q.staticActivation)
                addQuantParam(tree, int(i), "activation_scale", {});
            break;
        }
        case Quantization::Kind::Bnb4:
        case Quantization::Kind::Bnb8: {
            // integrations/bitsandbytes.py:157-231: exactly nn.Linear (or
            // Conv1D) becomes Linear4bit / Linear8bitLt; param_element_size
            // counts its weight at 0.5 / 1 byte an element
            // (quantizer_bnb_4bit.py:83-95, quantizer_bnb_8bit.py:107-118).
            if ((cls != "Linear" && cls != "Conv1D") || quantizerSkips(name, skip))
                break;
            if (Param* w = p("weight"))
                w->quantBytes = q.kind == Quantization::Kind::Bnb4 ? (w->numel() + 1) / 2 : w->numel();
            break;
        }
        case Quantization::Kind::Gptq: {
            // optimum's GPTQQuantizer.convert_model and gptqmodel's buffers:
            // an exact nn.Linear inside the block becomes a QuantLinear whose
            // qweight, qzeros, g_idx (int32) and scales, bias (float16) are
            // buffers; lm_head and everything outside the block stay.
            if (cls != "Linear" || block.empty() || name.rfind(block + ".", 0) != 0)
                break;
            if (!q.inBlock.empty() &&
                std::none_of(q.inBlock.begin(), q.inBlock.end(), [&](const std::string& s) { return endsWith(name, s); }))
                break;
            Param* w = p("weight");
            if (!w || w->shape.size() != 2)
                break;
            const int64_t out = w->shape[0], in = w->shape[1];
            const int64_t g = q.groupSize < 0 ? in : q.groupSize;
            w->quantDropped = true;
            Param* bias = p("bias");
            if (bias)
                bias->quantDropped = true;
            const int m = int(i);
            auto buffer = [&](const char* local, std::vector<int64_t> shape, DType dt) {
                tree.buffer(tree.addBuffer(m, local, std::move(shape), dt, true)).quantOnly = true;
            };
            buffer("qweight", {cdiv(in * q.bits, 32), out}, DType::I32);
            buffer("qzeros", {cdiv(in, g), cdiv(out * q.bits, 32)}, DType::I32);
            buffer("scales", {cdiv(in, g), out}, DType::F16);
            buffer("g_idx", {in}, DType::I32);
            if (bias)
                buffer("bias", {out}, DType::F16);
            break;
        }
        case Quantization::Kind::Unmodelled:
            break;
        }
    }
}

} // namespace stowage
