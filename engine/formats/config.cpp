#include "stowage/config.h"

#include "stowage/error.h"

namespace stowage {

ModelConfig ModelConfig::parse(const std::string& text, const std::string& path)
{
    ModelConfig c;
    c.m_path = path;
    try {
        c.m_raw = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(path, std::string("not valid JSON: ") + e.what());
    }
    if (!c.m_raw.is_object())
        throw InputError(path, "not a JSON object");
    c.m_modelType = c.stringOr("model_type", "");
    if (auto a = c.m_raw.find("architectures"); a != c.m_raw.end() && a->is_array())
        for (const auto& s : *a)
            if (s.is_string())
                c.m_architectures.push_back(s.get<std::string>());
    // transformers 5 keeps `dtype` when both are present (PreTrainedConfig.__post_init__).
    for (const char* key : {"dtype", "torch_dtype"}) {
        auto it = c.m_raw.find(key);
        if (it != c.m_raw.end() && it->is_string())
            if (auto d = dtypeFromTorchName(it->get<std::string>())) {
                c.m_dtype = d;
                break;
            }
    }
    return c;
}

ModelConfig ModelConfig::sub(const std::string& key) const
{
    ModelConfig c;
    c.m_path = m_path;
    auto it = m_raw.find(key);
    if (it == m_raw.end() || it->is_null())
        return c;
    if (!it->is_object())
        throw InputError(m_path, "'" + key + "' is not a JSON object");
    c.m_raw = *it;
    c.m_modelType = c.stringOr("model_type", "");
    c.m_dtype = m_dtype;
    return c;
}

bool ModelConfig::has(const std::string& key) const
{
    auto it = m_raw.find(key);
    return it != m_raw.end() && !it->is_null();
}

int64_t ModelConfig::integer(const std::string& key, std::optional<int64_t> def) const
{
    auto it = m_raw.find(key);
    if (it == m_raw.end() || it->is_null()) {
        if (def)
            return *def;
        throw InputError(m_path, "missing '" + key + "'");
    }
    if (!it->is_number_integer())
        throw InputError(m_path, "'" + key + "' is not an integer");
    // Sizes and counts: a negative or absurd value would wrap every size computed from it.
    const int64_t v = it->get<int64_t>();
    if (v < 0 || v > (int64_t(1) << 40))
        throw InputError(m_path, "'" + key + "' is " + std::to_string(v) + ", outside 0..2^40");
    return v;
}

int64_t ModelConfig::positive(const std::string& key, std::optional<int64_t> def) const
{
    const int64_t v = integer(key, def);
    if (v < 1)
        throw InputError(m_path, "'" + key + "' must be at least 1");
    return v;
}

void ModelConfig::requireDivisible(const std::string& key, int64_t value, const std::string& byKey, int64_t by) const
{
    if (by < 1 || value % by != 0)
        throw InputError(m_path, "'" + key + "' (" + std::to_string(value) + ") is not a multiple of '" + byKey + "' (" +
                                     std::to_string(by) + ")");
}

double ModelConfig::number(const std::string& key, double def) const
{
    auto it = m_raw.find(key);
    if (it == m_raw.end() || it->is_null())
        return def;
    if (!it->is_number())
        throw InputError(m_path, "'" + key + "' is not a number");
    return it->get<double>();
}

bool ModelConfig::boolOr(const std::string& key, bool def) const
{
    auto it = m_raw.find(key);
    if (it == m_raw.end() || it->is_null())
        return def;
    if (!it->is_boolean())
        throw InputError(m_path, "'" + key + "' is not true or false");
    return it->get<bool>();
}

std::string ModelConfig::stringOr(const std::string& key, const std::string& def) const
{
    auto it = m_raw.find(key);
    if (it == m_raw.end() || !it->is_string())
        return def;
    return it->get<std::string>();
}

} // namespace stowage
