// Chat templates: the Renderer's methods of str and dict (split, strip,
// startswith, replace, items, get, ...) as Python has them, by code point.
#include "chattemplate_internal.h"

#include <utf8proc.h>

#include <algorithm>

namespace stowage::jinja {

std::string Renderer::strip(const std::string& s, const Value* chars, bool left, bool right, int line) const
{
    auto cps = codePoints(s);
    std::vector<std::string> set;
    bool ws = !chars || (chars->kind == Value::Data && chars->j.is_null());
    if (!ws) {
        if (!chars->isStr())
            fail(line, "strip() takes a string of characters");
        set = codePoints(chars->j.get<std::string>());
    }
    auto drop = [&](const std::string& c) {
        return ws ? pySpace(codeOf(c)) : std::find(set.begin(), set.end(), c) != set.end();
    };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && drop(cps[b]))
            ++b;
    if (right)
        while (e > b && drop(cps[e - 1]))
            --e;
    std::string out;
    for (size_t i = b; i < e; ++i)
        out += cps[i];
    return out;
}

J Renderer::split(const std::string& s, const Value* sep, const Value* maxArg, bool fromRight, int line) const
{
    int64_t maxsplit = -1;
    if (maxArg) {
        if (!maxArg->isInt())
            fail(line, "split() maxsplit must be an integer");
        maxsplit = inum(maxArg->j);
    }
    J out = J::array();
    if (!sep || (sep->kind == Value::Data && sep->j.is_null())) {
        // Runs of whitespace, no empty strings.
        auto cps = codePoints(s);
        std::vector<std::string> words;
        std::string w;
        bool in = false;
        int64_t splits = 0;
        if (fromRight) {
            // rsplit with whitespace: rarely used; split fully then merge from the left.
            for (const auto& c : cps) {
                if (pySpace(codeOf(c))) {
                    if (in)
                        words.push_back(w), w.clear(), in = false;
                } else
                    w += c, in = true;
            }
            if (in)
                words.push_back(w);
            if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
                fail(line, "rsplit() with a maxsplit and no separator is not supported");
            }
            for (auto& x : words)
                out.push_back(x);
            return out;
        }
        size_t i = 0;
        for (; i < cps.size(); ++i) {
            bool sp = pySpace(codeOf(cps[i]));
            if (sp) {
                if (in) {
                    out.push_back(w);
                    w.clear();
                    in = false;
                    ++splits;
                }
            } else {
                if (!in && maxsplit >= 0 && splits >= maxsplit) {
                    std::string rest;
                    for (size_t j = i; j < cps.size(); ++j)
                        rest += cps[j];
                    // Python keeps the remainder with its trailing whitespace stripped.
                    out.push_back(strip(rest, nullptr, false, true, line));
                    return out;
                }
                w += cps[i];
                in = true;
            }
        }
        if (in)
            out.push_back(w);
        return out;
    }
    if (!sep->isStr())
        fail(line, "split() separator must be a string");
    const std::string d = sep->j.get<std::string>();
    if (d.empty())
        fail(line, "split() separator is empty");
    std::vector<std::string> parts;
    if (!fromRight) {
        size_t p = 0;
        int64_t n = 0;
        while (true) {
            size_t f = (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, p);
            if (f == std::string::npos) {
                parts.push_back(s.substr(p));
                break;
            }
            parts.push_back(s.substr(p, f - p));
            p = f + d.size();
            ++n;
        }
    } else {
        size_t end = s.size();
        int64_t n = 0;
        while (true) {
            size_t f = (maxsplit >= 0 && n >= maxsplit) || end < d.size() ? std::string::npos
                                                                            : s.rfind(d, end - d.size());
            if (f == std::string::npos) {
                parts.insert(parts.begin(), s.substr(0, end));
                break;
            }
            parts.insert(parts.begin(), s.substr(f + d.size(), end - f - d.size()));
            end = f;
            ++n;
        }
    }
    for (auto& x : parts)
        out.push_back(x);
    return out;
}

