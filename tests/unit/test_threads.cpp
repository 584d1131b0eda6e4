// Default thread counts: VERL_NUM_THREADS, else the CPUs of the process's affinity mask; and the
// model's thread pool, whose idle workers poll for a while before sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/core/threads.hpp"
#include "verl/cpu/thread_pool.hpp"

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
  verl::cpu::ThreadPool pool;
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
  verl::cpu::ThreadPool pool;
  EXPECT_EQ(pool.size(), 1u);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(verl::available_cpus(), static_cast<unsigned>(CPU_COUNT(&saved)));
#endif
}

TEST(ThreadPool, EveryTaskRunsOnceWhetherTheWorkersArePollingOrAsleep) {
  // Regions back to back find the workers polling; after a pause longer than their polling they
  // sleep and must be woken. Three threads on this machine's cores also oversubscribe it.
  using verl::cpu::ThreadPool;
  ThreadPool pool(3);
  for (int region = 0; region < 600; ++region) {
    const verl::Index count = 1 + region % 17;
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
    pool.parallel_for(count, [&](verl::Index i) { runs[static_cast<std::size_t>(i)].fetch_add(1); });
    for (verl::Index i = 0; i < count; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << region << " " << i;
    if (region % 50 == 49) std::this_thread::sleep_for(3 * ThreadPool::spin_duration);
  }
}

TEST(ThreadPool, ATaskErrorReachesTheCallerAndTheNextRegionStillRuns) {
  verl::cpu::ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(8,
                                 [&](verl::Index i) {
                                   ran.fetch_add(1);
                                   if (i == 5) throw std::runtime_error("task 5");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 8);  // the other tasks still ran
  std::atomic<verl::Index> sum{0};
  pool.parallel_for(100, [&](verl::Index i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, ARegionInsideATaskRunsOnThatThread) {
  verl::cpu::ThreadPool pool(2);
  std::vector<std::atomic<int>> runs(64);
  pool.parallel_for(8, [&](verl::Index outer) {
    const auto thread = std::this_thread::get_id();
    pool.parallel_for(8, [&](verl::Index inner) {
      EXPECT_EQ(std::this_thread::get_id(), thread);
      runs[static_cast<std::size_t>(outer * 8 + inner)].fetch_add(1);
    });
  });
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, APoolDestroyedRightAfterARegionStopsItsPollingWorkers) {
  for (int round = 0; round < 50; ++round) {
    verl::cpu::ThreadPool pool(2);
    std::atomic<int> ran{0};
    pool.parallel_for(4, [&](verl::Index) { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 4);
  }
}

}  // namespace
