// stowage-cli run: a thin caller of the run session (stowage/session.h).
// Built as a plugin the CLI loads only for `run` and `worker`, so inspect and
// plan never pay LibTorch's start-up.
#include "args.h"
#include "stowage/units.h"
#include "planoptions.h"
#include "sigbus.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/runtimeinfo.h"
#include "stowage/session.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace stowage::cli {
namespace {

double number(const Args& a, const std::string& name, double def, double lo, double hi)
{
    auto v = a.value(name);
    if (!v)
        return def;
    const auto x = parseNumber(*v);
    if (!x || *x < lo || *x > hi)
        throw InputError(name + " " + *v, "expected a number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return *x;
}

} // namespace

int runCommand(const std::vector<std::string>& argv)
{
    // A shard truncated while a step reads it from the mapping: one line
    // naming the file and status 2, as for any bad input, not a crash.
    installSigbusHandler("stowage-cli: ", "; reopen the checkpoint\n", 2);
    auto valued = planValuedOptions();
    valued.insert({"--device-map", "--prompt", "--prompt-ids", "--max-new-tokens", "--temperature", "--top-k", "--top-p",
                   "--seed", "--offload-folder", "--threads", "--logits", "--policy", "--hardware", "--unit-delay"});
    auto flags = planFlagOptions();
    flags.insert({"--greedy", "--simulate-gpus", "--json", "--ignore-eos", "--throttle", "--chat"});
    Args a(argv, valued, flags);

    SessionOptions so;
    so.path = checkpointPath(a);
    so.dtype = parseDTypeOption(a);
    // The plan options are checked against the model here, so their errors
    // name the flags the user typed; the session then loads from this same
    // opened checkpoint and tree, and checks a given map, naming its file.
    Checkpoint ck = Checkpoint::open(so.path);
    so.tree = std::make_shared<const ModuleTree>(buildModuleTree(ck, so.dtype, parseReferenceOption(a)));
    so.plan = planOptionsFromArgs(a, ck, *so.tree);
    if (auto f = a.value("--device-map")) {
        so.deviceMap = deviceMapFromJson(readFile(*f), *f);
        so.deviceMapSource = *f;
        so.onWarning = [](const std::string& w) { std::fprintf(stderr, "stowage-cli: warning: %s\n", w.c_str()); };
    }
    auto ids = a.value("--prompt-ids");
    std::vector<int32_t> promptIds;
    if (ids)
        promptIds = parseIds(*ids, "--prompt-ids");
    const bool chat = a.flag("--chat");
    if (chat && ids)
        throw InputError("--chat", "applies the chat template to --prompt text, not to --prompt-ids");

    LoadOptions& lo = so.load;
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
        lo.profile = hardwareFromSpec(*h);
    if (a.flag("--throttle")) {
        // Simulated GPUs copy at the profile's PCIe speed, for teaching demos.
        if (!lo.profile || lo.profile->gpus.empty())
            throw InputError("--throttle", "needs --hardware with a GPU, e.g. --hardware rtx4090");
        const GpuProfile& g = lo.profile->gpus.front();
        lo.simulatedPcieBytesPerSecond = lo.policy == ExecutionPolicy::AccelerateLike ? g.h2dPageable : g.h2dPinned;
    }
    const double maxNew = number(a, "--max-new-tokens", 32, 1, 1e6);
    const double temperature = number(a, "--temperature", 1.0, 1e-6, 100);
    const double topK = number(a, "--top-k", 0, 0, 1e9);
    const double topP = number(a, "--top-p", 1.0, 1e-6, 1.0);
    const double seed = number(a, "--seed", 0, 0, 9e18);
    const double unitDelay = number(a, "--unit-delay", 0, 0, 60); // slow motion, as the window's teaching mode

    auto session = Session::open(std::move(ck), so);
    session->model().setUnitDelay(unitDelay);
    const Tokenizer* tok = session->tokenizer();
    const std::string promptText = a.value("--prompt").value_or("");
    const std::vector<int32_t> prompt =
        ids ? promptIds : chat ? session->encodeChatPrompt(promptText) : session->encodePrompt(promptText);

    // The command line keeps its own defaults: greedy unless a sampling
    // option is given, and those options as typed; stop ids come from
    // generation_config.json as the session reads them.
    SamplingOptions sampling = session->samplingDefaults();
    sampling.maxNewTokens = int(maxNew);
    sampling.greedy = a.flag("--greedy") || !(a.value("--temperature") || a.value("--top-k") || a.value("--top-p"));
    sampling.temperature = float(temperature);
    sampling.topK = int(topK);
    sampling.topP = float(topP);
    sampling.seed = uint64_t(seed);
    if (a.flag("--ignore-eos"))
        sampling.stopIds.clear();

    const bool json = a.flag("--json");
    const bool stream = !json;
    if (stream && tok)
        std::printf("%s", tok->decode(prompt, true).c_str());
    GenerationResult result;
    if (auto lf = a.value("--logits")) {
        // Logits for the reference tests: the plain generation loop keeps them.
        sampling.stop = nullptr;
        result = generate(session->model(), prompt, sampling, {}, /*keepLogits=*/true);
        nlohmann::json lj = result.logits;
        writeFile(*lf, lj.dump());
    } else {
        result = session->generate(prompt, sampling, [&](const TokenPiece& piece) {
            if (!stream)
                return;
            if (tok)
                std::printf("%s", piece.text.c_str());
            else if (piece.id >= 0)
                std::printf("%d ", piece.id);
            std::fflush(stdout);
        });
    }
    Telemetry& tel = session->telemetry();
    tel.sample();
    if (!json) {
        std::printf("\n");
        std::fflush(stdout); // the text ends before the figures on stderr, piped or not
        std::fprintf(stderr, "%zu tokens, prefill %.3f s, decode %.2f tokens/s on %s\n", result.tokens.size(),
                     result.prefillSeconds, result.decodeTokensPerSecond(), runtimeDescription(lo.threads).c_str());
        return 0;
    }
    nlohmann::ordered_json j;
    j["prompt_ids"] = prompt;
    j["token_ids"] = result.tokens;
    j["text"] = tok ? nlohmann::ordered_json(tok->decode(result.tokens, true)) : nlohmann::ordered_json();
    j["device_map"] = nlohmann::ordered_json::parse(deviceMapToJson(session->deviceMap()));
    j["timings"] = {{"load_s", session->loadSeconds()}, {"prefill_s", result.prefillSeconds},
                    {"decode_tokens_per_s", result.decodeTokensPerSecond()}};
    auto& peak = j["peak_bytes"] = nlohmann::ordered_json::object();
    for (const auto& [d, b] : tel.peak())
        peak[d] = b;
    j["devices"] = session->model().deviceDescriptions();
    j["traffic"] = {{"host_to_device_bytes", tel.h2dBytes()}, {"disk_read_bytes", tel.diskReadBytes()}};
    auto& placed = j["placement"] = nlohmann::ordered_json::array();
    for (const DevicePlacement& d : session->placement())
        placed.push_back({{"device", d.device}, {"planned_bytes", d.plannedBytes}, {"actual_bytes", d.actualBytes}});
    // Beside the measurement, what `plan` and the window predict for this
    // map and policy on this hardware (--hardware, else this machine).
    try {
        const HardwareProfile hw = lo.profile ? *lo.profile : measureThisMachine();
        const Plan plan = so.deviceMap ? planFromDeviceMap(session->tree(), session->deviceMap(), "given")
                                       : planDeviceMap(session->tree(), so.plan);
        j["prediction"] = costJson(estimateDecode(plan, session->tree(), hw, lo.policy), hw, lo.policy);
    } catch (const InputError& e) {
        j["prediction"] = {{"error", e.what()}};
    }
    std::cout << j.dump(2) << '\n';
    return 0;
}

} // namespace stowage::cli

// The plugin's entry points, looked up with dlsym by stowage-cli.
extern "C" int stowage_cli_run(int argc, char** argv)
{
    std::vector<std::string> args(argv, argv + argc);
    return stowage::cli::runGuarded([&] { return stowage::cli::runCommand(args); });
}
