// What a decode step costs on this machine besides its bytes: the runtime
// decodes tiny generated Llama models (weights of a few hundred KB, so the
// step is almost all dispatch, hooks and hand-offs) and subtracts what the
// cost model already counts for their bytes.
#include "stowage/runtimeinfo.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/generate.h"
#include "stowage/model.h"
#include "stowage/safetensorswriter.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace stowage {
namespace {

namespace fs = std::filesystem;

// Every tensor `config` saves, in float32: norms 1, the rest `next()`.
template <class Next>
void writeWeights(const fs::path& out, const std::string& config, Next next)
{
    std::vector<TensorBlob> blobs;
    for (const SavedTensor& t : savedTensors(ModelConfig::parse(config, (out / "config.json").string()), DType::F32)) {
        TensorBlob b{t.name, DType::F32, t.shape, {}};
        size_t n = 1;
        for (int64_t d : t.shape)
            n *= size_t(d);
        b.bytes.resize(n * 4);
        const bool norm = t.shape.size() == 1;
        for (size_t i = 0; i < n; ++i) {
            const float v = norm ? 1.0f : next();
            std::memcpy(b.bytes.data() + i * 4, &v, 4);
        }
        blobs.push_back(std::move(b));
    }
    writeSafetensors((out / "model.safetensors").string(), blobs);
}

// A fast generator of small weights: the values do not matter to a timing,
// only that every page is real (the 300 MB models below took seconds with a
// normal distribution).
struct Xorshift {
    uint64_t state;
    float operator()()
    {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        return (float(state >> 40) / float(1 << 24) - 0.5f) * 0.08f;
    }
};

// A Llama of `layers` layers in heads of 32 (a head width the decode
// kernels take, as real checkpoints' are: with heads of 8 the attention fell
// back to LibTorch's operations and a layer cost twice what the demo's
// does). Hidden 64: ~160 KB per layer in float32.
fs::path writeTinyLlama(const fs::path& dir, int layers, int hidden = 64, int intermediate = 128)
{
    const fs::path out = dir / ("llama-" + std::to_string(layers) + "-" + std::to_string(hidden));
    fs::create_directories(out);
    const std::string config = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
 "hidden_size": )" + std::to_string(hidden) + R"(, "intermediate_size": )" +
                               std::to_string(intermediate) + R"(, "num_hidden_layers": )" +
                               std::to_string(layers) + R"(, "num_attention_heads": )" +
                               std::to_string(hidden / 32) + R"(,
 "num_key_value_heads": )" + std::to_string(hidden / 32) +
                               R"(, "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-05,
 "tie_word_embeddings": false, "torch_dtype": "float32"})";
    std::ofstream(out / "config.json") << config;
    writeWeights(out, config, Xorshift{0x9E3779B97F4A7C15ULL + uint64_t(layers)});
    return out;
}

// A Qwen3-MoE of two layers of 64 experts, each expert three 0.5 MiB
// matrices (hidden 512, expert width 256, fp32): 96 MiB of experts a layer,
// more than a CPU's caches hold, so the routed experts come from RAM as a
// real model's do, and each of their products is large enough to be split
// between the threads. `topK` experts a token; the weights are shared with
// the other top-k's folder (hard link, else a copy). A fast generator: the
// values do not matter, only that every page is real.
fs::path writeTinyMoe(const fs::path& dir, int topK, const fs::path& weightsFrom = {})
{
    const fs::path out = dir / ("qwen3-moe-top" + std::to_string(topK));
    fs::create_directories(out);
    const std::string config = R"({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
 "hidden_size": 512, "intermediate_size": 1024, "moe_intermediate_size": 256, "num_experts": 64,
 "num_experts_per_tok": )" + std::to_string(topK) + R"(, "norm_topk_prob": true, "decoder_sparse_step": 1,
 "mlp_only_layers": [], "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 16,
 "head_dim": 32, "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-06,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32"})";
    std::ofstream(out / "config.json") << config;
    const fs::path weights = out / "model.safetensors";
    std::error_code ec;
    fs::remove(weights, ec);
    if (!weightsFrom.empty()) {
        fs::create_hard_link(weightsFrom / "model.safetensors", weights, ec);
        if (ec)
            fs::copy_file(weightsFrom / "model.safetensors", weights);
        return out;
    }
    writeWeights(out, config, Xorshift{0x9E3779B97F4A7C15ULL});
    return out;
}

