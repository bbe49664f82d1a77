// Chat templates: the Renderer's evaluation of expressions (operators with
// Python's semantics, calls, the global functions, macros) and execution of
// statements, within the bounds on steps, output and call depth.
#include "chattemplate_internal.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

namespace stowage::jinja {

Renderer::Renderer(const ChatTemplate::Impl& t, const J& context) : m_t(t)
{
    m_scopes.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it)
        m_scopes[0][it.key()] = Value::data(it.value());
}

std::string Renderer::run()
{
    std::string out;
    exec(m_t.body, out);
    return out;
}

// ---- expressions

Value Renderer::eval(const Expr& e)
{
    step(e.line);
    switch (e.k) {
    case Expr::Lit: return Value::data(e.lit);
    case Expr::Name: return lookup(e.name);
    case Expr::Block: return m_block;
    case Expr::List:
    case Expr::Tuple: {
        J a = J::array();
        for (const auto& x : e.args)
            a.push_back(toJson(eval(*x), x->line));
        return Value::data(std::move(a));
    }
    case Expr::Dict: {
        J o = J::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
            Value k = eval(*e.args[i]);
            if (!k.isStr())
                fail(e.line, "dict keys must be strings here, not " + typeName(k));
            o[k.j.get<std::string>()] = toJson(eval(*e.args[i + 1]), e.line);
        }
        return Value::data(std::move(o));
    }
    case Expr::Attr: return getAttr(eval(*e.args[0]), e.name, e.line);
    case Expr::Item: {
        Value o = eval(*e.args[0]);
        return getItem(o, eval(*e.args[1]), e.line);
    }
    case Expr::Slice: {
        Value o = eval(*e.args[0]);
        Value parts[3];
        const Value* p[3] = {nullptr, nullptr, nullptr};
        for (int i = 0; i < 3; ++i)
            if (e.args[size_t(i) + 1]) {
                parts[i] = eval(*e.args[size_t(i) + 1]);
                p[i] = &parts[i];
            }
        if (o.kind == Value::Data && o.j.is_array()) {
            J out = J::array();
            for (int64_t i : sliceIndices(int64_t(o.j.size()), p[0], p[1], p[2], e.line))
                out.push_back(o.j[size_t(i)]);
            return Value::data(std::move(out));
        }
        if (o.isStr()) {
            auto cps = codePoints(o.j.get<std::string>());
            std::string out;
            for (int64_t i : sliceIndices(int64_t(cps.size()), p[0], p[1], p[2], e.line))
                out += cps[size_t(i)];
            return Value::data(out);
        }
        if (o.kind == Value::Undef)
            fail(e.line, "'" + o.name + "' is undefined (slicing it)");
        fail(e.line, "a " + typeName(o) + " cannot be sliced");
    }
    case Expr::Call: return call(e);
    case Expr::Filter: return filter(e);
    case Expr::Test: {
        bool r = test(e);
        return Value::data(e.negated ? !r : r);
    }
    case Expr::Neg:
    case Expr::Pos: {
        Value v = eval(*e.args[0]);
        if (!(v.kind == Value::Data && numeric(v.j)))
            fail(e.line, "bad operand type for unary " + std::string(e.k == Expr::Neg ? "-" : "+") + ": " +
                             typeName(v));
        if (e.k == Expr::Pos)
            return v;
        if (integral(v.j)) {
            if (inum(v.j) == std::numeric_limits<int64_t>::min())
                fail(e.line, "integer overflow in unary '-'");
            return Value::data(-inum(v.j));
        }
        return Value::data(-num(v.j));
    }
    case Expr::Not: return Value::data(!truthy(eval(*e.args[0])));
    case Expr::And: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
    }
    case Expr::Or: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
    }
    case Expr::Cond: {
        if (truthy(eval(*e.args[1])))
            return eval(*e.args[0]);
        if (e.args[2])
            return eval(*e.args[2]);
        return Value::undefined("the else branch");
    }
    case Expr::Concat: {
        std::string s;
        for (const auto& x : e.args)
            s += str(eval(*x));
        return Value::data(s);
    }
    case Expr::Cmp: {
        Value l = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
            Value r = eval(*e.args[i + 1]);
            const std::string& op = e.ops[i];
            bool ok;
            if (op == "==")
                ok = equal(l, r);
            else if (op == "!=")
                ok = !equal(l, r);
            else if (op == "in")
                ok = contains(r, l, e.line);
            else if (op == "not in")
                ok = !contains(r, l, e.line);
            else {
                int c = order(l, r, e.line);
                ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
            }
            if (!ok)
                return Value::data(false);
            l = std::move(r);
        }
        return Value::data(true);
    }
    case Expr::Bin: return binop(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
    }
    fail(e.line, "unknown expression");
}

