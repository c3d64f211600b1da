// The one JSON writer (io/json.hpp): string literals always valid UTF-8 with every control
// character escaped, numbers in their shortest exact form with non-finite ones as null, and
// the writer's commas, colons and nesting, including its refusal of misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "pipesched/io/json.hpp"

namespace test_json {

namespace json = pipesched::json;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

}  // namespace

TEST(JsonQuoted, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json::quoted("plain"), "\"plain\"");
  EXPECT_EQ(json::quoted(""), "\"\"");
  EXPECT_EQ(json::quoted("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(json::quoted("\n\r\t"), "\"\\n\\r\\t\"");
  EXPECT_EQ(json::quoted(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  // A NUL inside the text is a character like any other, not its end.
  EXPECT_EQ(json::quoted(std::string("a\0b", 3)), "\"a\\u0000b\"");
  // No raw byte below 0x20 is left in any escaped text.
  std::string all;
  for (int c = 0; c < 0x20; ++c)
    all += static_cast<char>(c);
  const std::string q = json::quoted(all);
  for (char c : q)
    EXPECT_GE(static_cast<unsigned char>(c), 0x20) << q;
}

TEST(JsonQuoted, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json::quoted("\xC2\xB7 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"\xC2\xB7 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  // A Latin-1 file name (0xE9 is 'é' there) and other bytes that are not UTF-8.
  EXPECT_EQ(json::quoted("caf\xE9.csv"), "\"caf" + fffd + ".csv\"");
  EXPECT_EQ(json::quoted("\xff\xfe"), "\"" + fffd + fffd + "\"");
  EXPECT_EQ(json::quoted("\xC0\xAF"), "\"" + fffd + fffd + "\"");             // overlong '/'
  EXPECT_EQ(json::quoted("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");  // surrogate
  EXPECT_EQ(json::quoted("\xF4\x90\x80\x80"), "\"" + fffd + fffd + fffd + fffd + "\"");  // > 10FFFF
  EXPECT_EQ(json::quoted("x\xE2\x82"), "\"x" + fffd + fffd + "\"");  // cut short
  // The replacement is not mistaken for a quote or an escape.
  EXPECT_EQ(json::quoted("\xff\""), "\"" + fffd + "\\\"\"");
}

TEST(JsonNumber, ShortestExactFormAndNullForNonFinite) {
  EXPECT_EQ(json::number(0), "0");
  EXPECT_EQ(json::number(-0.0), "0");
  EXPECT_EQ(json::number(3), "3");
  EXPECT_EQ(json::number(0.1), "0.1");
  EXPECT_EQ(json::number(-2.5), "-2.5");
  EXPECT_EQ(json::number(1e300), "1e+300");
  EXPECT_EQ(json::number(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(json::number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json::number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json::number(std::nan("")), "null");
  // Every finite double reads back as itself.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t bits = rng();
    double v;
    static_assert(sizeof v == sizeof bits);
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    const std::string text = json::number(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

TEST(JsonWriter, CompactAndSpacedNesting) {
  json::Writer w;
  w.begin_object()
      .field("name", "1f1b")
      .field("ranks", 4)
      .field("ratio", 0.25)
      .field("ok", true)
      .field("budget", nullptr)
      .key("list")
      .begin_array()
      .value(1)
      .value("two")
      .begin_object()
      .end_object()
      .begin_array()
      .end_array()
      .end_array()
      .end_object();
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.take(),
            "{\"name\":\"1f1b\",\"ranks\":4,\"ratio\":0.25,\"ok\":true,\"budget\":null,"
            "\"list\":[1,\"two\",{},[]]}");
  EXPECT_FALSE(w.complete());  // empty again

  json::Writer spaced(true);
  spaced.begin_object().field("a", 1).key("b").begin_array().value(2).value(3);
  spaced.end_array().end_object();
  EXPECT_EQ(spaced.take(), "{\"a\": 1, \"b\": [2, 3]}");
}

TEST(JsonWriter, ValuesOfEveryKind) {
  json::Writer w;
  const std::string s = "str";
  const std::size_t big = 12345678901234u;
  w.begin_array()
      .value(s)
      .value(std::string_view("view"))
      .value(static_cast<long long>(-5))
      .value(big)
      .value(false)
      .value(1.5f)
      .value(std::numeric_limits<double>::quiet_NaN())
      .raw("1500.25")
      .end_array();
  EXPECT_EQ(w.take(), "[\"str\",\"view\",-5,12345678901234,false,1.5,null,1500.25]");
  // Keys are escaped like values.
  json::Writer k;
  k.begin_object().field("a\"\xff", 1).end_object();
  EXPECT_EQ(k.take(), "{\"a\\\"" + fffd + "\":1}");
}

TEST(JsonWriter, RefusesMisuse) {
  {
    json::Writer w;
    w.begin_object();
    EXPECT_THROW(w.value(1), std::logic_error);  // a value in an object needs a key
  }
  {
    json::Writer w;
    w.begin_array();
    EXPECT_THROW(w.key("a"), std::logic_error);  // no keys in an array
    EXPECT_THROW(w.end_object(), std::logic_error);
  }
  {
    json::Writer w;
    w.begin_object().key("a");
    EXPECT_THROW(w.key("b"), std::logic_error);  // two keys in a row
    EXPECT_THROW(w.end_object(), std::logic_error);
  }
  {
    json::Writer w;
    w.begin_object();
    EXPECT_THROW(w.take(), std::logic_error);  // still open
  }
  {
    json::Writer w;
    EXPECT_THROW(w.take(), std::logic_error);  // nothing written
    w.value(1);
    EXPECT_THROW(w.value(2), std::logic_error);  // one top-level value only
  }
  {
    json::Writer w;
    EXPECT_THROW(w.end_array(), std::logic_error);
    EXPECT_THROW(w.key("a"), std::logic_error);
  }
}

}  // namespace test_json
