#pragma once
// Where every weight lives and how it reaches the device that computes with
// it: Accelerate's dispatch_model + AlignDevicesHook, as a store with
// enter()/leave() around each execution unit, plus prefetch.
#include "stowage/offloadfolder.h"
#include "stowage/checkpoint.h"
#include "stowage/model.h"

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace stowage {

// A device as the runtime sees it: its name in the map, and the torch device
// that holds its memory (simulated GPUs hold CPU memory).
struct RtDevice {
    Device device;
    at::Device torch{at::kCPU};
    bool simulated = false;
    std::string label() const { return device.name(); }
};

class WeightStore {
public:
    WeightStore(const Checkpoint& ck, const ModuleTree& tree, const LoadOptions& options, Telemetry& telemetry);
    ~WeightStore();
    void load(const ProgressFn& progress);

    // The dtype activations are computed in, and the one weights are held in:
    // the same but for fp16 on the CPU, where weights stay fp16 (read in place
    // from the checkpoint, half the bytes per token) and the kernels widen
    // them to fp32 as they stream (LibTorch 1.13 computes no fp16 on the CPU).
    at::ScalarType computeDType() const { return m_computeDType; }
    at::ScalarType weightDType() const { return m_weightDType; }
    const RtDevice& execDevice() const { return *m_exec; }
    // The device a unit computes on: the GPU all its weights live on, else the execution device.
    const RtDevice& unitDevice(const std::string& unit) const;

    // Pre-hook: makes the unit's offloaded weights resident on `unitDevice`
    // (waiting for a prefetch when one is under way) and moves the
    // prefetcher on: it fetches the next units that need it, one ahead, more
    // on a GPU with room (nextToPrefetch). Post-hook (leave): drops what was
    // fetched.
    // The execution units forward() enters, in order (prefetch follows it).
    void setOrder(std::vector<std::string> units);
    void enter(const std::string& unit);
    void leave(const std::string& unit);
    // After a failed forward: waits for a prefetch under way, then drops every
    // fetched copy (prefetched ones included) so a retry starts clean.
    void releaseAll();
    // Waits for a prefetch under way and starts no other until the next
    // enter(); what is fetched stays.
    void settle();
    // A weight by full name, on its unit's device; only between enter/leave
    // for offloaded ones. Tied names resolve to the tensor they share.
    const at::Tensor& get(const std::string& name) const;
    bool has(const std::string& name) const;
    // The weights of expert `e` of the fused parameter `param`
    // ("model.layers.0.mlp.experts.gate_up_proj"), on the current unit's
    // device: its stored tensors in Param::parts order (gate and up for
    // gate_up_proj, down for down_proj), or its slice [e] of a parameter
    // stored fused. Only between enter() and leave() of its unit.
    //
    // Prefetch and experts: which experts a token needs is known only once
    // its router has run, inside the unit's forward, so neither enter() nor
    // the prefetcher fetches an expert slot (a unit's fetch and prefetch
    // cover its attention, norms and router). The first call for an
    // offloaded expert fetches it then, synchronously (computing on the CPU
    // from disk: a view of the mapping and a read-ahead hint, no copy);
    // leave() drops it with the unit's other fetched weights. So a decode
    // step moves only the experts the router picked, never the others.
    // A fused parameter the checkpoint holds whole (gpt-oss's, or a 5.x
    // save; Param::experts) gets the same: one slot per expert, a slice of
    // the stored tensor's bytes, so it too is fetched an expert at a time.
    std::vector<at::Tensor> expert(const std::string& param, int64_t e);
    bool hasExperts(const std::string& param) const;
    // Where expert `e` of `param` computes in the current unit: the unit's
    // device, but under compute-where-it-lives the CPU when the expert
    // lives in RAM and the unit runs on a GPU (llama.cpp's -ot exps=CPU,
    // Stowage's experts_in_ram): expert() then hands its weights where
    // they are, no copy, and only the activations cross (moe.h routedSum).
    // A quantized one is dequantized there.
    at::Device expertDevice(const std::string& param, int64_t e) const;
    // A persistent buffer the checkpoint stores (DeepSeek-V3's router
    // e_score_correction_bias: tiny, no slot of its own), read from the file
    // into a float32 CPU tensor; undefined when the checkpoint lacks it.
    at::Tensor storedBuffer(const std::string& name) const;

    std::vector<std::string> deviceDescriptions() const;
    Telemetry& telemetry() { return m_telemetry; }
    // The unit entered last (where a failure during forward happened).
    const std::string& lastUnit() const { return m_lastUnit; }
    // When *flag turns true, enter() and fetches under way throw Stopped at
    // the next unit or copy slice. The flag outlives the store.
    void setInterrupt(const std::atomic<bool>* flag) { m_interrupt = flag; }
    // A pause after each unit's fetch, before it computes (teaching mode).
    void setUnitDelay(double seconds) { m_unitDelay = seconds; }

private:
    struct Slot;
    struct Unit {
        std::string name;
        std::vector<Slot*> slots;
        RtDevice* device = nullptr;
        std::vector<at::Tensor> fetched; // parallel to slots; undefined when resident
        std::vector<std::shared_ptr<void>> events; // CUDA copies still in flight
        std::vector<uint64_t> held;                // bytes accounted for each fetched copy (0: a view)
        bool ready = false;      // fetched (by enter or the prefetcher) and not yet released
        bool needsFetch = false; // some weight is not resident on `device`
        uint64_t fetchBytes = 0; // what fetching it places on `device`
        int64_t position = -1;   // in m_order; -1: not a unit forward() enters
        std::vector<const Unit*> sharing; // units holding one of its weights too (a tied head)
    };
    // Copies on a simulated GPU go into buffers kept from earlier units of
    // the same size, as the CUDA caching allocator does on a real one:
    // fresh memory costs a page fault per 4 KiB on first touch (~0.15 GB/s
    // in a VM here), which no GPU copy pays.
    at::Tensor pooledCopy(const at::Tensor& src, const RtDevice& dev);
    void returnToPool(const RtDevice& dev, at::Tensor t);
    bool readsInPlace(const Slot& s) const;
    void setQuantized(Slot& s, const TensorInfo& t) const;           // FP8 / MXFP4: finds its scales
    std::pair<at::Tensor, at::Tensor> storedQuant(const Slot& s) const; // its stored bytes and scales (views)
    void holdQuantized(Slot& s);                                     // keeps them at home
    void fetchQuantized(Unit& u, size_t i, TraceKind kind, const RtDevice& on); // dequantizes them for u, on `on`
    bool expertAtHome(const Slot& s, const Unit& u) const;           // computes in RAM, not on u's GPU
    bool usesInPlace(const Slot& s) const; // a CPU-resident weight kept as a view of the mapping
    bool cpuIsFaster() const;
    void dropFetched(Unit& u);
    RtDevice& deviceFor(const Device& d);
    at::Tensor fromSource(const Slot& s) const; // the stored bytes as a CPU tensor (zero-copy view)
    void fetchInto(Unit& u, bool ahead);        // copies offloaded weights to u.device (ahead: by the prefetcher), experts aside
    void fetchSlot(Unit& u, size_t i, TraceKind kind); // the same for u.slots[i]
    void checkInterrupt() const;                // throws Stopped when asked to
    // Sleeps, interruptibly: throws Stopped when asked to, and Cancelled when
    // `going` (a load's progress check) returns false.
    void pause(double seconds, const std::function<bool()>& going = {}) const;
    // A copy of `bytes` that began at `t0` crosses the simulated link
    // (simulatedPcieBytesPerSecond): copies queue on it one after another,
    // and the caller waits for the link once it owes more than kLinkSlack
    // (a sleep shorter than that oversleeps by a good part of itself). What
    // a sleep overslept is the next copy's credit: it may start that much
    // before it was asked for (kLinkSlack at most), so the link carries its
    // rate on average.
    void crossSimulatedLink(uint64_t bytes, double t0, const std::function<bool()>& going = {});
    static constexpr double kLinkSlack = 1e-3;
    void prefetchLoop();
    // The unit the prefetcher should fetch next, or nullptr (under m_mutex).
    Unit* nextToPrefetch();
    // Whether `u` may be fetched while `aheadBytes` are already fetched ahead.
    bool roomAhead(const Unit& u, uint64_t aheadBytes) const;

    const Checkpoint& m_ck;
    const ModuleTree& m_tree;
    LoadOptions m_options;
    Telemetry& m_telemetry;
    at::ScalarType m_computeDType = at::kFloat;
    at::ScalarType m_weightDType = at::kFloat;
    std::mutex m_poolMutex; // the prefetcher takes, the compute thread returns
    std::map<std::tuple<const RtDevice*, int, std::vector<int64_t>>, std::vector<at::Tensor>> m_pool;
    uint64_t m_poolBytes = 0;   // what m_pool holds
    uint64_t m_poolCap = 0;     // two of the largest unit (setOrder)
    std::deque<RtDevice> m_devices;
    RtDevice* m_exec = nullptr; // points into m_devices (a deque: stable addresses)
    std::unique_ptr<OffloadFolder> m_offload;
    std::vector<std::unique_ptr<Slot>> m_slots;
    std::unordered_map<std::string, Slot*> m_byName;
    std::unordered_map<std::string, std::vector<Slot*>> m_parts; // a fused parameter's part slots, in Param::parts order
    std::unordered_map<std::string, Unit> m_units;
    std::vector<Unit*> m_order; // units in the order forward() enters them (m_units' nodes stay put)

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::mutex m_linkMutex;
    double m_linkFree = 0; // when the simulated link has carried every copy so far (m_telemetry's clock)
    double m_linkCredit = 0; // seconds the last wait for the link overslept
    // Position in m_order of the unit entered last: the prefetcher works
    // ahead of it; -1 until the next enter() (after a failure, say).
    int64_t m_entered = -1;
    std::string m_inflight; // unit the prefetch thread is fetching now
    // Whether any unit needs a fetch: without one the prefetcher has nothing
    // to do and enter()/leave() do not wake it (setOrder).
    bool m_anyFetch = false;
    Unit* m_current = nullptr;
    std::string m_lastUnit;
    std::thread m_prefetcher;
    bool m_stop = false;
    const std::atomic<bool>* m_interrupt = nullptr;
    std::atomic<double> m_unitDelay{0};
};

} // namespace stowage
