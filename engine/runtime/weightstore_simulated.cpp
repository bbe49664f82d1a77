// The weight store's simulated GPU (weightstore.h): its link, which carries
// copies at the rate the user gave it by sleeping what they owe, and its
// memory, RAM buffers kept for the next unit's copies of the same shapes.
#include "weightstore.h"

#include "stowage/error.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace stowage {

void WeightStore::pause(double seconds, const std::function<bool()>& going) const
{
    // In slices, so a stop lands within ~10 ms whatever the pause.
    using clock = std::chrono::steady_clock;
    const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
    while (true) {
        checkInterrupt();
        if (going && !going())
            throw Cancelled();
        const clock::duration left = until - clock::now();
        if (left <= clock::duration::zero())
            return;
        std::this_thread::sleep_for(std::min<clock::duration>(left, std::chrono::milliseconds(10)));
    }
}

void WeightStore::crossSimulatedLink(uint64_t bytes, double t0, const std::function<bool()>& going)
{
    if (m_options.simulatedPcieBytesPerSecond <= 0)
        return;
    double owed = 0;
    {
        std::lock_guard<std::mutex> lock(m_linkMutex);
        // An idle link starts this copy when it began; a busy one after the
        // copies before it (another thread's, or this one's still owed).
        m_linkFree = std::max(m_linkFree, t0 - m_linkCredit) + double(bytes) / m_options.simulatedPcieBytesPerSecond;
        m_linkCredit = 0;
        owed = m_linkFree - m_telemetry.now();
    }
    // A sleep per weight of a small layer (tens of microseconds each) lasted
    // two to three times its length here, and the demo's simulated-GPU runs
    // half the speed of its link; what is owed is paid once it is worth a
    // sleep, and what is left is owed by the next copy.
    if (owed > kLinkSlack) {
        pause(owed, going);
        // A 1 ms sleep lasted 1.1-1.2 ms here: a Mixtral shape's 2 MiB
        // experts, one sleep each, crossed a 2 GB/s link at 1.7 GB/s.
        std::lock_guard<std::mutex> lock(m_linkMutex);
        m_linkCredit = std::clamp(m_telemetry.now() - m_linkFree, 0.0, kLinkSlack);
    }
}

at::Tensor WeightStore::pooledCopy(const at::Tensor& src, const RtDevice& dev)
{
    // Kept whole, shape and all: a view of a flat buffer would hold a second
    // reference to it (its autograd base) and never look free again.
    at::Tensor out;
    {
        std::lock_guard<std::mutex> lock(m_poolMutex);
        auto it = m_pool.find({&dev, int(m_weightDType), src.sizes().vec()});
        if (it != m_pool.end() && !it->second.empty()) {
            out = std::move(it->second.back());
            it->second.pop_back();
            m_poolBytes -= uint64_t(out.nbytes());
        }
    }
    if (!out.defined())
        out = at::empty(src.sizes(), at::TensorOptions().dtype(m_weightDType).device(dev.torch));
    out.copy_(src);
    return out;
}

void WeightStore::returnToPool(const RtDevice& dev, at::Tensor t)
{
    // Only a buffer nothing else holds (a unit's output may alias a weight).
    if (!t.defined() || t.is_view() || t.storage().use_count() != 1)
        return;
    // Two units in flight need two units' buffers. Counted in bytes, not
    // buffers of a shape: a mixture-of-experts layer fetches a routed
    // expert's gate and up (one shape) for each of its top-k, and a cap of
    // four a shape gave Qwen3-MoE's eight back to the allocator every layer,
    // to be faulted in anew at 0.5 GB/s (a simulated GPU decoded 2x slower
    // than its link, docs/PERFORMANCE.md).
    std::lock_guard<std::mutex> lock(m_poolMutex);
    const uint64_t bytes = uint64_t(t.nbytes());
    if (m_poolBytes + bytes > m_poolCap)
        return;
    m_pool[{&dev, int(t.scalar_type()), t.sizes().vec()}].push_back(std::move(t));
    m_poolBytes += bytes;
}

} // namespace stowage
