// TensorBoard's Event protobufs, encoded by hand (no protobuf dependency): only the fields wmtp
// writes. Field numbers from tensorflow/core/util/event.proto and framework/summary.proto:
//   Event        { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary      { repeated Value value = 1; }
//   Value        { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
//   TensorProto  { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8; }
// Scalars are float32 (simple_value): a double from metrics.jsonl is rounded to the nearest float.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

// The first record of every event file: file_version "brain.Event:2".
std::string encode_file_version_event(double wall_time);
// One Event holding every (tag, value) pair as a simple_value at `step`.
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& values);
// A text summary (the text plugin's scalar DT_STRING tensor) at `step`; TensorBoard renders it as Markdown.
std::string encode_text_event(double wall_time, int64_t step, const std::string& tag, const std::string& text);

}  // namespace wmtp
