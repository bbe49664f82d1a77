#pragma once
// The one way every front end runs a model (stowage-cli run, the worker
// process, and through it the window): open a checkpoint with a device map
// or plan options, generate with streaming and stop, unload by destroying
// the session. The prompt rules (BOS, EOS and stop ids, sampling defaults
// from generation_config.json) live here. Plain C++: no Qt, no LibTorch.
#include "stowage/checkpoint.h"
#include "stowage/generate.h"
#include "stowage/model.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"
#include "stowage/telemetry.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

class Tokenizer;

struct SessionOptions {
    std::string path;                   // checkpoint folder, index, weights file or Hub cache entry
    std::optional<DType> dtype;         // default: config.json's, else the checkpoint's
    std::optional<DeviceMap> deviceMap; // a given map, validated against the model...
    PlanOptions plan;                   // ...else one planned with these options
    // The module tree, where the caller has built it already (from this
    // checkpoint, with dtype and plan.reference): the session builds none then.
    std::shared_ptr<const ModuleTree> tree;
    // Validating deviceMap: an error is thrown as InputError(deviceMapSource,
    // the first error); each warning (keys that match no module) goes here.
    std::string deviceMapSource = "device map";
    std::function<void(const std::string&)> onWarning;
    // Dispatch and hooks; its deviceMap, dtype and gpuBudgets are filled in
    // by the session (GPU budgets from plan.maxMemory). A telemetry given
    // here lets the caller watch the load; else the session makes one.
    LoadOptions load;
};

// Where the weights went: what the plan put on a device and what the
// runtime holds there after loading.
struct DevicePlacement {
    std::string device;          // "0", "cpu", "disk"
    uint64_t plannedBytes = 0;   // the tree's bytes the map sends there
    uint64_t actualBytes = 0;    // resident after dispatch (disk: 0, read per step)
    std::string description;     // "0 (simulated GPU, 15000 bytes)"
};

// A generated token and its text. A last piece with id -1 carries text the
// stream decoder held back (an unfinished UTF-8 sequence) when generation ended.
struct TokenPiece {
    int32_t id = 0;
    std::string text; // the decoded text this token completes (may be empty mid-character)
    int index = 0;    // 0 for the first generated token
    double t = 0;     // when it was chosen: seconds on the session's telemetry clock (MemorySample::t)
};

class Session {
public:
    // Throws InputError (unreadable files, a map that does not fit the
    // model, a family that cannot run, an unwritable offload folder) and
    // Cancelled when progress returns false; nothing stays loaded then.
    static std::unique_ptr<Session> open(const SessionOptions& options, const ProgressFn& progress = {});
    // The same with a checkpoint the caller has opened already (to check its
    // options against the model): its mapped shards are used as they are,
    // and options.path is not opened a second time.
    static std::unique_ptr<Session> open(Checkpoint checkpoint, const SessionOptions& options,
                                         const ProgressFn& progress = {});
    ~Session(); // unload: releases every byte the model holds (all devices, pinned buffers, KV cache)

    const Checkpoint& checkpoint() const;
    const ModuleTree& tree() const;
    const DeviceMap& deviceMap() const;
    const Tokenizer* tokenizer() const; // null when the checkpoint has none
    Model& model();
    Telemetry& telemetry();
    double loadSeconds() const;
    std::vector<DevicePlacement> placement() const;

    // The prompt as transformers' tokenizer(text) gives it: BOS first when
    // tokenizer_config.json asks for it (add_bos_token; without the key,
    // for llama, mistral and opt), BOS alone for an empty prompt. Throws
    // InputError without a tokenizer or with nothing to start from.
    std::vector<int32_t> encodePrompt(const std::string& text) const;
    // The prompt as one user message through the checkpoint's chat template,
    // as transformers' apply_chat_template([{"role": "user", "content": text}],
    // add_generation_prompt=True, tokenize=True) gives it: the rendered text
    // encoded with no BOS added (the template writes its own). Throws
    // InputError naming the file when there is no template, or it refuses.
    std::vector<int32_t> encodeChatPrompt(const std::string& text) const;
    // From generation_config.json: greedy unless do_sample, its temperature,
    // top_k and top_p (else 1, off, 1) and its eos_token_id (else
    // config.json's) as stop ids.
    SamplingOptions samplingDefaults() const;

    // Prefill `prompt`, then decode. `onToken` sees each token with its text
    // piece. requestStop() from any thread ends it within one execution unit
    // (result.stopped). The context (prompt + tokens) is kept for step().
    GenerationResult generate(const std::vector<int32_t>& prompt, const SamplingOptions& sampling,
                              const std::function<void(const TokenPiece&)>& onToken = {});
    // One more token after the current context (prompt + generated so far;
    // `prompt` starts a new one), each execution unit pausing `unitDelay`
    // seconds before it computes, so a teacher can follow it.
    GenerationResult step(const std::optional<std::vector<int32_t>>& prompt, const SamplingOptions& sampling,
                          double unitDelay, const std::function<void(const TokenPiece&)>& onToken = {});
    const std::vector<int32_t>& context() const;

    void requestStop(); // thread-safe; cleared when the next generate or step starts

    struct Impl;

private:
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace stowage
