#include "weightstore.h"
#include "weightstoreslot.h"

#include "families/gemv.h"

#include "cudacopy.h"
#include "stowage/hardware.h"
#include "torchtypes.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h> // device_count(): the same call in LibTorch 1.13 and 2.x

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <filesystem>

namespace stowage {

namespace {

// A CPU copy of `src` in `dtype` in memory of its own (mmap), given back to
// the system the moment the tensor dies. Through malloc, a weight copy could
// land at the top of a thread's arena, which malloc_trim leaves alone: an
// unload then kept 20-30 MiB of a 30 MB model resident in about one run of
// ten (glibc's arena choice varies with thread timing). Tensors under
// 64 KiB (norms, biases) go through malloc.
at::Tensor ownedHostCopy(const at::Tensor& src, at::ScalarType dtype)
{
    const size_t bytes = size_t(src.numel()) * c10::elementSize(dtype);
    if (bytes < (size_t(64) << 10))
        return src.to(at::kCPU, dtype, false, /*copy=*/true);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        throw c10::Error({__func__, __FILE__, uint32_t(__LINE__)},
                         "could not allocate memory for a copy of " + std::to_string(bytes) + " bytes (" +
                             std::strerror(errno) + ")");
    at::Tensor t = at::from_blob(p, src.sizes(), [bytes](void* q) { ::munmap(q, bytes); },
                                 at::TensorOptions().dtype(dtype).device(at::kCPU));
    t.copy_(src);
    return t;
}

} // namespace

WeightStore::WeightStore(const Checkpoint& ck, const ModuleTree& tree, const LoadOptions& options, Telemetry& telemetry)
    : m_ck(ck), m_tree(tree), m_options(options), m_telemetry(telemetry)
{
    bool anyGpu = false;
    for (const auto& [k, d] : options.deviceMap)
        anyGpu = anyGpu || d.kind == Device::Gpu;
    DType dt = options.dtype ? *options.dtype : (tree.dtype() ? *tree.dtype() : DType::F32);
    m_computeDType = m_weightDType = toTorch(dt);
    m_devices.push_back(RtDevice{Device::cpu(), at::Device(at::kCPU), false});
    m_exec = &m_devices.front();
    if (anyGpu)
        m_exec = &deviceFor(Device::gpu(0));
    // LibTorch 1.13 has no half-precision matmul on the CPU: fp16 weights are
    // held as they are and the activations are fp32 (families/common.cpp),
    // where this CPU has a kernel that widens them as it streams; without
    // one (no AVX2, or STOWAGE_GEMV=none) they are widened once, at load.
    if (m_exec->torch.is_cpu() && m_computeDType == at::kHalf) {
        m_computeDType = at::kFloat;
        if (arch::gemvKernelFor(at::kHalf) == arch::GemvKernel::None)
            m_weightDType = at::kFloat;
    }
    for (const auto& b : options.gpuBudgets)
        if (b.device.kind == Device::Gpu)
            m_telemetry.setLimit(b.device.name(), uint64_t(b.bytes));
}

WeightStore::~WeightStore()
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
    }
    m_cv.notify_all();
    if (m_prefetcher.joinable())
        m_prefetcher.join();
}

RtDevice& WeightStore::deviceFor(const Device& d)
{
    for (auto& r : m_devices)
        if (r.device == d)
            return r;
    RtDevice r{d, at::Device(at::kCPU), false};
    if (d.kind == Device::Gpu) {
        const bool real = !m_options.simulateGpus && at::hasCUDA() && int64_t(d.index) < int64_t(torch::cuda::device_count());
        r.simulated = !real;
        if (real)
            r.torch = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index));
    }
    m_devices.push_back(r);
    return m_devices.back();
}

std::vector<std::string> WeightStore::deviceDescriptions() const
{
    std::vector<std::string> out;
    for (const auto& d : m_devices) {
        if (d.device.kind == Device::Gpu)
            out.push_back("GPU " + d.device.name() + (d.simulated ? " (simulated: budgeted CPU memory)" : " (CUDA)"));
        else
            out.push_back(d.device.name());
    }
    return out;
}

