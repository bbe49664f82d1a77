#pragma once
// A small command-line parser: one positional PATH, `--flag`, `--opt VALUE`
// (or `--opt=VALUE`), repeatable options. Unknown options are input errors.
#include "stowage/dtype.h"
#include "stowage/error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stowage::cli {

class Args {
public:
    // `valued`: options taking a value; `flags`: options that do not.
    Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& flags);

    bool flag(const std::string& name) const { return m_flags.count(name) > 0; }
    std::optional<std::string> value(const std::string& name) const;
    std::vector<std::string> values(const std::string& name) const;
    const std::vector<std::string>& positional() const { return m_positional; }

private:
    std::set<std::string> m_flags;
    std::multimap<std::string, std::string> m_values;
    std::vector<std::string> m_positional;
};

// The checkpoint PATH: the positional argument, else the bundled demo.
std::string checkpointPath(const Args& args);
// The bundled demo checkpoint: $STOWAGE_DEMO, the installed one, else the build's.
std::string demoCheckpointPath();
// An engine error as the CLI prints it: the engine names the input ("prompt
// token ids", "offload folder"); the CLI names the flag that gave it.
std::string withFlagNames(const InputError& error);
// Runs a command and maps what it throws to the exit-code contract: 2 and one
// line for bad input, 1 for a cancel or an internal failure.
int runGuarded(const std::function<int()>& command);

// --dtype: a floating torch dtype name, or nullopt for the checkpoint's own.
std::optional<DType> parseDTypeOption(const Args& args);

// "1,2,3" -> ids; InputError naming `what` for anything else.
std::vector<int32_t> parseIds(const std::string& text, const std::string& what);

// TEXT as a finite number, all of it; nullopt when it is not one.
std::optional<double> parseNumber(const std::string& text);
// Option NAME as a whole number from lo to hi, `fallback` when it is not
// given; InputError naming the option and its value otherwise.
int wholeNumberOption(const Args& args, const std::string& name, int fallback, int lo, int hi);

} // namespace stowage::cli
