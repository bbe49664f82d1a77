#pragma once
// What the chat template's source files share (chattemplate.cpp and
// chattemplate_*.cpp): the bounds on a template, the text helpers, the
// lexer's tokens, the parser's AST, the values a template works on, and the
// Renderer, whose members are defined over chattemplate_values.cpp,
// chattemplate_render.cpp, chattemplate_methods.cpp and
// chattemplate_filters.cpp. Private to stowage_tokenizer: no Qt, no LibTorch.
#include "stowage/chattemplate.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stowage::jinja {

using J = nlohmann::ordered_json;

// Bounds: a template is code from a download; it must not hang or eat memory.
inline constexpr size_t kMaxOutput = size_t(16) << 20;
inline constexpr uint64_t kMaxSteps = 2'000'000;
inline constexpr int kMaxNesting = 100;  // parser: nested expressions and blocks
inline constexpr int kMaxCallDepth = 32; // macro calls within calls
inline constexpr int64_t kMaxRange = 1'000'000;

// ---------------------------------------------------------------- UTF-8 (chattemplate_text.cpp)

std::vector<std::string> codePoints(const std::string& s);
int32_t codeOf(const std::string& ch);
std::string encodeCp(int32_t cp);
bool pySpace(int32_t c);
std::string mapCase(const std::string& s, bool upper);

// ---------------------------------------------------------------- Python formatting (chattemplate_text.cpp)

std::string pyFloat(double d);
std::string pyStr(const J& v);

struct DumpOptions {
    std::optional<std::string> indent;
    std::string itemSep = ", ", keySep = ": ";
    bool sortKeys = false, ensureAscii = false;
};

void pyDump(const J& v, const DumpOptions& o, int level, std::string& out);

// ---------------------------------------------------------------- lexer (chattemplate_lexer.cpp)

enum class T { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, End };

struct Tok {
    T type;
    std::string s;
    int line = 1;
    int64_t i = 0;
    double f = 0;
};

// The template's tokens, T::End last. Throws InputError naming `path`.
std::vector<Tok> lex(const std::string& source, const std::string& path);

// ---------------------------------------------------------------- AST

struct Expr;
using EP = std::unique_ptr<Expr>;
struct Expr {
    enum K { Lit, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Bin, And, Or, Cond, Cmp,
             Concat, Block } k;
    int line = 0;
    J lit;
    std::string name;
    std::vector<EP> args;
    std::vector<std::pair<std::string, EP>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
};

struct Stmt;
using SP = std::unique_ptr<Stmt>;
using Body = std::vector<SP>;
struct Stmt {
    enum K { Text, Out, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock } k;
    int line = 0;
    std::string text;                          // Text; Macro: its name
    EP expr;                                   // Out, For (iterable), Set (value), Set/FilterBlock (filters)
    EP cond;                                   // For: the "if" filter
    std::vector<std::pair<EP, Body>> branches; // If (the else branch has no condition)
    std::vector<std::string> targets;          // For, Set, SetBlock; Macro: its parameters
    std::string attr;                          // Set: ns.attr
    std::vector<EP> defaults;                  // Macro: one per parameter (null: none)
    Body body, elseBody;
};

// The filters and tests there are (defined in chattemplate_parser.cpp): the
// parser refuses any other name, and so do the filters map, select and reject.
extern const std::vector<std::string> kFilters;
extern const std::vector<std::string> kTests;
bool known(const std::vector<std::string>& list, const std::string& name);

// ---------------------------------------------------------------- parser (chattemplate_parser.cpp)

// The template's statements. Throws InputError naming `path`.
Body parse(std::vector<Tok> toks, const std::string& path);

// ---------------------------------------------------------------- values

struct Namespace;
struct Callable;
struct LoopState;

struct Value {
    enum Kind : uint8_t { Undef, Data, Ns, Fn, Loop } kind = Undef;
    J j;
    std::shared_ptr<Namespace> ns;
    std::shared_ptr<const LoopState> loop;
    std::shared_ptr<const Callable> fn;
    std::string name; // Undef: the name that was not found

    static Value data(J v)
    {
        Value r;
        r.kind = Data;
        r.j = std::move(v);
        return r;
    }
    static Value undefined(std::string n)
    {
        Value r;
        r.name = std::move(n);
        return r;
    }
    bool isStr() const { return kind == Data && j.is_string(); }
    bool isNum() const { return kind == Data && j.is_number(); }
    bool isInt() const { return kind == Data && (j.is_number_integer() || j.is_boolean()); }
};

struct Namespace {
    std::map<std::string, Value> attrs;
};

// `loop` inside a for: its attributes are computed when read.
struct LoopState {
    std::shared_ptr<const std::vector<Value>> items;
    int64_t index = 0;
};

struct Callable {
    enum K { Builtin, Method, Macro } k;
    std::string name;
    J self; // Method: the string, dict or list it is bound to
    const Stmt* macro = nullptr;
};

} // namespace stowage::jinja