at::Tensor WeightStore::fromSource(const Slot& s) const
{
    // A view, never written: the mapping is read-only (PROT_READ), so a stray
    // in-place op would fault rather than corrupt the file. The deleter owns
    // nothing but a reference to the mapping, so a view that outlives the
    // store (or the Checkpoint) still points at mapped memory.
    const auto options = at::TensorOptions().dtype(toTorch(s.srcDType));
    if (!s.keep)
        return at::from_blob(const_cast<uint8_t*>(s.src), s.shape, options);
    return at::from_blob(
        const_cast<uint8_t*>(s.src), s.shape, [keep = s.keep](void*) {}, options);
}

// A CPU-resident weight is used in place from the checkpoint's mapping (zero
// copy, as Accelerate and llama.cpp do) when nothing about it must change: a
// safetensors tensor already in the compute dtype, aligned for its element
// type, computed with on the CPU. Its pages are then file-backed: the page
// cache holds the weights once, shared with every process that maps the file,
// and the kernel can drop and re-read them instead of swapping. Not when a
// real GPU executes offloaded units with fast copies: those want pinned host
// memory, which is a copy anyway.
bool WeightStore::usesInPlace(const Slot& s) const
{
    return s.home.kind == Device::Cpu && s.keep && readsInPlace(s) &&
           reinterpret_cast<uintptr_t>(s.src) % uintptr_t(at::elementSize(m_weightDType)) == 0 &&
           !(m_exec->torch.is_cuda() && m_options.policy != ExecutionPolicy::AccelerateLike);
}

// Disk weights are read straight from the original safetensors mapping when
// no conversion is needed (as transformers does); otherwise, and always for
// .bin files, they go through the offload folder.
bool WeightStore::readsInPlace(const Slot& s) const
{
    const TensorInfo* t = s.tensor;
    return t && s.quant == Slot::Quant::None && m_ck.shards()[size_t(t->shard)].format == WeightFormat::Safetensors &&
           toTorch(t->dtype) == m_weightDType;
}