struct Timed {
    double secondsPerToken = 0; // measured, the quickest of a few runs
    double modelled = 0;        // what the cost model counts for the bytes alone
    int units = 0;
    uint64_t diskBytes = 0; // the map's bytes on disk
};

// `tokens` a run, the quickest of `runs` after a warm-up.
Timed timeDecode(const fs::path& path, const DeviceMap& map, ExecutionPolicy policy, const HardwareProfile& bytesOnly,
                 int tokens = 33, int runs = 7)
{
    const Checkpoint ck = Checkpoint::open(path.string());
    const ModuleTree tree = buildModuleTree(ck, DType::F32, Reference::Transformers);
    LoadOptions lo;
    lo.deviceMap = map;
    lo.policy = policy;
    auto model = Model::load(ck, tree, lo);
    SamplingOptions s;
    s.maxNewTokens = tokens;
    s.greedy = true;
    std::vector<double> perToken;
    generate(*model, {1, 2, 3, 4}, s); // warm-up: first-touch pages, LibTorch's first calls
    for (int r = 0; r < runs; ++r) {
        const GenerationResult g = generate(*model, {1, 2, 3, 4}, s);
        if (g.tokens.size() > 1)
            perToken.push_back(g.decodeSeconds / double(g.tokens.size() - 1));
    }
    if (perToken.empty())
        throw InputError(path.string(), "the timing model generated no tokens");
    // The quickest run: what the machine does when nothing else competes for
    // its cores (another process's burst only ever slows a run down).
    Timed t;
    t.secondsPerToken = *std::min_element(perToken.begin(), perToken.end());
    const Plan plan = planFromDeviceMap(tree, map, "timing");
    t.modelled = estimateDecode(plan, tree, bytesOnly, policy).secondsPerToken;
    t.units = int(executionUnits(tree).size());
    for (const DeviceTotal& d : plan.devices)
        if (d.device.kind == Device::Disk)
            t.diskBytes += d.used;
    return t;
}

} // namespace

