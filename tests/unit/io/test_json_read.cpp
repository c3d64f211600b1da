// The strict JSON reader (io/json_read.hpp): every value kind, escapes with surrogate pairs,
// numbers at the edges of a double, positions of values, the writer's output read back, and
// bad input — truncated, trailing garbage, bad escapes, invalid UTF-8, duplicate keys, deep
// nesting — each refused with a parse_error that names the line, the column and what was
// expected.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"

namespace test_json_read {

namespace json = pipesched::json;
using pipesched::parse_error;

namespace {

// The message of the parse_error reading `text` throws, and its position.
struct Refusal {
  std::string message;
  int line = 0;
  int column = 0;
};

Refusal refusal(const std::string& text) {
  try {
    json::parse(text, "in.json");
  } catch (const parse_error& e) {
    return {e.what(), e.line(), e.column()};
  }
  ADD_FAILURE() << "reading " << text << " did not throw";
  return {};
}

}  // namespace

TEST(JsonRead, ReadsEveryKind) {
  const json::Value v = json::parse(
      R"({"n": null, "t": true, "f": false, "i": -12, "x": 0.5e1, "s": "ab", "a": [1, [], {}],
          "o": {"k": "v"}})");
  ASSERT_EQ(v.kind(), json::Kind::Object);
  ASSERT_EQ(v.object().size(), 8u);
  EXPECT_TRUE(v.find("n")->is_null());
  EXPECT_TRUE(v.find("t")->boolean());
  EXPECT_FALSE(v.find("f")->boolean());
  EXPECT_EQ(v.find("i")->number(), -12);
  EXPECT_TRUE(v.find("i")->is_integer());
  EXPECT_EQ(v.find("x")->number(), 5);
  EXPECT_EQ(v.find("x")->number_text(), "0.5e1");
  EXPECT_EQ(v.find("s")->string(), "ab");
  const auto& a = v.find("a")->array();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1].kind(), json::Kind::Array);
  EXPECT_TRUE(a[1].array().empty());
  EXPECT_TRUE(a[2].object().empty());
  EXPECT_EQ(v.find("o")->find("k")->string(), "v");
  EXPECT_EQ(v.find("missing"), nullptr);
  // Members keep the document's order.
  EXPECT_EQ(v.object().front().key, "n");
  EXPECT_EQ(v.object().back().key, "o");
  // A scalar is a whole JSON text too, with blanks around it.
  EXPECT_EQ(json::parse(" \t\r\n 7 \n").number(), 7);
  EXPECT_EQ(json::parse("\"x\"").string(), "x");
  // A leading byte-order mark is skipped.
  EXPECT_TRUE(json::parse("\xEF\xBB\xBFnull").is_null());
}

TEST(JsonRead, KeepsWhereEachValueStarts) {
  const json::Value v = json::parse("{\n  \"a\": [1,\n    \"\xC3\xA9\", 2]\n}");
  EXPECT_EQ(v.line(), 1);
  EXPECT_EQ(v.column(), 1);
  EXPECT_EQ(v.object()[0].line, 2);
  EXPECT_EQ(v.object()[0].column, 3);
  const auto& a = v.find("a")->array();
  EXPECT_EQ(v.find("a")->line(), 2);
  EXPECT_EQ(v.find("a")->column(), 8);
  EXPECT_EQ(a[1].line(), 3);
  EXPECT_EQ(a[1].column(), 5);
  // Columns count characters: 'é' is two bytes and one column.
  EXPECT_EQ(a[2].column(), 10);
}

