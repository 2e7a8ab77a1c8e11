// tokenizer.json files built to break the reader, most of them first found
// by its fuzz target (tests/fuzz/tokenizer_json_fuzz.cc): each must be
// refused in one line naming what is wrong, or encode within bounds,
// never crash, hang or exhaust memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "tests/data/hf_tokenizer_test_util.h"

namespace trellis {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Status ParseStatus(const json& root) {
  return HfTokenizer::Parse(root.dump(), "test").status();
}

// An id outside the vocabulary went into every encoded text and was read
// past the end of the embedding.
TEST(HfTokenizerHostileTest, PostProcessorIdsMustBeTokens) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["post_processor"]["special_tokens"]["<s>"]["ids"] = {70000};
  EXPECT_THAT(ParseStatus(root).message(),
              AllOf(HasSubstr("post_processor"), HasSubstr("70000"),
                    HasSubstr("not in the vocabulary")));

  root["post_processor"] = {{"type", "RobertaProcessing"},
                            {"cls", {"<s>", 1}},
                            {"sep", {"</s>", 4000000}}};
  EXPECT_THAT(ParseStatus(root).message(), HasSubstr("4000000"));
}

// 5e45 was cast to uint32_t (undefined), 2^32 + 1 truncated to 1 and -1
// wrapped to 2^32 - 1.
TEST(HfTokenizerHostileTest, PostProcessorIdsAreUnsigned32BitIntegers) {
  for (const json& id : {json(5e45), json(1.0), json(-1),
                         json((uint64_t{1} << 32) + 1), json("1")}) {
    SCOPED_TRACE(id.dump());
    json root = json::parse(hf_testing::Llama2StyleJson());
    root["post_processor"]["special_tokens"]["<s>"]["ids"] = {id};
    EXPECT_THAT(ParseStatus(root).message(),
                AllOf(HasSubstr("post_processor.single[0]"),
                      HasSubstr("not an unsigned 32-bit integer")));
    root["post_processor"] = {
        {"type", "BertProcessing"}, {"cls", {"<s>", 1}}, {"sep", {"</s>", id}}};
    EXPECT_THAT(ParseStatus(root).message(),
                HasSubstr("post_processor.sep: token id"));
  }
}

}  // namespace
}  // namespace trellis
