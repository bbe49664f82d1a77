#include "sigbus.h"

#include "stowage/mappedfile.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <unistd.h>

namespace stowage::cli {
namespace {

const char* g_prefix = "";
const char* g_suffix = "\n";
int g_status = 2;
// Several threads (the caller and the GEMV helper, the prefetcher) can read
// the shrunk tail at once and each take the signal: the first writes the
// line and ends the process, the others wait for that end, so the line is
// written once.
std::atomic<bool> g_reporting{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

// Async-signal-safe text: a fixed buffer filled with write-free appends.
struct SignalLine {
    char text[768];
    size_t n = 0;
    void add(const char* s)
    {
        while (*s && n < sizeof text - 1)
            text[n++] = *s++;
    }
    void add(uint64_t v)
    {
        char digits[24];
        int k = 0;
        do {
            digits[k++] = char('0' + v % 10);
            v /= 10;
        } while (v && k < 24);
        while (k > 0 && n < sizeof text - 1)
            text[n++] = digits[--k];
    }
};

void onSigbus(int sig, siginfo_t* info, void*)
{
    char path[512];
    MappedFault fault;
    if (info && info->si_code > 0 && findMappedFile(info->si_addr, path, sizeof path, &fault)) {
        if (g_reporting.exchange(true)) {
            for (;;)
                ::pause(); // another thread is writing the line; _exit ends us all
        }
        SignalLine line;
        line.add(g_prefix);
        line.add(path);
        if (fault.currentSize == UINT64_MAX) {
            line.add(": shrank below its mapped ");
            line.add(fault.mappedSize);
        } else {
            line.add(": shrank from ");
            line.add(fault.mappedSize);
            line.add(" to ");
            line.add(fault.currentSize);
        }
        line.add(" bytes while in use (SIGBUS reading byte ");
        line.add(fault.offset);
        line.add(")");
        line.add(g_suffix);
        writeStderr(line.text, line.n);
        ::_exit(g_status);
    }
    // Not a mapped file's fault: the default action (a core dump), at once
    // for a signal sent with kill, else when the faulting access runs again.
    ::signal(sig, SIG_DFL);
    if (!info || info->si_code <= 0)
        ::raise(sig);
}

} // namespace

void writeStderr(const char* text, size_t n)
{
    while (n > 0) {
        const ssize_t w = ::write(STDERR_FILENO, text, n);
        if (w <= 0)
            break;
        text += w;
        n -= size_t(w);
    }
}

void installSigbusHandler(const char* prefix, const char* suffix, int exitStatus)
{
    g_prefix = prefix;
    g_suffix = suffix;
    g_status = exitStatus;
    struct sigaction sa {};
    sa.sa_sigaction = onSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
}

} // namespace stowage::cli