void WeightStore::load(const ProgressFn& progress)
{
    // Every tree parameter gets a slot; tied duplicates point at their
    // original. A fused expert parameter stored per expert gets one slot per
    // stored tensor instead, homed where the map puts the parameter: loading
    // never assembles the fused tensor (no second copy of the experts), and
    // decoding reads only the experts the router picks (expert()). A fused
    // expert parameter the checkpoint holds whole gets one slot per expert
    // too, each a slice of the stored tensor's bytes (its mapping, never
    // the whole tensor copied).
    const auto& params = m_tree.params();
    std::vector<std::vector<int>> slotsOfTensor(m_ck.tensors().size());
    const auto addSlot = [&](const Param& p, const std::string& name, const std::vector<int64_t>& shape, int tensor) {
        auto slot = std::make_unique<Slot>();
        slot->name = name;
        slot->param = p.name;
        auto home = stowage::deviceFor(m_options.deviceMap, p.name);
        if (!home)
            throw InputError("device map", "tensor '" + p.name + "' is not covered by the device map");
        slot->home = *home;
        slot->homeDev = &deviceFor(*home);
        slot->shape = shape;
        uint64_t numel = 1;
        for (int64_t d : shape)
            numel *= uint64_t(d);
        slot->bytes = numel * uint64_t(at::elementSize(m_weightDType));
        if (tensor >= 0)
            slotsOfTensor[size_t(tensor)].push_back(int(m_slots.size()));
        m_byName[name] = slot.get();
        m_slots.push_back(std::move(slot));
        return m_slots.back().get();
    };
    for (const Param& p : params) {
        if (p.quantOnly || p.quantDropped)
            continue; // a quantizer's scale: read beside the weight it scales (setQuantized)
        if (!p.duplicate && !p.found())
            throw InputError(m_ck.weightsPath(), "the checkpoint lacks '" + p.name + "', which running needs");
        const bool slicedExperts = p.parts.empty() && p.experts > 0 && !p.duplicate && p.tensor >= 0;
        if (p.parts.empty() && !slicedExperts) {
            addSlot(p, p.name, p.shape, p.duplicate ? -1 : p.tensor);
            continue;
        }
        auto& parts = m_parts[p.name];
        if (slicedExperts) {
            const TensorInfo& t = m_ck.tensors()[size_t(p.tensor)];
            const std::vector<int64_t> shape(p.shape.begin() + 1, p.shape.end());
            const uint64_t sliceBytes = t.nbytes / uint64_t(p.experts);
            for (int64_t e = 0; e < p.experts; ++e) {
                Slot* s = addSlot(p, p.name + "[" + std::to_string(e) + "]", shape, p.tensor);
                s->onDemand = true;
                s->expert = e;
                s->sliceOf = p.experts;
                s->srcOffset = uint64_t(e) * sliceBytes;
                parts.push_back(s);
            }
            continue;
        }
        for (const StoredPart& part : p.parts) {
            Slot* s = addSlot(p, part.name, part.shape, part.tensor);
            s->onDemand = true;
            s->expert = part.index;
            parts.push_back(s);
        }
    }
    for (const Param& p : params)
        if (p.duplicate)
            m_byName.at(p.name)->tiedTo = m_byName.at(p.tiedTo);

    bool needOffload = false;
    uint64_t total = 0, done = 0;
    for (size_t ti = 0; ti < slotsOfTensor.size(); ++ti)
        if (!slotsOfTensor[ti].empty())
            total += m_ck.tensors()[ti].nbytes;

    // Reports how far the load is; false when the caller wants it cancelled.
    auto going = [&](const std::string& what) {
        return !progress || progress(total ? double(done) / double(total) : 0.0, what);
    };
    // Shard by shard, tensor by tensor: only one tensor's copy is in flight.
    for (size_t shard = 0; shard < m_ck.shards().size(); ++shard) {
        for (size_t ti = 0; ti < m_ck.tensors().size(); ++ti) {
            const TensorInfo& t = m_ck.tensors()[ti];
            if (size_t(t.shard) != shard || slotsOfTensor[ti].empty())
                continue;
            for (int si : slotsOfTensor[ti]) {
                Slot& s = *m_slots[size_t(si)];
                if (!going(s.name))
                    throw Cancelled();
                s.src = m_ck.data(t) + s.srcOffset;
                s.keep = m_ck.shards()[shard].map;
                s.tensor = &t;
                s.srcDType = t.dtype;
                setQuantized(s, t);
                if (s.home.kind == Device::Disk) {
                    needOffload = needOffload || (s.quant == Slot::Quant::None && !readsInPlace(s));
                } else if (s.quant != Slot::Quant::None) {
                    holdQuantized(s);
                } else {
                    m_telemetry.allocate(s.homeDev->label(), s.bytes, s.name);
                    if (usesInPlace(s)) {
                        s.resident = fromSource(s);
                        continue;
                    }
                    const double t0 = m_telemetry.now();
                    try {
                        s.resident = s.homeDev->torch.is_cpu()
                                         ? ownedHostCopy(fromSource(s), m_weightDType)
                                         : fromSource(s).to(s.homeDev->torch, m_weightDType, false, /*copy=*/true);
                    } catch (const c10::Error& e) {
                        throw InputError("device " + s.homeDev->label(),
                                         "cannot hold " + s.name + ": " + std::string(e.what_without_backtrace()));
                    }
                    if (s.homeDev->device.kind == Device::Gpu) {
                        m_telemetry.addH2D(s.bytes);
                        // Dispatch crosses the simulated link as every later copy
                        // does (fetchInto): a throttled load lasts as it would.
                        if (s.homeDev->simulated)
                            crossSimulatedLink(s.bytes, t0, [&] { return going(s.name); }); // a cancel lands within a slice
                    } else if (m_exec->torch.is_cuda() && m_options.policy != ExecutionPolicy::AccelerateLike)
                        s.resident = cuda::pinned(s.resident); // fast, asynchronous host-to-GPU copies
                }
            }
            done += t.nbytes;
        }
    }

    if (needOffload) {
        if (m_options.offloadFolder.empty())
            throw InputError("offload folder", "the map sends weights to disk that must be converted to " +
                                                   std::string(c10::toString(m_weightDType)) +
                                                   " first; give an offload folder to write them to");
        m_offload = std::make_unique<OffloadFolder>(m_options.offloadFolder);
        m_offload->openExisting();
        const DType target = m_weightDType == at::kBFloat16 ? DType::BF16
                             : m_weightDType == at::kHalf   ? DType::F16
                                                             : DType::F32;
        bool wrote = false;
        for (auto& sp : m_slots) {
            Slot& s = *sp;
            if (s.tiedTo || s.home.kind != Device::Disk || s.quant != Slot::Quant::None || readsInPlace(s))
                continue;
            if (!m_offload->has(s.name, target, s.shape)) {
                at::Tensor c = fromSource(s).to(m_weightDType).contiguous();
                m_offload->write(s.name, target, s.shape, c.data_ptr(), uint64_t(c.nbytes()));
                wrote = true;
            }
            s.src = m_offload->data(s.name);
            s.keep = nullptr; // the offload folder's mapping lives as long as the store
            s.srcDType = target;
        }
        if (wrote)
            m_offload->commit();
    }
    if (progress)
        progress(1.0, "loaded");
    m_prefetcher = std::thread([this] { prefetchLoop(); });
}

