// Chat templates: the Renderer's conversions, comparisons and lookups, with
// Python's semantics for the values (truth, equality, ordering, `in`,
// iteration and length by code point, attributes, items and slices).
#include "chattemplate_internal.h"

#include <algorithm>
#include <iterator>

namespace stowage::jinja {

std::string Renderer::str(const Value& v) const
{
    switch (v.kind) {
    case Value::Undef: return "";
    case Value::Data: return pyStr(v.j);
    case Value::Ns: return "<Namespace>";
    case Value::Fn: return "<function " + v.fn->name + ">";
    case Value::Loop: return "<LoopContext " + std::to_string(v.loop->index + 1) + "/" +
                             std::to_string(v.loop->items->size()) + ">";
    }
    return "";
}

J Renderer::toJson(const Value& v, int line) const
{
    if (v.kind == Value::Data)
        return v.j;
    if (v.kind == Value::Undef)
        fail(line, "'" + v.name + "' is undefined");
    fail(line, "a namespace or function cannot be stored in a list or dict");
}

bool Renderer::truthy(const Value& v)
{
    switch (v.kind) {
    case Value::Undef: return false;
    case Value::Ns:
    case Value::Fn:
    case Value::Loop: return true;
    case Value::Data: break;
    }
    const J& j = v.j;
    switch (j.type()) {
    case J::value_t::null: return false;
    case J::value_t::boolean: return j.get<bool>();
    case J::value_t::number_integer: return j.get<int64_t>() != 0;
    case J::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case J::value_t::number_float: return j.get<double>() != 0;
    case J::value_t::string: return !j.get_ref<const std::string&>().empty();
    case J::value_t::array:
    case J::value_t::object: return !j.empty();
    default: return true;
    }
}

std::string Renderer::typeName(const Value& v)
{
    switch (v.kind) {
    case Value::Undef: return "undefined";
    case Value::Ns: return "namespace";
    case Value::Fn: return "function";
    case Value::Loop: return "loop";
    case Value::Data: break;
    }
    switch (v.j.type()) {
    case J::value_t::null: return "NoneType";
    case J::value_t::boolean: return "bool";
    case J::value_t::number_integer:
    case J::value_t::number_unsigned: return "int";
    case J::value_t::number_float: return "float";
    case J::value_t::string: return "str";
    case J::value_t::array: return "list";
    case J::value_t::object: return "dict";
    default: return "value";
    }
}

bool Renderer::equal(const Value& a, const Value& b)
{
    if (a.kind != b.kind)
        return false;
    if (a.kind == Value::Undef)
        return true;
    if (a.kind == Value::Ns)
        return a.ns == b.ns;
    if (a.kind == Value::Fn)
        return a.fn == b.fn;
    return jeq(a.j, b.j);
}

bool Renderer::jeq(const J& a, const J& b)
{
    if (numeric(a) && numeric(b))
        return integral(a) && integral(b) ? inum(a) == inum(b) : num(a) == num(b);
    if (a.type() != b.type())
        return false;
    if (a.is_array()) {
        if (a.size() != b.size())
            return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (!jeq(a[i], b[i]))
                return false;
        return true;
    }
    if (a.is_object()) {
        if (a.size() != b.size())
            return false;
        for (auto it = a.begin(); it != a.end(); ++it) {
            auto f = b.find(it.key());
            if (f == b.end() || !jeq(it.value(), *f))
                return false;
        }
        return true;
    }
    return a == b;
}

// <0, 0, >0 as Python orders them; fails for types Python cannot order.
int Renderer::order(const Value& a, const Value& b, int line) const
{
    if (a.kind == Value::Data && b.kind == Value::Data) {
        const J &x = a.j, &y = b.j;
        if (numeric(x) && numeric(y)) {
            if (integral(x) && integral(y))
                return inum(x) < inum(y) ? -1 : inum(x) > inum(y);
            double p = num(x), q = num(y);
            return p < q ? -1 : p > q;
        }
        if (x.is_string() && y.is_string())
            return x.get_ref<const std::string&>().compare(y.get_ref<const std::string&>());
        if (x.is_array() && y.is_array()) {
            for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
                if (jeq(x[i], y[i]))
                    continue;
                return order(Value::data(x[i]), Value::data(y[i]), line);
            }
            return x.size() < y.size() ? -1 : x.size() > y.size();
        }
    }
    fail(line, "'<' is not supported between " + typeName(a) + " and " + typeName(b));
}

