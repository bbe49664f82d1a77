#pragma once
// Test support for Gemma 3: tiny configs of the text model and of the
// multimodal model around it (a SigLIP vision tower and its projector), and
// the tensors a checkpoint of the latter holds under the layouts the Hub and
// transformers versions use, written from those layouts, not from the skeleton.
#include "fixtures.h"

namespace fixtures {

// 3 layers, every 3rd global, head_dim 12, tie_word_embeddings left out.
nlohmann::json gemma3TextConfig();
// The composite config: a SigLIP tower of one layer (`visionHead`: its head built).
nlohmann::json gemma3Config(bool visionHead);
// The tensors of gemma3Config(false), bf16: `lm` the language model's prefix,
// `vt` the vision tower's (before "embeddings."), `mm` the projector's.
std::vector<Tensor> gemma3Tensors(const std::string& lm, const std::string& vt, const std::string& mm);

} // namespace fixtures