Value Renderer::binop(const std::string& op, const Value& a, const Value& b, int line) const
{
    auto bad = [&]() -> Value {
        if (a.kind == Value::Undef)
            fail(line, "'" + a.name + "' is undefined (an operand of '" + op + "')");
        if (b.kind == Value::Undef)
            fail(line, "'" + b.name + "' is undefined (an operand of '" + op + "')");
        fail(line, "unsupported operand types for " + op + ": " + typeName(a) + " and " + typeName(b));
    };
    if (a.kind != Value::Data || b.kind != Value::Data)
        return bad();
    const J &x = a.j, &y = b.j;
    if (numeric(x) && numeric(y)) {
        bool ints = integral(x) && integral(y);
        if (ints && (op == "+" || op == "-" || op == "*")) {
            int64_t r = 0;
            bool over = op == "+" ? __builtin_add_overflow(inum(x), inum(y), &r)
                        : op == "-" ? __builtin_sub_overflow(inum(x), inum(y), &r)
                                    : __builtin_mul_overflow(inum(x), inum(y), &r);
            if (over)
                fail(line, "integer overflow in '" + op + "' (Python's integers have no limit; these have 64 bits)");
            return Value::data(r);
        }
        if (op == "+")
            return Value::data(num(x) + num(y));
        if (op == "-")
            return Value::data(num(x) - num(y));
        if (op == "*")
            return Value::data(num(x) * num(y));
        if (op == "/") {
            if (num(y) == 0)
                fail(line, "division by zero");
            return Value::data(num(x) / num(y));
        }
        if (op == "//" || op == "%") {
            if (num(y) == 0)
                fail(line, "division by zero");
            if (ints) {
                int64_t p = inum(x), q = inum(y);
                if (p == std::numeric_limits<int64_t>::min() && q == -1)
                    fail(line, "integer overflow in '" + op + "'");
                int64_t d = p / q, m = p % q;
                if (m != 0 && ((m < 0) != (q < 0))) {
                    --d;
                    m += q;
                }
                return Value::data(op == "//" ? d : m);
            }
            double p = num(x), q = num(y), d = std::floor(p / q);
            return Value::data(op == "//" ? d : p - d * q);
        }
        if (op == "**") {
            if (ints && inum(y) >= 0) {
                int64_t r = 1, base = inum(x);
                for (int64_t i = 0; i < inum(y) && r != 0 && !(r == 1 && (base == 1 || base == 0) && i > 0); ++i)
                    if (__builtin_mul_overflow(r, base, &r))
                        fail(line, "integer overflow in '**'");
                return Value::data(r);
            }
            return Value::data(std::pow(num(x), num(y)));
        }
    }
    if (op == "+" && x.is_string() && y.is_string())
        return Value::data(x.get<std::string>() + y.get<std::string>());
    if (op == "+" && x.is_array() && y.is_array()) {
        J r = x;
        for (const auto& v : y)
            r.push_back(v);
        return Value::data(std::move(r));
    }
    if (op == "*" && (((x.is_string() || x.is_array()) && integral(y)) || ((y.is_string() || y.is_array()) && integral(x)))) {
        const J& seq = x.is_string() || x.is_array() ? x : y;
        int64_t times = inum(x.is_string() || x.is_array() ? y : x);
        const uint64_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
        if (times <= 0 || unit == 0)
            return Value::data(seq.is_string() ? J("") : J::array());
        if (uint64_t(times) > kMaxOutput / unit)
            fail(line, "a repeated string or list passes the output limit");
        if (seq.is_string()) {
            std::string r;
            for (int64_t i = 0; i < times; ++i)
                r += seq.get<std::string>();
            return Value::data(r);
        }
        J r = J::array();
        for (int64_t i = 0; i < times; ++i)
            for (const auto& v : seq)
                r.push_back(v);
        return Value::data(std::move(r));
    }
    return bad();
}

