// CRC-32C against the published check values (RFC 3720 B.4 and the "123456789" check), TFRecord
// framing and masking against formulas written here, and the metrics hook: MetricsLog hands each
// record to its sink with the step and time metrics.jsonl records, and says how the run ended.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "test_util.h"
#include "track/crc32c.h"
#include "track/tfrecord.h"
#include "train/metrics.h"

namespace wmtp {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xE3069283u);
  unsigned char buf[32];
  std::memset(buf, 0, 32);
  EXPECT_EQ(crc32c(buf, 32), 0x8A9136AAu);
  std::memset(buf, 0xFF, 32);
  EXPECT_EQ(crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = (unsigned char)i;
  EXPECT_EQ(crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = (unsigned char)(31 - i);
  EXPECT_EQ(crc32c(buf, 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(buf, 0), 0u);
}

TEST(Crc32c, MaskIsRotateRight15PlusConstant) {
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) {
    const uint32_t rot = (c >> 15) | (c << 17);
    EXPECT_EQ(mask_crc32c(c), uint32_t(rot + 0xa282ead8u)) << c;
  }
}

TEST(TfRecord, FramingIsLengthCrcDataCrc) {
  const std::string data = "hello, event";
  const std::string framed = frame_tfrecord(data);
  ASSERT_EQ(framed.size(), 8 + 4 + data.size() + 4);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t((unsigned char)framed[size_t(i)]) << (8 * i);
  EXPECT_EQ(len, data.size());
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t((unsigned char)framed[at + size_t(i)]) << (8 * i);
    return v;
  };
  EXPECT_EQ(le32(8), mask_crc32c(crc32c(framed.data(), 8)));
  EXPECT_EQ(framed.substr(12, data.size()), data);
  EXPECT_EQ(le32(12 + data.size()), mask_crc32c(crc32c(data.data(), data.size())));
}

TEST(TfRecord, WriterNeverOverwrites) {
  const std::string dir = test::scratch_dir("tfrecord_excl");
  const std::string path = dir + "/events.out.tfevents.1.host";
  {
    TfRecordWriter w(path);
    w.write("x");
    w.flush();
  }
  EXPECT_THROW(TfRecordWriter again(path), Error);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, frame_tfrecord("x"));  // the first file is intact
}

struct RecordingSink : MetricsSink {
  std::vector<std::pair<int64_t, double>> writes;
  std::vector<RunEnd>* ends;
  explicit RecordingSink(std::vector<RunEnd>* e) : ends(e) {}
  void write(int64_t step, double t, const MetricValues& v) override {
    writes.emplace_back(step, t);
    EXPECT_EQ(v.size(), 2u);
  }
  void finish(RunEnd end) override { ends->push_back(end); }
};

TEST(MetricsHook, SinkSeesTheJsonlStepAndTimeAndTheEnd) {
  const std::string dir = test::scratch_dir("metrics_hook");
  std::vector<RunEnd> ends;
  RecordingSink* sink = nullptr;
  {
    MetricsLog log(dir, /*writer=*/true);
    auto s = std::make_unique<RecordingSink>(&ends);
    sink = s.get();
    log.set_sink(std::move(s));
    log.write(3, MetricsRecord().set("train/loss", 1.5).set("train/lr", 0.25));
    log.write(4, MetricsRecord().set("train/loss", 1.25).set("train/lr", 0.125));
    std::ifstream in(dir + "/metrics.jsonl");
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i) {
      const json::Value r = json::parse(line);
      ASSERT_LT(i, sink->writes.size());
      EXPECT_EQ(r.at("step").as_int(), sink->writes[i].first);
      EXPECT_EQ(r.at("time").as_double(), sink->writes[i].second);  // bitwise: the same double
    }
    EXPECT_EQ(sink->writes.size(), 2u);
    log.finish(RunEnd::Stopped);
  }  // the destructor does not finish a second time
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0], RunEnd::Stopped);
  {
    MetricsLog log(dir, true);
    log.set_sink(std::make_unique<RecordingSink>(&ends));
  }  // unwound without finish(): an error ended the run
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[1], RunEnd::Failed);
  MetricsLog other_rank(dir, /*writer=*/false);
  other_rank.set_sink(std::make_unique<RecordingSink>(&ends));
  other_rank.finish(RunEnd::Finished);
  EXPECT_EQ(ends.size(), 2u);  // only the writer has a sink
}

}  // namespace
}  // namespace wmtp
