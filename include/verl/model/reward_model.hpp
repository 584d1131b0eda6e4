// The RewardModel concept: verl's model-based reward, one scalar score per sequence read from a
// scalar head at the sequence's last attended token (a Hugging Face *ForSequenceClassification
// checkpoint with one label, as verl's reward-model worker loads it).
//
// forward(TokenBatch, RewardForwardOptions) yields one score per sequence of the batch (a padded
// row, or a packed sequence) and where it was read. A reward model is inference only in verl: it
// has no backward. Weights are exchanged through state_dict() / load_state_dict().
//
// Where the score is read. verl's worker takes, per row, argmax(position_ids * attention_mask):
// with verl's position ids (cumsum(mask) - 1 clipped at 0) that is the last attended token of
// every row holding two or more tokens. We read the last attended token of every sequence; the
// two differ only for a row with a single attended token, where the product is all zeros and
// verl's argmax falls on column 0 (a padding slot when the token is elsewhere: verl then reads 0
// with use_remove_padding and a padded position's output without). A sequence without tokens has
// no score and is an error.
//
// transformers' *ForSequenceClassification.forward pools differently: it ignores the attention
// mask and takes the rightmost column whose input id differs from config.pad_token_id (column -1
// when pad_token_id is null, which it refuses for batches of more than one row). The two rules
// pick the same token exactly when every column after the last attended token holds the config's
// pad id and the last attended token does not. verl pads with the policy tokenizer's pad id, so
// they part when (1) that id is not the reward model's config.pad_token_id (transformers then
// scores a padding column), or (2) the reward model's pad id is also its eos id and the response
// ends in eos (Llama-3-style reward models): transformers scores the token before the trailing
// eos, verl (and we) the eos itself. tests/data/models/tiny-*-rm record both for case (2).
#pragma once

#include <concepts>
#include <cstdint>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/model/causal_lm.hpp"

namespace verl::model {

struct RewardForwardOptions {
  /// Also report the head's output at every token (what a sequence's score would be had it ended
  /// there), in the batch layout: for inspection and tests.
  bool return_token_scores = false;
};

template <class Scalar>
struct RewardOutput {
  Vector<Scalar> scores;             ///< one per sequence of the batch (num_sequences())
  std::vector<std::int64_t> slots;   ///< the layout slot (row * cols + col) each score was read at
  RowMatrix<Scalar> token_scores;    ///< (rows, cols), 0 at padding; empty unless requested
};

/// The layout slot of each sequence's last token: the position a reward model scores (see above).
/// Throws verl::InvalidArgument naming a sequence without tokens.
inline std::vector<std::int64_t> last_token_slots(const TokenBatch& batch) {
  const auto cu = batch.cu_seqlens();
  const auto slots = batch.slots();
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch.num_sequences()));
  for (std::size_t s = 0; s < out.size(); ++s) {
    VERL_CHECK_ARG(cu[s + 1] > cu[s],
                   "batch: sequence {} has no attended token, so it has no last token to score (expected at least "
                   "one per {})",
                   s, batch.is_packed() ? "packed sequence" : "row");
    out[s] = slots[static_cast<std::size_t>(cu[s + 1] - 1)];
  }
  return out;
}

/// verl's token-level rm_scores of a padded batch whose last `response_length` columns are the
/// responses: (rows, response_length), zero but for each row's score on the token it was read at,
/// its last response token. A row whose scored token lies in the prompt (an empty response) is an
/// error: verl's legacy worker would drop its score and 0.9.1's reward loop would write it on the
/// last column, and neither is a reward for a response.
template <class Scalar>
RowMatrix<Scalar> response_token_scores(const TokenBatch& batch, const RewardOutput<Scalar>& output,
                                        Index response_length) {
  VERL_CHECK_ARG(!batch.is_packed(), "batch: expected a padded (B, T) batch (responses are its last columns), got a "
                 "packed one");
  VERL_CHECK_ARG(response_length > 0 && response_length <= batch.cols(),
                 "response_length: expected a value in [1, {}] (the batch's columns), got {}", batch.cols(),
                 response_length);
  VERL_CHECK_ARG(output.scores.size() == batch.rows() && static_cast<Index>(output.slots.size()) == batch.rows(),
                 "output: expected {} scores and slots (one per row), got {} and {}", batch.rows(),
                 output.scores.size(), output.slots.size());
  RowMatrix<Scalar> out = RowMatrix<Scalar>::Zero(batch.rows(), response_length);
  const Index first_response_column = batch.cols() - response_length;
  for (Index r = 0; r < batch.rows(); ++r) {
    const Index column = output.slots[static_cast<std::size_t>(r)] - r * batch.cols();
    VERL_CHECK_ARG(column >= first_response_column && column < batch.cols(),
                   "output: row {} was scored at column {}, before its response (columns {} to {}): its response is "
                   "empty",
                   r, column, first_response_column, batch.cols() - 1);
    out(r, column - first_response_column) = output.scores[r];
  }
  return out;
}

namespace detail {

template <class M>
concept has_reward_forward = declares_scalar_type<M> && requires(M& model, const TokenBatch& batch,
                                                                 const RewardForwardOptions& options) {
  { model.forward(batch, options) } -> std::same_as<RewardOutput<typename M::scalar_type>>;
};

}  // namespace detail

/// A reward model: forward(TokenBatch, RewardForwardOptions) -> RewardOutput (one score per
/// sequence); state_dict() and load_state_dict() as for CausalLM. No backward: verl never trains it.
template <class M>
concept RewardModel = detail::declares_scalar_type<M> && detail::has_reward_forward<M> && detail::has_state_dict<M>;

/// Named diagnostics for a type meant to be a RewardModel.
template <class M>
consteval bool check_reward_model() {
  VERL_STATIC_ASSERT(detail::declares_scalar_type<M>, THE_MODEL_MUST_DECLARE_ITS_SCALAR_TYPE);
  VERL_STATIC_ASSERT(detail::has_reward_forward<M>, THE_REWARD_MODEL_NEEDS_FORWARD_RETURNING_ONE_SCORE_PER_SEQUENCE);
  VERL_STATIC_ASSERT(detail::has_state_dict<M>, THE_MODEL_NEEDS_STATE_DICT_AND_LOAD_STATE_DICT);
  return true;
}

}  // namespace verl::model
