#pragma once
// The last line of defence for a process that reads memory-mapped
// checkpoints (stowage-cli run, stowage-cli worker): a file that shrinks
// between a size check and a read (a truncation racing a running step)
// raises SIGBUS. The handler finds which mapped file the address lies in,
// writes one line naming it, and exits with the status given; any other
// SIGBUS keeps its default action.
#include <cstddef>

namespace stowage::cli {

// Installs the handler. The line reads
// "<prefix><file>: shrank from A to B bytes while in use (SIGBUS reading byte N)<suffix>".
// Both strings must outlive the process (string literals).
void installSigbusHandler(const char* prefix, const char* suffix, int exitStatus);

// All of `text` on stderr with write(2) alone (async-signal-safe).
void writeStderr(const char* text, size_t n);

} // namespace stowage::cli
