#pragma once
// When a model outgrows one machine: how the serving engines that run it at
// scale would shard it over nodes x GPUs, what each GPU then holds, which
// tensor-parallel x pipeline-parallel (x expert-parallel) choices fit and how
// fast each decodes, and the launch command for each engine. The sharding
// rules are the engines' own, with file and line references in
// docs/deploy.md (vLLM's QKVParallelLinear, VocabParallelEmbedding and
// get_pp_indices; SGLang shares them; TGI shards by tensor parallelism alone
// and never replicates KV heads).
#include "stowage/config.h"
#include "stowage/hardware.h"
#include "stowage/moduletree.h"

#include <optional>
#include <string>
#include <vector>

namespace stowage {

enum class ServingEngine { Vllm, Sglang, Tgi, LlamaCpp, TransformersTp };
const char* servingEngineName(ServingEngine e); // "vllm", "sglang", "tgi", "llama.cpp", "transformers"
std::optional<ServingEngine> servingEngineFromName(const std::string& name);

struct DeployCluster {
    int nodes = 1;
    int gpusPerNode = 1;
    GpuProfile gpu;              // every GPU alike (a preset's)
    double linkBandwidth = 0;    // bytes/s between GPUs of a node (NVLink or PCIe)
    double linkLatency = 0;      // seconds per collective step within a node
    double networkBandwidth = 12.5e9; // between nodes: 100 Gb/s Ethernet unless said
    double networkLatency = 20e-6;
    std::string linkName;        // "NVLink 4 (450 GB/s a direction)", "PCIe 4.0 x16"
    // The first node's host, where llama.cpp's --n-cpu-moe keeps experts
    // (the preset's typical host: assumed figures).
    uint64_t hostMemoryBytes = 0;
    double hostMemoryBandwidth = 0; // bytes/s
    double hostFlops = 0;
};
// A cluster of `nodes` x `gpusPerNode` GPUs of a hardware preset, with the
// interconnect that preset's GPU comes with (SXM data-centre cards: NVLink;
// others: PCIe). Throws InputError for an unknown preset.
DeployCluster clusterFromPreset(const std::string& preset, int nodes, int gpusPerNode);

struct DeployRequest {
    ServingEngine engine = ServingEngine::Vllm;
    int contextTokens = 4096; // --max-model-len
    int sequences = 1;        // concurrent sequences, each of contextTokens
    // The fraction of each GPU the engine may use (vLLM's
    // --gpu-memory-utilization, default 0.92 at the revision read; SGLang's
    // --mem-fraction-static; TGI's --cuda-memory-fraction 1.0 x 0.90).
    std::optional<double> memoryFraction;
    bool expertParallel = false; // vLLM --enable-expert-parallel, SGLang --ep-size
};

struct DeployChoice {
    int tp = 1, pp = 1, ep = 1; // ep > 1: experts divided over that many GPUs
    // llama.cpp's --n-cpu-moe: the routed experts of the first this many
    // layers stay in the host's RAM and are multiplied there by its CPU.
    int cpuMoeLayers = 0;
    uint64_t hostBytes = 0;       // those experts' bytes
    bool fits = false;
    std::string why; // why it does not fit or is not allowed; empty when it fits
    // The GPU holding the most (a stage's, for its most loaded rank).
    uint64_t weightsPerGpu = 0;
    uint64_t kvPerGpu = 0;        // the KV cache of contextTokens x sequences, paged
    uint64_t overheadPerGpu = 0;  // activations and CUDA graphs (estimated; the engine measures them)
    uint64_t usablePerGpu = 0;    // memory x the engine's fraction
    std::vector<int> layersPerStage;
    // Per stage, what each of its GPUs holds (its most loaded rank's weights, its KV cache).
    std::vector<uint64_t> stageWeights, stageKv;
    double tokensPerSecond = 0;   // decode, one sequence
    std::string command;          // the launch for this choice ("" when it does not fit)
};

struct DeployPlan {
    // Every tp x pp (x ep) the cluster allows; for llama.cpp and a mixture of
    // experts whose layers do not fit the GPUs, also the fewest layers'
    // experts in host RAM that make them fit. Fitting ones first, fastest first.
    std::vector<DeployChoice> choices;
    std::vector<std::string> notes;    // what was assumed
};

// `modelId`: what the launch commands load (a Hub id or a folder).
DeployPlan planDeployment(const ModuleTree& tree, const ModelConfig& config, const DeployCluster& cluster,
                          const DeployRequest& request, const std::string& modelId);

// vLLM's get_pp_indices: `layers` over `stages`, the remainder given to the
// stages before the last, from the second-to-last backwards.
std::vector<int> pipelineLayers(int layers, int stages);
// vLLM's pad_vocab_size: up to a multiple of 64.
int64_t paddedVocab(int64_t vocab);

} // namespace stowage