const RtDevice& WeightStore::unitDevice(const std::string& unit) const
{
    auto it = m_units.find(unit);
    return it != m_units.end() && it->second.device ? *it->second.device : *m_exec;
}

bool WeightStore::has(const std::string& name) const { return m_byName.count(name) > 0; }

bool WeightStore::hasExperts(const std::string& param) const { return m_parts.count(param) > 0 || has(param); }

at::Tensor WeightStore::storedBuffer(const std::string& name) const
{
    const TensorInfo* t = m_ck.find(name);
    if (!t && name.rfind("model.", 0) == 0) // a base-model save
        t = m_ck.find(name.substr(6));
    if (!t)
        return {};
    return at::from_blob(const_cast<uint8_t*>(m_ck.data(*t)), t->shape, at::TensorOptions().dtype(toTorch(t->dtype)))
        .to(at::kFloat, false, /*copy=*/true);
}

std::vector<at::Tensor> WeightStore::expert(const std::string& param, int64_t e)
{
    std::vector<at::Tensor> out;
    auto it = m_parts.find(param);
    if (it == m_parts.end()) {
        // Stored fused: the expert's slice of the whole parameter.
        out.push_back(get(param)[e]);
        return out;
    }
    if (!m_current)
        throw std::logic_error("expert " + std::to_string(e) + " of '" + param + "' asked for outside its unit");
    Unit& u = *m_current;
    for (Slot* s : it->second) {
        if (s->expert != e)
            continue;
        const auto at = std::find(u.slots.begin(), u.slots.end(), s);
        if (at == u.slots.end())
            throw std::logic_error("'" + s->name + "' is not a weight of unit " + u.name);
        const size_t i = size_t(at - u.slots.begin());
        // What fails midway stays in u.fetched for leave() or releaseAll() to give back.
        if (!u.fetched[i].defined() && !s->readyOn(u.device) && expertAtHome(*s, u)) {
            // Computed where it lives: the resident weights themselves (a
            // quantized expert dequantized in RAM), nothing crosses the link.
            if (s->quant != Slot::Quant::None) {
                fetchQuantized(u, i, TraceKind::Map, *s->homeDev);
            } else {
                u.fetched[i] = s->resident;
                m_telemetry.event({m_telemetry.now(), m_telemetry.now(), TraceKind::Map, u.name, s->name,
                                   s->homeDev->label(), s->bytes});
            }
        } else if (!u.fetched[i].defined() && !s->readyOn(u.device)) {
            fetchSlot(u, i, TraceKind::Fetch);
            if (u.events[i]) { // a side-stream copy: the compute stream waits for it, as enter() does
                cuda::wait(u.events[i], u.device->torch);
                cuda::usedOnCurrentStream(u.fetched[i]);
                u.events[i] = nullptr;
            }
        }
        out.push_back(u.fetched[i].defined() ? u.fetched[i] : s->resident);
    }
    if (out.empty())
        throw std::logic_error("'" + param + "' has no expert " + std::to_string(e));
    return out;
}

