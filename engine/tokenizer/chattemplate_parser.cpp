// Chat templates: the parser, from the lexer's tokens to the AST of
// chattemplate_internal.h, with jinja2's operator precedence. A tag, filter or
// test that is not implemented is refused here, by name, before anything renders.
#include "chattemplate_internal.h"

#include <algorithm>

namespace stowage::jinja {

const std::vector<std::string> kFilters = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper", "wordcount"};
const std::vector<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
    "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

bool known(const std::vector<std::string>& list, const std::string& name)
{
    return std::find(list.begin(), list.end(), name) != list.end();
}

namespace {

class Parser {
public:
    Parser(std::vector<Tok> toks, const std::string& path) : m_t(std::move(toks)), m_path(path) {}

    Body parseTemplate()
    {
        std::string end;
        Body b = parseBody({}, end);
        return b;
    }

private:
    [[noreturn]] void fail(const std::string& what, int line = -1) const
    {
        throw InputError(m_path, "line " + std::to_string(line < 0 ? cur().line : line) + ": " + what);
    }
    const Tok& cur() const { return m_t[m_p]; }
    const Tok& peek(size_t ahead = 1) const { return m_t[std::min(m_p + ahead, m_t.size() - 1)]; }
    bool isOp(const char* op) const { return cur().type == T::Op && cur().s == op; }
    bool isName(const char* n) const { return cur().type == T::Name && cur().s == n; }
    Tok next()
    {
        Tok t = m_t[m_p];
        if (m_p + 1 < m_t.size())
            ++m_p;
        return t;
    }
    void expectOp(const char* op)
    {
        if (!isOp(op))
            fail(std::string("expected '") + op + "', found " + describe(cur()));
        next();
    }
    std::string expectName()
    {
        if (cur().type != T::Name)
            fail("expected a name, found " + describe(cur()));
        return next().s;
    }
    void expectBlockEnd()
    {
        if (cur().type != T::BlockEnd)
            fail("expected the end of the tag, found " + describe(cur()));
        next();
    }
    static std::string describe(const Tok& t)
    {
        switch (t.type) {
        case T::Name: return "'" + t.s + "'";
        case T::Op: return "'" + t.s + "'";
        case T::Str: return "a string";
        case T::Int:
        case T::Float: return "a number";
        case T::VarEnd: return "'}}'";
        case T::BlockEnd: return "'%}'";
        case T::End: return "the end of the template";
        default: return "text";
        }
    }

    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser) : p(parser)
        {
            if (++p.m_depth > kMaxNesting)
                p.fail("nested too deep (more than " + std::to_string(kMaxNesting) + " levels)");
        }
        ~Depth() { --p.m_depth; }
    };

