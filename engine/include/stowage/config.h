#pragma once
// config.json of a Hugging Face checkpoint, with typed accessors for the
// fields the architectures read.
#include "stowage/dtype.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

class ModelConfig {
public:
    ModelConfig() = default;
    // Throws InputError naming `path` when the text is not a JSON object.
    static ModelConfig parse(const std::string& text, const std::string& path);

    const std::string& path() const { return m_path; }
    const std::string& modelType() const { return m_modelType; }
    const std::vector<std::string>& architectures() const { return m_architectures; }
    // `dtype` (transformers 5), else `torch_dtype`, when it names a real type.
    std::optional<DType> dtype() const { return m_dtype; }
    bool tieWordEmbeddings() const { return boolOr("tie_word_embeddings", true); }

    bool has(const std::string& key) const;
    // Integer field; throws InputError when present but not an integer, or
    // absent and `def` is not given.
    // Values outside 0..2^40 are input errors too (they are sizes and counts).
    int64_t integer(const std::string& key, std::optional<int64_t> def = std::nullopt) const;
    // As integer(), and at least 1 (head counts and widths that are divided by).
    int64_t positive(const std::string& key, std::optional<int64_t> def = std::nullopt) const;
    // InputError unless `value` (of `key`) is a multiple of `by` (of `byKey`).
    void requireDivisible(const std::string& key, int64_t value, const std::string& byKey, int64_t by) const;
    double number(const std::string& key, double def) const;
    bool boolOr(const std::string& key, bool def) const;
    std::string stringOr(const std::string& key, const std::string& def) const;
    const nlohmann::json& raw() const { return m_raw; }
    // The object under `key` as a config of its own (same path; its own
    // model_type): a composite model's `text_config` / `vision_config`. An
    // empty one when the key is absent or null, as transformers builds the
    // sub-config from its class defaults then; InputError when not an object.
    ModelConfig sub(const std::string& key) const;
    // transformers' get_text_config(): `text_config` where config.json nests
    // one (Gemma 3's composite model), else this config itself.
    ModelConfig textConfig() const { return has("text_config") ? sub("text_config") : *this; }

private:
    std::string m_path;
    nlohmann::json m_raw = nlohmann::json::object();
    std::string m_modelType;
    std::vector<std::string> m_architectures;
    std::optional<DType> m_dtype;
};

} // namespace stowage
