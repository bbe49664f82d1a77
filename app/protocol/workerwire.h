#pragma once
// The worker protocol's words (docs/worker-protocol.md), written once for
// both ends: the worker (app/worker, plain C++ with nlohmann::json) and the
// window's client (app/run, Qt). Header only, no Qt, no JSON library: a
// command, event or field is spelt here and nowhere else, so the two ends
// cannot drift apart. tst_worker's round trip sends every command and
// receives every event kind listed below.
#include <cstddef>

namespace stowage::wire {

inline constexpr int kVersion = 1;

// Exit statuses with a meaning of their own, which the client turns into words.
inline constexpr int kExitMappedFileShrank = 74; // SIGBUS reading a mapped file that shrank
inline constexpr int kExitOutOfMemory = 75;      // an allocation failed where no request could report it

// A command line longer than this is skipped with an error.
inline constexpr size_t kMaxCommandBytes = size_t(16) << 20;

// The envelope.
inline constexpr const char* kCmd = "cmd";
inline constexpr const char* kEvent = "event";
inline constexpr const char* kRequest = "request"; // echoed on every event a command causes

namespace cmd {
inline constexpr const char* Load = "load";
inline constexpr const char* Generate = "generate";
inline constexpr const char* Step = "step";
inline constexpr const char* Stop = "stop";
inline constexpr const char* Unload = "unload";
inline constexpr const char* Quit = "quit";
inline constexpr const char* All[] = {Load, Generate, Step, Stop, Unload, Quit};
} // namespace cmd

namespace ev {
inline constexpr const char* Hello = "hello";
inline constexpr const char* Progress = "progress";
inline constexpr const char* Warning = "warning";
inline constexpr const char* Loaded = "loaded";
inline constexpr const char* Token = "token";
inline constexpr const char* Sample = "sample";
inline constexpr const char* Trace = "trace";
inline constexpr const char* Done = "done";
inline constexpr const char* Cancelled = "cancelled";
inline constexpr const char* Unloaded = "unloaded";
inline constexpr const char* Error = "error";
inline constexpr const char* All[] = {Hello, Progress, Warning, Loaded, Token, Sample,
                                      Trace, Done,     Cancelled, Unloaded, Error};
} // namespace ev

// `error` kinds.
namespace err {
inline constexpr const char* Input = "input";       // the command or its files are wrong
inline constexpr const char* Memory = "memory";     // an allocation failed; the request's memory is released
inline constexpr const char* Internal = "internal"; // ours
} // namespace err

// Fields, by the command or event that carries them.
namespace f {
// load
inline constexpr const char* Path = "path";
inline constexpr const char* DType = "dtype";
inline constexpr const char* Reference = "reference";
inline constexpr const char* DeviceMap = "device_map"; // also on `loaded`
inline constexpr const char* MaxMemory = "max_memory";
inline constexpr const char* Strategy = "strategy";
inline constexpr const char* NoSplit = "no_split";
inline constexpr const char* OffloadBuffers = "offload_buffers";
inline constexpr const char* KvCache = "kv_cache";
inline constexpr const char* OffloadFolder = "offload_folder";
inline constexpr const char* Policy = "policy";
inline constexpr const char* SimulateGpus = "simulate_gpus";
inline constexpr const char* Hardware = "hardware"; // a preset name, a profile .json, or the profile itself
inline constexpr const char* Throttle = "throttle";
inline constexpr const char* Threads = "threads";
// generate and step
inline constexpr const char* Prompt = "prompt";
inline constexpr const char* PromptIds = "prompt_ids";
inline constexpr const char* Chat = "chat"; // the prompt text through the chat template, as one user message
inline constexpr const char* MaxNewTokens = "max_new_tokens";
inline constexpr const char* Greedy = "greedy";
inline constexpr const char* Temperature = "temperature";
inline constexpr const char* TopK = "top_k";
inline constexpr const char* TopP = "top_p";
inline constexpr const char* Seed = "seed";
inline constexpr const char* IgnoreEos = "ignore_eos";
inline constexpr const char* UnitDelayMs = "unit_delay_ms";
// hello
inline constexpr const char* Protocol = "protocol";
inline constexpr const char* Runtime = "runtime";
inline constexpr const char* Cuda = "cuda";
inline constexpr const char* Families = "families";
inline constexpr const char* Policies = "policies";
inline constexpr const char* Pid = "pid";
// progress
inline constexpr const char* Fraction = "fraction";
inline constexpr const char* What = "what"; // also on `cancelled`
// warning, error
inline constexpr const char* Message = "message";
inline constexpr const char* Kind = "kind"; // also on trace entries
// loaded
inline constexpr const char* ModelType = "model_type";
inline constexpr const char* LoadS = "load_s";
inline constexpr const char* Devices = "devices";
inline constexpr const char* Device = "device"; // also on units and trace entries
inline constexpr const char* PlannedBytes = "planned_bytes";
inline constexpr const char* ActualBytes = "actual_bytes";
inline constexpr const char* Description = "description";
inline constexpr const char* Units = "units";
inline constexpr const char* Name = "name";
inline constexpr const char* VocabSize = "vocab_size";
inline constexpr const char* Tokenizer = "tokenizer";
// token
inline constexpr const char* Token = "token";
inline constexpr const char* Text = "text"; // also on `done`
inline constexpr const char* Index = "index";
inline constexpr const char* T = "t"; // seconds since the load began, the clock samples and trace share
// sample
inline constexpr const char* Resident = "resident";
inline constexpr const char* CudaAllocated = "cuda_allocated";
inline constexpr const char* H2dBytes = "h2d_bytes";
inline constexpr const char* DiskReadBytes = "disk_read_bytes"; // also in `done`'s traffic
inline constexpr const char* DiskPassBytes = "disk_pass_bytes"; // read from disk by the last complete pass
inline constexpr const char* RssBytes = "rss_bytes";            // also on `unloaded`
inline constexpr const char* Missed = "missed";                 // also on `trace`
// trace
inline constexpr const char* Events = "events";
inline constexpr const char* Unit = "unit";
inline constexpr const char* StepIndex = "step";
inline constexpr const char* T0 = "t0";
inline constexpr const char* T1 = "t1";
inline constexpr const char* Tensor = "tensor";
inline constexpr const char* Bytes = "bytes";
// done
inline constexpr const char* TokenIds = "token_ids";
inline constexpr const char* Stopped = "stopped";
inline constexpr const char* Timings = "timings";
inline constexpr const char* PrefillS = "prefill_s";
inline constexpr const char* DecodeS = "decode_s";
inline constexpr const char* DecodeTokensPerS = "decode_tokens_per_s";
inline constexpr const char* PeakBytes = "peak_bytes";
inline constexpr const char* Traffic = "traffic";
inline constexpr const char* HostToDeviceBytes = "host_to_device_bytes";
// unloaded
inline constexpr const char* WasLoaded = "was_loaded";
} // namespace f

} // namespace stowage::wire
