// Chat templates: the Renderer's filters (`x | name(...)`) and tests
// (`x is name`), as jinja2 and transformers (its own `tojson`) define them.
#include "chattemplate_internal.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace stowage::jinja {

Value Renderer::filter(const Expr& e)
{
    Value in = eval(*e.args[0]);
    Args a = evalArgs(e, 1);
    return applyFilter(e.name, in, a, e.line);
}

int64_t Renderer::toInt(double d, int line) const
{
    if (!(std::fabs(d) < 9.2e18))
        fail(line, "the number " + pyFloat(d) + " does not fit an integer");
    return int64_t(d);
}

Value Renderer::attrPath(const Value& v, const std::string& path, int line) const
{
    Value cur = v;
    size_t p = 0;
    while (true) {
        size_t d = path.find('.', p);
        std::string part = path.substr(p, d == std::string::npos ? std::string::npos : d - p);
        int64_t index = 0;
        auto r = std::from_chars(part.data(), part.data() + part.size(), index);
        bool digits = !part.empty() && r.ec == std::errc() && r.ptr == part.data() + part.size();
        if (cur.kind == Value::Undef)
            return cur;
        cur = digits ? getItem(cur, Value::data(index), line) : getItem(cur, Value::data(part), line);
        if (d == std::string::npos)
            return cur;
        p = d + 1;
    }
}

