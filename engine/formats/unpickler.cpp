// The opcode interpreter follows CPython's Lib/pickle.py (_Unpickler) for the
// subset torch.save() emits at protocol 2, plus the protocol 3-5 opcodes newer
// picklers use for the same values; globals mean only what the model says.
// Objects live in one arena and refer to each other by index, so shared and
// even cyclic references (which a hostile file can build with BINGET) cost
// nothing to hold or to free.
#include "unpickler.h"

#include "stowage/error.h"

#include <cstring>

namespace stowage {
namespace {

// Bounds that keep a hostile data.pkl from exhausting memory: an honest
// state dict needs about ten objects per tensor, so 1M objects (under 100 MB
// at worst) still allow some 100k tensors per file; torch nests MARKs 3 deep.
constexpr size_t kMaxObjects = size_t(1) << 20;
constexpr size_t kMaxMarks = 1000;
constexpr size_t kMaxGlobalName = 256;

constexpr PickleRef kNone = 0, kFalse = 1, kTrue = 2, kEmptyTuple = 3;

namespace op {
constexpr uint8_t MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', BINFLOAT = 'G';
constexpr uint8_t BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N', BINPERSID = 'Q', REDUCE = 'R';
constexpr uint8_t BINSTRING = 'T', SHORT_BINSTRING = 'U', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b';
constexpr uint8_t GLOBAL = 'c', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j', EMPTY_LIST = ']';
constexpr uint8_t BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')';
constexpr uint8_t SETITEMS = 'u', EMPTY_DICT = '}', BINBYTES = 'B', SHORT_BINBYTES = 'C';
constexpr uint8_t PROTO = 0x80, NEWOBJ = 0x81, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87;
constexpr uint8_t NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b;
constexpr uint8_t SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e;
constexpr uint8_t STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95;
} // namespace op

} // namespace

const char* pickleKindName(PickleKind k)
{
    static const char* const names[] = {"None", "bool", "int", "float", "str", "bytes",
                                        "tuple", "list", "dict", "global", "storage", "tensor"};
    return names[static_cast<int>(k)];
}

Unpickler::Unpickler(const uint8_t* data, uint64_t size, const std::string& path, PickleModel& model)
    : m_data(data), m_size(size), m_path(path), m_model(model)
{
    PickleObject none;
    PickleObject boolean;
    boolean.kind = PickleKind::Bool;
    PickleObject tuple;
    tuple.kind = PickleKind::Tuple;
    make(none);    // kNone
    make(boolean); // kFalse
    boolean.num = 1;
    make(boolean); // kTrue
    make(tuple);   // kEmptyTuple: immutable, so one suffices for every ()
}

void Unpickler::fail(const std::string& problem) const
{
    throw InputError(m_path, "corrupt pickle (data.pkl, byte " + std::to_string(m_pos) + "): " + problem);
}

const uint8_t* Unpickler::take(uint64_t n)
{
    if (n > m_size - m_pos)
        fail("unexpected end of data");
    const uint8_t* p = m_data + m_pos;
    m_pos += n;
    return p;
}