Renderer::Args Renderer::evalArgs(const Expr& e, size_t from)
{
    Args a;
    for (size_t i = from; i < e.args.size(); ++i)
        a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs)
        a.kw.emplace_back(k, eval(*v));
    return a;
}

std::string Renderer::strArg(const Args& a, size_t i, const char* name, int line, const char* what) const
{
    const Value* v = a.get(i, name);
    if (!v || !v->isStr())
        fail(line, std::string(what) + " needs a string argument '" + name + "'");
    return v->j.get<std::string>();
}

Value Renderer::call(const Expr& e)
{
    const Expr& callee = *e.args[0];
    Value fn;
    if (callee.k == Expr::Attr) {
        Value obj = eval(*callee.args[0]);
        fn = getAttr(obj, callee.name, callee.line);
        if (fn.kind == Value::Undef && obj.kind == Value::Data)
            fail(e.line, "the method " + typeName(obj) + "." + callee.name + "() is not supported");
    } else
        fn = eval(callee);
    if (fn.kind != Value::Fn) {
        if (fn.kind == Value::Undef)
            fail(e.line, "'" + fn.name + "' is undefined (called as a function)");
        fail(e.line, "a " + typeName(fn) + " is not callable");
    }
    Args a = evalArgs(e, 1);
    const Callable& c = *fn.fn;
    if (c.k == Callable::Method)
        return method(c.self, c.name, a, e.line);
    if (c.k == Callable::Macro)
        return callMacro(*c.macro, a, e.line);
    return builtin(c.name, a, e.line);
}

Value Renderer::builtin(const std::string& name, const Args& a, int line)
{
    if (name == "raise_exception") {
        std::string msg = a.pos.empty() ? "" : str(a.pos[0]);
        fail(line, "the template raised an exception: " + msg);
    }
    if (name == "strftime_now") {
        std::string fmt = strArg(a, 0, "format", line, "strftime_now");
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof buf, fmt.c_str(), &tm) : 0;
        return Value::data(std::string(buf, n));
    }
    if (name == "namespace" || name == "dict") {
        Value v;
        std::map<std::string, Value> attrs;
        for (const auto& p : a.pos) {
            if (p.kind == Value::Data && p.j.is_object()) {
                for (auto it = p.j.begin(); it != p.j.end(); ++it)
                    attrs[it.key()] = Value::data(it.value());
            } else
                fail(line, name + "() takes a dict or keyword arguments");
        }
        for (const auto& [k, val] : a.kw)
            attrs[k] = val;
        if (name == "dict") {
            J o = J::object();
            for (const auto& [k, val] : attrs)
                o[k] = toJson(val, line);
            return Value::data(std::move(o));
        }
        v.kind = Value::Ns;
        v.ns = std::make_shared<Namespace>();
        v.ns->attrs = std::move(attrs);
        return v;
    }
    if (name == "range") {
        int64_t lo = 0, hi = 0, st = 1;
        for (const auto& p : a.pos)
            if (!p.isInt())
                fail(line, "range() takes integers");
        if (a.pos.size() == 1)
            hi = inum(a.pos[0].j);
        else if (a.pos.size() >= 2) {
            lo = inum(a.pos[0].j);
            hi = inum(a.pos[1].j);
            if (a.pos.size() >= 3)
                st = inum(a.pos[2].j);
        } else
            fail(line, "range() takes 1 to 3 integers");
        if (st == 0)
            fail(line, "range() step must not be zero");
        J out = J::array();
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            if (out.size() >= size_t(kMaxRange))
                fail(line, "range() is longer than " + std::to_string(kMaxRange));
            out.push_back(i);
        }
        return Value::data(std::move(out));
    }
    fail(line, "the function " + name + "() is not supported");
}

