#pragma once
// An opened Hugging Face checkpoint: its weight files (memory-mapped), the
// tensors they hold, config.json, and the other small files beside them.
#include "stowage/config.h"
#include "stowage/mappedfile.h"
#include "stowage/tensorinfo.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace stowage {

enum class WeightFormat { Safetensors, TorchBin };

struct Shard {
    std::string path; // absolute
    WeightFormat format = WeightFormat::Safetensors;
    std::shared_ptr<MappedFile> map; // null in index-only mode
};

class Checkpoint {
public:
    // PATH as DESIGN.md's CLI contract: a folder, an index .json, a single
    // .safetensors/.bin file, or a Hub cache entry (models--org--name).
    // Throws InputError naming the file and the problem.
    static Checkpoint open(const std::string& path);

    const std::string& folder() const { return m_folder; } // folder holding config.json and shards
    const std::string& weightsPath() const { return m_weightsPath; } // index or single weights file
    WeightFormat format() const { return m_format; }
    const std::vector<Shard>& shards() const { return m_shards; }
    const std::vector<TensorInfo>& tensors() const { return m_tensors; }
    const TensorInfo* find(const std::string& name) const;
    // True when only config.json + index are present: shapes come from the
    // architecture registry (plan before download).
    bool indexOnly() const { return m_indexOnly; }
    const std::optional<ModelConfig>& config() const { return m_config; }
    // Bytes of a tensor inside its shard's mapping; null in index-only mode.
    const uint8_t* data(const TensorInfo& t) const;
    // A small file beside config.json (tokenizer.json, generation_config.json...).
    std::optional<std::string> readSideFile(const std::string& name) const;
    // Problems worth a warning that did not stop opening.
    const std::vector<std::string>& warnings() const { return m_warnings; }

private:
    void openIndex(const std::string& indexPath);
    void openSingle(const std::string& file);
    // Whether `file` (resolving to `real`) may be read: inside m_trustRoot, or by a Hub cache entry's rule.
    bool mayRead(const std::string& file, const std::string& real) const;
    void addShardTensors(int shard, std::vector<TensorInfo> tensors);

    std::string m_folder;
    std::string m_weightsPath;
    std::string m_trustRoot; // symlinks may not lead out of this folder
    WeightFormat m_format = WeightFormat::Safetensors;
    std::vector<Shard> m_shards;
    std::vector<TensorInfo> m_tensors;
    std::unordered_map<std::string, size_t> m_byName;
    bool m_indexOnly = false;
    std::optional<ModelConfig> m_config;
    std::vector<std::string> m_warnings;
};

} // namespace stowage
