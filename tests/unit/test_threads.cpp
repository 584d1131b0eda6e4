// Default thread counts: VERL_NUM_THREADS, else the CPUs of the process's affinity mask.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

#include "verl/algo/logprob_entropy.hpp"
#include "verl/core/threads.hpp"
#include "verl/model/transformer/detail/thread_pool.hpp"

namespace {

/// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Threads, EnvironmentSetsTheDefaultCount) {
  ScopedEnv env("VERL_NUM_THREADS", "3");
  EXPECT_EQ(verl::default_thread_count(), 3u);
  verl::model::detail::ThreadPool pool;
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(verl::algo::detail::logits_thread_count(0, 1 << 20, 1 << 10), 3u);
}

TEST(Threads, MalformedEnvironmentIsAnErrorNamingTheVariable) {
  for (const char* bad : {"abc", "0", "-2", "4x", "100000"}) {
    ScopedEnv env("VERL_NUM_THREADS", bad);
    try {
      (void)verl::default_thread_count();
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("VERL_NUM_THREADS"), std::string::npos) << message;
      EXPECT_NE(message.find(bad), std::string::npos) << message;
    }
  }
}

TEST(Threads, WithoutEnvironmentTheAffinityMaskCounts) {
  ScopedEnv env("VERL_NUM_THREADS", nullptr);
  EXPECT_GE(verl::available_cpus(), 1u);
  EXPECT_EQ(verl::default_thread_count(), verl::available_cpus());
#if defined(__linux__)
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(verl::available_cpus(), 1u);
  verl::model::detail::ThreadPool pool;
  EXPECT_EQ(pool.size(), 1u);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(verl::available_cpus(), static_cast<unsigned>(CPU_COUNT(&saved)));
#endif
}

}  // namespace
