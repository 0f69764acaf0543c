#pragma once

// What the benchmarks share: the median of repeated runs, and the bare
// simdjson On-Demand walk they are measured against (what it does and why it
// is the fair baseline is at the top of bench_read.cpp).

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string_view>
#include <vector>

namespace bench {

// A positive integer option value (--reps 11); false for anything else.
inline bool parse_int(std::string_view text, int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out > 0;
}

using Clock = std::chrono::steady_clock;

// Median wall time of `run`. What `run` returns is destroyed after the clock
// stops: freeing a result is not part of reading it (the DOM parser's tape is
// not freed either, it is reused).
template <typename F>
double median_ms(int reps, F&& run) {
  {
    [[maybe_unused]] auto warm_up = run();
  }  // page faults, caches, first allocations
  std::vector<double> times;
  times.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    [[maybe_unused]] auto result = run();
    std::chrono::duration<double, std::milli> elapsed = Clock::now() - start;
    times.push_back(elapsed.count());
  }
  std::sort(times.begin(), times.end());
  size_t mid = times.size() / 2;
  return times.size() % 2 == 1 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
}

namespace od = simdjson::ondemand;

// Touches every value below `value`; false on any error.
inline bool touch(od::value value, size_t& count) {
  od::json_type type{};
  if (value.type().get(type)) {
    return false;
  }
  ++count;
  switch (type) {
    case od::json_type::array: {
      od::array array;
      if (value.get_array().get(array)) {
        return false;
      }
      for (auto element : array) {
        od::value v;
        if (element.get(v) || !touch(v, count)) {
          return false;
        }
      }
      return true;
    }
    case od::json_type::object: {
      od::object object;
      if (value.get_object().get(object)) {
        return false;
      }
      for (auto field : object) {
        std::string_view key;
        if (field.unescaped_key().get(key) || !touch(field.value(), count)) {
          return false;
        }
      }
      return true;
    }
    case od::json_type::string: {
      std::string_view s;
      return !value.get_string().get(s);
    }
    case od::json_type::number: {
      od::number n;
      return !value.get_number().get(n);
    }
    case od::json_type::boolean: {
      bool b = false;
      return !value.get_bool().get(b);
    }
    case od::json_type::null: {
      bool is_null = false;
      return !value.is_null().get(is_null) && is_null;
    }
  }
  return false;
}

// Copy, fresh parser, every value touched: the work read_manifest must do.
inline size_t on_demand_walk(std::string_view text) {
  simdjson::padded_string copy(text.data(), text.size());
  od::parser parser;
  od::document doc;
  od::object top;
  if (parser.iterate(copy).get(doc) || doc.get_object().get(top)) {
    return 0;
  }
  size_t count = 0;
  for (auto field : top) {
    std::string_view key;
    if (field.unescaped_key().get(key) || !touch(field.value(), count)) {
      return 0;
    }
  }
  return count;
}

}  // namespace bench
