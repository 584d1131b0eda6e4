// Data-parallel gradient all-reduce in buckets, like torch DDP's Reducer: gradients are packed
// into buckets of about `bucket_bytes` and each bucket is reduced with one collective, so that
// many small parameters cost a few large calls instead of many latency-bound ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

/// Consecutive parameters [first, last) reduced together.
struct GradientBucket {
  std::size_t first = 0;
  std::size_t last = 0;
  std::int64_t elements = 0;
  friend bool operator==(const GradientBucket&, const GradientBucket&) = default;
};

/// Splits parameters (in order) into buckets of at most `bucket_bytes`; a parameter larger than
/// that gets a bucket of its own.
inline std::vector<GradientBucket> make_gradient_buckets(std::span<const std::int64_t> numels,
                                                         std::int64_t element_bytes, std::int64_t bucket_bytes) {
  VERL_CHECK_ARG(bucket_bytes > 0, "bucket_bytes: expected a positive size, got {}", bucket_bytes);
  VERL_CHECK_ARG(element_bytes > 0, "element_bytes: expected a positive size, got {}", element_bytes);
  std::vector<GradientBucket> buckets;
  GradientBucket current;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    VERL_CHECK_ARG(numels[i] >= 0, "numels: expected non-negative sizes, got {} for parameter {}", numels[i], i);
    if (current.elements > 0 && (current.elements + numels[i]) * element_bytes > bucket_bytes) {
      buckets.push_back(current);
      current = {i, i, 0};
    }
    current.last = i + 1;
    current.elements += numels[i];
  }
  if (current.last > current.first) buckets.push_back(current);
  return buckets;
}

/// Reduces a fixed list of gradient buffers bucket by bucket, reusing one staging buffer.
template <CommElement T>
class BucketedAllReduce {
 public:
  BucketedAllReduce(std::span<const std::int64_t> numels, std::int64_t bucket_bytes)
      : numels_(numels.begin(), numels.end()),
        buckets_(make_gradient_buckets(numels, static_cast<std::int64_t>(sizeof(T)), bucket_bytes)) {
    std::int64_t largest = 0;
    for (const GradientBucket& b : buckets_) {
      if (b.last - b.first > 1) largest = std::max(largest, b.elements);
    }
    staging_.resize(static_cast<std::size_t>(largest));
  }

  const std::vector<GradientBucket>& buckets() const noexcept { return buckets_; }

  /// All-reduces every gradient in place (avg by default: DP gradients are means over replicas).
  template <Communicator C>
  void operator()(C& comm, std::span<const std::span<T>> gradients, ReduceOp op = ReduceOp::avg) {
    VERL_CHECK_ARG(gradients.size() == numels_.size(), "gradients: expected {} buffers, got {}", numels_.size(),
                   gradients.size());
    for (std::size_t i = 0; i < gradients.size(); ++i) {
      VERL_CHECK_ARG(static_cast<std::int64_t>(gradients[i].size()) == numels_[i],
                     "gradients[{}]: expected length {}, got {}", i, numels_[i], gradients[i].size());
    }
    for (const GradientBucket& b : buckets_) {
      if (b.last - b.first == 1) {
        comm.all_reduce(gradients[b.first], op);  // a lone gradient needs no packing
        continue;
      }
      std::span<T> staging(staging_.data(), static_cast<std::size_t>(b.elements));
      std::size_t at = 0;
      for (std::size_t i = b.first; i < b.last; ++i) {
        std::copy(gradients[i].begin(), gradients[i].end(), staging.begin() + static_cast<std::ptrdiff_t>(at));
        at += gradients[i].size();
      }
      comm.all_reduce(staging, op);
      at = 0;
      for (std::size_t i = b.first; i < b.last; ++i) {
        std::copy_n(staging.begin() + static_cast<std::ptrdiff_t>(at), gradients[i].size(), gradients[i].begin());
        at += gradients[i].size();
      }
    }
  }

 private:
  std::vector<std::int64_t> numels_;
  std::vector<GradientBucket> buckets_;
  std::vector<T> staging_;
};

}  // namespace verl::parallel
