#pragma once
// Errors the engine reports. InputError means the user's input is wrong
// (the CLI exits 2 and prints what() as one line); anything else is ours (exit 1).
#include <stdexcept>
#include <string>

namespace stowage {

class InputError : public std::runtime_error {
public:
    // what() reads "<file>: <problem>" so every message names the file.
    InputError(const std::string& file, const std::string& problem)
        : std::runtime_error(file.empty() ? problem : file + ": " + problem),
          m_file(file), m_problem(problem) {}
    const std::string& file() const { return m_file; }
    const std::string& problem() const { return m_problem; }

private:
    std::string m_file;
    std::string m_problem;
};

// Thrown inside a forward pass when the caller asked to stop (checked between
// execution units); generation turns it into a stopped result.
class Stopped : public std::runtime_error {
public:
    Stopped() : std::runtime_error("stopped") {}
};

// Thrown when a progress callback asked to stop.
class Cancelled : public std::runtime_error {
public:
    Cancelled() : std::runtime_error("cancelled") {}
};

} // namespace stowage
