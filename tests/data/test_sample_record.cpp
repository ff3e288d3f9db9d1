// JSONL line parsing: the schema's fields, optional parts, and the message for each kind of bad line.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/sample_record.h"

namespace wmtp {
namespace {

std::string error_of(const std::string& line) {
  try {
    parse_sample_record(line);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    return e.what();
  }
  return "";
}

TEST(SampleRecord, ProblemIdStripsCorrectnessSuffix) {
  EXPECT_EQ(problem_id_from_task_id("1548_C_correct_12"), "1548_C");
  EXPECT_EQ(problem_id_from_task_id("abc_incorrect_0"), "abc");
  EXPECT_EQ(problem_id_from_task_id("abc_correct_"), "abc_correct_");
  EXPECT_EQ(problem_id_from_task_id("abc_correct_x1"), "abc_correct_x1");
  EXPECT_EQ(problem_id_from_task_id("abc_7"), "abc_7");
  EXPECT_EQ(problem_id_from_task_id("HumanEval/3"), "HumanEval/3");
  EXPECT_EQ(problem_id_from_task_id("_correct_1"), "");
}

TEST(SampleRecord, ParsesTheSchema) {
  SampleRecord r = parse_sample_record(
      R"({"instruction":"Do it.","input":"","output":"print(1)\n","task_id":"p1_incorrect_3","is_correct":false,)"
      R"("metadata":{"source":"code_contests","difficulty":7,"has_tests":true,"public_tests":{"input":["1"]},"r":1.5}})");
  EXPECT_EQ(r.instruction, "Do it.");
  EXPECT_EQ(r.output, "print(1)\n");
  EXPECT_EQ(r.task_id, "p1_incorrect_3");
  EXPECT_EQ(r.problem_id, "p1");
  EXPECT_FALSE(r.is_correct);
  EXPECT_EQ(r.difficulty, 7);
  // Simple metadata kept (difficulty has its own column), nested dropped.
  EXPECT_EQ(r.metadata_json, R"({"source":"code_contests","has_tests":true,"r":1.5})");

  SampleRecord m = parse_sample_record(R"({"instruction":"a","output":"b","task_id":"t","is_correct":true})");
  EXPECT_EQ(m.input, "");
  EXPECT_EQ(m.difficulty, kNoDifficulty);
  EXPECT_EQ(m.metadata_json, "{}");
  SampleRecord n = parse_sample_record(
      R"({"instruction":"a","input":null,"output":"b","task_id":"t","is_correct":true,"metadata":{"difficulty":null}})");
  EXPECT_EQ(n.difficulty, kNoDifficulty);
  EXPECT_EQ(parse_sample_record(
                R"({"instruction":"a","output":"b","task_id":"t","is_correct":true,"metadata":{"difficulty":-1}})")
                .difficulty,
            -1);
}

TEST(SampleRecord, NamesTheProblemOfEachBadLine) {
  const std::string ok_tail = R"("task_id":"t_correct_0","is_correct":true})";
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b",)"), "");
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b",)").find("malformed JSON"), std::string::npos);
  EXPECT_EQ(error_of(R"({"instruction":"a","output":"b",)").find("line 1"), std::string::npos);  // said as "column"
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b",)").find("at column"), std::string::npos);
  EXPECT_NE(error_of("").find("empty line"), std::string::npos);
  EXPECT_NE(error_of("  \r").find("empty line"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a",)" + ok_tail).find("missing field 'output'"), std::string::npos);
  EXPECT_NE(error_of(R"({"output":"a",)" + ok_tail).find("missing field 'instruction'"), std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","is_correct":true})").find("missing field 'task_id'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","task_id":"t"})").find("missing field 'is_correct'"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"instruction":"a","output":7,)" + ok_tail).find("field 'output' must be a string, got integer"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","task_id":"t","is_correct":"yes"})")
                .find("field 'is_correct' must be a boolean, got string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","task_id":"t","is_correct":1})").find("must be a boolean"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"instruction":"a","output":"b","metadata":[],)" + ok_tail).find("'metadata' must be an object"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","metadata":{"difficulty":"7"},)" + ok_tail)
                .find("'metadata.difficulty' must be an integer, got string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","metadata":{"difficulty":2.5},)" + ok_tail)
                .find("'metadata.difficulty' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{\"instruction\":\"a\xff\",\"output\":\"b\"," + ok_tail).find("invalid UTF-8 at byte 18"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"instruction":"a","output":"b","task_id":"","is_correct":true})").find("'task_id' is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace wmtp
