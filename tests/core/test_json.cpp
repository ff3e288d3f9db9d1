// JSON: values round-trip; malformed and hostile input is rejected with a position.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json.h"

namespace wmtp {
namespace {

TEST(Json, ParsesAndDumpsRoundTrip) {
  std::string text =
      R"({"a":1,"b":-2.5,"c":"x\"y\\z\n","d":[true,false,null],"e":{"n":9007199254740993},"f":1e-08,"g":"\u00e9\ud83d\ude00"})";
  json::Value v = json::parse(text);
  EXPECT_EQ(v.at("a").as_int(), 1);
  EXPECT_DOUBLE_EQ(v.at("b").as_double(), -2.5);
  EXPECT_EQ(v.at("c").as_string(), "x\"y\\z\n");
  EXPECT_EQ(v.at("d").as_array().size(), 3u);
  EXPECT_EQ(v.at("e").at("n").as_int(), 9007199254740993LL);  // beyond double precision: kept as int64
  EXPECT_EQ(v.at("g").as_string(), "\xc3\xa9\xf0\x9f\x98\x80");
  json::Value back = json::parse(json::dump(v));
  EXPECT_EQ(json::dump(back), json::dump(v));
  EXPECT_EQ(back.at("f").as_double(), 1e-08);
}

TEST(Json, DoublesRoundTripExactly) {
  for (double d : {0.1, 1.0 / 3.0, 3e-4, 1e300, -2.2250738585072014e-308, 123456789.125}) {
    json::Value v(d);
    EXPECT_EQ(json::parse(json::dump(v)).as_double(), d);
  }
  EXPECT_EQ(json::dump(json::Value(2.0)), "2.0");  // stays a float on the way back
}

TEST(Json, RejectsMalformedInputWithPosition) {
  const char* bad[] = {"{\"a\":1,}",  "[1 2]",   "{\"a\" 1}",  "\"abc",    "tru",
                       "01",          "1.",      "{\"a\":1}}", "",         "[\"\\x\"]",
                       "\"\\ud800\"", "{'a':1}", "[1,]",       "\"a\tb\"", "{\"a\":1,\"a\":2}"};
  for (const char* b : bad) {
    try {
      json::parse(b);
      ADD_FAILURE() << "accepted: " << b;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
    }
  }
}

TEST(Json, RejectsInvalidUtf8AndDeepNesting) {
  EXPECT_THROW(json::parse("\"\xff\""), Error);
  EXPECT_THROW(json::parse("\"\xc0\xaf\""), Error);      // overlong '/'
  EXPECT_THROW(json::parse("\"\xed\xa0\x80\""), Error);  // encoded surrogate
  EXPECT_EQ(json::find_invalid_utf8("ok \xc3\xa9"), std::string::npos);
  EXPECT_EQ(json::find_invalid_utf8("ab\xe2\x82"), 2u);
  std::string deep(100000, '[');
  EXPECT_THROW(json::parse(deep), Error);
}

TEST(Json, TypeErrorsAndMissingKeysNameTheProblem) {
  json::Value v = json::parse(R"({"dim": "4096"})");
  try {
    v.at("dim").as_int();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected integer, got string"), std::string::npos) << e.what();
  }
  try {
    v.at("n_layers");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_layers"), std::string::npos);
  }
  EXPECT_EQ(json::parse("4.0").as_int(), 4);
  EXPECT_THROW(json::parse("4.5").as_int(), Error);
}

}  // namespace
}  // namespace wmtp
