#!/usr/bin/env python3
"""Golden data for verl-cpp's Jinja chat-template engine (include/verl/model/tokenizer/jinja/),
rendered by jinja2 exactly as transformers' apply_chat_template(..., tokenize=False) renders:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
transformers' tojson override (json.dumps, ensure_ascii=False), the globals raise_exception and
strftime_now (here with a fixed date so the output is deterministic), and the render variables
messages, tools (None unless given), documents (None), add_generation_prompt, bos_token,
eos_token plus any extra keyword arguments.

    pip install jinja2
    python3 tools/scripts/make_jinja_golden.py [--out tests/data/tokenizer]

Inputs and outputs (in --out):
  jinja_templates.json  {"official": {name: {model, source, bos_token, eos_token, template}},
                         "synthetic": {name: template}}
      The official templates cannot be downloaded here; they were copied verbatim from public
      repositories that embed them (each entry's "source" says where) and are read back from this
      file. The synthetic ones, defined below, exercise each engine feature and whitespace corner
      case and are (re)written on every run.
  jinja.golden.jsonl    one JSON object per line:
      {"template": official name, "messages": [...], "add_generation_prompt": bool,
       "context": {extra variables, e.g. tools / enable_thinking}, "text" | "error", "error_type"}
      {"synthetic": name, "context": {...all variables...}, "text" | "error", "error_type"}
"""
import argparse
import datetime
import json
import os

import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)  # the engine's tests inject the same time


def make_environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, variables):
    try:
        return {"text": env.from_string(template).render(**variables)}
    except TemplateError as error:
        kind = "TemplateError" if type(error) is TemplateError else type(error).__name__
        return {"error": str(error), "error_type": kind}
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError) as error:
        return {"error": str(error), "error_type": type(error).__name__}


# ---- conversations ------------------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in °C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]

TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}


