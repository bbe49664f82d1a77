// pytorch_model.bin without LibTorch: torch.save() writes a stored zip holding
// `<prefix>/data.pkl` (the pickled state dict, storages replaced by persistent
// ids) and one entry `<prefix>/data/<key>` per storage. Tensors become views
// into those entries, so nothing is copied and nothing from the file runs.
//
// The top-level object must be a dict (or OrderedDict) of name -> tensor, as
// state_dict() returns. Values that are not tensors (an "epoch" int, nested
// optimizer state) are skipped; a file whose tensors all sit one level down
// (`{"model": state_dict}`) is refused with the key to unwrap. Tensors come
// back in the dict's order.
#include "stowage/error.h"
#include "stowage/torchbin.h"

#include "unpickler.h"
#include "zipreader.h"

#include <algorithm>
#include <map>
#include <optional>

namespace stowage {
namespace {

// Names come from the file and error messages must stay on one line.
std::string oneLine(const std::string& s)
{
    std::string out;
    for (unsigned char c : s)
        out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    return out;
}

bool mulOverflow(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Global names are ASCII identifiers: anything else is shown as '?' and cut
// short, so a hostile name cannot garble the one-line error message.
std::string asciiName(const std::string& s)
{
    std::string out;
    for (unsigned char c : s.substr(0, 100))
        out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
    return s.size() > 100 ? out + "..." : out;
}

struct AllowedGlobal {
    const char* module;
    const char* name;
    PickleGlobal global;
    std::optional<DType> dtype;
};
constexpr PickleGlobal kStorage = PickleGlobal::StorageClass, kDType = PickleGlobal::DType;
// Everything torch.save() names for a state dict; all else is refused.
constexpr AllowedGlobal kAllowed[] = {
    {"collections", "OrderedDict", PickleGlobal::OrderedDict, {}},
    {"torch._utils", "_rebuild_tensor_v2", PickleGlobal::RebuildTensorV2, {}},
    {"torch._utils", "_rebuild_tensor_v3", PickleGlobal::RebuildTensorV3, {}},
    {"torch._utils", "_rebuild_parameter", PickleGlobal::RebuildParameter, {}},
    {"torch._utils", "_rebuild_parameter_with_state", PickleGlobal::RebuildParameterWithState, {}},
    {"torch._tensor", "_rebuild_from_type_v2", PickleGlobal::RebuildFromTypeV2, {}},
    {"torch", "Tensor", PickleGlobal::TensorClass, {}},
    {"torch.nn.parameter", "Parameter", PickleGlobal::TensorClass, {}},
    {"torch", "UntypedStorage", kStorage, {}}, {"torch.storage", "UntypedStorage", kStorage, {}},
    // The legacy typed storage classes torch still writes for the classic dtypes.
    {"torch", "FloatStorage", kStorage, DType::F32}, {"torch", "HalfStorage", kStorage, DType::F16},
    {"torch", "BFloat16Storage", kStorage, DType::BF16}, {"torch", "DoubleStorage", kStorage, DType::F64},
    {"torch", "LongStorage", kStorage, DType::I64}, {"torch", "IntStorage", kStorage, DType::I32},
    {"torch", "ShortStorage", kStorage, DType::I16}, {"torch", "CharStorage", kStorage, DType::I8},
    {"torch", "ByteStorage", kStorage, DType::U8}, {"torch", "BoolStorage", kStorage, DType::BOOL},
    // torch.<dtype>: newer dtypes travel as UntypedStorage + dtype (_rebuild_tensor_v3).
    {"torch", "float32", kDType, DType::F32}, {"torch", "float", kDType, DType::F32},
    {"torch", "float16", kDType, DType::F16}, {"torch", "half", kDType, DType::F16},
    {"torch", "bfloat16", kDType, DType::BF16}, {"torch", "float64", kDType, DType::F64},
    {"torch", "double", kDType, DType::F64}, {"torch", "int64", kDType, DType::I64},
    {"torch", "long", kDType, DType::I64}, {"torch", "int32", kDType, DType::I32},
    {"torch", "int", kDType, DType::I32}, {"torch", "int16", kDType, DType::I16},
    {"torch", "short", kDType, DType::I16}, {"torch", "int8", kDType, DType::I8},
    {"torch", "uint8", kDType, DType::U8}, {"torch", "bool", kDType, DType::BOOL},
    {"torch", "uint16", kDType, DType::U16}, {"torch", "uint32", kDType, DType::U32},
    {"torch", "uint64", kDType, DType::U64}, {"torch", "float8_e5m2", kDType, DType::F8_E5M2},
    {"torch", "float8_e4m3fn", kDType, DType::F8_E4M3},
};

// What a persistent id ('storage', type, key, location, numel) names: the
// zip entry data/<key> holding `numel` elements.
struct TorchStorage {
    std::optional<DType> dtype; // unset: untyped bytes, the tensor says the dtype
    std::string key;
    int64_t numel = 0;
};

// The arguments of one _rebuild_tensor_v2/v3 call, not yet checked against the file.
struct TorchTensor {
    size_t storage = 0; // index into TorchModel::storages()
    DType dtype = DType::U8;
    int64_t storageOffset = 0;
    std::vector<int64_t> shape;
    std::vector<int64_t> stride;
};

// torch.save()'s pickle dialect. Calls are modelled from their arguments, so
// a "tensor" is only a record of where its bytes are said to be.
class TorchModel final : public PickleModel {
public:
    explicit TorchModel(const std::string& path) : m_path(path) {}
    PickleObject global(const std::string& module, const std::string& name) override;
    PickleRef call(Unpickler& u, PickleRef callable, const std::vector<PickleRef>& args) override;
    PickleRef persistentLoad(Unpickler& u, PickleRef pid) override;
    const std::vector<TorchStorage>& storages() const { return m_storages; }
    const std::vector<TorchTensor>& tensors() const { return m_tensors; }

private:
    PickleRef rebuildTensor(Unpickler& u, const std::vector<PickleRef>& args, bool v3);
    static int64_t intArg(const Unpickler& u, PickleRef r, const char* what);
    static std::vector<int64_t> intTuple(const Unpickler& u, PickleRef r, const char* what);

    std::string m_path;
    std::vector<TorchStorage> m_storages;
    std::vector<TorchTensor> m_tensors;
};

PickleObject TorchModel::global(const std::string& module, const std::string& name)
{
    for (const auto& g : kAllowed)
        if (module == g.module && name == g.name) {
            PickleObject o;
            o.global = g.global;
            o.dtype = g.dtype;
            return o;
        }
    const std::string full = asciiName(module + "." + name);
    if (module == "torch" && name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0)
        throw InputError(m_path, "tensor storage type '" + full +
                                     "' (complex or quantized) has no safetensors dtype and is not supported");
    throw InputError(m_path, "refuses pickle global '" + full + "' (only tensors and plain containers are allowed)");
}

PickleRef TorchModel::call(Unpickler& u, PickleRef callable, const std::vector<PickleRef>& args)
{
    const PickleGlobal g = u.object(callable).global;
    const std::string name = asciiName(u.object(callable).text);
    auto arity = [&](size_t lo, size_t hi) {
        if (args.size() < lo || args.size() > hi)
            u.fail(name + " called with " + std::to_string(args.size()) + " arguments");
    };
    switch (g) {
    case PickleGlobal::OrderedDict: {
        arity(0, 0);
        PickleObject o;
        o.kind = PickleKind::Dict;
        return u.make(std::move(o));
    }
    case PickleGlobal::RebuildTensorV2: arity(6, 7); return rebuildTensor(u, args, false);
    case PickleGlobal::RebuildTensorV3: arity(7, 8); return rebuildTensor(u, args, true);
    case PickleGlobal::RebuildParameter:
    case PickleGlobal::RebuildParameterWithState: {
        // A Parameter is its data tensor plus autograd flags we do not keep.
        size_t n = g == PickleGlobal::RebuildParameter ? 3 : 4;
        arity(n, n);
        if (u.object(args[0]).kind != PickleKind::Tensor)
            u.fail(name + " of a " + pickleKindName(u.object(args[0]).kind));
        return args[0];
    }
    case PickleGlobal::RebuildFromTypeV2: {
        // (func, type, args, state) for tensors carrying Python state; only a
        // tensor rebuild may be the inner call, so this recurses at most once.
        arity(4, 4);
        const PickleObject& inner = u.object(args[0]);
        const PickleObject& type = u.object(args[1]);
        const PickleObject& innerArgs = u.object(args[2]);
        if (inner.kind != PickleKind::Global ||
            (inner.global != PickleGlobal::RebuildTensorV2 && inner.global != PickleGlobal::RebuildTensorV3) ||
            type.kind != PickleKind::Global || type.global != PickleGlobal::TensorClass ||
            innerArgs.kind != PickleKind::Tuple)
            u.fail(name + " of anything but a plain tensor is not supported");
        const std::vector<PickleRef> items = innerArgs.items;
        return call(u, args[0], items);
    }
    default: u.fail("'" + name + "' cannot be called");
    }
}

// (storage, storage_offset, size, stride, requires_grad, backward_hooks[, dtype (v3)][, metadata])
PickleRef TorchModel::rebuildTensor(Unpickler& u, const std::vector<PickleRef>& args, bool v3)
{
    const PickleObject& s = u.object(args[0]);
    if (s.kind != PickleKind::Storage)
        u.fail(std::string("tensor rebuilt from a ") + pickleKindName(s.kind) + ", not a storage");
    TorchTensor t;
    t.storage = static_cast<size_t>(s.num);
    t.storageOffset = intArg(u, args[1], "storage offset");
    t.shape = intTuple(u, args[2], "size");
    t.stride = intTuple(u, args[3], "stride");
    if (v3) {
        const PickleObject& d = u.object(args[6]);
        if (d.kind != PickleKind::Global || d.global != PickleGlobal::DType)
            u.fail("_rebuild_tensor_v3 without a dtype");
        t.dtype = *d.dtype;
    } else if (m_storages[t.storage].dtype) {
        t.dtype = *m_storages[t.storage].dtype;
    } else {
        u.fail("_rebuild_tensor_v2 of an untyped storage");
    }
    if (t.shape.size() != t.stride.size())
        u.fail("tensor size and stride have different lengths");
    m_tensors.push_back(std::move(t));
    PickleObject o;
    o.kind = PickleKind::Tensor;
    o.num = static_cast<int64_t>(m_tensors.size() - 1);
    return u.make(std::move(o));
}

// torch.save() stores each storage as zip entry data/<key> and pickles only
// ('storage', storage_type, key, location, numel) in its place.
PickleRef TorchModel::persistentLoad(Unpickler& u, PickleRef pid)
{
    const PickleObject& t = u.object(pid);
    if (t.kind != PickleKind::Tuple || t.items.size() != 5 || u.object(t.items[0]).kind != PickleKind::String ||
        u.object(t.items[0]).text != "storage")
        u.fail("persistent id is not a ('storage', type, key, location, numel) tuple");
    const PickleObject& type = u.object(t.items[1]);
    const PickleObject& key = u.object(t.items[2]);
    if (type.kind != PickleKind::Global || type.global != PickleGlobal::StorageClass)
        u.fail("persistent id names no storage type");
    if (key.kind != PickleKind::String || u.object(t.items[3]).kind != PickleKind::String)
        u.fail("persistent id has no storage key or location");
    TorchStorage st;
    st.dtype = type.dtype;
    st.key = key.text;
    st.numel = intArg(u, t.items[4], "storage size");
    if (st.numel < 0)
        u.fail("negative storage size");
    m_storages.push_back(std::move(st));
    PickleObject o;
    o.kind = PickleKind::Storage;
    o.num = static_cast<int64_t>(m_storages.size() - 1);
    return u.make(std::move(o));
}

int64_t TorchModel::intArg(const Unpickler& u, PickleRef r, const char* what)
{
    if (u.object(r).kind != PickleKind::Int)
        u.fail(std::string("tensor ") + what + " is a " + pickleKindName(u.object(r).kind) + ", not an int");
    return u.object(r).num;
}

std::vector<int64_t> TorchModel::intTuple(const Unpickler& u, PickleRef r, const char* what)
{
    const PickleObject& o = u.object(r);
    if (o.kind != PickleKind::Tuple && o.kind != PickleKind::List)
        u.fail(std::string("tensor ") + what + " is a " + pickleKindName(o.kind) + ", not a tuple");
    std::vector<int64_t> out;
    out.reserve(o.items.size());
    for (PickleRef item : o.items)
        out.push_back(intArg(u, item, what));
    return out;
}

struct StorageSpan {
    std::string key;
    uint64_t offset = 0; // absolute, in the file
    uint64_t nbytes = 0; // as the pickle declares it, checked to fit its entry
};

std::vector<StorageSpan> resolveStorages(const TorchModel& model, const ZipReader& zip, const std::string& prefix,
                                         const std::string& path)
{
    std::vector<StorageSpan> spans;
    spans.reserve(model.storages().size());
    for (const TorchStorage& s : model.storages()) {
        const ZipEntry* e = zip.find(prefix + "data/" + s.key);
        if (!e)
            throw InputError(path, "storage '" + oneLine(s.key) + "' is missing from the archive (the file may be truncated)");
        StorageSpan span;
        span.key = s.key;
        span.offset = e->offset;
        uint64_t elem = s.dtype ? static_cast<uint64_t>(dtypeSize(*s.dtype)) : 1;
        if (mulOverflow(static_cast<uint64_t>(s.numel), elem, &span.nbytes) || span.nbytes > e->size)
            throw InputError(path, "storage '" + oneLine(s.key) + "' declares more bytes than its archive entry holds (" +
                                       std::to_string(e->size) + ")");
        spans.push_back(std::move(span));
    }
    return spans;
}

TensorInfo makeTensor(const std::string& name, const TorchTensor& t, const StorageSpan& s, const std::string& path)
{
    TensorInfo info;
    info.name = name;
    const std::string shown = oneLine(name);
    info.dtype = t.dtype;
    info.shape = t.shape;
    uint64_t numel = 1;
    for (int64_t d : t.shape)
        if (d < 0 || mulOverflow(numel, static_cast<uint64_t>(d), &numel))
            throw InputError(path, "tensor '" + shown + "' has an invalid size");
    // Contiguous row-major, as torch.Tensor.is_contiguous() defines it: a
    // dimension of size 1 may have any stride, an empty tensor any strides.
    if (numel > 0) {
        uint64_t expected = 1;
        for (size_t i = t.shape.size(); i-- > 0;) {
            if (t.shape[i] != 1 && (t.stride[i] < 0 || static_cast<uint64_t>(t.stride[i]) != expected))
                throw InputError(path, "tensor '" + shown + "' is not contiguous; convert the checkpoint to safetensors");
            expected *= static_cast<uint64_t>(t.shape[i]); // <= numel, cannot overflow
        }
    }
    uint64_t elem = static_cast<uint64_t>(dtypeSize(t.dtype));
    uint64_t start = 0;
    if (t.storageOffset < 0 || mulOverflow(static_cast<uint64_t>(t.storageOffset), elem, &start) ||
        mulOverflow(numel, elem, &info.nbytes) || start > s.nbytes || info.nbytes > s.nbytes - start)
        throw InputError(path, "tensor '" + shown + "' lies outside its storage '" + oneLine(s.key) + "'");
    info.offset = s.offset + start;
    info.shard = -1;
    return info;
}

bool holdsTensor(const Unpickler& u, const PickleObject& dict)
{
    for (size_t i = 1; i < dict.items.size(); i += 2)
        if (u.object(dict.items[i]).kind == PickleKind::Tensor)
            return true;
    return false;
}

} // namespace

std::vector<TensorInfo> parseTorchBin(const uint8_t* data, uint64_t size, const std::string& path)
{
    if (size == 0)
        throw InputError(path, "file is empty");
    // The legacy format is a bare pickle stream (magic number, protocol 2).
    if (size >= 2 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5)
        throw InputError(path, "legacy (non-zip) torch.save format is not supported; convert it to safetensors");

    ZipReader zip(data, size, path);
    // Like torch's reader, the folder of the first entry names the archive;
    // it is "archive" or the stem of the file torch.save() first wrote.
    if (zip.entries().empty())
        throw InputError(path, "the zip archive is empty, so not a torch.save file");
    const std::string& first = zip.entries().front().name;
    size_t slash = first.find('/');
    if (slash == std::string::npos)
        throw InputError(path, "zip entries are not inside one folder, so not a torch.save file");
    const std::string prefix = first.substr(0, slash + 1);

    const ZipEntry* pkl = zip.find(prefix + "data.pkl");
    if (!pkl)
        throw InputError(path, "the zip archive has no '" + oneLine(prefix) + "data.pkl', so not a torch.save file");
    zip.verifyCrc(*pkl);
    if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
        std::string value(reinterpret_cast<const char*>(data + order->offset),
                          static_cast<size_t>(std::min<uint64_t>(order->size, 16)));
        if (value != "little")
            throw InputError(path, "tensors are stored with byte order '" + oneLine(value) +
                                       "'; only little-endian checkpoints are supported");
    }