bool WeightStore::expertAtHome(const Slot& s, const Unit& u) const
{
    return m_options.policy == ExecutionPolicy::ComputeWhereItLives && s.home.kind == Device::Cpu &&
           s.resident.defined() && u.device->device.kind == Device::Gpu && cpuIsFaster();
}

at::Device WeightStore::expertDevice(const std::string& param, int64_t e) const
{
    if (!m_current)
        throw std::logic_error("expert " + std::to_string(e) + " of '" + param + "' asked for outside its unit");
    auto it = m_parts.find(param);
    if (it != m_parts.end())
        for (const Slot* s : it->second)
            if (s->expert == e)
                return expertAtHome(*s, *m_current) ? s->homeDev->torch : m_current->device->torch;
    return m_current->device->torch;
}

namespace {
// Starts reading the pages of [p, p + n) from disk into the page cache (a
// hint: it returns at once). Not MADV_POPULATE_READ, which maps them too: it
// walks every page again each token even when they are mapped already, and
// measured 3-4x slower decode from a warm page cache (docs/PERFORMANCE.md).
void readAhead(const uint8_t* p, uint64_t n)
{
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = uintptr_t(p) & ~(page - 1);
    posix_madvise(reinterpret_cast<void*>(begin), size_t(uintptr_t(p) + n - begin), POSIX_MADV_WILLNEED);
}
} // namespace

void WeightStore::checkInterrupt() const
{
    if (m_interrupt && m_interrupt->load(std::memory_order_relaxed))
        throw Stopped();
}

void WeightStore::fetchInto(Unit& u, bool ahead)
{
    for (size_t i = 0; i < u.slots.size(); ++i)
        if (!u.slots[i]->onDemand) // experts wait for the router (expert())
            fetchSlot(u, i, ahead ? TraceKind::Prefetch : TraceKind::Fetch);
}

void WeightStore::fetchSlot(Unit& u, size_t i, TraceKind copyKind)
{
    {
        checkInterrupt();
        Slot& s = *u.slots[i];
        if (s.readyOn(u.device))
            return; // resident where it computes
        if (s.quant != Slot::Quant::None) {
            fetchQuantized(u, i, copyKind, *u.device);
            return;
        }
        const double t0 = m_telemetry.now();
        at::Tensor src = s.resident.defined() ? s.resident : fromSource(s);
        if (!s.resident.defined())
            m_telemetry.addDiskRead(uint64_t(src.nbytes()));
        // Computing on the CPU from disk needs no copy at all: the mapping is a
        // tensor already, and asking the kernel to read ahead is the prefetch.
        // (Accelerate copies; the accelerate-like baseline keeps doing so.)
        if (!s.resident.defined() && u.device->device.kind == Device::Cpu &&
            m_options.policy != ExecutionPolicy::AccelerateLike && toTorch(s.srcDType) == m_weightDType) {
            readAhead(s.src, uint64_t(src.nbytes()));
            u.fetched[i] = src;
            m_telemetry.event({t0, m_telemetry.now(), TraceKind::Map, u.name, s.name, u.device->label(),
                               uint64_t(src.nbytes())}); // the bytes read in place
            return;
        }
        m_telemetry.allocate(u.device->label(), s.bytes, s.name);
        u.held[i] = s.bytes;
        try {
            if (u.device->simulated)
                u.fetched[i] = pooledCopy(src, *u.device);
            else if (m_options.policy == ExecutionPolicy::AccelerateLike)
                u.fetched[i] = src.to(u.device->torch, m_weightDType, false, /*copy=*/true); // synchronous, pageable
            else
                u.fetched[i] = cuda::copyTo(src, u.device->torch, m_weightDType, &u.events[i]);
        } catch (const c10::Error& e) {
            m_telemetry.release(u.device->label(), s.bytes);
            u.held[i] = 0;
            throw InputError("device " + u.device->label(),
                             "out of memory while fetching " + s.name + ": " + e.what_without_backtrace());
        }
        if (u.device->device.kind == Device::Gpu) {
            m_telemetry.addH2D(s.bytes);
            // A link of the given rate: the copy itself took part of its time.
            if (u.device->simulated)
                crossSimulatedLink(s.bytes, t0);
        }
        m_telemetry.event({t0, m_telemetry.now(), copyKind, u.name, s.name, u.device->label(), s.bytes});
    }
}

