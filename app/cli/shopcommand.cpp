// stowage-cli shop: the hardware to buy for a decode speed (stowage/shop.h).
#include "args.h"
#include "commands.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/shop.h"
#include "stowage/units.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace stowage::cli {
namespace {

double number(const std::string& text, const std::string& what)
{
    const auto v = parseNumber(text);
    if (!v || *v <= 0)
        throw InputError(what, "expected a positive number, got '" + text + "'");
    return *v;
}

std::vector<std::string> commaList(const std::string& text)
{
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

} // namespace

int shopCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"--speed", "--kv-cache", "--gpus", "--max-gpus", "--ram", "--policy", "--strategy", "--price",
                  "--dtype", "-o"},
           {"--json"});
    const auto target = a.value("--speed");
    if (!target)
        throw InputError("shop", "--speed TOK/S is required: the decode speed the setup must reach");
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a));

    ShopRequest r;
    r.minTokensPerSecond = number(*target, "--speed");
    if (auto g = a.value("--gpus"))
        r.gpus = commaList(*g);
    r.maxGpus = wholeNumberOption(a, "--max-gpus", r.maxGpus, 1, 64);
    if (auto ram = a.value("--ram")) {
        r.ramGiB.clear();
        for (const std::string& s : commaList(*ram)) {
            const double g = number(s, "--ram");
            if (g != std::floor(g) || g > 1 << 20)
                throw InputError("--ram", "expected whole GiB such as 64,128, got '" + s + "'");
            r.ramGiB.push_back(int(g));
        }
    }
    if (auto p = a.value("--policy")) {
        const auto policy = policyFromName(*p);
        if (!policy)
            throw InputError("--policy", "unknown policy '" + *p + "' (accelerate-like, prefetch, compute-where-it-lives)");
        r.policy = *policy;
    }
    if (auto s = a.value("--strategy")) {
        const auto strategy = strategyFromName(*s);
        if (!strategy)
            throw InputError("--strategy", "unknown strategy '" + *s + "'");
        r.strategy = *strategy;
    }
    for (const std::string& p : a.values("--price")) {
        const auto eq = p.find('=');
        if (eq == std::string::npos || eq == 0)
            throw InputError("--price", "expected PRESET=USD such as rtx4090=1799, got '" + p + "'");
        r.priceOverrides.emplace_back(p.substr(0, eq), number(p.substr(eq + 1), "--price " + p));
    }
    std::optional<KvReserve> kv;
    if (auto k = a.value("--kv-cache"))
        kv = kvReserveForCheckpoint(ck, tree, parseKvSpec(*k, "--kv-cache " + *k));

    const ShopResult result = shopFor(tree, kv, r);
    std::string text;
    if (a.flag("--json")) {
        nlohmann::ordered_json j;
        j["target_tokens_per_second"] = r.minTokensPerSecond;
        j["context"] = kv ? kv->context : 0;
        j["batch"] = kv ? kv->batch : 1;
        j["policy"] = policyName(r.policy);
        j["tried"] = result.tried;
        auto& list = j["setups"] = nlohmann::ordered_json::array();
        for (const ShopSetup& s : result.setups) {
            nlohmann::ordered_json e;
            e["hardware"] = s.hardware;
            e["gpu"] = s.gpu;
            e["gpu_count"] = s.gpuCount;
            e["ram_gib"] = s.ramGiB;
            e["price_usd"] = s.priceUsd;
            e["price_note"] = s.priceNote;
            e["tokens_per_second"] = s.estimate.tokensPerSecond;
            e["meets"] = s.meets;
            e["all_on_gpus"] = s.allOnGpus;
            e["where"] = s.where;
            e["why"] = s.why;
            e["device_map"] = nlohmann::ordered_json::parse(deviceMapToJson(s.plan.deviceMap));
            list.push_back(std::move(e));
        }
        j["notes"] = result.notes;
        text = j.dump(2) + "\n";
    } else {
        char line[256];
        std::snprintf(line, sizeof line, "Setups for %.4g tok/s%s (%d tried), cheapest first:\n", r.minTokensPerSecond,
                      kv ? (" at " + std::to_string(kv->context) + " tokens x " + std::to_string(kv->batch)).c_str() : "",
                      result.tried);
        text += line;
        for (const ShopSetup& s : result.setups) {
            std::snprintf(line, sizeof line, "  %s %-14s %4d GiB RAM  $%-9s %9.2f tok/s  %-16s %s\n",
                          s.meets ? "meets" : "     ", s.hardware.c_str(), s.ramGiB,
                          grouped(uint64_t(std::llround(s.priceUsd))).c_str(), s.estimate.tokensPerSecond,
                          s.where.c_str(), s.meets ? "" : s.why.c_str());
            text += line;
        }
        for (const std::string& n : result.notes)
            text += "note: " + n + "\n";
    }
    writeOutput(a, text);
    return 0;
}

} // namespace stowage::cli
