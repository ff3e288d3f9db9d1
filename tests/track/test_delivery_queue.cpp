// DeliveryQueue: every point delivered once and in order through transient failures; push() never
// waits for a stuck receiver; finish() gives up at its deadline (cancelling the receiver) instead of
// hanging; a full queue drops and counts; refused batches are dropped and later ones still go; a
// stop signal ends finish()'s wait (a stuck receiver is cancelled) yet leaves a healthy receiver the
// moment it needs for the last points and the run's status. The warnings name where the run's points
// are: a training run's metrics.jsonl with the track-sync command, evaluate's summary.json.
// No timing assertions: a queue that blocked or hung would deadlock the test (ctest's timeout).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "track/delivery_queue.h"
#include "track/run_record.h"

namespace wmtp {
namespace {

std::vector<MlflowMetric> points(int from, int to) {
  std::vector<MlflowMetric> v;
  for (int s = from; s < to; ++s) v.push_back({"train/loss", double(s) / 8, 1000 + s, s});
  return v;
}

// Fails transiently on the calls listed, refuses batches holding key "bad", can be held at a gate.
struct FakeDeliverer : PointDeliverer {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> delivered;  // steps, in delivery order
  std::vector<RunEnd> closes;
  std::set<int> fail_calls;
  int calls = 0;
  bool gate_closed = false, inside = false;
  const std::atomic<bool>* cancel = nullptr;

  void deliver(const std::vector<MlflowMetric>& batch) override {
    std::unique_lock<std::mutex> lock(mu);
    inside = true;
    cv.notify_all();
    while (gate_closed && !cancel->load()) cv.wait_for(lock, std::chrono::milliseconds(10));  // polls, as curl does
    inside = false;
    if (cancel->load()) throw MlflowError("cancelled", true);
    if (fail_calls.count(calls++)) throw MlflowError("server unavailable", true);
    for (const auto& p : batch)
      if (p.key == "bad") throw MlflowError("refused", false, "INVALID_PARAMETER_VALUE");
    for (const auto& p : batch) delivered.push_back(p.step);
  }
  void close(RunEnd end) override {
    std::lock_guard<std::mutex> lock(mu);
    closes.push_back(end);
  }
  void bind_cancel(const std::atomic<bool>* c) override { cancel = c; }
  void open_gate() {
    std::lock_guard<std::mutex> lock(mu);
    gate_closed = false;
    cv.notify_all();
  }
  void wait_inside() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
};

DeliveryOptions fast(size_t batch = 4, size_t capacity = 200000) {
  DeliveryOptions o;
  o.batch = batch;
  o.capacity = capacity;
  o.first_backoff_sec = 0.01;
  o.max_backoff_sec = 0.05;
  return o;
}

TEST(DeliveryQueue, EveryPointOnceInOrderThroughTransientFailures) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  fake->fail_calls = {0, 1, 3, 6};
  DeliveryQueue q(std::move(d), "fake", Logger(), fast());
  for (int i = 0; i < 10; ++i) q.push(points(i * 3, i * 3 + 3));
  const DeliveryQueue::Summary s = q.finish(RunEnd::Finished, 600.0);
  std::vector<int64_t> want;
  for (int i = 0; i < 30; ++i) want.push_back(i);
  EXPECT_EQ(fake->delivered, want);
  EXPECT_EQ(s.delivered, 30u);
  EXPECT_EQ(s.undelivered + s.dropped, 0u);
  EXPECT_TRUE(s.closed);
  ASSERT_EQ(fake->closes.size(), 1u);
  EXPECT_EQ(fake->closes[0], RunEnd::Finished);
}

TEST(DeliveryQueue, PushNeverWaitsAndFinishGivesUpAtItsDeadline) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  fake->gate_closed = true;  // the receiver hangs until cancelled
  DeliveryQueue q(std::move(d), "fake", Logger(), fast());
  q.push(points(0, 1));
  fake->wait_inside();
  for (int i = 1; i < 1000; ++i) q.push(points(i, i + 1));  // the receiver is stuck: these must not wait
  const DeliveryQueue::Summary s = q.finish(RunEnd::Stopped, 0.2);
  EXPECT_TRUE(fake->delivered.empty());
  EXPECT_EQ(s.undelivered, 1000u);
  EXPECT_FALSE(s.closed);
  EXPECT_TRUE(fake->closes.empty());
}

