// expect: THE_MODEL_NEEDS_MAKE_KV_CACHE_RETURNING_A_COPYABLE_CACHE
// The KV-cache rollout engine drives models that can decode incrementally.
#include "verl/rollout/kv_cache_rollout.hpp"

struct NoCacheModel {
  verl::Index vocab_size() const { return 8; }
  verl::Index context_length() const { return 64; }
};

int main() {
  NoCacheModel model;
  verl::rollout::KvCacheRollout<NoCacheModel> engine(model);
  (void)engine;
}
