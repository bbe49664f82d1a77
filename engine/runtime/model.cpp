#include "families/runner.h"
#include "cudacopy.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/kvcache.h"
#include "stowage/model.h"
#include "stowage/quantization.h"
#include "stowage/runtimeinfo.h"
#include "stowage/runtimeenv.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

namespace stowage {

struct Model::Impl {
    std::shared_ptr<Telemetry> telemetryPtr;
    Telemetry& telemetry;
    explicit Impl(std::shared_ptr<Telemetry> t) : telemetryPtr(std::move(t)), telemetry(*telemetryPtr) {}
    // Passes tile the time from one pass's start to the next's: the disk
    // bytes read in that span are the pass's (read ahead for the next pass
    // included, its own read ahead in the span before), none lost between.
    // A generation's last span stays open: it holds read-ahead for a pass
    // that may never run; the next pass closes it.
    uint64_t passStart = 0;
    bool passOpen = false;
    void beginPass()
    {
        if (passOpen)
            telemetry.setLastPassDiskRead(telemetry.diskReadBytes() - passStart);
        passStart = telemetry.diskReadBytes();
        passOpen = true;
    }
    std::string modelType;
    std::unique_ptr<WeightStore> store;
    std::unique_ptr<arch::Runner> runner;
    std::vector<std::string> units; // the family's execution units (families.h), in run order
    std::vector<arch::LayerCache> cache;
    int64_t cached = 0;