TEST(DeliveryQueue, FullQueueDropsAndCounts) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  fake->gate_closed = true;
  DeliveryQueue q(std::move(d), "fake", Logger(), fast(/*batch=*/1, /*capacity=*/10));
  q.push(points(0, 1));  // taken by the thread, which then waits at the gate
  fake->wait_inside();
  q.push(points(1, 26));  // 10 fit, 15 do not
  fake->open_gate();
  const DeliveryQueue::Summary s = q.finish(RunEnd::Finished, 600.0);
  EXPECT_EQ(s.dropped, 15u);
  EXPECT_EQ(s.delivered, 11u);
  std::vector<int64_t> want;
  for (int i = 0; i < 11; ++i) want.push_back(i);
  EXPECT_EQ(fake->delivered, want);
}

TEST(DeliveryQueue, RefusedBatchIsDroppedLaterOnesGo) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  fake->gate_closed = true;
  DeliveryQueue q(std::move(d), "fake", Logger(), fast(/*batch=*/2));
  q.push(points(0, 2));
  fake->wait_inside();
  q.push({{"bad", 1.0, 1, 2}, {"train/loss", 1.0, 1, 3}});
  q.push(points(4, 6));
  fake->open_gate();
  const DeliveryQueue::Summary s = q.finish(RunEnd::Finished, 600.0);
  EXPECT_EQ(fake->delivered, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_TRUE(s.closed);
}

TEST(DeliveryQueue, AStopSignalEndsTheEndOfRunWait) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  fake->gate_closed = true;  // a server that never answers
  std::atomic<bool> stop{false};
  DeliveryOptions opt = fast();
  opt.stop_requested = [&] { return stop.load(); };
  DeliveryQueue q(std::move(d), "fake", Logger(), opt);
  q.push(points(0, 10));
  fake->wait_inside();
  std::thread signal([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;  // SIGTERM during the wait
  });
  const DeliveryQueue::Summary s = q.finish(RunEnd::Finished, 3600.0);  // an hour without the signal
  signal.join();
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.undelivered, 10u);
  EXPECT_FALSE(s.closed);
  EXPECT_TRUE(fake->delivered.empty());
}

TEST(DeliveryQueue, AfterAStopSignalAHealthyReceiverStillGetsEverything) {
  auto d = std::make_unique<FakeDeliverer>();
  FakeDeliverer* fake = d.get();
  DeliveryOptions opt = fast();
  opt.stop_requested = [] { return true; };  // the run stopped on a signal (exit 75): KILLED must still reach MLflow
  DeliveryQueue q(std::move(d), "fake", Logger(), opt);
  q.push(points(0, 10));
  const DeliveryQueue::Summary s = q.finish(RunEnd::Stopped, 3600.0);
  EXPECT_EQ(s.delivered, 10u);
  EXPECT_TRUE(s.closed);
  EXPECT_FALSE(s.stopped);
  ASSERT_EQ(fake->closes.size(), 1u);
  EXPECT_EQ(fake->closes[0], RunEnd::Stopped);
}

TEST(DeliveryQueue, WarningsSayWhereThePointsAre) {
  RunRecord train{"runs/x", "train-baseline", 2, 0, "", "runs/x/metrics.jsonl"};
  EXPECT_EQ(
      points_kept_note(train, "http://h:5000"),
      "runs/x/metrics.jsonl has every point; bin/track-sync runs/x --mlflow http://h:5000 uploads what is missing");
  RunRecord eval{"out/a", "evaluate", 2, 0, "", "out/a/summary.json"};
  EXPECT_EQ(points_kept_note(eval, "http://h:5000"), "out/a/summary.json has every figure");
  EXPECT_EQ(points_kept_note(RunRecord{"r", "train-baseline", 0, 0, "", ""}), "");

  // The end-of-run warning when the server never took a point.
  auto d = std::make_unique<FakeDeliverer>();
  d->gate_closed = true;  // stuck until cancelled
  FakeDeliverer* fake = d.get();
  DeliveryOptions opt = fast();
  opt.kept_note = points_kept_note(eval, "http://h:5000");
  DeliveryQueue q(std::move(d), "MLflow http://h:5000", Logger(), opt);
  q.push(points(0, 3));
  fake->wait_inside();
  testing::internal::CaptureStderr();
  const DeliveryQueue::Summary s = q.finish(RunEnd::Finished, 0.1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.undelivered, 3u);
  EXPECT_NE(err.find("3 of 3 points not delivered"), std::string::npos) << err;
  EXPECT_NE(err.find("out/a/summary.json has every figure"), std::string::npos) << err;
  EXPECT_EQ(err.find("metrics.jsonl"), std::string::npos) << err;
}

}  // namespace
}  // namespace wmtp
