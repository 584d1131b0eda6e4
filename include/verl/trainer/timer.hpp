// Wall-clock timing of a trainer's phases into verl's `timing_raw` dictionary: a ScopedTimer
// adds the seconds its scope took to timing_raw[name] (accumulating, as verl's _timer does when
// a phase runs more than once in a step).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

namespace verl::trainer {

/// Phase name ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic",
/// "update_actor", "testing", "save_checkpoint", "step") -> seconds.
using TimingRaw = std::map<std::string, double, std::less<>>;

/// A monotonic stopwatch.
class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  Stopwatch() : start_(Clock::now()) {}
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void restart() { start_ = Clock::now(); }

 private:
  Clock::time_point start_;
};

/// Adds the lifetime of the object to timing_raw[name] (verl's marked_timer / simple_timer).
class ScopedTimer {
 public:
  ScopedTimer(std::string name, TimingRaw& timing_raw) : name_(std::move(name)), timing_raw_(&timing_raw) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() { (*timing_raw_)[name_] += stopwatch_.seconds(); }

 private:
  std::string name_;
  TimingRaw* timing_raw_;
  Stopwatch stopwatch_;
};

/// Runs `f` and adds its duration to timing_raw[name]; returns what f returns.
template <class F>
decltype(auto) timed(std::string name, TimingRaw& timing_raw, F&& f) {
  ScopedTimer timer(std::move(name), timing_raw);
  return std::forward<F>(f)();
}

}  // namespace verl::trainer
