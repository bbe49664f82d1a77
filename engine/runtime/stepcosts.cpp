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
#include <random>

namespace stowage {
namespace {

namespace fs = std::filesystem;

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
    std::mt19937 rng{static_cast<uint32_t>(layers)};
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<TensorBlob> blobs;
    for (const SavedTensor& t : savedTensors(ModelConfig::parse(config, (out / "config.json").string()), DType::F32)) {
        TensorBlob b{t.name, DType::F32, t.shape, {}};
        size_t n = 1;
        for (int64_t d : t.shape)
            n *= size_t(d);
        b.bytes.resize(n * 4);
        const bool norm = t.shape.size() == 1;
        for (size_t i = 0; i < n; ++i) {
            const float v = norm ? 1.0f : dist(rng);
            std::memcpy(b.bytes.data() + i * 4, &v, 4);
        }
        blobs.push_back(std::move(b));
    }
    writeSafetensors((out / "model.safetensors").string(), blobs);
    return out;
}

struct Timed {
    double secondsPerToken = 0; // measured, the quickest of a few runs
    double modelled = 0;        // what the cost model counts for the bytes alone
    int units = 0;
    uint64_t diskBytes = 0; // the map's bytes on disk
};

Timed timeDecode(const fs::path& path, const DeviceMap& map, ExecutionPolicy policy, const HardwareProfile& bytesOnly)
{
    const Checkpoint ck = Checkpoint::open(path.string());
    const ModuleTree tree = buildModuleTree(ck, DType::F32, Reference::Transformers);
    LoadOptions lo;
    lo.deviceMap = map;
    lo.policy = policy;
    auto model = Model::load(ck, tree, lo);
    SamplingOptions s;
    s.maxNewTokens = 33;
    s.greedy = true;
    std::vector<double> runs;
    generate(*model, {1, 2, 3, 4}, s); // warm-up: first-touch pages, LibTorch's first calls
    for (int r = 0; r < 7; ++r) {
        const GenerationResult g = generate(*model, {1, 2, 3, 4}, s);
        if (g.tokens.size() > 1)
            runs.push_back(g.decodeSeconds / double(g.tokens.size() - 1));
    }
    if (runs.empty())
        throw InputError(path.string(), "the timing model generated no tokens");
    // The quickest run: what the machine does when nothing else competes for
    // its cores (another process's burst only ever slows a run down).
    Timed t;
    t.secondsPerToken = *std::min_element(runs.begin(), runs.end());
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
    // every copy into fresh pages, says 2.4.
    {
        const fs::path mid = writeTinyLlama(dir, 2, 1024, 2816);
        const Timed r = timeDecode(mid, ram, ExecutionPolicy::AccelerateLike, profile),
                    d = timeDecode(mid, disk, ExecutionPolicy::AccelerateLike, profile);
        const double copying = d.secondsPerToken - r.secondsPerToken;
        if (copying > 0 && d.diskBytes > 0)
            out[policyName(ExecutionPolicy::AccelerateLike)].copyBandwidth = double(d.diskBytes) / copying;
    }
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
    }
    return out;
}

} // namespace stowage
