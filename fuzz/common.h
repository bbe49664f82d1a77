#pragma once
// Shared by the libFuzzer targets (docs/fuzzing.md): a scratch folder for
// parsers that read files, splitting one input into several files, and the
// rule every target checks: bad input may only throw InputError (the CLI's
// exit 2, a message naming the file); any other exception escapes and
// libFuzzer reports it as a crash ("deadly signal" after std::terminate).
#include "stowage/error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <cerrno>
#include <csignal>
#include <unistd.h>

namespace fuzz {

// The line that separates the files of a multi-file input (vocab.json,
// merges.txt, the text to encode...). make_corpus.py writes seeds with it.
constexpr std::string_view kSeparator = "\n--- stowage-fuzz ---\n";

inline std::vector<std::string> split(const uint8_t* data, size_t size, size_t maxParts)
{
    std::vector<std::string> parts;
    std::string_view all(reinterpret_cast<const char*>(data), size);
    while (parts.size() + 1 < maxParts) {
        const size_t at = all.find(kSeparator);
        if (at == std::string_view::npos)
            break;
        parts.emplace_back(all.substr(0, at));
        all.remove_prefix(at + kSeparator.size());
    }
    parts.emplace_back(all);
    parts.resize(maxParts);
    return parts;
}

// One folder per process under $TMPDIR (or /dev/shm when it exists: no disk
// writes per execution), removed at exit, or by the next fuzzer after a crash.
class Scratch {
public:
    static Scratch& get()
    {
        static Scratch s;
        return s;
    }
    const std::string& dir() const { return m_dir; }
    std::string path(const std::string& name) const { return m_dir + "/" + name; }
    void write(const std::string& name, const std::string& bytes) const
    {
        std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), std::streamsize(bytes.size()));
        if (!out)
            std::abort(); // the harness, not the engine, failed
    }
    void remove(const std::string& name) const { std::remove(path(name).c_str()); }
    // Empties the folder (a target may leave files a parser created).
    void clear() const
    {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(m_dir, ec))
            std::filesystem::remove_all(e.path(), ec);
    }
    ~Scratch()
    {
        std::error_code ec;
        std::filesystem::remove_all(m_dir, ec);
    }

private:
    Scratch()
    {
        std::string base = "/dev/shm";
        if (const char* t = std::getenv("TMPDIR"))
            base = t;
        else if (access(base.c_str(), W_OK) != 0)
            base = "/tmp";
        // A crash ends the process without destructors: remove the folders
        // of fuzzers that are gone (the name holds their process id).
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
            const std::string name = e.path().filename().string();
            const std::string prefix = "stowage-fuzz-";
            if (name.rfind(prefix, 0) != 0)
                continue;
            const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
            if (pid > 0 && kill(pid_t(pid), 0) != 0 && errno == ESRCH)
                std::filesystem::remove_all(e.path(), ec);
        }
        std::string tmpl = base + "/stowage-fuzz-" + std::to_string(getpid()) + "-XXXXXX";
        if (!mkdtemp(tmpl.data()))
            std::abort();
        m_dir = tmpl;
    }
    std::string m_dir;
};

} // namespace fuzz