// The cost model's rule (costmodel.h) for one RAM-resident unit: read it on
// the CPU, or copy it (pinned) and read it on the GPU. Without a profile,
// always the CPU (true of every preset).
bool WeightStore::cpuIsFaster() const
{
    if (!m_options.profile || m_options.profile->gpus.empty())
        return true;
    return ramLayerRunsOnCpu(*m_options.profile, m_options.profile->gpus.front());
}

void WeightStore::setOrder(std::vector<std::string> units)
{
    m_order.clear();
    m_anyFetch = false;
    for (const auto& u : units) {
        Unit& unit = m_units[u];
        unit.name = u;
        unit.position = int64_t(m_order.size());
        m_order.push_back(&unit);
        RtDevice* dev = nullptr;
        bool oneGpu = true, allCpu = true, allHost = true;
        for (auto& sp : m_slots) {
            if (!isUnder(sp->param, u))
                continue;
            Slot* s = sp->tiedTo ? sp->tiedTo : sp.get();
            if (std::find(unit.slots.begin(), unit.slots.end(), s) != unit.slots.end())
                continue;
            unit.slots.push_back(s);
            // A unit computes on the GPU holding all its weights, else on the execution device.
            if (s->home.kind != Device::Gpu || (dev && dev != s->homeDev))
                oneGpu = false;
            allCpu = allCpu && s->home.kind == Device::Cpu;
            allHost = allHost && s->home.kind != Device::Gpu;
            dev = s->homeDev;
        }
        unit.device = (oneGpu && dev) ? dev : m_exec;
        uint64_t unitBytes = 0;
        for (const Slot* s : unit.slots)
            unitBytes += s->bytes;
        m_poolCap = std::max(m_poolCap, 2 * unitBytes);
        if (m_options.policy == ExecutionPolicy::ComputeWhereItLives && dev && allHost && cpuIsFaster())
            // A layer in RAM, or on disk and read in place from its mapping
            // (fetchSlot): the CPU computes it, nothing crosses the link
            // (the cost model's diskResident says the same).
            unit.device = allCpu ? dev : &deviceFor(Device::cpu());
        unit.fetched.assign(unit.slots.size(), at::Tensor());
        unit.events.assign(unit.slots.size(), nullptr);
        unit.held.assign(unit.slots.size(), 0);
        // Expert slots are fetched when routed to (expert()), so they neither
        // make a unit need a fetch nor count in what prefetching it places.
        for (const Slot* slot : unit.slots)
            if (!slot->onDemand && !slot->readyOn(unit.device)) {
                unit.needsFetch = true;
                unit.fetchBytes += slot->bytes;
            }
        m_anyFetch = m_anyFetch || unit.needsFetch;
    }
    for (Unit* a : m_order)
        for (const Unit* b : m_order)
            if (a != b && std::any_of(a->slots.begin(), a->slots.end(), [&](const Slot* x) {
                    return std::find(b->slots.begin(), b->slots.end(), x) != b->slots.end();
                }))
                a->sharing.push_back(b);
}

