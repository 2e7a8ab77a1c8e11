// The flight recorder's ring: it keeps the last `capacity` operations in
// order, overwrites the oldest, and prints them as text and JSON.
#include "parallel/flight_recorder.h"

#include <gtest/gtest.h>

#include <string>

namespace trellis {
namespace {

FlightRecord Op(const std::string& group, int64_t seq) {
  FlightRecord record;
  record.group = group;
  record.op = "all_reduce";
  record.seq = seq;
  record.bytes = 16;
  return record;
}

TEST(FlightRecorderTest, KeepsTheLast64InOrderAfterWrapping) {
  FlightRecorder recorder;
  for (int i = 0; i < 100; ++i) {
    const int64_t id = recorder.Begin(Op(i % 2 ? "dp" : "tp", i));
    EXPECT_EQ(id, i);
    if (i != 99) recorder.Finish(id);
  }
  const std::vector<FlightRecord> records = recorder.Snapshot();
  ASSERT_EQ(records.size(), 64u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].id, static_cast<int64_t>(36 + i));
    EXPECT_EQ(records[i].seq, static_cast<int64_t>(36 + i));
  }
  EXPECT_EQ(records.front().state, FlightRecord::State::kDone);
  EXPECT_EQ(records.back().state, FlightRecord::State::kWaiting);
  EXPECT_EQ(recorder.recorded(), 100);
  // Ids that left the ring are gone; finishing one touches nothing.
  EXPECT_FALSE(recorder.Find(35).has_value());
  recorder.Finish(35);
  EXPECT_EQ(recorder.Find(99)->state, FlightRecord::State::kWaiting);
}

TEST(FlightRecorderTest, PrintsOneLinePerRecordAndJson) {
  FlightRecorder recorder(4);
  for (int i = 0; i < 6; ++i) {
    FlightRecord record = Op("pp", i);
    record.op = "recv";
    record.peer = 3;
    const int64_t id = recorder.Begin(record);
    if (i < 5) recorder.Finish(id);
  }
  const std::string text = recorder.ToText();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_NE(text.find("#2 pp recv seq=2 peer=3 bytes=16 done"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("#5 pp recv seq=5 peer=3 bytes=16 waiting"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("#1 "), std::string::npos) << text;

  const nlohmann::json json = nlohmann::json::parse(recorder.ToJson().dump());
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), 4u);
  EXPECT_EQ(json[0]["id"], 2);
  EXPECT_EQ(json[0]["group"], "pp");
  EXPECT_EQ(json[0]["op"], "recv");
  EXPECT_EQ(json[0]["peer"], 3);
  EXPECT_EQ(json[0]["bytes"], 16);
  EXPECT_EQ(json[0]["seq"], 2);
  EXPECT_EQ(json[0]["state"], "done");
  EXPECT_GT(json[0]["start_unix_s"].get<double>(), 1.6e9);
  EXPECT_EQ(json[3]["state"], "waiting");
  EXPECT_GE(json[3]["seconds"].get<double>(), 0.0);
}

}  // namespace
}  // namespace trellis