    // What a budgeted (simulated or real) GPU holds besides weights, counted
    // against its budget as the planner's KV reserve counts it: each
    // decoder layer's KV buffers on the device its unit computes on, and,
    // during a pass of T tokens, the activation room the reserve keeps for T
    // (kvcache.h; a real GPU's allocator holds those activations then). A
    // cache that outgrows the budget fails the step with the device named.
    const ModelConfig* config = nullptr;
    const ModuleTree* tree = nullptr;
    std::vector<std::string> cacheUnit;  // per decoder layer: its module (empty: not counted)
    std::vector<uint64_t> cacheHeld;     // bytes counted for its buffers
    std::vector<std::string> activationDevices; // GPUs some unit computes on
    void releaseCaches()
    {
        for (size_t l = 0; l < cacheHeld.size(); ++l)
            if (cacheHeld[l] > 0)
                telemetry.release(store->unitDevice(cacheUnit[l]).label(), cacheHeld[l]);
        cacheHeld.assign(cacheHeld.size(), 0);
    }
    // After a pass: the buffers' bytes now, counted where they live.
    void countCaches()
    {
        for (size_t l = 0; l < cache.size() && l < cacheUnit.size(); ++l) {
            if (cacheUnit[l].empty())
                continue;
            const arch::LayerCache& c = cache[l];
            const uint64_t now = uint64_t((c.k.defined() ? c.k.nbytes() : 0) + (c.v.defined() ? c.v.nbytes() : 0));
            const std::string device = store->unitDevice(cacheUnit[l]).label();
            if (now > cacheHeld[l]) {
                telemetry.allocate(device, now - cacheHeld[l], "the KV cache of " + cacheUnit[l]);
                cacheHeld[l] = now;
            } else if (now < cacheHeld[l]) {
                telemetry.release(device, cacheHeld[l] - now);
                cacheHeld[l] = now;
            }
        }
    }
    uint64_t activationFor(int64_t tokens) const
    {
        if (!config || !tree)
            return 0;
        const auto r = kvReserveFor(*config, *tree, int(std::min<int64_t>(tokens, 1 << 30)), 1,
                                    tree->dtype().value_or(DType::F32));
        return r ? r->activationBytes : 0;
    }
};

Model::Model(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const Checkpoint& ck, const ModuleTree& tree, const LoadOptions& options,
                                   const ProgressFn& progress)
{
    if (!ck.config())
        throw InputError(ck.weightsPath(), "running needs config.json beside the weights");
    const ModelConfig& cfg = *ck.config();
    auto types = runnableModelTypes();
    if (std::find(types.begin(), types.end(), cfg.modelType()) == types.end()) {
        std::string list;
        for (const auto& t : types)
            list += (list.empty() ? "" : ", ") + t;
        throw InputError(cfg.path(), "model_type '" + cfg.modelType() + "' cannot be run yet (runnable: " + list +
                                         "); inspect and plan work for it");
    }
    // MXFP4 (gpt-oss) and fine-grained FP8 weights are dequantized per unit
    // as they are fetched (weightstore.h); the other quantizers are planned
    // and inspected only.
    if (const auto q = quantizationOf(cfg); q && !quantizationRuns(*q))
        throw InputError(cfg.path(), "quantization_config (" + q->label() +
                                         ") can be planned and inspected but not run here: running reads MXFP4 "
                                         "and block-wise FP8 (dynamic activations) weights; an unquantized "
                                         "(bf16, fp16 or fp32) checkpoint of the model can be run");
    if (ck.indexOnly())
        throw InputError(ck.weightsPath(), "the shards are not downloaded: running needs the weights");
    at::set_num_threads(loadThreads(options.threads));
    pinAllocator(); // accelerate-like's copies into the same memory every run (runtimeenv.h)

    auto impl = std::make_unique<Impl>(options.telemetry ? options.telemetry : std::make_shared<Telemetry>());
    impl->modelType = cfg.modelType();
    impl->telemetry.startSampling(20);
    if (cuda::compiledIn() && !options.simulateGpus && cudaAvailable()) {
        std::vector<int> gpus; // the real GPUs the map uses
        for (const auto& [name, device] : options.deviceMap)
            if (device.kind == Device::Gpu && std::find(gpus.begin(), gpus.end(), device.index) == gpus.end())
                gpus.push_back(device.index);
        if (!gpus.empty())
            impl->telemetry.setCudaProbe([gpus] {
                std::map<std::string, uint64_t> out;
                for (int i : gpus)
                    out[std::to_string(i)] = cuda::allocatedBytes(i);
                return out;
            });
    }
    impl->store = std::make_unique<WeightStore>(ck, tree, options, impl->telemetry);
    impl->store->load(progress); // a throw here releases everything loaded so far
    impl->runner = arch::makeRunner(cfg, *impl->store);
    impl->units = executionUnits(tree);
    impl->store->setOrder(impl->units);
    impl->cache.resize(size_t(impl->runner->layers()));
    // The decoder layers the caches belong to: the modules of the reserve's
    // layer class, in definition order (kvcache.h), one per cache.
    impl->config = &cfg;
    impl->tree = &tree;
    if (!tree.noSplitClasses().empty()) {
        std::vector<std::string> layers;
        for (const Module& m : tree.modules())
            if (m.className == tree.noSplitClasses()[0])
                layers.push_back(m.name);
        if (layers.size() == impl->cache.size())
            impl->cacheUnit = std::move(layers);
    }
    impl->cacheHeld.assign(impl->cacheUnit.size(), 0);
    for (const std::string& u : impl->units) {
        const RtDevice& d = impl->store->unitDevice(u);
        if (d.device.kind == Device::Gpu &&
            std::find(impl->activationDevices.begin(), impl->activationDevices.end(), d.label()) ==
                impl->activationDevices.end())
            impl->activationDevices.push_back(d.label());
    }
    std::unique_ptr<Model> model(new Model(std::move(impl)));
    model->resetCache();
    return model;
}

std::vector<float> Model::forward(const std::vector<int32_t>& ids, bool allPositions)
{
    if (ids.empty())
        return {};
    c10::NoGradGuard noGrad; // c10's: ATen.h of LibTorch 2.x no longer declares at::NoGradGuard
    std::vector<int64_t> ids64(ids.begin(), ids.end());
    for (int64_t id : ids64)
        if (id < 0 || id >= m_impl->runner->vocabSize())
            throw InputError("prompt token ids", "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                 std::to_string(m_impl->runner->vocabSize() - 1) + ")");
    at::Tensor t = at::tensor(ids64, at::kLong).view({1, int64_t(ids64.size())});
    at::Tensor logits;
    m_impl->beginPass();
    // The activation room of this pass, on each GPU a unit computes on.
    const uint64_t activation = m_impl->activationFor(int64_t(ids.size()));
    std::vector<std::string> heldActivation;
    struct ActivationRoom {
        Impl& impl;
        uint64_t bytes;
        std::vector<std::string>& held;
        ~ActivationRoom()
        {
            for (const std::string& d : held)
                impl.telemetry.release(d, bytes);
        }
    } room{*m_impl, activation, heldActivation};
    try {
        for (const std::string& d : m_impl->activationDevices) {
            m_impl->telemetry.allocate(d, activation, "activations of a pass of " + std::to_string(ids.size()) +
                                                          (ids.size() == 1 ? " token" : " tokens"));
            heldActivation.push_back(d);
        }
        logits = m_impl->runner->forward(t, m_impl->cached, m_impl->cache);
        try {
            m_impl->countCaches();
        } catch (const InputError& e) {
            // Say at which context; the step is undone below, the tokens so far stay the caller's.
            throw InputError(e.file(), e.problem() + " (at a context of " +
                                           std::to_string(m_impl->cached + int64_t(ids.size())) +
                                           " tokens; a plan with a KV-cache reserve for the context keeps room for it)");
        }
    } catch (const c10::Error& e) {
        // A real CUDA out-of-memory while computing: name where it happened;
        // the failed step's cache entries are dropped, the model stays usable.
        const std::string what = e.what_without_backtrace();
        resetCache();
        m_impl->store->releaseAll();
        if (what.find("out of memory") == std::string::npos)
            throw;
        const std::string& unit = m_impl->store->lastUnit();
        throw InputError("device " + m_impl->store->unitDevice(unit).label(),
                         "out of memory while running " + (unit.empty() ? std::string("the model") : unit) + ": " + what);
    } catch (...) {
        resetCache(); // some layers already appended this step's keys and values
        m_impl->store->releaseAll();
        throw;
    }
    m_impl->cached += int64_t(ids.size());
    if (!allPositions)
        logits = logits[-1];
    logits = logits.contiguous();
    const float* p = logits.data_ptr<float>();
    return std::vector<float>(p, p + logits.numel());
}

void Model::resetCache(int expectedPositions)
{
    m_impl->releaseCaches();
    arch::LayerCache empty;
    empty.expected = std::max(0, expectedPositions);
    // fp16 weights computed in fp32 on the CPU: keys and values in fp16 (runner.h)
    const WeightStore& s = *m_impl->store;
    if (s.weightDType() == at::kHalf && s.computeDType() == at::kFloat)
        empty.storeAs = at::kHalf;
    m_impl->cache.assign(m_impl->cache.size(), empty);
    m_impl->cached = 0;
}

void Model::idle() { m_impl->store->releaseAll(); }
void Model::settle() { m_impl->store->settle(); }

int Model::vocabSize() const { return int(m_impl->runner->vocabSize()); }
int Model::cachedTokens() const { return int(m_impl->cached); }
const std::string& Model::modelType() const { return m_impl->modelType; }
std::vector<std::string> Model::deviceDescriptions() const { return m_impl->store->deviceDescriptions(); }
Telemetry& Model::telemetry() { return m_impl->telemetry; }
void Model::setInterrupt(const std::atomic<bool>* flag) { m_impl->store->setInterrupt(flag); }
void Model::setUnitDelay(double seconds) { m_impl->store->setUnitDelay(seconds); }
std::vector<std::string> Model::units() const { return m_impl->units; }
std::string Model::unitDevice(const std::string& unit) const { return m_impl->store->unitDevice(unit).label(); }

} // namespace stowage