bool Renderer::contains(const Value& hay, const Value& needle, int line) const
{
    if (hay.kind == Value::Undef)
        return false;
    if (hay.kind != Value::Data)
        fail(line, "'in' needs a string, list or dict on its right, not " + typeName(hay));
    if (hay.j.is_string()) {
        if (!needle.isStr())
            fail(line, "'in <string>' needs a string on its left, not " + typeName(needle));
        return hay.j.get_ref<const std::string&>().find(needle.j.get_ref<const std::string&>()) !=
               std::string::npos;
    }
    if (hay.j.is_array()) {
        for (const auto& e : hay.j)
            if (equal(Value::data(e), needle))
                return true;
        return false;
    }
    if (hay.j.is_object())
        return needle.isStr() && hay.j.contains(needle.j.get<std::string>());
    fail(line, "'in' needs a string, list or dict on its right, not " + typeName(hay));
}

std::vector<Value> Renderer::iterate(const Value& v, int line) const
{
    std::vector<Value> out;
    if (v.kind == Value::Undef)
        return out;
    if (v.kind != Value::Data)
        fail(line, "a " + typeName(v) + " cannot be iterated");
    if (v.j.is_array()) {
        for (const auto& e : v.j)
            out.push_back(Value::data(e));
    } else if (v.j.is_object()) {
        for (auto it = v.j.begin(); it != v.j.end(); ++it)
            out.push_back(Value::data(it.key()));
    } else if (v.j.is_string()) {
        for (auto& c : codePoints(v.j.get<std::string>()))
            out.push_back(Value::data(c));
    } else
        fail(line, "a " + typeName(v) + " cannot be iterated");
    return out;
}

J Renderer::listOf(const std::vector<Value>& items, int line) const
{
    J a = J::array();
    for (const auto& i : items)
        a.push_back(toJson(i, line));
    return a;
}

int64_t Renderer::length(const Value& v, int line) const
{
    if (v.kind == Value::Undef)
        return 0;
    if (v.kind == Value::Data) {
        if (v.j.is_string())
            return int64_t(codePoints(v.j.get<std::string>()).size());
        if (v.j.is_array() || v.j.is_object())
            return int64_t(v.j.size());
    }
    fail(line, "a " + typeName(v) + " has no length");
}

Value Renderer::lookup(const std::string& name) const
{
    for (auto it = m_scopes.rbegin(); it != m_scopes.rend(); ++it) {
        auto f = it->find(name);
        if (f != it->end())
            return f->second;
    }
    static const char* builtins[] = {"namespace", "range", "raise_exception", "strftime_now", "dict"};
    for (const char* b : builtins)
        if (name == b) {
            Value v;
            v.kind = Value::Fn;
            v.fn = std::make_shared<Callable>(Callable{Callable::Builtin, name, {}, nullptr});
            return v;
        }
    return Value::undefined(name);
}

bool Renderer::isStringMethod(const std::string& n)
{
    static const char* m[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                              "lower", "upper", "replace", "title", "capitalize", "find", "rfind", "count",
                              "join", "splitlines", "isdigit", "isspace", "isalpha", "isalnum", "islower",
                              "isupper"};
    return std::any_of(std::begin(m), std::end(m), [&](const char* x) { return n == x; });
}

bool Renderer::isDictMethod(const std::string& n)
{
    return n == "items" || n == "keys" || n == "values" || n == "get";
}

Value Renderer::bound(const J& self, const std::string& name) const
{
    Value v;
    v.kind = Value::Fn;
    v.fn = std::make_shared<Callable>(Callable{Callable::Method, name, self, nullptr});
    return v;
}