    TorchModel model(path);
    Unpickler u(data + pkl->offset, pkl->size, path, model);
    const PickleObject& root = u.object(u.load());
    if (root.kind != PickleKind::Dict)
        throw InputError(path, std::string("the pickled object is a ") + pickleKindName(root.kind) +
                                   ", not a state dict of tensors");
    const std::vector<StorageSpan> spans = resolveStorages(model, zip, prefix, path);

    // Python dict semantics: a repeated key keeps its first position and its last value.
    std::vector<std::string> order;
    std::map<std::string, PickleRef> values;
    std::string nestedKey;
    for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
        const PickleObject& key = u.object(root.items[i]);
        const PickleObject& value = u.object(root.items[i + 1]);
        if (key.kind != PickleKind::String) {
            if (value.kind == PickleKind::Tensor)
                throw InputError(path, std::string("a tensor is keyed by a ") + pickleKindName(key.kind) +
                                           ", not by a name");
            continue;
        }
        if (values.emplace(key.text, root.items[i + 1]).second)
            order.push_back(key.text);
        else
            values[key.text] = root.items[i + 1];
    }

    std::vector<TensorInfo> tensors;
    for (const std::string& name : order) {
        const PickleObject& value = u.object(values[name]);
        if (value.kind == PickleKind::Tensor) {
            const TorchTensor& t = model.tensors()[static_cast<size_t>(value.num)];
            tensors.push_back(makeTensor(name, t, spans[t.storage], path));
        } else if (value.kind == PickleKind::Dict && nestedKey.empty() && holdsTensor(u, value)) {
            nestedKey = name;
        }
    }
    if (tensors.empty() && !nestedKey.empty())
        throw InputError(path, "the tensors are nested under '" + oneLine(nestedKey) +
                                   "'; only a flat state_dict (name -> tensor) is supported");
    return tensors;
}

} // namespace stowage
