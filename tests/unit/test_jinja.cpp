// The Jinja chat-template engine against jinja2 renderings (tools/scripts/make_jinja_golden.py:
// official model templates x conversations, and synthetic templates exercising each feature),
// plus its syntax errors, undefined semantics, limits and the ChatTemplate policy.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "verl/tokenizer/jinja/template.hpp"
#include "verl/tokenizer/jinja_chat_template.hpp"

using namespace verl;
using namespace verl::tokenizer;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "tokenizer";

std::vector<Json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

/// The time make_jinja_golden.py gives strftime_now: 2025-03-14 09:26:53 (a Friday).
std::tm fixed_now() {
  std::tm now{};
  now.tm_year = 2025 - 1900;
  now.tm_mon = 2;
  now.tm_mday = 14;
  now.tm_hour = 9;
  now.tm_min = 26;
  now.tm_sec = 53;
  now.tm_wday = 5;
  now.tm_yday = 72;
  return now;
}

std::string render(std::string_view source, const Json& context = Json::object()) {
  jinja::Environment environment;
  environment.now = fixed_now();
  return jinja::Template(source).render(jinja::from_json(context).object(), environment);
}

std::string error_of(std::string_view source, const Json& context = Json::object()) {
  try {
    (void)render(source, context);
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "<no error>";
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

/// jinja2's error kinds whose messages the engine reproduces word for word.
bool message_is_reproduced(const std::string& error_type) {
  return error_type == "TemplateError" || error_type == "UndefinedError" || error_type == "SecurityError" ||
         error_type == "TypeError" || error_type == "ValueError" || error_type == "ZeroDivisionError";
}

void expect_matches_golden(const Json& row, const std::function<std::string()>& render_row) {
  if (row.contains("text")) {
    try {
      EXPECT_EQ(render_row(), row["text"].get<std::string>()) << row.dump();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "unexpected error: " << error.what() << "\n" << row.dump();
    }
    return;
  }
  try {
    const std::string text = render_row();
    ADD_FAILURE() << "expected an error, rendered: " << text << "\n" << row.dump();
  } catch (const InvalidArgument& error) {
    if (message_is_reproduced(row["error_type"].get<std::string>())) {
      EXPECT_TRUE(contains(error.what(), row["error"].get<std::string>())) << error.what() << "\n" << row.dump();
    }
  }
}

}  // namespace

TEST(Jinja, OfficialTemplatesRenderExactlyLikeJinja2) {
  const Json sources = read_json(data_dir / "jinja_templates.json");
  ASSERT_GE(sources["official"].size(), 14u);
  std::map<std::string, JinjaChatTemplate> templates;
  for (const auto& [name, entry] : sources["official"].items()) {
    const auto token = [&](const char* key) {
      return entry[key].is_null() ? std::nullopt : std::optional<std::string>(entry[key].get<std::string>());
    };
    JinjaChatTemplate chat_template(entry["template"].get<std::string>(), token("bos_token"), token("eos_token"));
    chat_template.set_fixed_now(fixed_now());
    templates.emplace(name, std::move(chat_template));
  }
  std::size_t count = 0;
  std::set<std::string> covered;
  for (const auto& row : read_jsonl(data_dir / "jinja.golden.jsonl")) {
    if (!row.contains("template")) continue;
    const auto& chat_template = templates.at(row["template"].get<std::string>());
    covered.insert(row["template"].get<std::string>());
    expect_matches_golden(row, [&] {
      return chat_template.render_json(row["messages"], row["add_generation_prompt"].get<bool>(), row["context"]);
    });
    ++count;
  }
  EXPECT_GE(count, 800u);
  EXPECT_EQ(covered.size(), templates.size());
}

TEST(Jinja, SyntheticTemplatesRenderExactlyLikeJinja2) {
  const Json sources = read_json(data_dir / "jinja_templates.json");
  std::size_t count = 0;
  for (const auto& row : read_jsonl(data_dir / "jinja.golden.jsonl")) {
    if (!row.contains("synthetic")) continue;
    const std::string source = sources["synthetic"][row["synthetic"].get<std::string>()].get<std::string>();
    expect_matches_golden(row, [&] { return render(source, row["context"]); });
    ++count;
  }
  EXPECT_GE(count, 40u);
}

TEST(Jinja, PlainMessagesMatchTheJsonEntryPoint) {
  const Json sources = read_json(data_dir / "jinja_templates.json");
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  Json as_json = Json::array();
  for (const auto& message : messages) as_json.push_back({{"role", message.role}, {"content", message.content}});
  for (const char* name : {"qwen2_5_instruct", "llama3_1_instruct", "qwen3"}) {
    JinjaChatTemplate chat_template(sources["official"][name]["template"].get<std::string>(), "<s>", "</s>");
    chat_template.set_fixed_now(fixed_now());
    for (const bool add_generation_prompt : {false, true}) {
      EXPECT_EQ(chat_template.render(messages, add_generation_prompt), chat_template.render_json(as_json, add_generation_prompt))
          << name;
    }
  }
}

TEST(Jinja, SatisfiesTheChatTemplateConcept) {
  static_assert(ChatTemplate<JinjaChatTemplate>);
  EXPECT_EQ(JinjaChatTemplate::name, "jinja");
  const JinjaChatTemplate chat_template("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ extra }}",
                                        std::nullopt, std::nullopt, Json{{"extra", "!"}});
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  EXPECT_EQ(chat_template.render(messages, true), "[user:hi]!");
  EXPECT_EQ(chat_template.render_json(Json::array(), false, Json{{"extra", "?"}}), "?");
}

TEST(Jinja, SyntaxErrorsNameLineColumnAndExpectation) {
  const auto syntax_error = [](std::string_view source) -> std::string {
    try {
      jinja::Template parsed(source);
    } catch (const jinja::SyntaxError& error) {
      return error.what();
    }
    return "<no error>";
  };
  std::string message = syntax_error("line one\n{% if x %}\nno end");
  EXPECT_TRUE(contains(message, "line 3")) << message;
  EXPECT_TRUE(contains(message, "'endif'")) << message;
  EXPECT_TRUE(contains(message, "'if'")) << message;

  message = syntax_error("{{ 1 + }}");
  EXPECT_TRUE(contains(message, "line 1, column 8")) << message;
  EXPECT_TRUE(contains(message, "expected an expression")) << message;

  message = syntax_error("ab\n  {{ x | nosuchfilter }}");
  EXPECT_TRUE(contains(message, "line 2, column 10")) << message;
  EXPECT_TRUE(contains(message, "unknown filter 'nosuchfilter'")) << message;

  message = syntax_error("{% if x is nosuchtest %}{% endif %}");
  EXPECT_TRUE(contains(message, "unknown test 'nosuchtest'")) << message;

  message = syntax_error("{% for x in y %}{% endif %}");
  EXPECT_TRUE(contains(message, "unknown tag 'endif'")) << message;
  EXPECT_TRUE(contains(message, "'endfor'")) << message;

  for (const char* unsupported : {"{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}",
                                  "{% call m() %}{% endcall %}", "{% do xs.append(1) %}", "{% block b %}{% endblock %}"}) {
    message = syntax_error(unsupported);
    EXPECT_TRUE(contains(message, "not supported")) << unsupported << ": " << message;
  }
  EXPECT_TRUE(contains(syntax_error("{% for x in xs recursive %}{% endfor %}"), "recursive"));
  EXPECT_TRUE(contains(syntax_error("{% break %}"), "outside of a for loop"));
  EXPECT_TRUE(contains(syntax_error("{{ 'unterminated }}"), "unterminated string"));
  EXPECT_TRUE(contains(syntax_error("{# no end"), "missing end of comment"));
  EXPECT_TRUE(contains(syntax_error("{{ x }"), "unexpected '}'"));
  EXPECT_TRUE(contains(syntax_error("{{ x "), "expected '}}'"));
  EXPECT_TRUE(contains(syntax_error("{{ x ]}}"), "unexpected ']'"));
  EXPECT_TRUE(contains(syntax_error("{{ f(*args) }}"), "*args"));
  EXPECT_TRUE(contains(syntax_error("{{ 'a' % 3 if x }}{% frobnicate %}"), "unknown tag 'frobnicate'"));
  EXPECT_EQ(syntax_error("{{ {'a': {'b': 1}} }}"), "<no error>");  // '}}' inside a dict literal
}

TEST(Jinja, UndefinedFollowsJinja2) {
  const Json context = {{"d", {{"a", 1}}}, {"xs", {1, 2}}};
  EXPECT_EQ(render("[{{ nope }}][{{ d.b }}][{{ d['b'] }}][{{ xs[5] }}][{{ nope|default('x') }}]", context), "[][][][][x]");
  EXPECT_EQ(render("{{ nope is defined }} {{ d.b is defined }} {{ d.a is defined }} {{ nope is undefined }}", context),
            "False False True True");
  EXPECT_EQ(render("{% if nope %}yes{% else %}no{% endif %}{{ nope|length }}{{ 'x' ~ nope }}", context), "no0x");
  EXPECT_TRUE(contains(error_of("{{ nope.attr }}", context), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("{{ d.b.c }}", context), "'dict object' has no attribute 'b'"));
  EXPECT_TRUE(contains(error_of("{{ nope + 1 }}", context), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("{{ nope() }}", context), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("line 1\n{{ nope.attr }}", context), "line 2")) << error_of("line 1\n{{ nope.attr }}", context);
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesMessage) {
  const JinjaChatTemplate chat_template(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "{% endfor %}");
  const std::vector<ChatMessage> messages = {{"system", "x"}};
  try {
    (void)chat_template.render(messages, false);
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& error) {
    EXPECT_TRUE(contains(error.what(), "System role not supported")) << error.what();
  }
}

TEST(Jinja, LoopsNamespacesAndMacros) {
  EXPECT_EQ(render("{% for a, b in [(1, 2), (3, 4)] %}{{ loop.index }}:{{ a * b }}{{ ',' if not loop.last }}{% endfor %}"),
            "1:2,2:12");
  EXPECT_EQ(render("{% set ns = namespace(total=0) %}{% for x in range(5) %}{% set ns.total = ns.total + x %}{% endfor %}"
                   "{{ ns.total }}"),
            "10");
  EXPECT_EQ(render("{% macro tag(name, body='') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('b', 'x') }}"
                   "{{ tag(body='y', name='i') }}{{ tag('br') }}"),
            "<b>x</b><i>y</i><br></br>");
  EXPECT_TRUE(contains(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "takes not more than 1 argument"));
  EXPECT_TRUE(contains(error_of("{% set x = 1 %}{% set x.attr = 2 %}"), "non-namespace"));
}

TEST(Jinja, FiltersAndTests) {
  EXPECT_EQ(render("{{ [{'n': 'b'}, {'n': 'a'}] | sort(attribute='n') | map(attribute='n') | join }}"), "ab");
  EXPECT_EQ(render("{{ {'k': 'é', 'l': [1.0, none]} | tojson }}"), "{\"k\": \"é\", \"l\": [1.0, null]}");
  EXPECT_EQ(render("{{ {'k': 1} | tojson(indent=2) }}"), "{\n  \"k\": 1\n}");
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e20 }} {{ 0.5 }} {{ none }} {{ [1, 'a'] }}"), "1.0 1e+20 0.5 None [1, 'a']");
  EXPECT_EQ(render("{{ 4 is even }} {{ 'x' is string }} {{ {} is mapping }} {{ 3 is divisibleby 3 }}"), "True True True True");
  EXPECT_TRUE(contains(error_of("{{ [1, 2] | map('upper') }}"), "generator"));  // Python would print an address
}

TEST(Jinja, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep_expression = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_THROW(jinja::Template parsed(deep_expression), jinja::SyntaxError);
  std::string deep_blocks;
  for (int i = 0; i < 3000; ++i) deep_blocks += "{% if true %}";
  for (int i = 0; i < 3000; ++i) deep_blocks += "{% endif %}";
  EXPECT_THROW(jinja::Template parsed(deep_blocks), jinja::SyntaxError);
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) long_chain += " + 1";
  EXPECT_THROW(jinja::Template parsed(long_chain + " }}"), jinja::SyntaxError);
  EXPECT_TRUE(contains(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "nested deeper"));
  Json deep = Json::array();
  for (int i = 0; i < 600; ++i) deep = Json::array({std::move(deep)});
  EXPECT_THROW((void)jinja::from_json(deep), InvalidArgument);
}

TEST(Jinja, StrftimeNowUsesTheFixedTime) {
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}"), "14 Mar 2025");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
}
