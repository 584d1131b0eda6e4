// The actor's (training, generation) mesh pair as types (trainer/layouts.hpp): valid static pairs
// compile (the invalid ones are tests/compile_fail/trainer_*.cpp), dynamic sizes are checked at run
// time with errors naming the key, the mesh type, the expected and the given value, and the meshes
// built from the keys are the ones the Megatron worker slices into its groups.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "verl/core/error.hpp"
#include "verl/trainer/layouts.hpp"

namespace {

using namespace verl::parallel;
using verl::trainer::LayoutSizes;
using verl::trainer::Layouts;
using verl::trainer::layout_rules;
using verl::trainer::model_heads;
using verl::trainer::StaticHeads;

struct FourHeadsTwoKv {
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
};
struct EightHeads {  // no KV constant: as many KV heads as attention heads
  static constexpr std::int64_t num_attention_heads = 8;
};
struct NoHeads {};
struct Specialised {};

}  // namespace

template <>
struct verl::trainer::model_heads<Specialised> {
  static constexpr std::int64_t attention = 6;
  static constexpr std::int64_t key_value = 1;
};

namespace {

// ---- compile time: the valid pairs --------------------------------------------------------------
static_assert(layout_rules<Mesh<TP<>, DP<>>, Mesh<TP<>, DP<>>>::value);
static_assert(layout_rules<Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>::value);
static_assert(layout_rules<Mesh<TP<4>, DP<2>>, Mesh<TP<2>, DP<4>>>::value);
static_assert(layout_rules<Mesh<TP<4>, DP<>, PP<1>>, Mesh<TP<2>, DP<>>>::value);  // PP<1> is no pipeline
static_assert(layout_rules<Mesh<TP<>, DP<>, PP<>>, Mesh<TP<>, DP<>>>::value);    // PP<>: checked at run time
static_assert(layout_rules<Mesh<PP<1>, TP<2>, DP<>>, Mesh<TP<1>, DP<>>>::value);  // order matters only past size 1
static_assert(layout_rules<Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>>>::value);  // pipeline training, pg = 1
static_assert(layout_rules<Mesh<TP<4>, DP<>>, Mesh<TP<2>, DP<>>, FourHeadsTwoKv>::value);
static_assert(layout_rules<Mesh<TP<8>, DP<>>, Mesh<TP<1>, DP<>>, EightHeads>::value);
static_assert(layout_rules<Mesh<TP<6>, DP<>>, Mesh<TP<3>, DP<>>, Specialised>::value);  // KV copied (6 % 1)

static_assert(StaticHeads<FourHeadsTwoKv> && model_heads<FourHeadsTwoKv>::key_value == 2);
static_assert(StaticHeads<EightHeads> && model_heads<EightHeads>::key_value == 8);
static_assert(StaticHeads<Specialised> && model_heads<Specialised>::attention == 6);
static_assert(!StaticHeads<NoHeads> && !StaticHeads<void>);

template <class L>
std::string error_of(const LayoutSizes& sizes) {
  try {
    (void)L::from_sizes(sizes);
  } catch (const verl::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

constexpr std::string_view tp_key = "actor_rollout_ref.actor.megatron.tensor_model_parallel_size";
constexpr std::string_view tg_key = "actor_rollout_ref.rollout.tensor_model_parallel_size";

TEST(Layouts, DynamicMeshesFromTheKeys) {
  const auto l = Layouts<>::from_sizes({.ranks = 8, .train_tp = 4, .train_pp = 1, .gen_tp = 2});
  EXPECT_EQ(l.train.to_string(), "tp=4,dp=2,pp=1");  // the default training mesh takes pp from the keys too
  EXPECT_EQ(l.generation.to_string(), "tp=2,dp=4");
  // The worker's groups are the mesh's slices: tp fastest, as Megatron lays ranks out.
  EXPECT_EQ(l.train.group(5, AxisKind::tp).to_vector(), (std::vector<std::int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(l.train.group(5, AxisKind::dp).to_vector(), (std::vector<std::int64_t>{1, 5}));
  EXPECT_EQ(l.train.group_index(5, AxisKind::dp), 1);  // the colour: rank 5's tp coordinate
  EXPECT_EQ(l.train.group_index(5, AxisKind::tp), 1);  // its dp coordinate
  EXPECT_EQ(Layouts<>::describe(), "Mesh<TP<>, DP<>, PP<>> -> Mesh<TP<>, DP<>>");
}

TEST(Layouts, StaticSizesMustAgreeWithTheKeys) {
  using L = Layouts<Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
  EXPECT_EQ(L::describe(), "Mesh<TP<2>, DP<>> -> Mesh<TP<1>, DP<>>");
  const auto l = L::from_sizes({.ranks = 4, .train_tp = 2, .train_pp = 1, .gen_tp = 1});
  EXPECT_EQ(l.train.to_string(), "tp=2,dp=2");
  EXPECT_EQ(l.generation.to_string(), "tp=1,dp=4");
  EXPECT_EQ(decltype(l.train.size<AxisKind::tp>())::value, 2);  // still a compile-time size

  EXPECT_EQ(error_of<L>({.ranks = 4, .train_tp = 4, .train_pp = 1, .gen_tp = 1}),
            std::string(tp_key) + ": the worker's training mesh Mesh<TP<2>, DP<>> fixes tp: expected 2, got 4");
  EXPECT_EQ(error_of<L>({.ranks = 4, .train_tp = 2, .train_pp = 1, .gen_tp = 2}),
            std::string(tg_key) + ": the worker's generation mesh Mesh<TP<1>, DP<>> fixes tp: expected 1, got 2");
  using Fixed = Layouts<Mesh<TP<2>, DP<2>>, Mesh<TP<1>, DP<4>>>;
  EXPECT_EQ(error_of<Fixed>({.ranks = 2, .train_tp = 2, .train_pp = 1, .gen_tp = 1}),
            "the actor pool's ranks (trainer.nnodes x trainer.n_gpus_per_node): the worker's training mesh "
            "Mesh<TP<2>, DP<2>> fixes the world size: expected 4, got 2");
  EXPECT_THROW(Fixed::check_ranks(8), verl::InvalidArgument);
  EXPECT_NO_THROW(Fixed::check_ranks(4));
  EXPECT_NO_THROW(Layouts<>::check_ranks(3));
}

TEST(Layouts, TheRulesAtRunTimeNameTheKeys) {
  EXPECT_NE(error_of<Layouts<>>({.ranks = 4, .train_tp = 4, .train_pp = 1, .gen_tp = 3})
                .find(std::string(tg_key) + ": expected a divisor of " + std::string(tp_key) + " = 4, got 3"),
            std::string::npos);
  EXPECT_NE(error_of<Layouts<>>({.ranks = 6, .train_tp = 4, .train_pp = 1, .gen_tp = 1})
                .find(std::string(tp_key) + ": expected a divisor of the actor pool's 6 ranks"),
            std::string::npos);
  // Pipeline parallel training: dp = ranks / (tp pp), the generation over every rank (pg = 1).
  using Pipelined = Layouts<Mesh<TP<>, DP<>, PP<>>>;
  const Pipelined piped = Pipelined::from_sizes({.ranks = 8, .train_tp = 2, .train_pp = 2, .gen_tp = 1});
  EXPECT_EQ(piped.train.size(verl::parallel::AxisKind::tp), 2);
  EXPECT_EQ(piped.train.size(verl::parallel::AxisKind::dp), 2);
  EXPECT_EQ(piped.train.size(verl::parallel::AxisKind::pp), 2);
  EXPECT_EQ(piped.train.coord(5, verl::parallel::AxisKind::pp), 1);  // Megatron's order: pp slowest
  EXPECT_EQ(piped.generation.size(verl::parallel::AxisKind::dp), 8);
  EXPECT_NE(error_of<Pipelined>({.ranks = 3, .train_tp = 1, .train_pp = 2, .gen_tp = 1})
                .find("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size: expected a divisor of the actor "
                      "pool's 3 ranks"),
            std::string::npos);
  EXPECT_NE(error_of<Pipelined>({.ranks = 6, .train_tp = 2, .train_pp = 2, .gen_tp = 1})
                .find(std::string(tp_key) + ": expected a divisor of the actor pool's 6 ranks over "
                      "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size = 2 pipeline stages"),
            std::string::npos);
  // A static PP<2> the keys contradict.
  using FixedPp = Layouts<Mesh<TP<>, DP<>, PP<2>>>;
  EXPECT_NE(error_of<FixedPp>({.ranks = 4, .train_tp = 1, .train_pp = 1, .gen_tp = 1})
                .find("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size: the worker's training mesh "
                      "Mesh<TP<>, DP<>, PP<2>> fixes pp: expected 2, got 1"),
            std::string::npos);
  // The default meshes take pp from the keys too.
  EXPECT_EQ(Layouts<>::from_sizes({.ranks = 4, .train_tp = 1, .train_pp = 2, .gen_tp = 1}).train.size(verl::parallel::AxisKind::pp), 2);
}

TEST(Layouts, TheLoadedModelMustHaveTheDeclaredHeads) {
  using L = Layouts<Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>, FourHeadsTwoKv>;
  EXPECT_NO_THROW(L::check_model_heads(4, 2, "actor_rollout_ref.model.path"));
  try {
    L::check_model_heads(8, 2, "actor_rollout_ref.model.path");
    FAIL() << "expected an error";
  } catch (const verl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("actor_rollout_ref.model.path: the model type declares num_attention_heads = 4 "
                                         "and num_key_value_heads = 2"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("the loaded model has 8 and 2"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((Layouts<Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>, NoHeads>::check_model_heads(8, 2, "x")));
}

}  // namespace