Value Renderer::method(const J& self, const std::string& name, const Args& a, int line)
{
    if (self.is_object()) {
        if (name == "items") {
            J out = J::array();
            for (auto it = self.begin(); it != self.end(); ++it)
                out.push_back(J::array({it.key(), it.value()}));
            return Value::data(std::move(out));
        }
        if (name == "keys" || name == "values") {
            J out = J::array();
            for (auto it = self.begin(); it != self.end(); ++it)
                out.push_back(name == "keys" ? J(it.key()) : it.value());
            return Value::data(std::move(out));
        }
        if (name == "get") {
            if (a.pos.empty() || !a.pos[0].isStr())
                return a.pos.size() > 1 ? a.pos[1] : Value::data(nullptr);
            auto f = self.find(a.pos[0].j.get<std::string>());
            if (f != self.end())
                return Value::data(*f);
            return a.pos.size() > 1 ? a.pos[1] : Value::data(nullptr);
        }
    }
    if (!self.is_string())
        fail(line, "the method " + name + "() is not supported");
    const std::string s = self.get<std::string>();
    if (name == "startswith" || name == "endswith") {
        const Value* arg = a.get(0, "prefix");
        std::vector<std::string> options;
        if (arg && arg->isStr())
            options.push_back(arg->j.get<std::string>());
        else if (arg && arg->kind == Value::Data && arg->j.is_array()) {
            for (const auto& o : arg->j) {
                if (!o.is_string())
                    fail(line, name + "() takes strings");
                options.push_back(o.get<std::string>());
            }
        } else
            fail(line, name + "() takes a string or a tuple of strings");
        for (const auto& o : options) {
            if (o.size() <= s.size() &&
                (name == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0))
                return Value::data(true);
        }
        return Value::data(false);
    }
    if (name == "split" || name == "rsplit")
        return Value::data(split(s, a.get(0, "sep"), a.get(1, "maxsplit"), name == "rsplit", line));
    if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::data(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip", line));
    if (name == "lower" || name == "upper")
        return Value::data(mapCase(s, name == "upper"));
    if (name == "capitalize") {
        auto cps = codePoints(s);
        std::string out = cps.empty() ? "" : mapCase(cps[0], true);
        for (size_t i = 1; i < cps.size(); ++i)
            out += mapCase(cps[i], false);
        return Value::data(out);
    }
    if (name == "title")
        return Value::data(title(s));
    if (name == "replace") {
        std::string from = strArg(a, 0, "old", line, "replace()"), to = strArg(a, 1, "new", line, "replace()");
        const Value* cnt = a.get(2, "count");
        return Value::data(replace(s, from, to, cnt && cnt->isInt() ? inum(cnt->j) : -1));
    }
    if (name == "find" || name == "rfind" || name == "count") {
        std::string sub = strArg(a, 0, "sub", line, (name + "()").c_str());
        if (name == "count") {
            if (sub.empty())
                return Value::data(int64_t(codePoints(s).size()) + 1);
            int64_t n = 0;
            for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size()))
                ++n;
            return Value::data(n);
        }
        size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
        if (p == std::string::npos)
            return Value::data(int64_t(-1));
        return Value::data(int64_t(codePoints(s.substr(0, p)).size()));
    }
    if (name == "join") {
        if (a.pos.empty())
            fail(line, "join() takes a list");
        std::string out;
        bool first = true;
        for (const auto& v : iterate(a.pos[0], line)) {
            if (!v.isStr())
                fail(line, "join() takes strings, not " + typeName(v));
            out += (first ? "" : s) + v.j.get<std::string>();
            first = false;
        }
        return Value::data(out);
    }
    if (name == "splitlines") {
        J out = J::array();
        std::string cur;
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\n' || s[i] == '\r') {
                out.push_back(cur);
                cur.clear();
                if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
                    ++i;
            } else
                cur += s[i];
        }
        if (!cur.empty())
            out.push_back(cur);
        return Value::data(std::move(out));
    }
    if (name.rfind("is", 0) == 0) {
        auto cps = codePoints(s);
        if (cps.empty())
            return Value::data(false);
        bool ok = true, cased = false;
        for (const auto& c : cps) {
            int32_t cp = codeOf(c);
            auto cat = utf8proc_category(cp);
            bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            if (name == "isdigit")
                ok = ok && digit;
            else if (name == "isspace")
                ok = ok && pySpace(cp);
            else if (name == "isalpha")
                ok = ok && letter;
            else if (name == "isalnum")
                ok = ok && (letter || digit);
            else if (name == "islower" || name == "isupper") {
                if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL) {
                    cased = true;
                    ok = ok && (name == "islower" ? cat == UTF8PROC_CATEGORY_LL : cat == UTF8PROC_CATEGORY_LU);
                }
            }
        }
        if (name == "islower" || name == "isupper")
            ok = ok && cased;
        return Value::data(ok);
    }
    fail(line, "the method str." + name + "() is not supported");
}

std::string Renderer::replace(const std::string& s, const std::string& from, const std::string& to, int64_t count)
{
    if (from.empty()) {
        // Python inserts `to` between every character (and at both ends).
        auto cps = codePoints(s);
        std::string out;
        int64_t n = 0;
        for (size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || n < count) {
                out += to;
                ++n;
            }
            if (i < cps.size())
                out += cps[i];
        }
        return out;
    }
    std::string out;
    size_t p = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        size_t f = s.find(from, p);
        if (f == std::string::npos)
            break;
        out += s.substr(p, f - p) + to;
        p = f + from.size();
        ++n;
    }
    return out + s.substr(p);
}

std::string Renderer::title(const std::string& s)
{
    std::string out;
    bool prevCased = false;
    for (const auto& c : codePoints(s)) {
        int32_t cp = codeOf(c);
        auto cat = utf8proc_category(cp);
        bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
        out += cased ? mapCase(c, !prevCased) : c;
        prevCased = cased;
    }
    return out;
}

} // namespace stowage::jinja