def conversations():
    u = lambda text: {"role": "user", "content": text}  # noqa: E731
    a = lambda text: {"role": "assistant", "content": text}  # noqa: E731
    s = lambda text: {"role": "system", "content": text}  # noqa: E731
    return [
        [u("What is 2 + 3?")],
        [s("You are a math tutor."), u("Solve x + 1 = 3.")],
        [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")],
        [s("Be brief."), u("Capital of France?"), a("Paris.")],
        [u("  padded content \n\n"), a("\n  answer with spaces  "), u("\tnext\t")],
        [u("")],
        [s(""), u("Empty system prompt")],
        [u("你好，请用中文回答。"), a("好的。😀 café naïve Ωμέγα"), u("\u2028line\u00a0sep\u3000")],
        [u("Template-looking text: {{ messages }} {% if %} {# c #}")],
        [u("Quote ' and \" and \\ backslash")],
        [u("2+2?"), a("<think>\nAdd them.\n</think>\n\n4"), u("and 3+3?")],
        [u("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."}, u("3+3?")],
        [u("first"), u("second in a row")],
        [a("An assistant message first")],
        [u("first"), s("a later system message"), u("second")],
        [u("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
         {"role": "tool", "content": "{\"temperature\": 21}"}, {"role": "tool", "content": "sunny"}],
        [s("Use tools."), u("Weather in Paris?"), {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
         {"role": "tool", "content": "21 degrees"}, a("It is 21 °C.")],
        [s("multi\nline\nsystem"), u("q1"), a("a1"), u("q2"), a("a2"), u("q3")],
    ]


# ---- synthetic templates: one feature (or corner case) each ----------------------------------------
SYNTHETIC = {
    # whitespace control: trim_blocks, lstrip_blocks, -, + and comments
    "ws_trim_lstrip": "  {% if true %}\n  x\n  {% endif %}\n  y {{ 1 }}  {% if true %}z{% endif %}\n",
    "ws_minus": "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  \n e",
    "ws_plus": "  {%+ if true +%}\nkept\n  {%+ endif %}\nend",
    "ws_comments": "a {#- c #} b\n{# c #}\nc\n  {# indented #}\nd {# trailing #}\n  {#- x -#}  e",
    "ws_variable_not_lstripped": "  {{ 'v' }}\n  {% if true %}\t\n{% endif %}",
    "ws_tabs_and_crlf": "\t{% for i in [1, 2] %}\r\n\t{{ i }}\r\n\t{% endfor %}\r\n",
    "ws_trailing_newline": "text\n",
    "ws_raw": "{% raw %}{{ not rendered }} {% if %}{% endraw %}\n{%- raw -%}  x  {%- endraw %}",
    # literals and expressions
    "literals": "{{ 'a\\tb\\n\\'q\\'' }}|{{ \"d\\\"q\" }}|{{ 'x' 'y' }}|{{ 1_000 }}|{{ 0x1f }}|{{ 1.5e3 }}|{{ [1, 'two', none, true, false] }}|{{ {'k': 'v', 'n': [1, 2.0]} }}|{{ (1,) }}|{{ () }}|{{ None }}|{{ True }}",
    "arithmetic": "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 10 / 5 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ true + true }}",
    "strings_ops": "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'ell' in 'hello' }} {{ 'z' not in 'hello' }}",
    "comparisons": "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ none == none }} {{ 1 != '1' }} {{ (1, 2) == [1, 2] }}",
    "logic": "{{ none or 'x' }}|{{ 0 and 'y' }}|{{ 'a' and 'b' }}|{{ not '' }}|{{ not not 3 }}|{{ 'yes' if [] else 'no' }}|{{ 'shown' if true }}|{{ 'hidden' if false }}|",
    "subscripts_slices": "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[5] }}|{{ 'héllo'[1] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ d['a'] }}{{ d.a }}{{ d.zz }}|{{ d.items is callable }}{{ d['items'] }}|",
    # statements
    "if_elif_else": "{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one{% elif n is even %}even{% else %}other{% endif %};{% endfor %}",
    "for_loop_vars": "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %}",
    "for_else_filter": "{% for x in [] %}never{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}",
    "for_unpack": "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
    "for_break_continue": "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 6 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "for_scoping": "{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}|{{ x }}",
    "nested_loops": "{% for row in [[1, 2], [3]] %}{% for c in row %}{{ loop.index }}:{{ c }}{% endfor %}/{{ loop.index }} {% endfor %}",
    "set_tuple_and_block": "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 3, 4 %}{{ c }}{% set blk %}  inside {{ a }}\n{% endset %}[{{ blk }}]{% set up | upper %}shout{% endset %}{{ up }}",
    "namespace": "{% set ns = namespace(found=false, n=0, items=[]) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.items = ns.items + [m.content] %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ ns.items }} {{ ns }}",
    "macros": "{% set x = 5 %}{% macro m(a, b=2) %}{{ a }}{{ b }}{{ x }}{% set x = 9 %}{{ x }}{% endmacro %}{{ m(1) }}{{ x }}{% set x = 7 %}{{ m(1, b=3) }}{% macro render(msg) -%}\n  <{{ msg.role }}>{{ msg.content | trim }}\n{%- endmacro %}{% for m in messages %}{{ render(m) }}{% endfor %}",
    "filter_block_with": "{% filter upper %}abc {{ 'd' }}{% endfilter %}|{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a }}",
    # filters
    "filters_strings": "{{ '  t  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello-world foo(bar)' | title }}|{{ 'a-b-a' | replace('a', 'X') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | reverse }}|{{ 3 | string }}|{{ '<b>' | safe }}|{{ '<&>' | e }}|{{ 'hi' | center(6) }}|{{ 'one two  three' | wordcount }}",
    "filters_numbers": "{{ '3' | int + 1 }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '2.7' | int }} {{ 3.9 | int }} {{ '1.5' | float }} {{ 'x' | float }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 3.14159 | round(2) }} {{ 2.7 | round(method='floor') }} {{ 2.1 | round(0, 'ceil') }} {{ 3 | round }} {{ -3 | abs }} {{ -2.5 | abs }} {{ [1, 2, 3.5] | sum }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }}",
    "filters_sequences": "{{ xs | length }} {{ xs | count }} {{ 'héllo' | length }} {{ d | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }} {{ xs | reverse | list }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 2, 3, 1] | unique | list }} {{ 'ab' | list }} {{ d | list }} {{ d | items | list }} {{ [] | first }}|",
    "filters_select_map": "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | join('|') }} {{ messages | map(attribute='role') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ ['a', 'b'] | map('upper') | join }} {{ messages | map(attribute='missing', default='-') | join }} {{ messages | selectattr('content') | list | length }}",
    "filters_default": "{{ undefined_name | default('dflt') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ 0 | d('zero', boolean=true) }}|{{ d.zz | default('missing key') }}",
    "filters_tojson": "{{ {'a': [1, 2.5, 'é', none, true], 'b': {}} | tojson }}|{{ {'a': [1, {'b': 2}], 'c': []} | tojson(indent=2) }}|{{ 'x\\u2028\"\\\\<>&' | tojson }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ tools | tojson(indent=4) }}",
    "filters_indent": "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(blank=true) }}|{{ 'x\\ny' | indent('> ') }}",
    # tests
    "tests": "{{ x is defined }}{{ undefined_name is defined }}{{ undefined_name is undefined }}{{ none is none }}{{ 1 is none }}{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ d is mapping }}{{ xs is mapping }}{{ xs is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ xs is sequence }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 2 is in xs }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 3 is gt 2 }}{{ 'A' is upper }}{{ 'a' is lower }}{{ d.a is not none }}",
    # methods
    "methods_str": "{{ '  a b  '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ ' x '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}{{ \"they're here\".title() }}{{ 'hELLO'.capitalize() }}{{ 'abc'.startswith('a') }}{{ 'abc'.startswith(('x', 'b')) }}{{ 'abc'.endswith('bc') }}{{ 'a-b-c'.replace('-', '+') }}{{ 'a-b-c'.replace('-', '+', 1) }}{{ 'héllo'.find('l') }}{{ 'abc'.find('z') }}{{ 'banana'.count('an') }}{{ ', '.join(['x', 'y']) }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}{{ '42'.isdigit() }}",
    "methods_dict_list": "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{{ d.items() }}{{ xs.index(2) }}{{ xs.count(1) }}{{ messages.append }}|",
    "globals": "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1, b='x') }}{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}{{ namespace(a=1).a }}",
    # undefined semantics and runtime errors
    "undefined_renders_empty": "[{{ undefined_name }}][{{ d.zz }}][{{ xs[10] }}][{{ 'a' ~ undefined_name }}][{{ undefined_name | length }}][{% for x in undefined_name %}x{% else %}none{% endfor %}][{{ 'a' in undefined_name }}][{{ undefined_name == undefined_name }}]",
    "error_attribute_of_undefined": "{{ undefined_name.attribute }}",
    "error_attribute_of_missing_key": "{{ d.zz.deeper }}",
    "error_add_undefined": "{{ undefined_name + 'a' }}",
    "error_concat_types": "{{ 'a' + 1 }}",
    "error_raise_exception": "{% if messages | length > 1 %}{{ raise_exception('Only one message, got ' ~ messages | length) }}{% endif %}",
    "error_call_undefined": "{{ undefined_function() }}",
    "error_tojson_undefined": "{{ undefined_name | tojson }}",
    "error_division_by_zero": "{{ 1 // 0 }}",
    "error_unsafe_method": "{{ xs.append(4) }}",
    "error_compare_types": "{{ 'a' < 1 }}",
    "error_unpack": "{% for a, b in [[1]] %}{% endfor %}",
}

SYNTHETIC_CONTEXT = {
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": " hi "},
                 {"role": "assistant", "content": "yo"}, {"role": "user", "content": ""}],
    "xs": [1, 2, 3, 1],
    "d": {"a": 1, "items": "I"},
    "x": "defined",
    "tools": TOOLS,
}


def official_cases(official):
    rows = []
    env = make_environment()
    for name, entry in official.items():
        variants = [{}]
        if "tools" in entry["template"]:
            variants.append({"tools": TOOLS})
        if "enable_thinking" in entry["template"]:
            variants.append({"enable_thinking": False})
        if "date_string" in entry["template"]:
            variants.append({"date_string": "01 Jan 2030"})
        for messages in conversations():
            for extra in variants:
                for add_generation_prompt in (False, True):
                    variables = {"messages": messages, "tools": None, "documents": None,
                                 "add_generation_prompt": add_generation_prompt}
                    if entry["bos_token"] is not None:
                        variables["bos_token"] = entry["bos_token"]
                    if entry["eos_token"] is not None:
                        variables["eos_token"] = entry["eos_token"]
                    variables.update(extra)
                    row = {"template": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
                           "context": extra}
                    row.update(render(env, entry["template"], variables))
                    rows.append(row)
    return rows


def synthetic_cases():
    env = make_environment()
    rows = []
    for name, template in SYNTHETIC.items():
        row = {"synthetic": name, "context": SYNTHETIC_CONTEXT}
        row.update(render(env, template, SYNTHETIC_CONTEXT))
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tokenizer"))
    args = parser.parse_args()
    sources_path = os.path.join(args.out, "jinja_templates.json")
    with open(sources_path, encoding="utf-8") as f:
        official = json.load(f)["official"]
    with open(sources_path, "w", encoding="utf-8") as f:
        json.dump({"official": official, "synthetic": SYNTHETIC}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    rows = official_cases(official) + synthetic_cases()
    with open(os.path.join(args.out, "jinja.golden.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    errors = sum(1 for row in rows if "error" in row)
    print(f"jinja: {len(official)} official + {len(SYNTHETIC)} synthetic templates, {len(rows)} cases ({errors} errors)")


if __name__ == "__main__":
    main()
