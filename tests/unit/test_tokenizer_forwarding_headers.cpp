// Headers that moved keep working for one release: each old path forwards to the new one (and says
// so in a #pragma message), and the tokenizer types keep their old verl::model names.
#include <type_traits>

#include "verl/algo/advantage_estimator.hpp"
#include "verl/algo/advantage_registry.hpp"
#include "verl/algo/entropy.hpp"
#include "verl/algo/kl_controller.hpp"
#include "verl/algo/kl_estimator.hpp"
#include "verl/algo/kl_penalty.hpp"
#include "verl/algo/kl_registry.hpp"
#include "verl/algo/kl_rewards.hpp"
#include "verl/algo/logprob.hpp"
#include "verl/algo/logprob_entropy.hpp"
#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_loss_registry.hpp"
#include "verl/model/tokenizer/added_vocabulary.hpp"
#include "verl/model/tokenizer/bpe_model.hpp"
#include "verl/model/tokenizer/char_tokenizer.hpp"
#include "verl/model/tokenizer/chat_message.hpp"
#include "verl/model/tokenizer/chat_template.hpp"
#include "verl/model/tokenizer/concept.hpp"
#include "verl/model/tokenizer/decoder.hpp"
#include "verl/model/tokenizer/hf_tokenizer.hpp"
#include "verl/model/tokenizer/jinja/ast.hpp"
#include "verl/model/tokenizer/jinja/builtins.hpp"
#include "verl/model/tokenizer/jinja/filters.hpp"
#include "verl/model/tokenizer/jinja/interpreter.hpp"
#include "verl/model/tokenizer/jinja/lexer.hpp"
#include "verl/model/tokenizer/jinja/parser.hpp"
#include "verl/model/tokenizer/jinja/python.hpp"
#include "verl/model/tokenizer/jinja/strings.hpp"
#include "verl/model/tokenizer/jinja/template.hpp"
#include "verl/model/tokenizer/jinja/value.hpp"
#include "verl/model/tokenizer/jinja_chat_template.hpp"
#include "verl/model/tokenizer/normalizer.hpp"
#include "verl/model/tokenizer/pre_tokenizer.hpp"
#include "verl/model/tokenizer/pretrained.hpp"
#include "verl/trainer/optim/adamw.hpp"
#include "verl/trainer/optim/clip_grad_norm.hpp"
#include "verl/trainer/optim/lr_schedule.hpp"
#include "verl/trainer/optim/lr_scheduler.hpp"
#include "verl/trainer/optim/optimizer.hpp"
#include "verl/trainer/optim/optimizer_step.hpp"
#include "verl/trainer/optim/parameter.hpp"
#include "verl/trainer/optim/schedules.hpp"

#include <gtest/gtest.h>

#include "verl/optim.hpp"
#include "verl/tokenizer.hpp"
#include "verl/algo.hpp"

static_assert(std::is_same_v<verl::model::HfTokenizer, verl::tokenizer::HfTokenizer>);
static_assert(std::is_same_v<verl::model::ChatMessage, verl::tokenizer::ChatMessage>);
static_assert(std::is_same_v<verl::model::jinja::Value, verl::tokenizer::jinja::Value>);

TEST(ForwardingHeaders, OldPathsReachTheMovedDeclarations) {
  // The old paths compile and declare what they declared before (checked above at compile time).
  const verl::model::ChatMessage message{"user", "hi"};
  EXPECT_EQ(message.content, "hi");
  EXPECT_EQ(verl::algo::kl_penalty(verl::MatrixF::Zero(1, 1), verl::MatrixF::Zero(1, 1), "k1")(0, 0), 0.0f);
}
