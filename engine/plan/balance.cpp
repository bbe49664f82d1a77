#include "balance.h"

#include <algorithm>
#include <cmath>

namespace stowage::detail {

Budgets balancedMemory(const ModuleTree& tree, const Sizes& sizes, Budgets mm, bool userNotSet, bool lowZero,
                       std::vector<std::string>* notes)
{
    std::vector<size_t> gpus; // indices into mm of GPUs with memory, ascending
    for (size_t i = 0; i < mm.size(); ++i)
        if (mm[i].device.kind == Device::Gpu && mm[i].bytes > 0)
            gpus.push_back(i);
    const size_t n = gpus.size();
    if (n == 0)
        return mm;
    if (n == 1) {
        lowZero = false;
        if (userNotSet) {
            // Only the first GPU key, as Accelerate's loop breaks after it.
            for (auto& b : mm)
                if (b.device.kind == Device::Gpu) {
                    b.bytes = b.bytes * 0.9;
                    notes->push_back("one GPU and no budget given: planning with 90% of GPU " + b.device.name() +
                                     "'s free memory");
                    break;
                }
        }
    }
    const uint64_t total = sizes.module(0);
    uint64_t perGpu = total / (lowZero ? n - 1 : n);

    // Largest no-split block: the FIRST instance of each class in
    // compute_module_sizes order. Its keys come from named_parameters() then
    // named_buffers(), so modules with a parameter below come first (pre-order),
    // then modules holding only buffers.
    uint64_t buffer = 0;
    std::vector<std::string> found;
    const auto& mods = tree.modules();
    if (!sizes.noSplit().empty())
        for (int pass = 0; pass < 2; ++pass)
            for (size_t i = 1; i < mods.size() && found.size() < sizes.noSplit().size(); ++i) {
                if (!sizes.listed(int(i)) || sizes.listedByParam(int(i)) != (pass == 0) || !sizes.isNoSplit(int(i)))
                    continue;
                if (std::find(found.begin(), found.end(), mods[i].className) != found.end())
                    continue;
                found.push_back(mods[i].className);
                buffer = std::max(buffer, sizes.module(int(i)));
            }
    uint64_t leafSum = 0, leaves = 0;
    if (tree.reference() == Reference::Transformers) {
        // transformers' leaves: every module (not the root) that holds a
        // non-tied tensor itself, sized by those tensors alone.
        for (size_t i = 1; i < mods.size(); ++i)
            if (sizes.holdsTensor(int(i))) {
                leafSum += sizes.direct(int(i));
                ++leaves;
            }
    } else {
        // Accelerate's get_module_leaves twice: the deepest modules holding
        // tensors (none of their child modules holds any), at full size.
        for (size_t i = 1; i < mods.size(); ++i) {
            if (!sizes.listed(int(i)))
                continue;
            bool leaf = std::none_of(mods[i].children.begin(), mods[i].children.end(),
                                     [&](int c) { return sizes.listed(c); });
            if (leaf) {
                leafSum += sizes.module(int(i));
                ++leaves;
            }
        }
    }
    const auto mean = static_cast<uint64_t>(std::trunc(double(leafSum) / double(std::max<uint64_t>(leaves, 1))));
    buffer = static_cast<uint64_t>(std::trunc(1.25 * double(std::max(buffer, mean))));
    perGpu += buffer;

    const double gpu0 = mm[gpus[0]].bytes;
    for (size_t k = 0; k + 1 < n; ++k) {
        auto& b = mm[gpus[k]];
        double cap = (lowZero && k == 0) ? gpu0 : double(perGpu);
        b.bytes = std::min(cap, b.bytes);
    }
    if (lowZero) {
        double others = 0;
        for (size_t k = 1; k < n; ++k)
            others += mm[gpus[k]].bytes;
        double minZero = std::max(0.0, double(total) - others);
        mm[gpus[0]].bytes = std::min(minZero, mm[gpus[0]].bytes);
    }
    if (n > 1)
        notes->push_back("balanced over " + std::to_string(n) + " GPUs: " + grouped(total) + " bytes / " +
                     std::to_string(lowZero ? n - 1 : n) + " + " + grouped(buffer) +
                     " buffer (1.25 x the largest of the first no-split block and the mean " +
                     (tree.reference() == Reference::Transformers ? "tensor-holding module" : "deepest module") +
                     ") = " + grouped(perGpu) +
                     " per GPU but the last");
    return mm;
}

} // namespace stowage::detail
