// stowage-cli run: dispatch by a device map and generate. Built as a plugin
// the CLI loads only for `run`, so inspect and plan never pay LibTorch's
// start-up.
#include "args.h"
#include "format.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/runtime.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

namespace stowage::cli {
namespace {

std::vector<int32_t> parseIds(const std::string& text, const std::string& what)
{
    std::vector<int32_t> ids;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(part, &used);
        } catch (...) {
            used = 0;
        }
        if (used != part.size() || v < 0 || v > INT32_MAX)
            throw InputError(what, "'" + part + "' is not a token id");
        ids.push_back(int32_t(v));
    }
    if (ids.empty())
        throw InputError(what, "no token ids given");
    return ids;
}

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
                   "--seed", "--offload-folder", "--threads", "--logits", "--policy"});
    auto flags = planFlagOptions();
    flags.insert({"--greedy", "--simulate-gpus", "--json", "--ignore-eos"});
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

    std::vector<int32_t> prompt;
    if (auto ids = a.value("--prompt-ids"))
        prompt = parseIds(*ids, "--prompt-ids");
    else if (a.value("--prompt"))
        throw InputError("--prompt", "text prompts need a tokenizer, which this build does not have yet; use --prompt-ids");
    else
        prompt = {0};

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
    auto result = generate(
        *model, prompt, so,
        [&](int32_t id) {
            if (!json) {
                std::printf("%d ", id);
                std::fflush(stdout);
            }
            return true;
        },
        a.value("--logits").has_value());
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
    j["text"] = nullptr;
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