Value Renderer::applyFilter(const std::string& f, const Value& in, const Args& a, int line)
{
    if (f == "safe")
        return in;
    if (f == "default" || f == "d") {
        const Value* b = a.get(1, "boolean");
        bool boolean = b && truthy(*b);
        if (in.kind == Value::Undef || (boolean && !truthy(in))) {
            const Value* d = a.get(0, "default_value");
            return d ? *d : Value::data("");
        }
        return in;
    }
    if (f == "length" || f == "count")
        return Value::data(length(in, line));
    if (f == "string")
        return Value::data(str(in));
    if (f == "trim") {
        return Value::data(strip(str(in), a.get(0, "chars"), true, true, line));
    }
    if (f == "lower" || f == "upper")
        return Value::data(mapCase(str(in), f == "upper"));
    if (f == "capitalize")
        return method(J(str(in)), "capitalize", {}, line);
    if (f == "title")
        return Value::data(title(str(in)));
    if (f == "replace") {
        std::string s = str(in);
        const Value *o = a.get(0, "old"), *n = a.get(1, "new"), *c = a.get(2, "count");
        if (!o || !n)
            fail(line, "replace needs the old and new strings");
        return Value::data(replace(s, str(*o), str(*n), c && c->isInt() ? inum(c->j) : -1));
    }
    if (f == "e" || f == "escape") {
        std::string out;
        for (char c : str(in)) {
            switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
            }
        }
        return Value::data(out);
    }
    if (f == "tojson") {
        DumpOptions o;
        if (const Value* ind = a.get(0, "indent"); ind && !(ind->kind == Value::Data && ind->j.is_null())) {
            if (ind->isInt())
                o.indent = std::string(size_t(std::clamp<int64_t>(inum(ind->j), 0, 64)), ' ');
            else if (ind->isStr())
                o.indent = ind->j.get<std::string>();
            else
                fail(line, "tojson's indent must be an integer or a string");
            o.itemSep = ",";
        }
        if (const Value* sep = a.get(99, "separators"); sep && sep->kind == Value::Data && sep->j.is_array() &&
                                                          sep->j.size() == 2 && sep->j[0].is_string() &&
                                                          sep->j[1].is_string()) {
            o.itemSep = sep->j[0].get<std::string>();
            o.keySep = sep->j[1].get<std::string>();
        }
        if (const Value* sk = a.get(99, "sort_keys"))
            o.sortKeys = truthy(*sk);
        if (const Value* ea = a.get(99, "ensure_ascii"))
            o.ensureAscii = truthy(*ea);
        if (in.kind != Value::Data)
            fail(line, "a " + typeName(in) + " is not JSON serializable");
        std::string out;
        pyDump(in.j, o, 0, out);
        return Value::data(out);
    }
    if (f == "first" || f == "last") {
        auto items = iterate(in, line);
        if (items.empty())
            return Value::undefined("first item");
        return f == "first" ? items.front() : items.back();
    }
    if (f == "list")
        return Value::data(listOf(iterate(in, line), line));
    if (f == "items") {
        if (in.kind == Value::Undef)
            return Value::data(J::array());
        if (!(in.kind == Value::Data && in.j.is_object()))
            fail(line, "items needs a dict, not " + typeName(in));
        return method(in.j, "items", {}, line);
    }
    if (f == "reverse") {
        if (in.isStr()) {
            auto cps = codePoints(in.j.get<std::string>());
            std::string out;
            for (auto it = cps.rbegin(); it != cps.rend(); ++it)
                out += *it;
            return Value::data(out);
        }
        auto items = iterate(in, line);
        std::reverse(items.begin(), items.end());
        return Value::data(listOf(items, line));
    }
    if (f == "join") {
        const Value* sep = a.get(0, "d");
        const Value* at = a.get(1, "attribute");
        std::string s = sep ? str(*sep) : "", out;
        bool first = true;
        for (const auto& v : iterate(in, line)) {
            out += (first ? "" : s) + str(at ? attrPath(v, str(*at), line) : v);
            first = false;
        }
        return Value::data(out);
    }
    if (f == "int") {
        const Value* d = a.get(0, "default");
        if (in.kind == Value::Data && numeric(in.j))
            return integral(in.j) ? Value::data(inum(in.j)) : Value::data(toInt(num(in.j), line));
        if (in.isStr()) {
            std::string s = strip(in.j.get<std::string>(), nullptr, true, true, line);
            int64_t v = 0;
            auto r = std::from_chars(s.data(), s.data() + s.size(), v);
            if (r.ec == std::errc() && r.ptr == s.data() + s.size())
                return Value::data(v);
            char* end = nullptr;
            double dv = std::strtod(s.c_str(), &end);
            if (!s.empty() && end == s.c_str() + s.size())
                return Value::data(toInt(dv, line));
        }
        return d ? *d : Value::data(int64_t(0));
    }
    if (f == "float") {
        if (in.kind == Value::Data && numeric(in.j))
            return Value::data(num(in.j));
        if (in.isStr()) {
            std::string s = strip(in.j.get<std::string>(), nullptr, true, true, line);
            char* end = nullptr;
            double dv = std::strtod(s.c_str(), &end);
            if (!s.empty() && end == s.c_str() + s.size())
                return Value::data(dv);
        }
        const Value* d = a.get(0, "default");
        return d ? *d : Value::data(0.0);
    }
    if (f == "abs") {
        if (!(in.kind == Value::Data && numeric(in.j)))
            fail(line, "abs needs a number");
        if (integral(in.j) && inum(in.j) == std::numeric_limits<int64_t>::min())
            fail(line, "integer overflow in abs");
        return integral(in.j) ? Value::data(std::abs(inum(in.j))) : Value::data(std::fabs(num(in.j)));
    }
    if (f == "round") {
        if (!(in.kind == Value::Data && numeric(in.j)))
            fail(line, "round needs a number");
        const Value* p = a.get(0, "precision");
        int64_t prec = p && p->isInt() ? inum(p->j) : 0;
        std::string m = a.get(1, "method") ? str(*a.get(1, "method")) : "common";
        double scale = std::pow(10.0, double(prec)), v = num(in.j) * scale;
        v = m == "floor" ? std::floor(v) : m == "ceil" ? std::ceil(v) : std::round(v);
        return Value::data(v / scale);
    }
    if (f == "indent") {
        const Value* w = a.get(0, "width");
        std::string pad = w ? (w->isStr() ? w->j.get<std::string>() : std::string(size_t(std::clamp<int64_t>(w->isInt() ? inum(w->j) : 4, 0, 256)), ' '))
                            : std::string(4, ' ');
        bool first = a.get(1, "first") && truthy(*a.get(1, "first"));
        bool blank = a.get(2, "blank") && truthy(*a.get(2, "blank"));
        std::string s = str(in), out;
        size_t p = 0;
        bool firstLine = true;
        while (true) {
            size_t nl = s.find('\n', p);
            std::string ln = s.substr(p, nl == std::string::npos ? std::string::npos : nl - p);
            bool add = firstLine ? first : (blank || !ln.empty());
            if (!firstLine)
                out += "\n";
            out += (add && !(firstLine && ln.empty() && !blank && false) ? pad : "") + ln;
            firstLine = false;
            if (nl == std::string::npos)
                break;
            p = nl + 1;
        }
        return Value::data(out);
    }
    if (f == "wordcount") {
        J words = split(str(in), nullptr, nullptr, false, line);
        return Value::data(int64_t(words.size()));
    }
    if (f == "attr") {
        if (a.pos.empty())
            fail(line, "attr needs a name");
        return getAttr(in, str(a.pos[0]), line);
    }
    if (f == "unique") {
        std::vector<Value> out;
        for (const auto& v : iterate(in, line))
            if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equal(o, v); }))
                out.push_back(v);
        return Value::data(listOf(out, line));
    }
    if (f == "sort" || f == "min" || f == "max" || f == "dictsort") {
        std::vector<Value> items;
        if (f == "dictsort") {
            if (!(in.kind == Value::Data && in.j.is_object()))
                fail(line, "dictsort needs a dict");
            for (auto it = in.j.begin(); it != in.j.end(); ++it)
                items.push_back(Value::data(J::array({it.key(), it.value()})));
        } else
            items = iterate(in, line);
        const Value* at = f == "sort" ? a.get(2, "attribute") : a.get(1, "attribute");
        auto key = [&](const Value& v) {
            if (f == "dictsort")
                return Value::data(v.j[0]);
            return at ? attrPath(v, str(*at), line) : v;
        };
        std::stable_sort(items.begin(), items.end(),
                         [&](const Value& x, const Value& y) { return order(key(x), key(y), line) < 0; });
        if (f == "min" || f == "max") {
            if (items.empty())
                return Value::undefined(f);
            return f == "min" ? items.front() : items.back();
        }
        if (f == "sort" && a.get(0, "reverse") && truthy(*a.get(0, "reverse")))
            std::reverse(items.begin(), items.end());
        return Value::data(listOf(items, line));
    }
    if (f == "sum") {
        const Value* at = a.get(0, "attribute");
        Value total = a.get(1, "start") ? *a.get(1, "start") : Value::data(int64_t(0));
        for (const auto& v : iterate(in, line))
            total = binop("+", total, at ? attrPath(v, str(*at), line) : v, line);
        return total;
    }
    if (f == "map") {
        std::vector<Value> out;
        const Value* at = a.get(99, "attribute");
        for (const auto& v : iterate(in, line)) {
            if (at) {
                Value r = attrPath(v, str(*at), line);
                if (r.kind == Value::Undef && a.get(99, "default"))
                    r = *a.get(99, "default");
                out.push_back(r);
            } else {
                if (a.pos.empty() || !a.pos[0].isStr())
                    fail(line, "map needs a filter name or attribute=");
                std::string fname = a.pos[0].j.get<std::string>();
                if (!known(kFilters, fname))
                    fail(line, "the filter '" + fname + "' is not supported");
                Args rest;
                rest.pos.assign(a.pos.begin() + 1, a.pos.end());
                out.push_back(applyFilter(fname, v, rest, line));
            }
        }
        return Value::data(listOf(out, line));
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
        bool attr = f == "selectattr" || f == "rejectattr";
        bool keep = f == "select" || f == "selectattr";
        size_t ti = attr ? 1 : 0;
        if (attr && (a.pos.empty()))
            fail(line, f + " needs an attribute name");
        std::vector<Value> out;
        for (const auto& v : iterate(in, line)) {
            Value probe = attr ? attrPath(v, str(a.pos[0]), line) : v;
            bool r;
            if (a.pos.size() > ti) {
                std::string tname = str(a.pos[ti]);
                if (!known(kTests, tname))
                    fail(line, "the test '" + tname + "' is not supported");
                std::vector<Value> targs(a.pos.begin() + long(ti) + 1, a.pos.end());
                r = runTest(tname, probe, targs, line);
            } else
                r = truthy(probe);
            if (r == keep)
                out.push_back(v);
        }
        return Value::data(listOf(out, line));
    }
    fail(line, "the filter '" + f + "' is not supported");
}

