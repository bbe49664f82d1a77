// Greedy and sampled decoding over Model::forward, with a seeded generator so
// sampling is reproducible.
#include "stowage/error.h"
#include "stowage/generate.h"
#include "stowage/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

namespace stowage {

int32_t sampleToken(const std::vector<float>& logits, const SamplingOptions& o, uint64_t step)
{
    if (logits.empty())
        return -1;
    if (o.greedy || o.temperature <= 0)
        return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); // first max, like argmax
    // temperature -> top-k -> top-p, the order transformers' logits warpers apply
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    size_t keep = idx.size();
    if (o.topK > 0)
        keep = std::min(keep, size_t(o.topK));
    std::vector<double> p(keep);
    const double maxL = logits[size_t(idx[0])] / o.temperature;
    double sum = 0;
    for (size_t i = 0; i < keep; ++i)
        sum += p[i] = std::exp(logits[size_t(idx[i])] / o.temperature - maxL);
    if (o.topP < 1.0f) {
        double cum = 0;
        size_t n = 0;
        while (n < keep) {
            cum += p[n] / sum;
            ++n;
            if (cum >= o.topP)
                break;
        }
        keep = std::max<size_t>(n, 1);
        p.resize(keep);
        sum = std::accumulate(p.begin(), p.end(), 0.0);
    }
    // one generator per (seed, step): the same seed gives the same text
    std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + step);
    double r = std::uniform_real_distribution<double>(0.0, sum)(rng);
    for (size_t i = 0; i < keep; ++i) {
        r -= p[i];
        if (r <= 0)
            return idx[i];
    }
    return idx[keep - 1];
}

GenerationResult generate(Model& model, const std::vector<int32_t>& prompt, const SamplingOptions& o,
                          const std::function<bool(int32_t)>& onToken, bool keepLogits)
{
    using clock = std::chrono::steady_clock;
    GenerationResult r;
    Telemetry& telemetry = model.telemetry();
    if (o.stop)
        model.setInterrupt(o.stop);
    auto stopRequested = [&] { return o.stop && o.stop->load(); };
    model.resetCache(int(prompt.size()) + std::max(0, o.maxNewTokens));
    auto t0 = clock::now();
    auto t1 = t0;
    std::vector<float> logits;
    try {
        telemetry.setStep(0);
        logits = model.forward(prompt);
        t1 = clock::now();
        r.prefillSeconds = std::chrono::duration<double>(t1 - t0).count();
        for (int step = 0; step < o.maxNewTokens; ++step) {
            if (stopRequested()) {
                r.stopped = true;
                break;
            }
            if (keepLogits)
                r.logits.push_back(logits);
            int32_t next = sampleToken(logits, o, uint64_t(step));
            r.tokens.push_back(next);
            if (onToken && !onToken(next)) {
                r.stopped = true;
                break;
            }
            if (std::find(o.stopIds.begin(), o.stopIds.end(), next) != o.stopIds.end() || step + 1 == o.maxNewTokens)
                break;
            telemetry.setStep(step + 1);
            logits = model.forward({next});
        }
    } catch (const Stopped&) {
        // Between two execution units: the model dropped this pass's cache
        // entries and fetched copies; what was generated so far stands.
        r.stopped = true;
        if (r.tokens.empty())
            t1 = clock::now();
    }
    r.decodeSeconds = std::chrono::duration<double>(clock::now() - t1).count();
    model.idle(); // nothing stays fetched ahead for a token that will not come
    return r;
}

} // namespace stowage
