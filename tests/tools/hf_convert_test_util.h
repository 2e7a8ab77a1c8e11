// Helpers of the Hugging Face conversion tests: converting a directory,
// reading config.json, comparing two HF directories tensor by tensor, and
// reading one stored tensor of a trellis checkpoint.
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_HF_CONVERT_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_HF_CONVERT_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/hdf5.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/convert_test_util.h"
#include "tools/convert/convert.h"
#include "tools/convert/hf_files.h"

namespace trellis::test {

inline absl::StatusOr<ConvertSummary> ConvertTo(const std::string& input,
                                                const std::string& to,
                                                const std::string& output,
                                                int64_t max_shard_size = 0) {
  ConvertOptions o;
  o.input = input;
  o.to = to;
  o.output = output;
  o.tokenizer = "byte";
  if (max_shard_size > 0) o.max_shard_size = max_shard_size;
  return Convert(o);
}

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadFile(path), nullptr, false);
}

// Every tensor of two HF directories: same names, dtypes, shapes, bytes.
inline void ExpectSameTensors(const std::string& a_dir,
                              const std::string& b_dir) {
  absl::StatusOr<HfSafetensors> a = HfSafetensors::Open(a_dir);
  absl::StatusOr<HfSafetensors> b = HfSafetensors::Open(b_dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<std::string> names = a->names(), b_names = b->names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            std::set<std::string>(b_names.begin(), b_names.end()));
  for (const std::string& name : names) {
    const SafetensorsEntry* e = a->Find(name);
    const SafetensorsEntry* f = b->Find(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->dtype, e->dtype) << name;
    absl::StatusOr<Tensor> x = a->Read(name, e->shape);
    absl::StatusOr<Tensor> y = b->Read(name, e->shape);
    ASSERT_TRUE(x.ok() && y.ok()) << name;
    const std::string xb(static_cast<const char*>(x->raw()), x->nbytes());
    const std::string yb(static_cast<const char*>(y->raw()), y->nbytes());
    EXPECT_EQ(FirstDifference(xb, yb), -1) << name;
  }
}

// A stored tensor of a trellis checkpoint, through plain HDF5.
inline std::vector<float> TrellisTensor(const std::string& step_dir,
                                        const std::string& name) {
  absl::StatusOr<hdf5::File> f = hdf5::File::Open(step_dir + "/model.h5");
  EXPECT_TRUE(f.ok()) << f.status();
  absl::StatusOr<hdf5::Dataset> d = f->OpenDataset(name);
  EXPECT_TRUE(d.ok()) << name << ": " << d.status();
  if (!d.ok()) return {};
  absl::StatusOr<Tensor> t = d->ReadAll(DType::kF32);
  EXPECT_TRUE(t.ok());
  return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_HF_CONVERT_TEST_UTIL_H_
