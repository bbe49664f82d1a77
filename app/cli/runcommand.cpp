// stowage-cli run: dispatch by a device map and generate. Built as a plugin
// the CLI loads only for `run`, so inspect and plan never pay LibTorch's
// start-up.
#include "args.h"
#include "format.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/runtime.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

namespace stowage::cli {
namespace {

std::vector<int32_t> eosIds(const Checkpoint& ck)
{
    std::vector<int32_t> ids;
    auto add = [&](const nlohmann::json& v) {
        if (v.is_number_integer())
            ids.push_back(v.get<int32_t>());
        else if (v.is_array())
            for (const auto& x : v)
                if (x.is_number_integer())
                    ids.push_back(x.get<int32_t>());
    };
    if (auto g = ck.readSideFile("generation_config.json")) {
        auto j = nlohmann::json::parse(*g, nullptr, false);
        if (j.is_object() && j.contains("eos_token_id"))
            add(j["eos_token_id"]);
    }
    if (ids.empty() && ck.config() && ck.config()->raw().contains("eos_token_id"))
        add(ck.config()->raw()["eos_token_id"]);
    return ids;
}

double number(const Args& a, const std::string& name, double def, double lo, double hi)
{
    auto v = a.value(name);
    if (!v)
        return def;
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (!end || *end || x < lo || x > hi)
        throw InputError(name + " " + *v, "expected a number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return x;
}

} // namespace

int runCommand(const std::vector<std::string>& argv)
{
    auto valued = planValuedOptions();
    valued.insert({"--device-map", "--prompt", "--prompt-ids", "--max-new-tokens", "--temperature", "--top-k", "--top-p",
                   "--seed", "--offload-folder", "--threads", "--logits", "--policy", "--hardware"});
    auto flags = planFlagOptions();
    flags.insert({"--greedy", "--simulate-gpus", "--json", "--ignore-eos", "--throttle"});
    Args a(argv, valued, flags);
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a));

    PlanOptions po = planOptionsFromArgs(a, ck, tree);
    DeviceMap map;
    std::vector<std::string> warnings;
    if (auto f = a.value("--device-map"))
        map = loadDeviceMap(*f, tree, &warnings);
    else
        map = planDeviceMap(tree, po).deviceMap;
    for (const auto& w : warnings)
        std::fprintf(stderr, "stowage-cli: warning: %s\n", w.c_str());

    // The tokenizer is optional with --prompt-ids (output is then ids only).
    std::unique_ptr<Tokenizer> tok;
    if (a.value("--prompt") || !a.value("--prompt-ids"))
        tok = Tokenizer::load(ck);
    else
        try {
            tok = Tokenizer::load(ck);
        } catch (const InputError&) {
        }
    std::vector<int32_t> prompt;
    if (auto ids = a.value("--prompt-ids")) {
        prompt = parseIds(*ids, "--prompt-ids");
    } else {
        prompt = tok->encode(a.value("--prompt").value_or(""));
        // Llama-style and OPT tokenizers put BOS first, as transformers' encode does by default.
        const std::string& type = ck.config() ? ck.config()->modelType() : std::string();
        if (tok->bosId() && (type == "llama" || type == "mistral" || type == "opt"))
            prompt.insert(prompt.begin(), *tok->bosId());
        if (prompt.empty() && tok->bosId())
            prompt.push_back(*tok->bosId());
        if (prompt.empty())
            throw InputError("--prompt", "the prompt is empty and the tokenizer has no BOS token to start from");
    }

    SamplingOptions so;
    so.maxNewTokens = int(number(a, "--max-new-tokens", 32, 1, 1e6));
    so.greedy = a.flag("--greedy") || !(a.value("--temperature") || a.value("--top-k") || a.value("--top-p"));
    so.temperature = float(number(a, "--temperature", 1.0, 1e-6, 100));
    so.topK = int(number(a, "--top-k", 0, 0, 1e9));
    so.topP = float(number(a, "--top-p", 1.0, 1e-6, 1.0));
    so.seed = uint64_t(number(a, "--seed", 0, 0, 9e18));
    if (!a.flag("--ignore-eos"))
        so.stopIds = eosIds(ck);

