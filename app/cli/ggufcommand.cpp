// stowage-cli gguf: the checkpoint written as one GGUF file for llama.cpp
// (engine/include/stowage/gguf.h), the model file `deploy --engine
// llama.cpp`'s launch names.
#include "args.h"
#include "commands.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/gguf.h"

#include <cstdio>
#include <filesystem>

#include <unistd.h>

namespace stowage::cli {

int ggufCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"-o"}, {"--check"});
    const Checkpoint ck = Checkpoint::open(checkpointPath(a));
    if (a.flag("--check")) {
        const std::string problem = ggufExportProblem(ck);
        if (!problem.empty())
            throw InputError("", problem);
        std::printf("%s can be written as GGUF\n", ck.folder().c_str());
        return 0;
    }
    const auto out = a.value("-o");
    if (!out)
        throw InputError("", "gguf needs -o FILE.gguf (or --check)");
    std::error_code ec;
    if (std::filesystem::is_directory(*out, ec))
        throw InputError(*out, "is a folder; give the .gguf file to write");
    // Progress on a terminal only: scripts and logs get the one result line.
    const bool tty = isatty(fileno(stderr)) != 0;
    int lastPercent = -1;
    const GgufExport r = exportGguf(ck, *out, [&](uint64_t done, uint64_t total) {
        const int percent = total ? int(100 * done / total) : 100;
        if (tty && percent / 10 != lastPercent / 10)
            std::fprintf(stderr, "\rwriting %s: %d%%%s", out->c_str(), percent, percent == 100 ? "\n" : "");
        lastPercent = percent;
        return true;
    });
    std::printf("%s: GGUF %s, tokenizer %s, %llu tensors, %.1f MB\n", out->c_str(), r.architecture.c_str(),
                r.tokenizerPre.c_str(), static_cast<unsigned long long>(r.tensors), double(r.bytes) / 1e6);
    return 0;
}

} // namespace stowage::cli