Value Renderer::getAttr(const Value& obj, const std::string& name, int line) const
{
    if (obj.kind == Value::Undef)
        fail(line, "'" + obj.name + "' is undefined (reading its attribute '" + name + "')");
    if (obj.kind == Value::Ns) {
        auto f = obj.ns->attrs.find(name);
        return f == obj.ns->attrs.end() ? Value::undefined(name) : f->second;
    }
    if (obj.kind == Value::Fn)
        return Value::undefined(name);
    if (obj.kind == Value::Loop) {
        const auto& items = *obj.loop->items;
        const int64_t i = obj.loop->index, n = int64_t(items.size());
        if (name == "index0")
            return Value::data(i);
        if (name == "index")
            return Value::data(i + 1);
        if (name == "revindex")
            return Value::data(n - i);
        if (name == "revindex0")
            return Value::data(n - i - 1);
        if (name == "first")
            return Value::data(i == 0);
        if (name == "last")
            return Value::data(i == n - 1);
        if (name == "length")
            return Value::data(n);
        if (name == "depth")
            return Value::data(1);
        if (name == "depth0")
            return Value::data(0);
        if (name == "previtem" && i > 0)
            return items[size_t(i - 1)];
        if (name == "nextitem" && i + 1 < n)
            return items[size_t(i + 1)];
        return Value::undefined("loop." + name);
    }
    const J& j = obj.j;
    if (j.is_object()) {
        if (isDictMethod(name))
            return bound(j, name);
        auto f = j.find(name);
        return f == j.end() ? Value::undefined(name) : Value::data(*f);
    }
    if (j.is_string() && isStringMethod(name))
        return bound(j, name);
    return Value::undefined(name);
}

Value Renderer::getItem(const Value& obj, const Value& key, int line) const
{
    if (obj.kind == Value::Undef)
        fail(line, "'" + obj.name + "' is undefined (reading an item of it)");
    if (obj.kind == Value::Ns || obj.kind == Value::Fn) {
        if (key.isStr())
            return getAttr(obj, key.j.get<std::string>(), line);
        return Value::undefined("item");
    }
    const J& j = obj.j;
    if (j.is_object()) {
        if (key.isStr()) {
            auto f = j.find(key.j.get<std::string>());
            if (f != j.end())
                return Value::data(*f);
            return getAttr(obj, key.j.get<std::string>(), line);
        }
        return Value::undefined("item");
    }
    if ((j.is_array() || j.is_string()) && key.isInt()) {
        if (j.is_array()) {
            int64_t i = normIndex(inum(key.j), int64_t(j.size()));
            if (i < 0 || i >= int64_t(j.size()))
                return Value::undefined("item");
            return Value::data(j[size_t(i)]);
        }
        auto cps = codePoints(j.get<std::string>());
        int64_t i = normIndex(inum(key.j), int64_t(cps.size()));
        if (i < 0 || i >= int64_t(cps.size()))
            return Value::undefined("item");
        return Value::data(cps[size_t(i)]);
    }
    if (key.isStr())
        return getAttr(obj, key.j.get<std::string>(), line);
    return Value::undefined("item");
}

// Python's slice indices for a sequence of n.
std::vector<int64_t> Renderer::sliceIndices(int64_t n, const Value* a, const Value* b, const Value* c, int line) const
{
    auto opt = [&](const Value* v) -> std::optional<int64_t> {
        if (!v || (v->kind == Value::Data && v->j.is_null()))
            return std::nullopt;
        if (!v->isInt())
            fail(line, "slice indices must be integers or none");
        return inum(v->j);
    };
    int64_t st = opt(c).value_or(1);
    if (st == 0)
        fail(line, "slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> x, int64_t def) {
        if (!x)
            return def;
        int64_t i = *x < 0 ? *x + n : *x;
        if (st > 0)
            return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    int64_t lo = clamp(opt(a), st > 0 ? 0 : n - 1), hi = clamp(opt(b), st > 0 ? n : -1);
    std::vector<int64_t> out;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
        out.push_back(i);
    return out;
}

} // namespace stowage::jinja
