// Deployment on serving engines (deploy.h); the rules and their sources are
// in docs/deploy.md.
#include "stowage/deploy.h"

#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace stowage {

namespace {

// How a parameter is divided over the tensor-parallel ranks.
enum class Split { Replicated, Column, KvColumn, Row, Vocab, Expert };

const std::set<std::string> kColumn = {"q_proj", "gate_proj", "up_proj", "gate_up_proj", "c_fc", "fc1", "w1", "w3"};
const std::set<std::string> kKv = {"k_proj", "v_proj"};
const std::set<std::string> kRow = {"o_proj", "down_proj", "c_proj", "fc2", "out_proj", "w2", "dense"};
const std::set<std::string> kVocab = {"embed_tokens", "lm_head", "wte"};

std::string leafOf(const std::string& module)
{
    const size_t dot = module.rfind('.');
    return dot == std::string::npos ? module : module.substr(dot + 1);
}

Split splitOf(const Param& p, const std::string& module)
{
    if (p.experts > 0)
        return Split::Expert;
    const std::string leaf = leafOf(module);
    const bool bias = p.name.size() >= 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (kKv.count(leaf))
        return Split::KvColumn;
    if (kColumn.count(leaf))
        return Split::Column;
    if (kRow.count(leaf))
        return bias ? Split::Replicated : Split::Row; // a row-parallel layer adds its bias after the all-reduce
    if (kVocab.count(leaf))
        return Split::Vocab;
    return Split::Replicated;
}

// One parameter's bytes and where it goes.
struct Piece {
    uint64_t bytes = 0;
    Split split = Split::Replicated;
    int64_t experts = 0;
    int layer = -1;   // decoder layer, or -1
    bool tail = false; // after the layers (final norm, head): the last stage
};

struct Shape {
    int64_t heads = 0, kvHeads = 0, headDim = 0, hidden = 0, inner = 0, vocab = 0, layers = 0;
    bool tied = false;
    std::vector<LayerCacheShape> cache; // per layer where not uniform (MLA, windows)
};

// One crossing of the hidden state between a GPU and its host, beside its
// bytes over PCIe: a synchronisation of llama.cpp's graph split (assumed).
constexpr double kPcieHop = 10e-6;

double dtypeBytes(const ModuleTree& tree) { return double(dtypeSize(tree.dtype().value_or(DType::BF16))); }

std::string fixed(double v, int decimals)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

} // namespace

const char* servingEngineName(ServingEngine e)
{
    switch (e) {
    case ServingEngine::Vllm: return "vllm";
    case ServingEngine::Sglang: return "sglang";
    case ServingEngine::Tgi: return "tgi";
    case ServingEngine::LlamaCpp: return "llama.cpp";
    case ServingEngine::TransformersTp: return "transformers";
    }
    return "?";
}

std::optional<ServingEngine> servingEngineFromName(const std::string& name)
{
    for (ServingEngine e : {ServingEngine::Vllm, ServingEngine::Sglang, ServingEngine::Tgi, ServingEngine::LlamaCpp,
                            ServingEngine::TransformersTp})
        if (name == servingEngineName(e))
            return e;
    return std::nullopt;
}

DeployCluster clusterFromPreset(const std::string& preset, int nodes, int gpusPerNode)
{
    if (nodes < 1 || gpusPerNode < 1 || nodes > 1024 || gpusPerNode > 64)
        throw InputError("cluster", "expected 1 to 1024 nodes of 1 to 64 GPUs each");
    DeployCluster c;
    c.nodes = nodes;
    c.gpusPerNode = gpusPerNode;
    const HardwareProfile host = hardwarePreset(preset);
    c.gpu = host.gpus.front();
    c.hostMemoryBytes = host.ramBytes;
    c.hostMemoryBandwidth = host.ramBandwidth;
    c.hostFlops = host.cpuFlops;
    // The data-centre cards as they ship in 8-GPU servers (SXM, NVLink); the
    // others on PCIe (datasheet figures, one direction).
    if (preset == "h100-80gb" || preset == "h200") {
        c.linkBandwidth = 450e9;
        c.linkName = "NVLink 4 (450 GB/s a direction)";
    } else if (preset == "a100-40gb" || preset == "a100-80gb") {
        c.linkBandwidth = 300e9;
        c.linkName = "NVLink 3 (300 GB/s a direction)";
    } else {
        c.linkBandwidth = c.gpu.h2dPinned;
        c.linkName = "PCIe (" + fixed(c.gpu.h2dPinned / 1e9, 0) + " GB/s)";
    }
    c.linkLatency = c.linkBandwidth >= 300e9 ? 5e-6 : 10e-6;
    return c;
}

