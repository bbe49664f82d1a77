#pragma once
// A restricted pickle reader. It interprets the opcode stream into an inert
// object graph and never calls anything: what a GLOBAL names, what calling it
// yields and what a persistent id loads are all decided by a PickleModel,
// which recognises a few names and refuses every other one on sight.
#include "stowage/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace stowage {

using PickleRef = uint32_t; // index into Unpickler::object()

// Storage and Tensor objects are made only by a model.
enum class PickleKind : uint8_t { None, Bool, Int, Float, String, Bytes, Tuple, List, Dict, Global, Storage, Tensor };

// "dict", "tensor", ... for error messages.
const char* pickleKindName(PickleKind k);

// The globals torch.save() uses; a model gives each accepted GLOBAL one.
enum class PickleGlobal : uint8_t {
    OrderedDict,
    RebuildTensorV2,
    RebuildTensorV3,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildFromTypeV2,
    TensorClass,  // torch.Tensor / torch.nn.Parameter, only as _rebuild_from_type_v2's type
    StorageClass, // torch.FloatStorage ...; `dtype` unset for torch.UntypedStorage
    DType,        // torch.float16 ...
};

struct PickleObject {
    PickleKind kind = PickleKind::None;
    PickleGlobal global = PickleGlobal::OrderedDict; // kind == Global
    std::optional<DType> dtype;                      // StorageClass / DType globals
    int64_t num = 0;                                 // Int, Bool; the model's index for Storage / Tensor
    double real = 0;                                 // Float
    std::string text;                                // String, Bytes; "module.name" of a Global
    std::vector<PickleRef> items;                    // Tuple, List; Dict as key, value, key, value...
};

class Unpickler;

// The meaning of one pickle dialect's globals. Each hook either builds an
// inert object with Unpickler::make() or throws InputError.
class PickleModel {
public:
    virtual ~PickleModel() = default;
    // GLOBAL / STACK_GLOBAL: must refuse any name it does not model.
    virtual PickleObject global(const std::string& module, const std::string& name) = 0;
    // REDUCE / NEWOBJ of a Global object, with the argument tuple's items.
    virtual PickleRef call(Unpickler& u, PickleRef callable, const std::vector<PickleRef>& args) = 0;
    // BINPERSID.
    virtual PickleRef persistentLoad(Unpickler& u, PickleRef pid) = 0;
};

class Unpickler {
public:
    // `path` names the file in errors; `data` is the pickle's bytes.
    Unpickler(const uint8_t* data, uint64_t size, const std::string& path, PickleModel& model);

    // Interprets opcodes up to STOP and returns the resulting object. Throws
    // InputError for an unknown opcode, malformed input, a file that would
    // exceed the memory bounds, or whatever the model refuses.
    PickleRef load();

    const PickleObject& object(PickleRef r) const { return m_objects[r]; }
    // Adds an object to the arena. References from object() may dangle afterwards.
    PickleRef make(PickleObject obj);
    // Throws InputError("corrupt pickle ... byte N: problem").
    [[noreturn]] void fail(const std::string& problem) const;

private:
    const uint8_t* take(uint64_t n);
    uint64_t readUInt(int bytes);
    std::string readLine();

    PickleRef makeInt(int64_t v);
    PickleRef makeString(PickleKind kind, uint64_t len);
    PickleRef makeGlobal(const std::string& module, const std::string& name);
    PickleRef call(PickleRef callable, PickleRef args, const char* opName);
    void push(PickleRef r);
    PickleRef pop();
    PickleRef& top();
    std::vector<PickleRef> popMark();
    PickleObject& mutableContainer(PickleRef r, PickleKind kind, const char* opName);

    const uint8_t* m_data;
    uint64_t m_size;
    uint64_t m_pos = 0;
    std::string m_path;
    PickleModel& m_model;

    std::vector<PickleObject> m_objects;
    std::vector<PickleRef> m_stack;
    std::vector<size_t> m_marks;
    std::unordered_map<uint32_t, PickleRef> m_memo;
    PickleRef m_smallInts[256] = {};
    bool m_haveSmallInt[256] = {};
};

} // namespace stowage