bool Renderer::test(const Expr& e)
{
    Value in = eval(*e.args[0]);
    std::vector<Value> args;
    for (size_t i = 1; i < e.args.size(); ++i)
        args.push_back(eval(*e.args[i]));
    if (!e.kwargs.empty())
        fail(e.line, "tests take no keyword arguments here");
    return runTest(e.name, in, args, e.line);
}

bool Renderer::runTest(const std::string& t, const Value& v, const std::vector<Value>& args, int line) const
{
    const bool data = v.kind == Value::Data;
    const J& j = v.j;
    auto arg = [&](size_t i) -> const Value& {
        if (i >= args.size())
            fail(line, "the test '" + t + "' needs an argument");
        return args[i];
    };
    if (t == "defined")
        return v.kind != Value::Undef;
    if (t == "undefined")
        return v.kind == Value::Undef;
    if (t == "none")
        return data && j.is_null();
    if (t == "boolean")
        return data && j.is_boolean();
    if (t == "true" || t == "false")
        return data && j.is_boolean() && j.get<bool>() == (t == "true");
    if (t == "string")
        return data && j.is_string();
    if (t == "number")
        return data && (j.is_number() || j.is_boolean());
    if (t == "integer")
        return data && j.is_number_integer();
    if (t == "float")
        return data && j.is_number_float();
    if (t == "mapping")
        return data && j.is_object();
    if (t == "iterable")
        return v.kind == Value::Undef || (data && (j.is_string() || j.is_array() || j.is_object()));
    if (t == "sequence")
        return v.kind == Value::Undef || (data && (j.is_string() || j.is_array() || j.is_object()));
    if (t == "callable")
        return v.kind == Value::Fn;
    if (t == "escaped")
        return false;
    if (t == "lower" || t == "upper") {
        std::string s = str(v);
        return s == mapCase(s, t == "upper") && s != mapCase(s, t != "upper");
    }
    if (t == "odd" || t == "even" || t == "divisibleby") {
        if (!v.isInt())
            fail(line, "the test '" + t + "' needs an integer");
        int64_t n = inum(j);
        if (t == "divisibleby") {
            const Value& d = arg(0);
            if (!d.isInt() || inum(d.j) == 0)
                fail(line, "divisibleby needs a non-zero integer");
            return n % inum(d.j) == 0;
        }
        return (n % 2 != 0) == (t == "odd");
    }
    if (t == "eq" || t == "equalto" || t == "==")
        return equal(v, arg(0));
    if (t == "ne" || t == "!=")
        return !equal(v, arg(0));
    if (t == "sameas") {
        const Value& o = arg(0);
        if (data && o.kind == Value::Data && (j.is_null() || j.is_boolean()))
            return j == o.j;
        return equal(v, o) && (!data || j.is_null() || j.is_boolean());
    }
    if (t == "in")
        return contains(arg(0), v, line);
    int c = order(v, arg(0), line);
    if (t == "lt" || t == "<")
        return c < 0;
    if (t == "le" || t == "<=")
        return c <= 0;
    if (t == "gt" || t == ">")
        return c > 0;
    if (t == "ge" || t == ">=")
        return c >= 0;
    fail(line, "the test '" + t + "' is not supported");
}

} // namespace stowage::jinja
