// Safetensors header validation, rule for rule as the reference implementation
// (huggingface/safetensors, `SafeTensors::read_metadata` and `Metadata::validate`).
#include "stowage/error.h"
#include "stowage/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

namespace stowage {
namespace {

constexpr uint64_t kMaxHeaderSize = 100'000'000;

bool mulOverflows(uint64_t a, uint64_t b, uint64_t* out)
{
    return __builtin_mul_overflow(a, b, out);
}

// nlohmann keeps the last of duplicate keys silently; the reference rejects
// them (serde refuses duplicate fields), so catch them while parsing.
nlohmann::json parseHeaderJson(const std::string& text, const std::string& path)
{
    std::vector<std::set<std::string>> keysAtDepth;
    std::string duplicate;
    auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (event == E::object_start) {
            keysAtDepth.resize(static_cast<size_t>(depth) + 2);
            keysAtDepth[static_cast<size_t>(depth) + 1].clear();
        } else if (event == E::key && duplicate.empty()) {
            auto& seen = keysAtDepth[static_cast<size_t>(depth)];
            if (!seen.insert(parsed.get<std::string>()).second)
                duplicate = parsed.get<std::string>();
        }
        return true;
    };
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text, callback);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(path, std::string("safetensors header is not valid JSON: ") + e.what());
    }
    if (!duplicate.empty())
        throw InputError(path, "safetensors header names '" + duplicate + "' twice");
    return header;
}

std::vector<int64_t> parseShape(const nlohmann::json& j, const std::string& name, const std::string& path)
{
    if (!j.is_array())
        throw InputError(path, "tensor '" + name + "' has no shape array");
    std::vector<int64_t> shape;
    for (const auto& d : j) {
        if (!d.is_number_unsigned())
            throw InputError(path, "tensor '" + name + "' has a shape entry that is not a non-negative integer");
        uint64_t v = d.get<uint64_t>();
        if (v > static_cast<uint64_t>(INT64_MAX))
            throw InputError(path, "tensor '" + name + "' shape overflows");
        shape.push_back(static_cast<int64_t>(v));
    }
    return shape;
}

} // namespace

SafetensorsHeader parseSafetensors(const uint8_t* data, uint64_t size, const std::string& path)
{
    if (size < 8)
        throw InputError(path, "safetensors header too small: the file has fewer than 8 bytes");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = (n << 8) | data[i];
    if (n > kMaxHeaderSize)
        throw InputError(path, "safetensors header too large: " + std::to_string(n) + " bytes (limit 100 MB)");
    if (n > size - 8)
        throw InputError(path, "safetensors header length " + std::to_string(n) + " runs past the end of the file (" +
                                   std::to_string(size) + " bytes)");
    std::string text(reinterpret_cast<const char*>(data + 8), n);
    if (text.empty() || text[0] != '{')
        throw InputError(path, "safetensors header does not start with '{'");
    nlohmann::json header = parseHeaderJson(text, path);
    if (!header.is_object())
        throw InputError(path, "safetensors header is not a JSON object");

    SafetensorsHeader out;
    struct Span {
        uint64_t begin, end;
        size_t index;
    };
    std::vector<Span> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object())
                throw InputError(path, "__metadata__ is not a string-to-string map");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    throw InputError(path, "__metadata__ value for '" + m.key() + "' is not a string");
                out.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (!v.is_object())
            throw InputError(path, "tensor '" + name + "' is not described by an object");
        auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string())
            throw InputError(path, "tensor '" + name + "' has no dtype");
        auto dtype = dtypeFromCode(dt->get<std::string>());
        if (!dtype)
            throw InputError(path, "tensor '" + name + "' has unknown dtype '" + dt->get<std::string>() + "'");
        auto sh = v.find("shape");
        if (sh == v.end())
            throw InputError(path, "tensor '" + name + "' has no shape");
        auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            throw InputError(path, "tensor '" + name + "' has no data_offsets pair of non-negative integers");
        TensorInfo t;
        t.name = name;
        t.dtype = *dtype;
        t.shape = parseShape(*sh, name, path);
        uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
        if (end < begin)
            throw InputError(path, "tensor '" + name + "' data_offsets end before they begin");
        uint64_t numel = 1;
        for (int64_t d : t.shape)
            if (mulOverflows(numel, static_cast<uint64_t>(d), &numel))
                throw InputError(path, "tensor '" + name + "' element count overflows");
        uint64_t bytes = 0;
        if (mulOverflows(numel, static_cast<uint64_t>(dtypeSize(t.dtype)), &bytes))
            throw InputError(path, "tensor '" + name + "' byte size overflows");
        if (bytes != end - begin)
            throw InputError(path, "tensor '" + name + "' has " + std::to_string(end - begin) +
                                       " bytes but shape x dtype needs " + std::to_string(bytes));
        t.nbytes = bytes;
        t.offset = begin; // made absolute below
        spans.push_back({begin, end, out.tensors.size()});
        out.tensors.push_back(std::move(t));
    }

    // Data must be one contiguous run from 0 with no gaps or overlaps, ending at EOF.
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expected = 0;
    for (const Span& s : spans) {
        const std::string& name = out.tensors[s.index].name;
        if (s.begin != expected)
            throw InputError(path, "tensor '" + name + "' starts at " + std::to_string(s.begin) + " but data is " +
                                       (s.begin < expected ? "already used there (overlap)" : "missing before it (gap)") +
                                       "; expected offset " + std::to_string(expected));
        expected = s.end;
    }
    uint64_t dataSize = size - 8 - n;
    if (expected != dataSize)
        throw InputError(path, "safetensors data is " + std::to_string(dataSize) + " bytes but the header describes " +
                                   std::to_string(expected));
    std::vector<TensorInfo> ordered;
    ordered.reserve(spans.size());
    for (const Span& s : spans) {
        TensorInfo t = std::move(out.tensors[s.index]);
        t.offset += 8 + n;
        ordered.push_back(std::move(t));
    }
    out.tensors = std::move(ordered);
    return out;
}

std::string shapeText(const std::vector<int64_t>& shape)
{
    std::string out = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "]";
}

} // namespace stowage