namespace stowage {

struct ChatTemplate::Impl {
    std::string path;
    jinja::Body body;
};

} // namespace stowage

namespace stowage::jinja {

enum class Flow { Normal, Break, Continue };

// Renders a parsed template with its variables: one Renderer per ChatTemplate::render().
class Renderer {
public:
    Renderer(const ChatTemplate::Impl& t, const J& context);
    std::string run();

private:
    using Scope = std::unordered_map<std::string, Value>;

    [[noreturn]] void fail(int line, const std::string& what) const
    {
        throw InputError(m_t.path, "line " + std::to_string(line) + ": " + what);
    }

    void step(int line)
    {
        if (++m_steps > kMaxSteps)
            fail(line, "rendering takes more than " + std::to_string(kMaxSteps) + " steps (a loop that does not end?)");
    }

    void emit(std::string& out, const std::string& s, int line)
    {
        if (out.size() + s.size() > kMaxOutput)
            fail(line, "the rendered text passes " + std::to_string(kMaxOutput >> 20) + " MiB");
        out += s;
    }

    // ---- conversions (chattemplate_values.cpp)

    std::string str(const Value& v) const;
    J toJson(const Value& v, int line) const;
    static bool truthy(const Value& v);
    static std::string typeName(const Value& v);
    static double num(const J& j)
    {
        if (j.is_boolean())
            return j.get<bool>() ? 1 : 0;
        return j.get<double>();
    }
    static int64_t inum(const J& j)
    {
        if (j.is_boolean())
            return j.get<bool>() ? 1 : 0;
        if (j.is_number_unsigned())
            return int64_t(j.get<uint64_t>());
        return j.get<int64_t>();
    }
    static bool numeric(const J& j) { return j.is_number() || j.is_boolean(); }
    static bool integral(const J& j) { return j.is_number_integer() || j.is_boolean(); }
    static bool equal(const Value& a, const Value& b);
    static bool jeq(const J& a, const J& b);
    int order(const Value& a, const Value& b, int line) const;
    bool contains(const Value& hay, const Value& needle, int line) const;
    std::vector<Value> iterate(const Value& v, int line) const;
    J listOf(const std::vector<Value>& items, int line) const;
    int64_t length(const Value& v, int line) const;

    // ---- lookups (chattemplate_values.cpp)

    Value lookup(const std::string& name) const;
    static bool isStringMethod(const std::string& n);
    static bool isDictMethod(const std::string& n);
    Value bound(const J& self, const std::string& name) const;
    Value getAttr(const Value& obj, const std::string& name, int line) const;
    static int64_t normIndex(int64_t i, int64_t n) { return i < 0 ? i + n : i; }
    Value getItem(const Value& obj, const Value& key, int line) const;
    std::vector<int64_t> sliceIndices(int64_t n, const Value* a, const Value* b, const Value* c, int line) const;

    // ---- expressions and calls (chattemplate_render.cpp)

    Value eval(const Expr& e);
    Value binop(const std::string& op, const Value& a, const Value& b, int line) const;

    struct Args {
        std::vector<Value> pos;
        std::vector<std::pair<std::string, Value>> kw;
        const Value* get(size_t i, const char* name) const
        {
            for (const auto& [k, v] : kw)
                if (k == name)
                    return &v;
            return i < pos.size() ? &pos[i] : nullptr;
        }
    };

    Args evalArgs(const Expr& e, size_t from);
    std::string strArg(const Args& a, size_t i, const char* name, int line, const char* what) const;
    Value call(const Expr& e);
    Value builtin(const std::string& name, const Args& a, int line);
    Value callMacro(const Stmt& m, const Args& a, int line);

    // ---- string methods (chattemplate_methods.cpp)

    std::string strip(const std::string& s, const Value* chars, bool left, bool right, int line) const;
    J split(const std::string& s, const Value* sep, const Value* maxArg, bool fromRight, int line) const;
    Value method(const J& self, const std::string& name, const Args& a, int line);
    static std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
    static std::string title(const std::string& s);

    // ---- filters and tests (chattemplate_filters.cpp)

    Value filter(const Expr& e);
    int64_t toInt(double d, int line) const;
    Value attrPath(const Value& v, const std::string& path, int line) const;
    Value applyFilter(const std::string& f, const Value& in, const Args& a, int line);
    bool test(const Expr& e);
    bool runTest(const std::string& t, const Value& v, const std::vector<Value>& args, int line) const;

    // ---- statements (chattemplate_render.cpp)

    void assign(const std::string& name, Value v) { m_scopes.back()[name] = std::move(v); }

    void unpack(const std::vector<std::string>& targets, const Value& v, int line);
    Flow exec(const Body& body, std::string& out);
    Flow exec(const Stmt& s, std::string& out);

    const ChatTemplate::Impl& m_t;
    std::vector<Scope> m_scopes;
    Value m_block;
    uint64_t m_steps = 0;
    int m_callDepth = 0;
};

} // namespace stowage::jinja
