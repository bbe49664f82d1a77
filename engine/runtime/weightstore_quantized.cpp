// The weight store's quantized weights (weightstore.h): FP8 and MXFP4
// tensors recognised with their scales, kept as stored, and dequantized on
// the device that computes each time their unit is fetched (dequant.h).
#include "weightstore.h"
#include "weightstoreslot.h"

#include "dequant.h"
#include "stowage/quantization.h"
#include "torchtypes.h"

#include <c10/util/Exception.h>

#include <tuple>

namespace stowage {

// A quantized stored tensor and its scales, as transformers 5.6 stores them:
// a float8_e4m3fn weight beside `<name>_scale_inv` (one float per
// weight_block_size block), an MXFP4 `<name>_blocks` beside `<name>_scales`.
// Anything else stays as it is.
void WeightStore::setQuantized(Slot& s, const TensorInfo& t) const
{
    const std::string& file = m_ck.shards()[size_t(t.shard)].path;
    const auto need = [&](bool ok, const std::string& what) {
        if (!ok)
            throw InputError(file, "tensor '" + t.name + "': " + what);
    };
    std::string scaleName;
    if (t.dtype == DType::F8_E4M3) {
        s.quant = Slot::Quant::Fp8;
        scaleName = t.name + "_scale_inv";
    } else if (t.dtype == DType::U8 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, "_blocks") == 0) {
        s.quant = Slot::Quant::Mxfp4;
        scaleName = t.name.substr(0, t.name.size() - 7) + "_scales";
    } else {
        need(t.dtype != DType::F8_E5M2, "float8_e5m2 weights are not read (FP8 checkpoints store float8_e4m3fn)");
        return;
    }
    const TensorInfo* sc = m_ck.find(scaleName);
    need(sc != nullptr, std::string(s.quant == Slot::Quant::Fp8 ? "float8_e4m3fn" : "MXFP4 blocks") +
                            ", but the checkpoint has no '" + scaleName + "' to scale it");
    std::vector<int64_t> stored = t.shape, scale = sc->shape;
    uint64_t scaleOffset = 0;
    if (s.sliceOf > 0) { // one expert of a fused tensor: its slice of the scales too
        need(!stored.empty() && stored[0] == s.sliceOf && !scale.empty() && scale[0] == s.sliceOf,
             "its scales do not hold " + std::to_string(s.sliceOf) + " experts");
        stored.erase(stored.begin());
        scale.erase(scale.begin());
        scaleOffset = sc->nbytes / uint64_t(s.sliceOf) * uint64_t(s.expert);
    }
    if (s.quant == Slot::Quant::Fp8) {
        need(stored == s.shape && stored.size() >= 2, "an FP8 weight of shape " + shapeText(stored) +
                                                          " where the model has " + shapeText(s.shape));
        const Quantization* q = m_tree.quantization();
        const auto block = q && q->block ? *q->block : std::make_pair(stored[stored.size() - 2], stored.back());
        s.blockRows = block.first;
        s.blockCols = block.second;
    } else {
        need(stored.size() == 3 && stored[2] == 16 && scale == std::vector<int64_t>{stored[0], stored[1]} &&
                 s.shape == std::vector<int64_t>{stored[1] * 32, stored[0]},
             "MXFP4 blocks " + shapeText(stored) + " with scales " + shapeText(scale) +
                 " do not make the model's " + shapeText(s.shape));
    }
    s.storedShape = std::move(stored);
    s.scaleShape = std::move(scale);
    s.scaleSrc = m_ck.data(*sc) + scaleOffset;
    s.scaleKeep = m_ck.shards()[size_t(sc->shard)].map;
    s.scaleDType = sc->dtype;
}

std::pair<at::Tensor, at::Tensor> WeightStore::storedQuant(const Slot& s) const
{
    const auto view = [](const uint8_t* p, const std::vector<int64_t>& shape, at::ScalarType dtype,
                         std::shared_ptr<const void> keep) {
        return at::from_blob(
            const_cast<uint8_t*>(p), shape, [keep = std::move(keep)](void*) {}, at::TensorOptions().dtype(dtype));
    };
    return {view(s.src, s.storedShape, at::kByte, s.keep), view(s.scaleSrc, s.scaleShape, toTorch(s.scaleDType), s.scaleKeep)};
}

// A quantized weight at home in RAM stays the checkpoint's mapped bytes (no
// copy, as a RAM weight used in place); on a GPU its stored bytes and scales
// are copied there. Either way it weighs its stored bytes, a quarter or half
// of the dequantized ones the plan counts where transformers dequantizes.
void WeightStore::holdQuantized(Slot& s)
{
    auto [q, scale] = storedQuant(s);
    const uint64_t bytes = uint64_t(q.nbytes() + scale.nbytes());
    m_telemetry.allocate(s.homeDev->label(), bytes, s.name);
    if (s.homeDev->torch.is_cpu() && !s.homeDev->simulated) {
        s.resident = q;
        s.residentScale = scale;
        return;
    }
    try {
        s.resident = q.to(s.homeDev->torch, at::kByte, false, /*copy=*/true);
        s.residentScale = scale.to(s.homeDev->torch, scale.scalar_type(), false, /*copy=*/true);
    } catch (const c10::Error& e) {
        throw InputError("device " + s.homeDev->label(), "cannot hold " + s.name + ": " + e.what_without_backtrace());
    }
    m_telemetry.addH2D(bytes);
}

// A quantized weight's fetch: its stored bytes (and scales) reach the unit's
// device, quantized (a quarter or half of the bytes over the link), and are
// dequantized there into the weight dtype; the copy is the unit's until
// leave(), like any fetched weight.
void WeightStore::fetchQuantized(Unit& u, size_t i, TraceKind kind, const RtDevice& on)
{
    Slot& s = *u.slots[i];
    const double t0 = m_telemetry.now();
    at::Tensor q = s.resident, scale = s.residentScale;
    if (!q.defined()) {
        std::tie(q, scale) = storedQuant(s);
        m_telemetry.addDiskRead(uint64_t(q.nbytes() + scale.nbytes()));
    }
    const uint64_t moved = uint64_t(q.nbytes() + scale.nbytes());
    // Dequantized for an expert computed in RAM beside a GPU unit: scratch
    // memory until leave(), not the unit device's (one expert's worth).
    const bool onUnit = &on == u.device;
    if (onUnit) {
        m_telemetry.allocate(u.device->label(), s.bytes, s.name);
        u.held[i] = s.bytes;
    }
    try {
        if (q.device() != on.torch) {
            q = q.to(on.torch);
            scale = scale.to(on.torch);
        }
        u.fetched[i] = s.quant == Slot::Quant::Fp8 ? dequant::fp8(q, scale, s.blockRows, s.blockCols, m_weightDType)
                                                    : dequant::mxfp4(q, scale, m_weightDType);
    } catch (const c10::Error& e) {
        if (onUnit)
            m_telemetry.release(u.device->label(), s.bytes);
        u.held[i] = 0;
        throw InputError("device " + on.label(),
                         "out of memory while dequantizing " + s.name + ": " + e.what_without_backtrace());
    }
    if (on.device.kind == Device::Gpu && s.homeDev != &on) {
        m_telemetry.addH2D(moved);
        if (on.simulated)
            crossSimulatedLink(moved, t0);
    }
    m_telemetry.event({t0, m_telemetry.now(), kind, u.name, s.name, on.label(), s.bytes});
}

} // namespace stowage