std::vector<int> pipelineLayers(int layers, int stages)
{
    if (stages < 1 || layers < stages)
        throw InputError("pipeline", std::to_string(layers) + " layers cannot fill " + std::to_string(stages) +
                                         " pipeline stages");
    std::vector<int> out(size_t(stages), layers / stages);
    const int rem = layers % stages;
    for (int i = 2; i < rem + 2; ++i)
        ++out[size_t(stages - i)];
    return out;
}

int64_t paddedVocab(int64_t vocab) { return (vocab + 63) / 64 * 64; }

DeployPlan planDeployment(const ModuleTree& tree, const ModelConfig& config, const DeployCluster& cluster,
                          const DeployRequest& req, const std::string& modelId)
{
    const ModelConfig text = config.textConfig();
    const auto attention = attentionShape(config);
    if (!attention)
        throw InputError(config.path(), "model_type '" + config.modelType() +
                                            "': Stowage does not know its attention, so it cannot shard it");
    if (tree.noSplitClasses().empty())
        throw InputError(config.path(), "the model has no decoder layer class to divide into stages");
    if (req.contextTokens < 1 || req.sequences < 1)
        throw InputError("deploy", "the context and the number of sequences must be positive");
    Shape s;
    s.heads = text.positive("num_attention_heads");
    s.kvHeads = attention->kvHeads;
    s.headDim = attention->headDim;
    s.hidden = attention->hidden;
    s.inner = attention->inner;
    s.vocab = text.integer("vocab_size", 0);
    s.tied = text.boolOr("tie_word_embeddings", config.boolOr("tie_word_embeddings", false));
    s.cache = attention->cache;

    // Each parameter with its layer (pre-order: a layer's subtree is one range).
    const auto& mods = tree.modules();
    const std::string layerClass = tree.noSplitClasses()[0];
    std::vector<Piece> pieces;
    int layer = -1, layerEnd = -1, seenLayers = 0;
    for (size_t m = 0; m < mods.size(); ++m) {
        if (int(m) >= layerEnd)
            layer = -1;
        if (mods[m].className == layerClass && layer < 0) {
            layer = seenLayers++;
            layerEnd = mods[m].end;
        }
        for (int pi : mods[m].params) {
            const Param& p = tree.params()[size_t(pi)];
            if (p.duplicate || !tree.exists(p))
                continue;
            Piece piece;
            piece.bytes = tree.paramBytes(p);
            piece.split = splitOf(p, mods[m].name);
            piece.experts = p.experts;
            piece.layer = layer;
            piece.tail = layer < 0 && seenLayers > 0;
            pieces.push_back(piece);
        }
    }
    s.layers = seenLayers;
    if (s.layers == 0)
        throw InputError(config.path(), "no decoder layers of class " + layerClass + " to shard");

    const bool vllmLike = req.engine == ServingEngine::Vllm || req.engine == ServingEngine::Sglang;
    const double el = dtypeBytes(tree);
    const double fraction = req.memoryFraction ? *req.memoryFraction
                            : req.engine == ServingEngine::Vllm     ? 0.92
                            : req.engine == ServingEngine::Sglang   ? 0.88
                            : req.engine == ServingEngine::Tgi      ? 0.90
                            : req.engine == ServingEngine::LlamaCpp
                                ? 1.0 - double(uint64_t(1) << 30) / double(cluster.gpu.memoryBytes)
                                : 0.95;
    const int total = cluster.nodes * cluster.gpusPerNode;
    // KV cache: vLLM's 16-token blocks, SGLang's pages of 1; llama.cpp keeps
    // each sequence's cells padded to 256 in F16 (--cache-type-k/-v's
    // default), whatever the weights' type (llama-server 0.7.0's own log:
    // "-c 300" gives 512 cells, K (f16)).
    const bool llamaCpp = req.engine == ServingEngine::LlamaCpp;
    const int block = req.engine == ServingEngine::Sglang ? 1 : llamaCpp ? 256 : 16;
    const double kvEl = llamaCpp ? 2.0 : el;
    const int64_t tokens = (int64_t(req.contextTokens) + block - 1) / block * block * req.sequences;

    const int64_t topK = tree.expertsPerToken();
    const bool moe = std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) { return p.experts > 0; });
    DeployPlan plan;
    std::vector<int> tps;
    if (req.engine == ServingEngine::LlamaCpp)
        tps = {1}; // -sm layer: whole layers per GPU, a pipeline
    else
        for (int t = 1; t <= cluster.gpusPerNode; ++t)
            if (cluster.gpusPerNode % t == 0)
                tps.push_back(t);
    for (int tp : tps) {
        const int maxPp = req.engine == ServingEngine::Tgi || req.engine == ServingEngine::TransformersTp ? 1 : total / tp;
        for (int pp = 1; pp <= maxPp; ++pp) {
            if (tp * pp != total && !(pp == 1 && tp * pp <= cluster.gpusPerNode))
                continue; // a choice uses the whole cluster, or part of one node
            DeployChoice c;
            c.tp = tp;
            c.pp = pp;
            c.ep = moe && req.expertParallel && vllmLike ? tp : 1;
            // The engine's own rules first.
            std::vector<std::string> refusals;
            if (s.heads % tp != 0)
                refusals.push_back(std::to_string(s.heads) + " attention heads do not divide by " + std::to_string(tp));
            if (req.engine == ServingEngine::Tgi || req.engine == ServingEngine::TransformersTp) {
                if (s.kvHeads % tp != 0)
                    refusals.push_back(std::to_string(s.kvHeads) + " KV heads do not divide by " + std::to_string(tp) +
                                       " (this engine does not replicate them)");
            } else if (s.kvHeads % tp != 0 && tp % s.kvHeads != 0) {
                refusals.push_back(std::to_string(s.kvHeads) + " KV heads and " + std::to_string(tp) +
                                   " GPUs: neither divides the other");
            }
            if (vllmLike && s.vocab > 0 && paddedVocab(s.vocab) % tp != 0)
                refusals.push_back("the padded vocabulary (" + std::to_string(paddedVocab(s.vocab)) +
                                   ") does not divide by " + std::to_string(tp));
            if (pp > s.layers)
                refusals.push_back(std::to_string(s.layers) + " layers cannot fill " + std::to_string(pp) + " stages");
            if (!refusals.empty()) {
                c.why = refusals.front();
                plan.choices.push_back(c);
                continue;
            }
            c.layersPerStage = pipelineLayers(int(s.layers), pp);
            std::vector<int> stageOf(size_t(s.layers));
            for (int st = 0, l = 0; st < pp; ++st)
                for (int k = 0; k < c.layersPerStage[size_t(st)]; ++k)
                    stageOf[size_t(l++)] = st;
            // Bytes per rank of each stage (the most loaded rank: the first
            // ones hold the remainder experts).
            const int64_t kvRank = s.kvHeads >= tp ? s.kvHeads / tp : 1;
            const int64_t vocabRows =
                s.vocab > 0 ? (vllmLike ? paddedVocab(s.vocab) / tp : (s.vocab + tp - 1) / tp) : 0;
            std::vector<double> stageBytes(size_t(pp), 0.0), stageRead(size_t(pp), 0.0);
            // Routed experts a rank holds a layer, and what a token reads of them.
            std::vector<double> layerExperts(size_t(s.layers), 0.0), layerExpertsRead(size_t(s.layers), 0.0);
            for (const Piece& p : pieces) {
                double b = double(p.bytes);
                switch (p.split) {
                case Split::Replicated: break;
                case Split::Column:
                case Split::Row: b /= tp; break;
                case Split::KvColumn: b = b * double(kvRank) / double(s.kvHeads); break;
                case Split::Vocab: b = s.vocab > 0 ? b * double(vocabRows) / double(s.vocab) : b / tp; break;
                case Split::Expert:
                    b = c.ep > 1 ? b * double((p.experts + c.ep - 1) / c.ep) / double(p.experts) : b / tp;
                    break;
                }
                const int st = p.layer >= 0 ? stageOf[size_t(p.layer)] : p.tail ? pp - 1 : 0;
                stageBytes[size_t(st)] += b;
                // A token reads top-k of a layer's E experts: that share of what a rank holds of them.
                const double read = p.experts > 0 && topK > 0 ? b * std::min(1.0, double(topK) / double(p.experts)) : b;
                stageRead[size_t(st)] += read;
                if (p.experts > 0 && p.layer >= 0) {
                    layerExperts[size_t(p.layer)] += b;
                    layerExpertsRead[size_t(p.layer)] += read;
                }
                // a tied embedding is the head too: the last stage holds it as well
                if (p.split == Split::Vocab && s.tied && !p.tail && p.layer < 0 && pp > 1) {
                    stageBytes[size_t(pp - 1)] += b;
                    stageRead[size_t(pp - 1)] += b;
                }
            }
            // KV per position on each stage's GPUs.
            std::vector<double> stageKv(size_t(pp), 0.0);
            for (int l = 0; l < s.layers; ++l) {
                double perPosition = 2.0 * double(kvRank * s.headDim) * kvEl;
                if (!s.cache.empty() && size_t(l) < s.cache.size()) {
                    const LayerCacheShape& lc = s.cache[size_t(l)];
                    // MLA's latent is one "head", on every rank; windows are kept whole (vLLM pages them too)
                    perPosition = lc.elementsPerPosition < 2 * s.kvHeads * s.headDim
                                      ? double(lc.elementsPerPosition) * kvEl
                                      : double(lc.elementsPerPosition) * kvEl * double(kvRank) / double(s.kvHeads);
                }
                stageKv[size_t(stageOf[size_t(l)])] += perPosition;
            }
            for (int st = 0; st < pp; ++st)
                c.stageKv.push_back(uint64_t(stageKv[size_t(st)] * double(tokens)));
            c.kvPerGpu = *std::max_element(c.stageKv.begin(), c.stageKv.end());
            // Activations of a 2,048-token prefill chunk (the hidden state's
            // widest, divided by TP) and 512 MiB for CUDA graphs and the
            // allocator: an estimate; the engines measure theirs at start-up.
            c.overheadPerGpu = uint64_t(2048.0 * double(std::max(s.inner / tp, 3 * s.hidden)) * el) + (uint64_t(512) << 20);
            c.usablePerGpu = uint64_t(double(cluster.gpu.memoryBytes) * fraction);

            // What each GPU holds and how fast a token decodes with the
            // experts of the first `cpuLayers` layers in host RAM (0: none).
            const double message = double(s.hidden) * el;
            const double allReduce =
                tp > 1 ? 2 * cluster.linkLatency + 2.0 * (tp - 1) / tp * message / cluster.linkBandwidth : 0;
            // Returns whether every GPU holds its share (the host's RAM aside).
            auto settle = [&](DeployChoice& d, int cpuLayers) {
                d.cpuMoeLayers = cpuLayers;
                d.stageWeights.clear();
                d.hostBytes = 0;
                std::vector<double> held = stageBytes, gpuRead = stageRead, hostRead(size_t(pp), 0.0);
                std::vector<int> hostLayers(size_t(pp), 0);
                for (int l = 0; l < cpuLayers; ++l) {
                    const size_t st = size_t(stageOf[size_t(l)]);
                    held[st] -= layerExperts[size_t(l)];
                    gpuRead[st] -= layerExpertsRead[size_t(l)];
                    hostRead[st] += layerExpertsRead[size_t(l)];
                    hostLayers[st] += 1;
                    d.hostBytes += uint64_t(layerExperts[size_t(l)]);
                }
                for (double bytes : held)
                    d.stageWeights.push_back(uint64_t(std::max(0.0, bytes)));
                size_t busiest = 0;
                for (size_t st = 0; st < size_t(pp); ++st)
                    if (d.stageWeights[st] + d.stageKv[st] > d.stageWeights[busiest] + d.stageKv[busiest])
                        busiest = st;
                d.weightsPerGpu = *std::max_element(d.stageWeights.begin(), d.stageWeights.end());
                const uint64_t need = d.stageWeights[busiest] + d.stageKv[busiest] + d.overheadPerGpu;
                const bool gpusHoldIt = need <= d.usablePerGpu;
                d.fits = gpusHoldIt;
                d.why.clear();
                if (!d.fits)
                    d.why = "needs " + humanBytes(need) + " a GPU (weights " + humanBytes(d.stageWeights[busiest]) +
                            ", KV cache " + humanBytes(d.stageKv[busiest]) + ", activations and graphs " +
                            humanBytes(d.overheadPerGpu) + ") of " + humanBytes(d.usablePerGpu) + " usable";
                else if (cluster.hostMemoryBytes > 0 && d.hostBytes > cluster.hostMemoryBytes) {
                    d.fits = false;
                    d.why = "the experts kept in RAM need " + humanBytes(d.hostBytes) + " of the host's " +
                            humanBytes(cluster.hostMemoryBytes);
                }
                // Decode, one sequence: the stages one after another, each
                // reading what a token uses of its rank's weights; two
                // all-reduces a layer within a stage (after attention and
                // after the MLP) and a hop between stages. Experts in host RAM
                // are read by its CPU, the hidden state crossing PCIe there
                // and back each such layer.
                double seconds = 0;
                for (int st = 0; st < pp; ++st) {
                    const double gpu = gpuRead[size_t(st)], host = hostRead[size_t(st)];
                    seconds += std::max(gpu / cluster.gpu.memoryBandwidth, 2.0 * gpu / el / cluster.gpu.flops) +
                               2.0 * c.layersPerStage[size_t(st)] * allReduce;
                    if (host > 0)
                        seconds += std::max(host / cluster.hostMemoryBandwidth, 2.0 * host / el / cluster.hostFlops) +
                                   2.0 * hostLayers[size_t(st)] * (kPcieHop + message / cluster.gpu.h2dPinned);
                }
                const int nodesUsed = (tp * pp + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
                const int crossings = nodesUsed - 1;
                seconds += double(pp - 1 - crossings) * (cluster.linkLatency + message / cluster.linkBandwidth) +
                           double(crossings) * (cluster.networkLatency + message / cluster.networkBandwidth);
                d.tokensPerSecond = seconds > 0 ? 1.0 / seconds : 0;
                return gpusHoldIt;
            };
            settle(c, 0);
            plan.choices.push_back(c);
            // llama.cpp keeps the experts of its first N layers on the CPU
            // (--n-cpu-moe N): offer the fewest that make every GPU fit,
            // saying so when the host's RAM cannot hold them.
            if (llamaCpp && moe && !c.fits && cluster.hostMemoryBandwidth > 0) {
                DeployChoice h = c;
                for (int n = 1; n <= s.layers; ++n)
                    if (settle(h, n)) {
                        plan.choices.push_back(h);
                        break;
                    }
            }
        }
    }
    std::stable_sort(plan.choices.begin(), plan.choices.end(), [](const DeployChoice& a, const DeployChoice& b) {
        if (a.fits != b.fits)
            return a.fits;
        return a.tokensPerSecond > b.tokensPerSecond;
    });

    // The launch for each choice that fits.
    const std::string ctx = std::to_string(req.contextTokens);
    for (DeployChoice& c : plan.choices) {
        if (!c.fits)
            continue;
        const int nodesUsed = (c.tp * c.pp + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
        std::string cmd;
        switch (req.engine) {
        case ServingEngine::Vllm:
            if (nodesUsed > 1)
                cmd += "# on the head node: ray start --head --port=6379\n"
                       "# on each other node: ray start --address=HEAD_IP:6379\n";
            cmd += "vllm serve " + modelId + " --tensor-parallel-size " + std::to_string(c.tp) +
                   " --pipeline-parallel-size " + std::to_string(c.pp) + (c.ep > 1 ? " --enable-expert-parallel" : "") +
                   " --gpu-memory-utilization " + fixed(fraction, 2) + " --max-model-len " + ctx + " --max-num-seqs " +
                   std::to_string(req.sequences) + (nodesUsed > 1 ? " --distributed-executor-backend ray" : "");
            break;
        case ServingEngine::Sglang:
            for (int n = 0; n < nodesUsed; ++n) {
                if (nodesUsed > 1)
                    cmd += "# node " + std::to_string(n) + "\n";
                cmd += "python3 -m sglang.launch_server --model-path " + modelId + " --tp-size " + std::to_string(c.tp) +
                       (c.pp > 1 ? " --pp-size " + std::to_string(c.pp) : "") +
                       (c.ep > 1 ? " --ep-size " + std::to_string(c.ep) : "") + " --mem-fraction-static " +
                       fixed(fraction, 2) + " --context-length " + ctx +
                       (nodesUsed > 1 ? " --nnodes " + std::to_string(nodesUsed) + " --node-rank " + std::to_string(n) +
                                            " --dist-init-addr NODE0_IP:20000"
                                      : "") +
                       (n + 1 < nodesUsed ? "\n" : "");
            }
            break;
        case ServingEngine::Tgi:
            cmd = "text-generation-launcher --model-id " + modelId + " --num-shard " + std::to_string(c.tp) +
                  " --max-total-tokens " + ctx + " --max-input-tokens " + std::to_string(req.contextTokens - 1);
            break;
        case ServingEngine::LlamaCpp: {
            // Layers per device, the other nodes' GPUs (RPC devices) after this node's.
            std::string split, rpc;
            for (int i = 0; i < c.pp && c.pp > 1; ++i)
                split += (split.empty() ? "" : ",") + std::to_string(c.layersPerStage[size_t(i)]);
            for (int n = 1; n < nodesUsed; ++n) {
                cmd += "# on node " + std::to_string(n) + ": ggml-rpc-server -H 0.0.0.0 -p 50052\n";
                rpc += (rpc.empty() ? "" : ",") + std::string("NODE") + std::to_string(n) + "_IP:50052";
            }
            cmd += "llama-server -m MODEL.gguf -ngl all" +
                   (split.empty() ? std::string() : " --split-mode layer --tensor-split " + split) + " -c " +
                   std::to_string(int64_t(req.contextTokens) * req.sequences) + " --parallel " +
                   std::to_string(req.sequences) +
                   (c.cpuMoeLayers > 0 ? " --n-cpu-moe " + std::to_string(c.cpuMoeLayers) : std::string()) +
                   (rpc.empty() ? "" : " --rpc " + rpc);
            break;
        }
        case ServingEngine::TransformersTp:
            cmd = "torchrun --nproc-per-node " + std::to_string(c.tp) +
                  " serve_tp.py  # serve_tp.py: AutoModelForCausalLM.from_pretrained(\"" + modelId +
                  "\", dtype=\"auto\", tp_plan=\"auto\")";
            break;
        }
        c.command = cmd;
    }
    plan.notes.push_back("GPUs: " + std::to_string(cluster.nodes) + " node(s) x " + std::to_string(cluster.gpusPerNode) +
                         " " + cluster.gpu.name + ", " + cluster.linkName +
                         " within a node, 100 Gb/s Ethernet between nodes (assumed).");
    plan.notes.push_back(std::string(servingEngineName(req.engine)) + " may use " + fixed(100 * fraction, 0) +
                         "% of each GPU; activations and CUDA graphs are estimated (2,048-token chunk + 512 MiB), "
                         "the engine measures its own at start-up.");
    if (std::any_of(plan.choices.begin(), plan.choices.end(), [](const DeployChoice& c) { return c.cpuMoeLayers > 0; }))
        plan.notes.push_back("--n-cpu-moe N keeps the routed experts of the first N layers in the host's RAM, "
                             "multiplied there by its CPU: " + fixed(double(cluster.hostMemoryBytes) / 1e9, 0) + " GB at " +
                             fixed(cluster.hostMemoryBandwidth / 1e9, 0) + " GB/s (the preset's typical host, assumed).");
    return plan;
}

} // namespace stowage