void WeightStore::enter(const std::string& name)
{
    auto it = m_units.find(name);
    if (it == m_units.end())
        throw std::logic_error("unit '" + name + "' was not announced to the weight store");
    Unit& u = it->second;
    checkInterrupt();
    std::unique_lock<std::mutex> lock(m_mutex);
    if (m_inflight == name) {
        // The prefetcher is still copying this unit: the step waits on it.
        const double t0 = m_telemetry.now();
        m_cv.wait(lock, [&] { return m_inflight != name; });
        m_telemetry.event({t0, m_telemetry.now(), TraceKind::Wait, name, {}, u.device->label(), 0});
    }
    if (!u.ready && u.needsFetch) {
        // Claim it first so the prefetcher does not fetch the same unit too.
        u.ready = true;
        lock.unlock();
        try {
            fetchInto(u, false);
        } catch (...) {
            lock.lock();
            dropFetched(u);
            throw;
        }
        lock.lock();
    }
    u.ready = true;
    for (size_t i = 0; i < u.events.size(); ++i) { // the compute stream waits for the side-stream copies
        if (!u.events[i])
            continue;
        cuda::wait(u.events[i], u.device->torch);
        // and the allocator must not reuse the block before the compute stream is done with it
        cuda::usedOnCurrentStream(u.fetched[i]);
        u.events[i] = nullptr;
    }
    m_current = &u;
    m_lastUnit = name;
    // The prefetcher works ahead of this unit (wrapping round: the next token
    // starts again). Woken only where some unit needs a fetch: a map that
    // needs none woke it twice a unit for nothing, a futex call on this
    // thread and a context switch on a core the GEMV helpers share.
    if (m_options.policy != ExecutionPolicy::AccelerateLike) {
        m_entered = u.position;
        if (m_anyFetch)
            m_cv.notify_all();
    }
    if (const double delay = m_unitDelay.load(); delay > 0) {
        lock.unlock();
        pause(delay); // teaching: one unit at a time, slowly enough to follow
    }
}

// Post-hook work: offloaded copies go away, resident weights stay. A disk
// weight read in place stays mapped: its pages are the page cache's (clean,
// file-backed, shared), which the kernel reclaims under memory pressure
// without writing anything. Unmapping them after each unit (MADV_DONTNEED)
// kept the resident set at the RAM part, but re-faulting them cost 90% of the
// decode speed here (2-3 instead of 43-48 tok/s all on disk, fp32).
void WeightStore::dropFetched(Unit& u)
{
    for (size_t i = 0; i < u.fetched.size(); ++i) {
        if (u.held[i]) {
            m_telemetry.release(u.device->label(), u.held[i]);
            if (u.device->simulated)
                returnToPool(*u.device, std::move(u.fetched[i]));
        }
        u.held[i] = 0;
        u.fetched[i] = at::Tensor();
    }
    u.ready = false;
}

void WeightStore::settle()
{
    std::unique_lock<std::mutex> lock(m_mutex);
    m_entered = -1; // nothing more ahead until the next enter()
    m_cv.wait(lock, [&] { return m_inflight.empty(); });
}

void WeightStore::releaseAll()
{
    settle();
    std::unique_lock<std::mutex> lock(m_mutex);
    for (auto& [name, u] : m_units)
        dropFetched(u);
    m_current = nullptr;
    std::lock_guard<std::mutex> pool(m_poolMutex);
    m_pool.clear();
    m_poolBytes = 0;
}

void WeightStore::leave(const std::string& name)
{
    Unit& u = m_units.at(name);
    std::lock_guard<std::mutex> lock(m_mutex);
    dropFetched(u);
    if (m_current == &u)
        m_current = nullptr;
    if (m_anyFetch)
        m_cv.notify_all(); // room for the prefetcher
    m_telemetry.event({m_telemetry.now(), m_telemetry.now(), TraceKind::Release, name, {}, u.device->label(), 0});
}