Value Renderer::callMacro(const Stmt& m, const Args& a, int line)
{
    if (m_callDepth >= kMaxCallDepth)
        fail(line, "macro calls nested deeper than " + std::to_string(kMaxCallDepth));
    if (a.pos.size() > m.targets.size())
        fail(line, "the macro " + m.text + " takes at most " + std::to_string(m.targets.size()) + " arguments");
    std::vector<Scope> saved = std::move(m_scopes);
    m_scopes.clear();
    m_scopes.push_back(std::move(saved[0])); // the globals; the caller's locals stay out of sight
    m_scopes.emplace_back();
    for (size_t i = 0; i < m.targets.size(); ++i) {
        const Value* v = a.get(i, m.targets[i].c_str());
        if (v)
            m_scopes.back()[m.targets[i]] = *v;
        else if (m.defaults[i])
            m_scopes.back()[m.targets[i]] = eval(*m.defaults[i]);
        else
            m_scopes.back()[m.targets[i]] = Value::undefined(m.targets[i]);
    }
    for (const auto& [k, v] : a.kw)
        if (std::find(m.targets.begin(), m.targets.end(), k) == m.targets.end())
            fail(line, "the macro " + m.text + " has no parameter '" + k + "'");
    std::string out;
    ++m_callDepth;
    try {
        exec(m.body, out);
    } catch (...) {
        --m_callDepth;
        saved[0] = std::move(m_scopes[0]);
        m_scopes = std::move(saved);
        throw;
    }
    --m_callDepth;
    saved[0] = std::move(m_scopes[0]);
    m_scopes = std::move(saved);
    return Value::data(out);
}

// ---- statements

void Renderer::unpack(const std::vector<std::string>& targets, const Value& v, int line)
{
    if (targets.size() == 1) {
        assign(targets[0], v);
        return;
    }
    auto items = iterate(v, line);
    if (items.size() != targets.size())
        fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                       std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i)
        assign(targets[i], items[i]);
}

Flow Renderer::exec(const Body& body, std::string& out)
{
    for (const auto& s : body) {
        Flow f = exec(*s, out);
        if (f != Flow::Normal)
            return f;
    }
    return Flow::Normal;
}

Flow Renderer::exec(const Stmt& s, std::string& out)
{
    step(s.line);
    switch (s.k) {
    case Stmt::Text: emit(out, s.text, s.line); return Flow::Normal;
    case Stmt::Out: emit(out, str(eval(*s.expr)), s.line); return Flow::Normal;
    case Stmt::If:
        for (const auto& [c, b] : s.branches)
            if (!c || truthy(eval(*c)))
                return exec(b, out);
        return Flow::Normal;
    case Stmt::Break: return Flow::Break;
    case Stmt::Continue: return Flow::Continue;
    case Stmt::Set: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) {
            Value ns = lookup(s.targets[0]);
            if (ns.kind != Value::Ns)
                fail(s.line, "cannot set an attribute of '" + s.targets[0] + "': it is not a namespace()");
            ns.ns->attrs[s.attr] = std::move(v);
        } else
            unpack(s.targets, v, s.line);
        return Flow::Normal;
    }
    case Stmt::SetBlock:
    case Stmt::FilterBlock: {
        std::string inner;
        exec(s.body, inner);
        Value saved = m_block;
        m_block = Value::data(inner);
        Value v = eval(*s.expr);
        m_block = saved;
        if (s.k == Stmt::SetBlock)
            assign(s.targets[0], v);
        else
            emit(out, str(v), s.line);
        return Flow::Normal;
    }
    case Stmt::Macro: {
        Value v;
        v.kind = Value::Fn;
        v.fn = std::make_shared<Callable>(Callable{Callable::Macro, s.text, {}, &s});
        assign(s.text, v);
        return Flow::Normal;
    }
    case Stmt::For: {
        Value seq = eval(*s.expr);
        std::vector<Value> items = iterate(seq, s.line);
        if (s.cond) {
            std::vector<Value> kept;
            for (const auto& it : items) {
                m_scopes.emplace_back();
                unpack(s.targets, it, s.line);
                bool keep = truthy(eval(*s.cond));
                m_scopes.pop_back();
                if (keep)
                    kept.push_back(it);
            }
            items = std::move(kept);
        }
        if (items.empty())
            return exec(s.elseBody, out);
        const int64_t n = int64_t(items.size());
        auto state = std::make_shared<LoopState>();
        auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
        state->items = shared;
        m_scopes.emplace_back();
        for (int64_t i = 0; i < n; ++i) {
            step(s.line);
            m_scopes.back().clear();
            state->index = i;
            Value lv;
            lv.kind = Value::Loop;
            lv.loop = state;
            assign("loop", std::move(lv));
            unpack(s.targets, (*shared)[size_t(i)], s.line);
            Flow f;
            try {
                f = exec(s.body, out);
            } catch (...) {
                m_scopes.pop_back();
                throw;
            }
            if (f == Flow::Break)
                break;
        }
        m_scopes.pop_back();
        return Flow::Normal;
    }
    }
    return Flow::Normal;
}

} // namespace stowage::jinja
