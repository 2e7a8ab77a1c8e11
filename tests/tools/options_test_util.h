// The options the option tests start from: a small model that resolves on
// one rank (TrainOptions::Resolve).
#ifndef TRELLIS_TESTS_TOOLS_OPTIONS_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_OPTIONS_TEST_UTIL_H_

#include "tools/options/options.h"

namespace trellis::test {

inline TrainOptions SmallValidOptions() {
  TrainOptions o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.d_model = 32;
  o.model.seq_len = 16;
  o.data = "tokens.h5";
  o.micro_batch_size = 2;
  o.global_batch_size = 16;
  return o;
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_OPTIONS_TEST_UTIL_H_
