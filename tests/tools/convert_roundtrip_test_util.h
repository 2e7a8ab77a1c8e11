// Helpers of the converter's round-trip tests: run trellis-convert's
// Convert on a checkpoint or model directory, and read a stored tensor of a
// trellis checkpoint back through plain HDF5 (not the checkpoint reader
// under test).
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_CONVERT_ROUNDTRIP_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_CONVERT_ROUNDTRIP_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/hdf5.h"
#include "framework/tensor.h"
#include "tools/convert/convert.h"

namespace trellis::test {

// Converts `input` to format `to` ("hf", "llmc", "trellis", "shards") at
// `output`, optionally to `dtype` and without the optimizer state.
inline absl::StatusOr<ConvertSummary> ConvertTo(
    const std::string& input, const std::string& to, const std::string& output,
    std::optional<DType> dtype = std::nullopt, bool weights_only = false) {
  ConvertOptions o;
  o.input = input;
  o.to = to;
  o.output = output;
  o.dtype = dtype;
  o.weights_only = weights_only;
  return Convert(o);
}

// A stored tensor of a trellis checkpoint, through plain HDF5.
inline std::vector<float> TrellisTensor(const std::string& step_dir,
                                        const std::string& name) {
  absl::StatusOr<hdf5::File> f = hdf5::File::Open(step_dir + "/model.h5");
  EXPECT_TRUE(f.ok()) << f.status();
  absl::StatusOr<hdf5::Dataset> d = f->OpenDataset(name);
  EXPECT_TRUE(d.ok()) << d.status();
  absl::StatusOr<Tensor> t = d->ReadAll(DType::kF32);
  EXPECT_TRUE(t.ok());
  return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_CONVERT_ROUNDTRIP_TEST_UTIL_H_