uint64_t Unpickler::readUInt(int bytes)
{
    const uint8_t* p = take(static_cast<uint64_t>(bytes));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

std::string Unpickler::readLine()
{
    for (uint64_t i = m_pos; i < m_size && i - m_pos <= kMaxGlobalName; ++i) {
        if (m_data[i] == '\n') {
            std::string s(reinterpret_cast<const char*>(m_data + m_pos), static_cast<size_t>(i - m_pos));
            m_pos = i + 1;
            return s;
        }
    }
    fail("GLOBAL name is not terminated");
}

PickleRef Unpickler::make(PickleObject obj)
{
    if (m_objects.size() >= kMaxObjects)
        fail("more than " + std::to_string(kMaxObjects) + " objects; refusing to read further");
    m_objects.push_back(std::move(obj));
    return static_cast<PickleRef>(m_objects.size() - 1);
}

PickleRef Unpickler::makeInt(int64_t v)
{
    bool small = v >= 0 && v < 256;
    if (small && m_haveSmallInt[v])
        return m_smallInts[v];
    PickleObject o;
    o.kind = PickleKind::Int;
    o.num = v;
    PickleRef r = make(std::move(o));
    if (small) {
        m_smallInts[v] = r;
        m_haveSmallInt[v] = true;
    }
    return r;
}

PickleRef Unpickler::makeString(PickleKind kind, uint64_t len)
{
    const uint8_t* p = take(len);
    PickleObject o;
    o.kind = kind;
    o.text.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    return make(std::move(o));
}

// The model refuses unknown names here, before anything could reference them.
PickleRef Unpickler::makeGlobal(const std::string& module, const std::string& name)
{
    PickleObject o = m_model.global(module, name);
    o.kind = PickleKind::Global;
    o.text = module + "." + name;
    return make(std::move(o));
}

PickleRef Unpickler::call(PickleRef callable, PickleRef args, const char* opName)
{
    if (m_objects[callable].kind != PickleKind::Global)
        fail(std::string(opName) + " calls a " + pickleKindName(m_objects[callable].kind));
    if (m_objects[args].kind != PickleKind::Tuple)
        fail(std::string(opName) + " arguments are not a tuple");
    const std::vector<PickleRef> items = m_objects[args].items; // a copy: the model grows the arena
    return m_model.call(*this, callable, items);
}

void Unpickler::push(PickleRef r)
{
    if (m_stack.size() >= kMaxObjects)
        fail("pickle stack exceeds " + std::to_string(kMaxObjects) + " entries");
    m_stack.push_back(r);
}

// As in CPython, MARK opens a new stack frame: nothing may pop below it.
PickleRef& Unpickler::top()
{
    if (m_stack.size() <= (m_marks.empty() ? 0 : m_marks.back()))
        fail("stack underflow");
    return m_stack.back();
}

PickleRef Unpickler::pop()
{
    PickleRef r = top();
    m_stack.pop_back();
    return r;
}

std::vector<PickleRef> Unpickler::popMark()
{
    if (m_marks.empty())
        fail("no MARK to pop to");
    size_t start = m_marks.back();
    m_marks.pop_back();
    std::vector<PickleRef> items(m_stack.begin() + static_cast<std::ptrdiff_t>(start), m_stack.end());
    m_stack.resize(start);
    return items;
}

// Callers append to the returned object and create nothing meanwhile, since
// make() may reallocate the arena.
PickleObject& Unpickler::mutableContainer(PickleRef r, PickleKind kind, const char* opName)
{
    if (m_objects[r].kind != kind)
        fail(std::string(opName) + " on a " + pickleKindName(m_objects[r].kind));
    return m_objects[r];
}

PickleRef Unpickler::load()
{
    for (;;) {
        const uint8_t code = *take(1);
        switch (code) {
        case op::PROTO:
            if (uint64_t v = readUInt(1); v < 2 || v > 5)
                fail("pickle protocol " + std::to_string(v) + " is not supported");
            break;
        case op::FRAME: readUInt(8); break; // frames only batch reads; the whole pickle is mapped
        case op::STOP:
            if (m_stack.empty())
                fail("STOP with an empty stack");
            return m_stack.back();
        case op::MARK:
            if (m_marks.size() >= kMaxMarks)
                fail("MARKs nested deeper than " + std::to_string(kMaxMarks));
            m_marks.push_back(m_stack.size());
            break;
        case op::POP: pop(); break;
        case op::POP_MARK: popMark(); break;
        case op::DUP: push(top()); break;
        case op::NONE: push(kNone); break;
        case op::NEWTRUE: push(kTrue); break;
        case op::NEWFALSE: push(kFalse); break;
        case op::EMPTY_TUPLE: push(kEmptyTuple); break;
        case op::EMPTY_LIST:
        case op::EMPTY_DICT: {
            PickleObject o;
            o.kind = code == op::EMPTY_LIST ? PickleKind::List : PickleKind::Dict;
            push(make(std::move(o)));
            break;
        }
        case op::TUPLE:
        case op::TUPLE1:
        case op::TUPLE2:
        case op::TUPLE3: {
            PickleObject o;
            o.kind = PickleKind::Tuple;
            if (code == op::TUPLE) {
                o.items = popMark();
            } else {
                o.items.resize(static_cast<size_t>(code - op::TUPLE1 + 1));
                for (size_t i = o.items.size(); i-- > 0;)
                    o.items[i] = pop();
            }
            push(o.items.empty() ? kEmptyTuple : make(std::move(o)));
            break;
        }
        case op::BININT: push(makeInt(static_cast<int32_t>(static_cast<uint32_t>(readUInt(4))))); break;
        case op::BININT1: push(makeInt(static_cast<int64_t>(readUInt(1)))); break;
        case op::BININT2: push(makeInt(static_cast<int64_t>(readUInt(2)))); break;
        case op::LONG1:
        case op::LONG4: {
            uint64_t n = readUInt(code == op::LONG1 ? 1 : 4);
            if (n > 8)
                fail("integer wider than 64 bits");
            uint64_t v = readUInt(static_cast<int>(n));
            if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1)
                v |= ~uint64_t(0) << (8 * n); // two's complement sign extension
            push(makeInt(static_cast<int64_t>(v)));
            break;
        }
        case op::BINFLOAT: {
            const uint8_t* p = take(8);
            uint64_t bits = 0;
            for (int i = 0; i < 8; ++i)
                bits = (bits << 8) | p[i]; // big-endian, unlike everything else in pickle
            PickleObject o;
            o.kind = PickleKind::Float;
            std::memcpy(&o.real, &bits, sizeof bits);
            push(make(std::move(o)));
            break;
        }
        // Length-prefixed text and bytes; the length field is 1, 4 or 8 bytes wide.
        case op::SHORT_BINUNICODE: case op::SHORT_BINSTRING: push(makeString(PickleKind::String, readUInt(1))); break;
        case op::BINUNICODE: case op::BINSTRING: push(makeString(PickleKind::String, readUInt(4))); break;
        case op::BINUNICODE8: push(makeString(PickleKind::String, readUInt(8))); break;
        case op::SHORT_BINBYTES: push(makeString(PickleKind::Bytes, readUInt(1))); break;
        case op::BINBYTES: push(makeString(PickleKind::Bytes, readUInt(4))); break;
        case op::BINBYTES8: push(makeString(PickleKind::Bytes, readUInt(8))); break;
        case op::BINPUT:
        case op::LONG_BINPUT:
        case op::MEMOIZE: {
            uint32_t key = code == op::MEMOIZE ? static_cast<uint32_t>(m_memo.size())
                                               : static_cast<uint32_t>(readUInt(code == op::BINPUT ? 1 : 4));
            if (m_memo.size() >= kMaxObjects)
                fail("memo exceeds " + std::to_string(kMaxObjects) + " entries");
            m_memo[key] = top();
            break;
        }
        case op::BINGET:
        case op::LONG_BINGET: {
            auto it = m_memo.find(static_cast<uint32_t>(readUInt(code == op::BINGET ? 1 : 4)));
            if (it == m_memo.end())
                fail("memo key not found");
            push(it->second);
            break;
        }
        case op::GLOBAL: {
            std::string module = readLine();
            std::string name = readLine();
            push(makeGlobal(module, name));
            break;
        }
        case op::STACK_GLOBAL: {
            PickleRef name = pop(), module = pop();
            if (m_objects[name].kind != PickleKind::String || m_objects[module].kind != PickleKind::String)
                fail("STACK_GLOBAL needs two strings");
            // Copies: makeGlobal() grows the arena the names live in.
            std::string moduleText = m_objects[module].text, nameText = m_objects[name].text;
            push(makeGlobal(moduleText, nameText));
            break;
        }
        case op::REDUCE: {
            PickleRef args = pop(), callable = pop();
            push(call(callable, args, "REDUCE"));
            break;
        }
        case op::NEWOBJ: {
            PickleRef args = pop(), cls = pop();
            push(call(cls, args, "NEWOBJ"));
            break;
        }
        case op::BUILD:
            // Sets attributes (an OrderedDict's _metadata, a tensor's Python
            // state); nothing here needs them, and applying none is the safe choice.
            pop();
            top();
            break;
        case op::BINPERSID: {
            PickleRef pid = pop();
            push(m_model.persistentLoad(*this, pid));
            break;
        }
        case op::SETITEM: {
            PickleRef value = pop(), key = pop();
            auto& items = mutableContainer(top(), PickleKind::Dict, "SETITEM").items;
            items.push_back(key);
            items.push_back(value);
            break;
        }
        case op::SETITEMS:
        case op::APPENDS: {
            std::vector<PickleRef> added = popMark();
            if (code == op::SETITEMS && added.size() % 2)
                fail("SETITEMS with an odd number of items");
            auto& items = code == op::SETITEMS ? mutableContainer(top(), PickleKind::Dict, "SETITEMS").items
                                               : mutableContainer(top(), PickleKind::List, "APPENDS").items;
            items.insert(items.end(), added.begin(), added.end());
            break;
        }
        case op::APPEND: {
            PickleRef value = pop();
            mutableContainer(top(), PickleKind::List, "APPEND").items.push_back(value);
            break;
        }
        default: {
            static const char hex[] = "0123456789abcdef";
            --m_pos;
            fail(std::string("unsupported pickle opcode 0x") + hex[code >> 4] + hex[code & 15]);
        }
        }
    }
}

} // namespace stowage