const at::Tensor& WeightStore::get(const std::string& name) const
{
    auto it = m_byName.find(name);
    if (it == m_byName.end())
        throw std::logic_error("no weight named '" + name + "'");
    const Slot* s = it->second->tiedTo ? it->second->tiedTo : it->second;
    if (m_current) {
        for (size_t i = 0; i < m_current->slots.size(); ++i)
            if (m_current->slots[i] == s && m_current->fetched[i].defined())
                return m_current->fetched[i];
    }
    if (!s->resident.defined() || s->quant != Slot::Quant::None)
        throw std::logic_error("weight '" + name + "' is offloaded or quantized and its unit is not entered");
    return s->resident;
}

// The next unit after the one entered last (in forward order, wrapping
// round) that needs a fetch and has none yet. Units that need none (resident
// where they compute) are skipped, so the first offloaded layer of the next
// token is fetched while the last one of this token computes, not once the
// resident layers before it have run. The first unit ahead is always fetched
// (as Accelerate's own reservation of the largest layer allows); further
// ones only while roomAhead() says the device has room for them.
WeightStore::Unit* WeightStore::nextToPrefetch()
{
    const int64_t n = int64_t(m_order.size());
    if (m_options.policy == ExecutionPolicy::AccelerateLike || m_entered < 0 || m_entered >= n)
        return nullptr;
    std::vector<const Unit*> held{m_order[size_t(m_entered)]};
    uint64_t aheadBytes = 0;
    for (int64_t k = 1; k < n; ++k) {
        Unit& u = *m_order[size_t((m_entered + k) % n)];
        if (!u.needsFetch)
            continue;
        // Never a unit that shares weights with one held (the tied head
        // wrapping round to the embedding): that would be a second copy.
        for (const Unit* h : held)
            if (std::find(u.sharing.begin(), u.sharing.end(), h) != u.sharing.end())
                return nullptr;
        if (u.ready || m_inflight == u.name) {
            held.push_back(&u);
            aheadBytes += u.fetchBytes;
            continue;
        }
        return held.size() == 1 || roomAhead(u, aheadBytes) ? &u : nullptr;
    }
    return nullptr;
}

// More than one unit ahead only on a GPU whose room is known: the budget the
// plan gave it (simulated or real), capped by the free memory of a real one
// and by available RAM for a simulated one; a simulated GPU without a budget
// stays one unit ahead. Fetched-ahead weights may take up to half of that
// room, less a margin for activations and the KV cache, which grow while
// they wait. On a real GPU this keeps the copy engine busy while the
// resident layers run (an H200's trace in docs/PERFORMANCE.md shows it idle
// then); a CPU unit's "fetch" is the kernel's read-ahead of its pages, one
// unit ahead as before.
bool WeightStore::roomAhead(const Unit& u, uint64_t aheadBytes) const
{
    const RtDevice& d = *u.device;
    if (d.device.kind != Device::Gpu)
        return false;
    std::optional<uint64_t> room = m_telemetry.headroom(d.label());
    if (d.simulated && room) // its memory is RAM
        room = std::min(*room, availableRamBytes());
    else if (!d.simulated && d.torch.is_cuda()) {
        const uint64_t free = cuda::freeBytes(d.torch.index());
        room = room ? std::min(*room, free) : free;
    }
    constexpr uint64_t kMargin = uint64_t(256) << 20;
    return room && aheadBytes + u.fetchBytes + kMargin <= (*room + aheadBytes) / 2;
}

void WeightStore::prefetchLoop()
{
    std::unique_lock<std::mutex> lock(m_mutex);
    while (true) {
        Unit* next = nullptr;
        m_cv.wait(lock, [&] { return m_stop || (next = nextToPrefetch()) != nullptr; });
        if (m_stop)
            return;
        Unit& u = *next;
        m_inflight = u.name;
        lock.unlock();
        try {
            fetchInto(u, true);
        } catch (...) {
            // The unit's own enter() fetches again and reports the error there;
            // nothing more is fetched ahead until then.
            lock.lock();
            dropFetched(u);
            m_inflight.clear();
            m_entered = -1;
            m_cv.notify_all();
            continue;
        }
        lock.lock();
        u.ready = true;
        m_inflight.clear();
        m_cv.notify_all();
    }
}

} // namespace stowage
