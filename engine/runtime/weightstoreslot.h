#pragma once
// A weight as the weight store keeps it (weightstore.cpp), shared with the
// quantized weights' half of the store (weightstore_quantized.cpp).
#include "weightstore.h"

namespace stowage {

struct WeightStore::Slot {
    std::string name;  // the parameter's, or for a part of a fused one the stored tensor's
    std::string param; // the tree parameter it belongs to (its unit follows from it)
    // An expert's part of a fused parameter: fetched when the router picks
    // the expert (expert()), never by enter() or the prefetcher.
    bool onDemand = false;
    int64_t expert = -1;
    Device home;
    RtDevice* homeDev = nullptr;
    at::Tensor resident; // on its home device; undefined for disk
    const uint8_t* src = nullptr; // bytes in the checkpoint mapping or offload file
    uint64_t srcOffset = 0; // where its bytes start in the stored tensor's (an expert's slice of a fused one)
    std::shared_ptr<const void> keep; // the mapping `src` points into, kept alive by views of it
    DType srcDType = DType::F32;
    std::vector<int64_t> shape;
    uint64_t bytes = 0; // in the compute dtype
    Slot* tiedTo = nullptr;
    const TensorInfo* tensor = nullptr; // the checkpoint's (its name may lack the base-model prefix)
    // A quantized weight (dequant.h): `src` holds its stored bytes (FP8, or
    // MXFP4 blocks) in `storedShape`, `scaleSrc` its scales. It is never
    // resident in the weight dtype: `resident` (where its home is not the
    // disk) holds the stored bytes and `residentScale` the scales, and every
    // fetch of its unit dequantizes them on the unit's device.
    enum class Quant { None, Fp8, Mxfp4 } quant = Quant::None;
    std::vector<int64_t> storedShape, scaleShape;
    const uint8_t* scaleSrc = nullptr;
    DType scaleDType = DType::F32;
    int64_t blockRows = 0, blockCols = 0; // FP8's weight_block_size
    std::shared_ptr<const void> scaleKeep; // the mapping `scaleSrc` points into
    at::Tensor residentScale;
    // > 0: one expert's slice of a stored tensor that holds this many (its
    // scales are sliced the same way).
    int64_t sliceOf = 0;
    // Usable as it is on `d`: resident there, in the weight dtype.
    bool readyOn(const RtDevice* d) const { return resident.defined() && homeDev == d && quant == Quant::None; }
};

} // namespace stowage