std::map<std::string, FixedCosts> measureFixedCosts(const std::string& scratchDir, HardwareProfile profile)
{
    profile.fixedCosts.clear(); // what the bytes cost alone: the rest is fixed
    const fs::path dir = scratchDir;
    const int few = 2, many = 10;
    const fs::path small = writeTinyLlama(dir, few), large = writeTinyLlama(dir, many);
    const DeviceMap ram{{"", Device::cpu()}};
    // Every decoder layer on disk (read in place from the checkpoint file).
    const DeviceMap disk{{"model.embed_tokens", Device::cpu()},
                         {"model.layers", Device::disk()},
                         {"model.norm", Device::cpu()},
                         {"model.rotary_emb", Device::cpu()},
                         {"lm_head", Device::cpu()}};
    std::map<std::string, FixedCosts> out;
    // Accelerate-like copies each disk weight into a new tensor every token.
    // What that costs depends on glibc's allocator (freed memory reused, or
    // given back and faulted in anew), so it is timed as the runtime does it:
    // two layers on disk against the same in RAM, with the 4 and 11 MiB
    // weights of a 1B-class layer (hidden 1024; real checkpoints' are larger
    // still). Smaller weights fool it: hidden 512's 1-2.75 MB ones were all
    // reused, 14.8 GB/s, while a 440 MB Llama's copies ran 3.2-3.5 GB/s (its
    // 11 MiB weights fault every page) and the profile's freshCopyBandwidth,
    // every copy into fresh pages, says 2.4. A token copies 100 MB, so a
    // few tokens time it: 33 took a minute where fresh pages fault at
    // 0.5 GB/s (an AMD EPYC VM, 2026-12-07). With the allocator pinned
    // while a model runs (pinAllocator, runtimeenv.h) the copies reuse the
    // heap, 14-33 GB/s, and 12 tokens take a fraction of a second.
    //
    // Smaller weights copy faster: the demo's (64-176 KiB) at 2.2-2.6 GB/s
    // where those 4 and 11 MiB ones copied at 0.4-0.8 (fresh pages), and
    // 1-2.75 MiB ones into reused memory. So the rate is timed at three
    // sizes (FixedCosts::copyRates: a demo-sized Llama's largest weight, a
    // hidden-512 one's, and the 1B-class one's smallest), and the cost model
    // takes each weight's rate by its size.
    {
        FixedCosts& c = out[policyName(ExecutionPolicy::AccelerateLike)];
        // Timed again (at most twice) when the copies came out free: with the
        // allocator pinned they cost a few ms a token, which a burst of other
        // work on a shared 2-core machine can hide (CI, 2026-12-08: the RAM
        // runs all slowed, and no rate was timed).
        const auto copyRate = [&](int layers, int hidden, int intermediate, int tokens) {
            const fs::path m = writeTinyLlama(dir, layers, hidden, intermediate);
            for (int attempt = 0; attempt < 3; ++attempt) {
                const Timed r = timeDecode(m, ram, ExecutionPolicy::AccelerateLike, profile, tokens, 3),
                            d = timeDecode(m, disk, ExecutionPolicy::AccelerateLike, profile, tokens, 3);
                const double copying = d.secondsPerToken - r.secondsPerToken;
                if (copying > 0 && d.diskBytes > 0)
                    return double(d.diskBytes) / copying;
            }
            return 0.0;
        };
        c.copyBandwidth = copyRate(2, 1024, 2816, 12);
        const std::pair<double, double> points[] = {{352.0 * 128 * 4, copyRate(8, 128, 352, 32)},
                                                    {1408.0 * 512 * 4, copyRate(4, 512, 1408, 8)},
                                                    {1024.0 * 1024 * 4, c.copyBandwidth}};
        for (const auto& point : points)
            if (point.second > 0)
                c.copyRates.push_back(point);
        if (c.copyBandwidth <= 0)
            out.erase(policyName(ExecutionPolicy::AccelerateLike));
    }
    // A routed expert: the same mixture of experts with eight experts a
    // token and with one; what the eight cost beyond their bytes and the
    // one's, per expert (FixedCosts::perExpert). Fitted on the bench_moe
    // shapes instead, an expert cost 20-40 us more than its bytes at the
    // profile's rate on an AMD EPYC (docs/PERFORMANCE.md).
    const fs::path one = writeTinyMoe(dir, 1), eight = writeTinyMoe(dir, 8, one);
    // Layers past the CPU's caches (FixedCosts::perUnitFromRam): hidden 512,
    // 12.9 MB a layer, 12 and 24 of them (154 and 308 MB: more than the
    // 32 MiB this AMD EPYC guest caches, or a large server L3). Per layer the
    // step cost 0.13-0.18 ms beyond its bytes there, at hidden 512 and 1024
    // alike, against the tiny models' 0.02 (2026-12-08).
    const fs::path cold = writeTinyLlama(dir, 12, 512, 1408), colder = writeTinyLlama(dir, 24, 512, 1408);
    for (ExecutionPolicy pol :
         {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives}) {
        // The bytes' cost with the copy rate just timed, so that what is
        // left over is fixed.
        HardwareProfile bytesOnly = profile;
        if (auto it = out.find(policyName(pol)); it != out.end())
            bytesOnly.fixedCosts[policyName(pol)] = it->second;
        const Timed a = timeDecode(small, ram, pol, bytesOnly), b = timeDecode(large, ram, pol, bytesOnly),
                    d = timeDecode(large, disk, pol, bytesOnly);
        // Measured minus modelled, per token: fixed(a) = token + units(a) x unit.
        const double fa = std::max(0.0, a.secondsPerToken - a.modelled),
                     fb = std::max(0.0, b.secondsPerToken - b.modelled),
                     fd = std::max(0.0, d.secondsPerToken - d.modelled);
        FixedCosts& c = out[policyName(pol)];
        c.perUnit = std::max(0.0, (fb - fa) / double(b.units - a.units));
        c.perToken = std::max(0.0, fa - c.perUnit * a.units);
        c.perDiskUnit = std::max(0.0, (fd - fb) / double(many));
        const Timed ca = timeDecode(cold, ram, pol, bytesOnly, 16, 4), cb = timeDecode(colder, ram, pol, bytesOnly, 16, 4);
        c.perUnitFromRam = std::max(c.perUnit, ((cb.secondsPerToken - cb.modelled) - (ca.secondsPerToken - ca.modelled)) /
                                                   double(cb.units - ca.units));
        const Timed e1 = timeDecode(one, ram, pol, bytesOnly), e8 = timeDecode(eight, ram, pol, bytesOnly);
        const double more = (e8.secondsPerToken - e8.modelled) - (e1.secondsPerToken - e1.modelled);
        c.perExpert = std::max(0.0, more / double(7 * 2)); // seven more experts in each of two layers
    }
    return out;
}

} // namespace stowage