TEST(JsonRead, DecodesEveryEscapeAndSurrogatePairs) {
  EXPECT_EQ(json::parse(R"("\" \\ \/ \b \f \n \r \t")").string(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(json::parse(R"("\u00e9\u00E9")").string(), "\xC3\xA9\xC3\xA9");
  EXPECT_EQ(json::parse(R"("\u20ac")").string(), "\xE2\x82\xAC");
  EXPECT_EQ(json::parse(R"("\ud83d\ude00")").string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(json::parse(R"("\uDBFF\uDFFF")").string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(json::parse(R"("a\u0000b")").string(), std::string("a\0b", 3));
  // Raw UTF-8 and DEL pass unchanged.
  EXPECT_EQ(json::parse("\"\xF0\x9F\x98\x80 \x7F\"").string(), "\xF0\x9F\x98\x80 \x7F");
}

TEST(JsonRead, NumbersAtTheEdgesOfADouble) {
  EXPECT_EQ(json::parse("0").number(), 0);
  EXPECT_TRUE(std::signbit(json::parse("-0").number()));
  EXPECT_EQ(json::parse("1.7976931348623157e308").number(), std::numeric_limits<double>::max());
  EXPECT_EQ(json::parse("5e-324").number(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(json::parse("0.1").number(), 0.1);
  EXPECT_EQ(json::parse("1E+2").number(), 100);
  // Below the smallest double a number is zero, keeping its sign; above the largest it is
  // refused (below).
  EXPECT_EQ(json::parse("1e-400").number(), 0);
  EXPECT_TRUE(std::signbit(json::parse("-0.0000001e-400").number()));
  EXPECT_TRUE(json::parse("4.0").is_integer());
  EXPECT_TRUE(json::parse("1e3").is_integer());
  EXPECT_FALSE(json::parse("2.5").is_integer());
  EXPECT_FALSE(json::parse("1e300").is_integer());
  EXPECT_FALSE(json::parse("\"3\"").is_integer());
}

TEST(JsonRead, ReadsBackWhatTheWriterWrites) {
  // Every string the writer can be given (control characters, quotes, UTF-8, bytes that are
  // not UTF-8) reads back as the writer's sanitized text; numbers read back exactly.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k)
      s += static_cast<char>(rng() % 256);
    double d =
        std::ldexp(static_cast<double>(rng()) - 2147483648.0, static_cast<int>(rng() % 200) - 100);
    json::Writer w(round % 2 == 1);
    w.begin_object()
        .field("s", s)
        .field("d", d)
        .field("i", static_cast<long long>(rng()) - 2147483648LL)
        .key("a")
        .begin_array()
        .value(true)
        .value(nullptr)
        .begin_object()
        .end_object()
        .end_array()
        .end_object();
    const std::string text = w.take();
    const json::Value v = json::parse(text);
    EXPECT_EQ(v.find("s")->string(), pipesched::detail::sanitize_utf8(s)) << text;
    EXPECT_EQ(v.find("d")->number(), d) << text;
    EXPECT_TRUE(v.find("i")->is_integer());
    EXPECT_EQ(v.find("a")->array().size(), 3u);
    // Written again from what was read, the text is the same.
    json::Writer again(round % 2 == 1);
    again.begin_object()
        .field("s", v.find("s")->string())
        .field("d", v.find("d")->number())
        .field("i", static_cast<long long>(v.find("i")->number()))
        .key("a")
        .begin_array()
        .value(true)
        .value(nullptr)
        .begin_object()
        .end_object()
        .end_array()
        .end_object();
    EXPECT_EQ(again.take(), text);
  }
}

TEST(JsonRead, RefusesTruncatedInput) {
  EXPECT_EQ(refusal("").message,
            "in.json: line 1, column 1: the input is empty; expected a JSON value (an object, an "
            "array, a string, a number, true, false or null).");
  EXPECT_EQ(refusal("  \n ").message,
            "in.json: line 2, column 2: the input holds only blanks; expected a JSON value (an "
            "object, an array, a string, a number, true, false or null).");
  EXPECT_EQ(refusal(R"({"a": 1)").message,
            "in.json: line 1, column 8: the input ends; expected ',' or '}' in the object.");
  EXPECT_EQ(refusal(R"({"a":)").message,
            "in.json: line 1, column 6: the input ends; expected a JSON value (an object, an "
            "array, a string, a number, true, false or null).");
  EXPECT_EQ(refusal("[1, 2").message,
            "in.json: line 1, column 6: the input ends; expected ',' or ']' in the array.");
  EXPECT_EQ(refusal("{\"a\": \"abc").message,
            "in.json: line 1, column 7: this string is not closed: the input ends before its "
            "closing '\"'.");
  EXPECT_EQ(refusal("tru").message,
            "in.json: line 1, column 1: found 'tru'; expected a JSON value (an object, an array, "
            "a string, a number, true, false or null).");
  EXPECT_EQ(refusal("-").message,
            "in.json: line 1, column 2: the input ends; expected a digit "
            "after '-'.");
  EXPECT_EQ(refusal("1.").message,
            "in.json: line 1, column 3: the input ends; expected a digit after the decimal "
            "point.");
  EXPECT_EQ(refusal("1e+").message,
            "in.json: line 1, column 4: the input ends; expected a digit in the exponent.");
  const Refusal r = refusal("{\n  \"a\": [1,\n");
  EXPECT_EQ(r.line, 3);
  EXPECT_EQ(r.column, 1);
}

TEST(JsonRead, RefusesTrailingGarbageAndNonJson) {
  EXPECT_EQ(refusal("{} x").message,
            "in.json: line 1, column 4: found 'x' after the JSON value; the input holds one "
            "value and nothing after it but blanks.");
  EXPECT_EQ(refusal("1 2").message,
            "in.json: line 1, column 3: found '2' after the JSON value; the input holds one "
            "value and nothing after it but blanks.");
  EXPECT_EQ(refusal("[1,]").message,
            "in.json: line 1, column 4: found ']' after a ','; expected "
            "a value (JSON has no trailing comma).");
  EXPECT_EQ(refusal(R"({"a": 1,})").message,
            "in.json: line 1, column 9: found '}' after a ','; expected a key (JSON has no "
            "trailing comma).");
  EXPECT_EQ(refusal("{a: 1}").message,
            "in.json: line 1, column 2: found 'a'; expected a key (a string in double quotes).");
  EXPECT_EQ(refusal("{'a': 1}").message,
            "in.json: line 1, column 2: found '''; expected a key (a string in double quotes).");
  EXPECT_EQ(refusal(R"({"a" 1})").message,
            "in.json: line 1, column 6: found '1'; expected ':' after the key \"a\".");
  EXPECT_EQ(refusal("[1 2]").message,
            "in.json: line 1, column 4: found '2'; expected ',' or ']' in the array.");
  EXPECT_EQ(refusal("True").message,
            "in.json: line 1, column 1: found 'True'; expected a JSON value (an object, an "
            "array, a string, a number, true, false or null).");
  EXPECT_EQ(refusal("NaN").message.substr(0, 39), "in.json: line 1, column 1: found 'NaN';");
  EXPECT_EQ(refusal("+1").message.substr(0, 37), "in.json: line 1, column 1: found '+';");
  EXPECT_EQ(refusal(".5").message.substr(0, 37), "in.json: line 1, column 1: found '.';");
  EXPECT_EQ(refusal("007").message,
            "in.json: line 1, column 2: found a digit after a leading 0; a JSON number has no "
            "leading zeros (write 7, not 07, or 0.7).");
  EXPECT_EQ(refusal("1e400").message,
            "in.json: line 1, column 1: the number \"1e400\" is out of the range of a double "
            "(magnitudes up to about 1.8e308).");
  EXPECT_EQ(refusal("-123456789012345678901234567890e290").message.substr(0, 40),
            "in.json: line 1, column 1: the number \"-");
  EXPECT_EQ(refusal("[\v1]").message,
            "in.json: line 1, column 2: found a control character (U+000B); expected a JSON "
            "value (an object, an array, a string, a number, true, false or null).");
  EXPECT_EQ(refusal(R"({"a": 1, "b": 2, "a": 3})").message,
            "in.json: line 1, column 18: the key \"a\" appears twice in one object (first at "
            "line 1, column 2); give each key once.");
  // Past a few members the duplicate check uses a map; the message is the same.
  std::string many = "{";
  for (int k = 0; k < 20; ++k)
    many += "\"k" + std::to_string(k) + "\": " + std::to_string(k) + ", ";
  EXPECT_EQ(refusal(many + "\"k3\": 0}").message,
            "in.json: line 1, column 202: the key \"k3\" appears twice in one object (first at "
            "line 1, column 29); give each key once.");
}

TEST(JsonRead, RefusesBadStringsAndEscapes) {
  EXPECT_EQ(refusal(R"("\x")").message,
            "in.json: line 1, column 2: unknown escape '\\x'; JSON's escapes are \\\" \\\\ \\/ "
            "\\b \\f \\n \\r \\t and \\u with four hex digits.");
  EXPECT_EQ(refusal(R"("\u12")").message,
            "in.json: line 1, column 2: the escape \"\\u12\"\" is cut short; \\u takes four hex "
            "digits (\\u00e9).");
  EXPECT_EQ(refusal(R"("\u12g4")").message.substr(0, 44),
            "in.json: line 1, column 2: the escape \"\\u12g");
  EXPECT_EQ(refusal(R"("\ud83d")").message,
            "in.json: line 1, column 2: the escape \\ud83d is a high surrogate without a low "
            "surrogate (\\uDC00 to \\uDFFF) right after it; a character beyond U+FFFF is a pair "
            "such as \\uD83D\\uDE00.");
  EXPECT_EQ(refusal(R"("\ud83d\u0041")").message.substr(0, 64),
            "in.json: line 1, column 2: the escape \\ud83d is a high surrogate");
  EXPECT_EQ(refusal(R"("ab\ude00")").message,
            "in.json: line 1, column 4: the escape \\ude00 is a low surrogate with no high "
            "surrogate (\\uD800 to \\uDBFF) before it; a character beyond U+FFFF is a pair such "
            "as \\uD83D\\uDE00.");
  EXPECT_EQ(refusal("\"a\\").message,
            "in.json: line 1, column 3: the input ends inside an escape; expected a character "
            "after '\\'.");
  EXPECT_EQ(refusal("\"a\nb\"").message,
            "in.json: line 1, column 3: a raw control character (U+000A) inside a string; write "
            "it as the escape \\n.");
  EXPECT_EQ(refusal(std::string("\"a\x01\"")).message,
            "in.json: line 1, column 3: a raw control character (U+0001) inside a string; write "
            "it as the escape \\u0001.");
  EXPECT_EQ(refusal("\"caf\xE9\"").message,
            "in.json: line 1, column 5: byte 0xe9 inside a string is not UTF-8; JSON text is "
            "UTF-8 (write other characters as \\u escapes).");
  EXPECT_EQ(refusal("\"\xED\xA0\x80\"").message.substr(0, 52),
            "in.json: line 1, column 2: byte 0xed inside a string");  // an encoded surrogate
  EXPECT_EQ(refusal("\"\xC0\xAF\"").message.substr(0, 52),
            "in.json: line 1, column 2: byte 0xc0 inside a string");  // overlong
}

TEST(JsonRead, BoundsTheNesting) {
  const std::string deepest = std::string(json::max_depth, '[') + std::string(json::max_depth, ']');
  EXPECT_EQ(json::parse(deepest).kind(), json::Kind::Array);
  EXPECT_EQ(refusal("[" + deepest + "]").message,
            "in.json: line 1, column 257: arrays and objects nest deeper than 256 here; "
            "pipesched reads JSON nested at most that deep.");
  // Hostile depth is refused at the bound, not by the stack.
  std::string hostile;
  for (int k = 0; k < 100000; ++k)
    hostile += "{\"a\":";
  const Refusal r = refusal(hostile);
  EXPECT_EQ(r.line, 1);
  EXPECT_EQ(r.column, 256 * 5 + 1);
}

TEST(JsonRead, ReadingAsTheWrongKindIsABug) {
  const json::Value v = json::parse("[1]");
  EXPECT_THROW((void)v.object(), std::logic_error);
  EXPECT_THROW((void)v.find("a"), std::logic_error);
  EXPECT_THROW((void)v.array()[0].string(), std::logic_error);
  EXPECT_STREQ(json::describe(json::Kind::Object), "an object");
  EXPECT_STREQ(json::describe(json::Kind::Null), "null");
}

// More values than json::max_values is refused by count, before the tree grows past it.
TEST(JsonRead, TooManyValuesAreRefused) {
  std::string text = "[";
  text.reserve(static_cast<std::size_t>(pipesched::json::max_values) * 2 + 8);
  for (long long i = 0; i < pipesched::json::max_values; ++i)
    text += "0,";
  text += "0]";
  try {
    (void)pipesched::json::parse(text, "big.json");
    ADD_FAILURE() << "accepted " << pipesched::json::max_values + 2 << " values";
  } catch (const pipesched::parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4194304 values"), std::string::npos)
        << e.what();
  }
}

}  // namespace test_json_read
