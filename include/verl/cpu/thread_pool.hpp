// A small persistent thread pool for the reference transformer. Eigen's matrix products are
// single-threaded without OpenMP, so the model splits its work into independent tasks (row blocks
// of a product, (sequence, head) pairs of attention) and runs them here.
//
// Determinism: every task writes its own outputs and the split depends only on the shapes, never
// on the number of threads, so results are bit-identical for any thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/core/threads.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace verl::cpu {

class ThreadPool {
 public:
  /// How long an idle worker (or the caller waiting for workers) polls before sleeping.
  static constexpr std::chrono::microseconds spin_duration{100};

  /// `threads` counts the calling thread too; 0 means verl::default_thread_count()
  /// (VERL_NUM_THREADS, else the CPUs this process may run on).
  explicit ThreadPool(unsigned threads = 0) {
    if (threads == 0) threads = default_thread_count();
    workers_.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) workers_.emplace_back([this] { work_loop(); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  [[nodiscard]] unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  /// Runs task(i) for every i in [0, count) and returns when all are done. The first exception a
  /// task throws is rethrown here (the other tasks still run). A call from inside a task runs
  /// serially on that thread.
  template <class Task>
  void parallel_for(Index count, const Task& task) {
    if (count <= 0) return;
    if (count == 1 || workers_.empty() || inside_task()) {
      for (Index i = 0; i < count; ++i) task(i);
      return;
    }
    std::lock_guard dispatch(dispatch_mutex_);  // one parallel region at a time
    Job job;
    job.call = &invoke<Task>;
    job.task = &task;
    job.count = count;
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();  // no system call when every worker is still spinning
    run_tasks(job);
    // Every task is claimed once the caller's loop ends; wait only for workers still running one.
    // A worker that wakes later finds no job: on a busy machine the caller never waits for a
    // thread the scheduler has not run yet.
    spin_until([&] { return job.active_workers.load(std::memory_order_acquire) == 0; });
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return job.active_workers.load(std::memory_order_relaxed) == 0; });
      job_ = nullptr;
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    void (*call)(const void*, Index) = nullptr;
    const void* task = nullptr;
    Index count = 0;
    std::atomic<Index> next{0};
    // Workers inside run_tasks: changed under mutex_ (so that done_ misses no wake-up), read
    // without it while the caller spins.
    std::atomic<std::size_t> active_workers{0};
    std::exception_ptr error;          // guarded by mutex_
  };

  template <class Task>
  static void invoke(const void* task, Index i) {
    (*static_cast<const Task*>(task))(i);
  }

  /// Polls `ready` for up to spin_duration before the caller blocks on a condition variable.
  /// A model's step is a chain of short parallel regions (a decode step runs about 30, each tens
  /// of microseconds), and a thread woken through the kernel starts late enough to cost a
  /// noticeable share of each; a worker that polls picks the next region up at once. Bounded, so
  /// that an idle pool or an oversubscribed machine loses at most that much of a core per region.
  template <class Ready>
  static void spin_until(const Ready& ready) {
    constexpr int polls_per_clock_read = 64;
    const auto deadline = std::chrono::steady_clock::now() + spin_duration;
    for (;;) {
      for (int i = 0; i < polls_per_clock_read; ++i) {
        if (ready()) return;
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      }
      if (std::chrono::steady_clock::now() >= deadline) return;
    }
  }

  static bool& inside_task() {
    thread_local bool inside = false;
    return inside;
  }

  void run_tasks(Job& job) {
    inside_task() = true;
    for (Index i = job.next.fetch_add(1); i < job.count; i = job.next.fetch_add(1)) {
      try {
        job.call(job.task, i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
    }
    inside_task() = false;
  }

  void work_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_relaxed); });
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
        if (job == nullptr) continue;  // that region is already over
        ++job->active_workers;
      }
      run_tasks(*job);
      {
        std::lock_guard lock(mutex_);
        --job->active_workers;
      }
      done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex dispatch_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Job* job_ = nullptr;
  // Changed under mutex_ (so that wake_ misses no wake-up), read without it while workers poll.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace verl::cpu