    LoadOptions lo;
    lo.deviceMap = map;
    lo.dtype = tree.dtype();
    lo.offloadFolder = a.value("--offload-folder").value_or("");
    lo.simulateGpus = a.flag("--simulate-gpus");
    if (auto p = a.value("--policy")) {
        auto pol = policyFromName(*p);
        if (!pol)
            throw InputError("--policy " + *p, "expected accelerate-like, prefetch or compute-where-it-lives");
        lo.policy = *pol;
    }
    lo.threads = int(number(a, "--threads", 0, 0, 4096));
    if (auto h = a.value("--hardware"))
        lo.profile = loadHardware(*h);
    if (a.flag("--throttle")) {
        // Simulated GPUs copy at the profile's PCIe speed, for teaching demos.
        if (!lo.profile || lo.profile->gpus.empty())
            throw InputError("--throttle", "needs --hardware with a GPU, e.g. --hardware rtx4090");
        const GpuProfile& g = lo.profile->gpus.front();
        lo.simulatedPcieBytesPerSecond = lo.policy == ExecutionPolicy::AccelerateLike ? g.h2dPageable : g.h2dPinned;
    }
    if (po.maxMemory)
        for (const auto& b : *po.maxMemory)
            if (b.device.kind == Device::Gpu)
                lo.gpuBudgets.push_back(b);

    Telemetry* tel = nullptr;
    double t0 = 0;
    auto model = Model::load(ck, tree, lo);
    tel = &model->telemetry();
    t0 = tel->now();
    const double loadSeconds = t0;
    const bool json = a.flag("--json");
    std::unique_ptr<StreamDecoder> stream;
    if (tok && !json) {
        stream = std::make_unique<StreamDecoder>(*tok, /*skipSpecial=*/true);
        std::printf("%s", tok->decode(prompt, true).c_str());
    }
    auto result = generate(
        *model, prompt, so,
        [&](int32_t id) {
            if (json)
                return true;
            if (stream)
                std::printf("%s", stream->push(id).c_str());
            else
                std::printf("%d ", id);
            std::fflush(stdout);
            return true;
        },
        a.value("--logits").has_value());
    if (stream)
        std::printf("%s", stream->finish().c_str());
    tel->sample();
    if (auto lf = a.value("--logits")) {
        nlohmann::json lj = result.logits;
        writeFile(*lf, lj.dump());
    }
    if (!json) {
        std::printf("\n");
        std::fprintf(stderr, "%zu tokens, prefill %.3f s, decode %.2f tokens/s on %s\n", result.tokens.size(),
                     result.prefillSeconds, result.decodeTokensPerSecond(), runtimeDescription().c_str());
        return 0;
    }
    nlohmann::ordered_json j;
    j["prompt_ids"] = prompt;
    j["token_ids"] = result.tokens;
    j["text"] = tok ? nlohmann::ordered_json(tok->decode(result.tokens, true)) : nlohmann::ordered_json();
    j["device_map"] = nlohmann::ordered_json::parse(deviceMapToJson(map));
    j["timings"] = {{"load_s", loadSeconds}, {"prefill_s", result.prefillSeconds},
                    {"decode_tokens_per_s", result.decodeTokensPerSecond()}};
    auto& peak = j["peak_bytes"] = nlohmann::ordered_json::object();
    for (const auto& [d, b] : tel->peak())
        peak[d] = b;
    j["devices"] = model->deviceDescriptions();
    j["traffic"] = {{"host_to_device_bytes", tel->h2dBytes()}, {"disk_read_bytes", tel->diskReadBytes()}};
    std::cout << j.dump(2) << '\n';
    return 0;
}

} // namespace stowage::cli

// The plugin's entry point, looked up with dlsym by stowage-cli.
extern "C" int stowage_cli_run(int argc, char** argv)
{
    std::vector<std::string> args(argv, argv + argc);
    try {
        return stowage::cli::runCommand(args);
    } catch (const stowage::InputError& e) {
        std::fprintf(stderr, "stowage-cli: %s\n", e.what());
        return 2;
    } catch (const stowage::Cancelled&) {
        std::fprintf(stderr, "stowage-cli: cancelled\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stowage-cli: internal error: %s\n", e.what());
        return 1;
    }
}
