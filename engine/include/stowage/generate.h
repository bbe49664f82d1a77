#pragma once
// Generation over a loaded Model (model.h): prefill, then decode token by
// token, greedy or sampled with a seeded generator. Free of LibTorch types,
// like model.h.
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

namespace stowage {

class Model;

struct SamplingOptions {
    int maxNewTokens = 32;
    bool greedy = true;
    float temperature = 1.0f;
    int topK = 0;      // 0: off
    float topP = 1.0f; // 1: off
    uint64_t seed = 0;
    std::vector<int32_t> stopIds;
    const std::atomic<bool>* stop = nullptr; // when set and true, generation ends as "stopped"
};

struct GenerationResult {
    std::vector<int32_t> tokens; // generated ids (without the prompt)
    double prefillSeconds = 0;
    double decodeSeconds = 0;
    bool stopped = false; // ended by SamplingOptions::stop or onToken
    double decodeTokensPerSecond() const
    {
        return tokens.size() > 1 && decodeSeconds > 0 ? double(tokens.size() - 1) / decodeSeconds : 0;
    }
    std::vector<std::vector<float>> logits; // per generated token, when asked for
};

// Prefill, then decode token by token. `onToken` gets each id as it is
// chosen; returning false stops. A stop (onToken, or options.stop while a
// forward pass runs) is a result with `stopped` set, never an exception.
GenerationResult generate(Model& model, const std::vector<int32_t>& prompt, const SamplingOptions& options,
                          const std::function<bool(int32_t)>& onToken = {}, bool keepLogits = false);

// Chooses the next token from float32 logits (exposed for tests).
int32_t sampleToken(const std::vector<float>& logits, const SamplingOptions& options, uint64_t step);

} // namespace stowage