    // Statements until one of `ends` (a block tag name); its name goes to `end`.
    Body parseBody(const std::vector<std::string>& ends, std::string& end)
    {
        Depth d(*this);
        Body body;
        while (true) {
            const Tok& t = cur();
            if (t.type == T::End) {
                if (!ends.empty())
                    fail("the template ends inside a block: expected {% " + ends.back() + " %}");
                return body;
            }
            if (t.type == T::Data) {
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::Text;
                s->line = t.line;
                s->text = t.s;
                body.push_back(std::move(s));
                next();
            } else if (t.type == T::VarBegin) {
                next();
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::Out;
                s->line = t.line;
                s->expr = parseTuple(true);
                if (cur().type != T::VarEnd)
                    fail("expected '}}', found " + describe(cur()));
                next();
                body.push_back(std::move(s));
            } else if (t.type == T::BlockBegin) {
                next();
                if (cur().type != T::Name)
                    fail("expected a tag name after '{%', found " + describe(cur()));
                std::string name = cur().s;
                if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
                    next();
                    end = name;
                    return body;
                }
                body.push_back(parseStatement());
            } else {
                fail("unexpected " + describe(t));
            }
        }
    }

    SP parseStatement()
    {
        const int line = cur().line;
        const std::string name = next().s;
        auto s = std::make_unique<Stmt>();
        s->line = line;
        std::string end;
        if (name == "if") {
            s->k = Stmt::If;
            EP c = parseTuple(true);
            expectBlockEnd();
            while (true) {
                Body b = parseBody({"elif", "else", "endif"}, end);
                s->branches.emplace_back(std::move(c), std::move(b));
                if (end == "elif") {
                    c = parseTuple(true);
                    expectBlockEnd();
                } else if (end == "else") {
                    expectBlockEnd();
                    Body eb = parseBody({"endif"}, end);
                    s->branches.emplace_back(nullptr, std::move(eb));
                    expectBlockEnd();
                    break;
                } else {
                    expectBlockEnd();
                    break;
                }
            }
        } else if (name == "for") {
            s->k = Stmt::For;
            s->targets = parseTargets();
            if (!isName("in"))
                fail("expected 'in' in the for tag, found " + describe(cur()));
            next();
            s->expr = parseTuple(false);
            if (isName("if")) {
                next();
                s->cond = parseExpression(true);
            }
            if (isName("recursive"))
                fail("recursive for loops are not supported");
            expectBlockEnd();
            ++m_loops;
            s->body = parseBody({"else", "endfor"}, end);
            --m_loops;
            expectBlockEnd();
            if (end == "else") {
                s->elseBody = parseBody({"endfor"}, end);
                expectBlockEnd();
            }
        } else if (name == "set") {
            std::string first = expectName();
            if (isOp(".")) {
                next();
                s->attr = expectName();
                s->targets = {first};
                expectOp("=");
                s->k = Stmt::Set;
                s->expr = parseTuple(true);
                expectBlockEnd();
            } else {
                s->targets = {first};
                while (isOp(",")) {
                    next();
                    s->targets.push_back(expectName());
                }
                if (isOp("=")) {
                    next();
                    s->k = Stmt::Set;
                    s->expr = parseTuple(true);
                    expectBlockEnd();
                } else {
                    if (s->targets.size() != 1)
                        fail("a {% set %} block assigns one name");
                    s->k = Stmt::SetBlock;
                    s->expr = parseBlockFilters(false);
                    expectBlockEnd();
                    s->body = parseBody({"endset"}, end);
                    expectBlockEnd();
                }
            }
        } else if (name == "macro") {
            s->k = Stmt::Macro;
            s->text = expectName();
            const int loops = m_loops;
            m_loops = 0; // a loop around the macro is not the macro's
            expectOp("(");
            while (!isOp(")")) {
                s->targets.push_back(expectName());
                if (isOp("=")) {
                    next();
                    s->defaults.push_back(parseExpression(true));
                } else
                    s->defaults.push_back(nullptr);
                if (!isOp(")"))
                    expectOp(",");
            }
            next();
            expectBlockEnd();
            s->body = parseBody({"endmacro"}, end);
            m_loops = loops;
            if (cur().type == T::Name && cur().s == s->text)
                next();
            expectBlockEnd();
        } else if (name == "break" || name == "continue") {
            if (m_loops == 0)
                fail("{% " + name + " %} outside a for loop");
            s->k = name == "break" ? Stmt::Break : Stmt::Continue;
            expectBlockEnd();
        } else if (name == "filter") {
            s->k = Stmt::FilterBlock;
            s->expr = parseBlockFilters(true);
            expectBlockEnd();
            s->body = parseBody({"endfilter"}, end);
            expectBlockEnd();
        } else if (name == "generation") {
            // transformers' AssistantTracker: the body renders as it is.
            s->k = Stmt::If;
            auto always = std::make_unique<Expr>();
            always->k = Expr::Lit;
            always->lit = true;
            expectBlockEnd();
            Body b = parseBody({"endgeneration"}, end);
            expectBlockEnd();
            s->branches.emplace_back(std::move(always), std::move(b));
        } else {
            fail("the tag {% " + name + " %} is not supported");
        }
        return s;
    }

    // For `for` targets: a name, or names separated by commas (parentheses allowed).
    std::vector<std::string> parseTargets()
    {
        std::vector<std::string> out;
        bool paren = isOp("(");
        if (paren)
            next();
        out.push_back(expectName());
        while (isOp(",")) {
            next();
            out.push_back(expectName());
        }
        if (paren)
            expectOp(")");
        return out;
    }

    // `{% filter name | other %}` (leadingName) or `{% set x | name %}`: a
    // chain of filters over the block's rendered text.
    EP parseBlockFilters(bool leadingName)
    {
        auto e = std::make_unique<Expr>();
        e->k = Expr::Block;
        e->line = cur().line;
        if (leadingName)
            e = parseFilter(std::move(e));
        while (isOp("|")) {
            next();
            e = parseFilter(std::move(e));
        }
        return e;
    }

    EP make(Expr::K k, int line)
    {
        auto e = std::make_unique<Expr>();
        e->k = k;
        e->line = line;
        return e;
    }

    EP parseTuple(bool condexpr)
    {
        const int line = cur().line;
        EP first = parseExpression(condexpr);
        if (!isOp(","))
            return first;
        EP t = make(Expr::Tuple, line);
        t->args.push_back(std::move(first));
        while (isOp(",")) {
            next();
            if (cur().type == T::VarEnd || cur().type == T::BlockEnd || isOp(")"))
                break;
            t->args.push_back(parseExpression(condexpr));
        }
        return t;
    }

    EP parseExpression(bool condexpr)
    {
        Depth d(*this);
        EP e = parseOr();
        if (!condexpr)
            return e;
        while (isName("if")) {
            const int line = next().line;
            EP c = parseOr();
            EP other;
            if (isName("else")) {
                next();
                other = parseExpression(true);
            }
            EP ce = make(Expr::Cond, line);
            ce->args.push_back(std::move(e));
            ce->args.push_back(std::move(c));
            ce->args.push_back(std::move(other));
            e = std::move(ce);
        }
        return e;
    }

    EP binary(Expr::K k, EP l, EP r, int line, const std::string& op = {})
    {
        EP e = make(k, line);
        e->name = op;
        e->args.push_back(std::move(l));
        e->args.push_back(std::move(r));
        return e;
    }

    EP parseOr()
    {
        EP l = parseAnd();
        while (isName("or")) {
            int line = next().line;
            l = binary(Expr::Or, std::move(l), parseAnd(), line);
        }
        return l;
    }

    EP parseAnd()
    {
        EP l = parseNot();
        while (isName("and")) {
            int line = next().line;
            l = binary(Expr::And, std::move(l), parseNot(), line);
        }
        return l;
    }

    EP parseNot()
    {
        if (isName("not")) {
            Depth d(*this);
            EP e = make(Expr::Not, next().line);
            e->args.push_back(parseNot());
            return e;
        }
        return parseCompare();
    }

    EP parseCompare()
    {
        const int line = cur().line;
        EP first = parseMath1();
        EP cmp;
        while (true) {
            std::string op;
            if (cur().type == T::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                        cur().s == ">" || cur().s == ">=")) {
                op = next().s;
            } else if (isName("in")) {
                next();
                op = "in";
            } else if (isName("not") && peek().type == T::Name && peek().s == "in") {
                next();
                next();
                op = "not in";
            } else
                break;
            if (!cmp) {
                cmp = make(Expr::Cmp, line);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parseMath1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    EP parseMath1()
    {
        EP l = parseConcat();
        while (isOp("+") || isOp("-")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parseConcat(), t.line, t.s);
        }
        return l;
    }

    EP parseConcat()
    {
        const int line = cur().line;
        EP first = parseMath2();
        if (!isOp("~"))
            return first;
        EP c = make(Expr::Concat, line);
        c->args.push_back(std::move(first));
        while (isOp("~")) {
            next();
            c->args.push_back(parseMath2());
        }
        return c;
    }

    EP parseMath2()
    {
        EP l = parsePow();
        while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parsePow(), t.line, t.s);
        }
        return l;
    }

    EP parsePow()
    {
        EP l = parseUnary(true);
        while (isOp("**")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parseUnary(true), t.line, t.s);
        }
        return l;
    }

    EP parseUnary(bool withFilter)
    {
        Depth d(*this);
        EP node;
        if (isOp("-") || isOp("+")) {
            Tok t = next();
            node = make(t.s == "-" ? Expr::Neg : Expr::Pos, t.line);
            node->args.push_back(parseUnary(false));
        } else
            node = parsePrimary();
        node = parsePostfix(std::move(node));
        if (withFilter)
            node = parseFilterExpr(std::move(node));
        return node;
    }

    EP parsePrimary()
    {
        const Tok& t = cur();
        const int line = t.line;
        if (t.type == T::Name) {
            std::string n = next().s;
            EP e = make(Expr::Lit, line);
            if (n == "true" || n == "True")
                e->lit = true;
            else if (n == "false" || n == "False")
                e->lit = false;
            else if (n == "none" || n == "None")
                e->lit = nullptr;
            else {
                e->k = Expr::Name;
                e->name = n;
            }
            return e;
        }
        if (t.type == T::Str) {
            std::string s = next().s;
            while (cur().type == T::Str)
                s += next().s; // adjacent literals are one string
            EP e = make(Expr::Lit, line);
            e->lit = s;
            return e;
        }
        if (t.type == T::Int || t.type == T::Float) {
            Tok n = next();
            EP e = make(Expr::Lit, line);
            if (n.type == T::Int)
                e->lit = n.i;
            else
                e->lit = n.f;
            return e;
        }
        if (isOp("(")) {
            next();
            if (isOp(")")) {
                next();
                return make(Expr::Tuple, line);
            }
            EP e = parseTuple(true);
            expectOp(")");
            return e;
        }
        if (isOp("[")) {
            next();
            EP e = make(Expr::List, line);
            while (!isOp("]")) {
                e->args.push_back(parseExpression(true));
                if (!isOp("]"))
                    expectOp(",");
            }
            next();
            return e;
        }
        if (isOp("{")) {
            next();
            EP e = make(Expr::Dict, line);
            while (!isOp("}")) {
                e->args.push_back(parseExpression(true));
                expectOp(":");
                e->args.push_back(parseExpression(true));
                if (!isOp("}"))
                    expectOp(",");
            }
            next();
            return e;
        }
        fail("unexpected " + describe(t) + " in an expression");
    }

    EP parsePostfix(EP node)
    {
        while (true) {
            if (isOp(".")) {
                const int line = next().line;
                if (cur().type == T::Name) {
                    EP e = make(Expr::Attr, line);
                    e->name = next().s;
                    e->args.push_back(std::move(node));
                    node = std::move(e);
                } else if (cur().type == T::Int) {
                    EP e = make(Expr::Item, line);
                    e->args.push_back(std::move(node));
                    EP idx = make(Expr::Lit, line);
                    idx->lit = next().i;
                    e->args.push_back(std::move(idx));
                    node = std::move(e);
                } else
                    fail("expected a name after '.', found " + describe(cur()));
            } else if (isOp("[")) {
                const int line = next().line;
                node = parseSubscript(std::move(node), line);
            } else if (isOp("(")) {
                node = parseCall(std::move(node));
            } else
                return node;
        }
    }

    EP parseSubscript(EP node, int line)
    {
        EP parts[3];
        bool slice = false;
        for (int i = 0; i < 3; ++i) {
            if (!isOp(":") && !isOp("]"))
                parts[i] = parseExpression(true);
            if (isOp(":") && i < 2) {
                slice = true;
                next();
                continue;
            }
            break;
        }
        expectOp("]");
        if (!slice) {
            if (!parts[0])
                fail("an empty subscript []", line);
            EP e = make(Expr::Item, line);
            e->args.push_back(std::move(node));
            e->args.push_back(std::move(parts[0]));
            return e;
        }
        EP e = make(Expr::Slice, line);
        e->args.push_back(std::move(node));
        for (auto& p : parts)
            e->args.push_back(std::move(p));
        return e;
    }

    void parseCallArgs(Expr& e)
    {
        expectOp("(");
        while (!isOp(")")) {
            if (isOp("*") || isOp("**"))
                fail("*args and **kwargs in calls are not supported");
            if (cur().type == T::Name && peek().type == T::Op && peek().s == "=") {
                std::string k = next().s;
                next();
                e.kwargs.emplace_back(k, parseExpression(true));
            } else {
                if (!e.kwargs.empty())
                    fail("a positional argument after a keyword argument");
                e.args.push_back(parseExpression(true));
            }
            if (!isOp(")"))
                expectOp(",");
        }
        next();
    }

    EP parseCall(EP node)
    {
        EP e = make(Expr::Call, cur().line);
        e->args.push_back(std::move(node));
        parseCallArgs(*e);
        return e;
    }

    EP parseFilter(EP node)
    {
        const int line = cur().line;
        std::string name = expectName();
        if (!known(kFilters, name))
            fail("the filter '" + name + "' is not supported", line);
        EP e = make(Expr::Filter, line);
        e->name = name;
        e->args.push_back(std::move(node));
        if (isOp("("))
            parseCallArgs(*e);
        return e;
    }

    EP parseFilterExpr(EP node)
    {
        while (true) {
            if (isOp("|")) {
                next();
                node = parseFilter(std::move(node));
            } else if (isName("is")) {
                const int line = next().line;
                EP e = make(Expr::Test, line);
                if (isName("not")) {
                    next();
                    e->negated = true;
                }
                if (cur().type == T::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                            cur().s == ">" || cur().s == ">="))
                    e->name = next().s;
                else
                    e->name = expectName();
                if (!known(kTests, e->name))
                    fail("the test '" + e->name + "' is not supported", line);
                e->args.push_back(std::move(node));
                if (isOp("(")) {
                    parseCallArgs(*e);
                } else if ((cur().type == T::Name || cur().type == T::Str || cur().type == T::Int ||
                            cur().type == T::Float || isOp("[") || isOp("{")) &&
                           !isName("else") && !isName("or") && !isName("and")) {
                    if (isName("is"))
                        fail("'is' cannot follow a test");
                    EP arg = parsePrimary();
                    e->args.push_back(parsePostfix(std::move(arg)));
                }
                node = std::move(e);
            } else if (isOp("(")) {
                node = parseCall(std::move(node));
            } else
                return node;
        }
    }

    std::vector<Tok> m_t;
    size_t m_p = 0;
    std::string m_path;
    int m_depth = 0;
    int m_loops = 0; // for bodies being parsed: where break and continue may stand
};

} // namespace

Body parse(std::vector<Tok> toks, const std::string& path)
{
    Parser p(std::move(toks), path);
    return p.parseTemplate();
}

} // namespace stowage::jinja
