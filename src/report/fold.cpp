#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// Folding per-tensor rows across layers for text output (plan, reshard).
//
// A row is its name as it prints now: the input name, or for a row that has
// absorbed others, the name with sets ("{0..31}") in place of numbers. The
// pass for the k-th numeric component from the right groups rows whose text
// is equal outside that component and whose `rest` is equal; rows are
// compared as text, never split into per-component strings, so that a pass
// over 100k rows allocates nothing per row.

namespace shardplan {

namespace {

// An integer component: digits only, no leading zero, fits comfortably.
bool parse_number(std::string_view text, int64_t& value) {
  if (text.empty() || text.size() > 18 || (text.size() > 1 && text[0] == '0')) {
    return false;
  }
  auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

// "7", or the runs of a set: "{0..2,5,7..9}".
void render_values(const std::vector<int64_t>& values, std::string& out) {
  if (values.size() == 1) {
    out += std::to_string(values[0]);
    return;
  }
  out += '{';
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) {
      ++j;
    }
    if (i > 0) {
      out += ',';
    }
    out += std::to_string(values[i]);
    if (j > i) {
      out += "..";
      out += std::to_string(values[j]);
    }
    i = j + 1;
  }
  out += '}';
}

// Where a numeric component (a number, or a set after a merge) lies in its
// row's text, with a hash of that text and, before any merge, its number.
struct Span {
  size_t begin = 0;
  size_t end = 0;
  uint64_t hash = 0;
  int64_t value = 0;
};

// Combines hashes in order.
uint64_t combine(uint64_t seed, uint64_t h) {
  seed ^= h + 0x9E3779B97F4A7C15ULL + (seed << 6U) + (seed >> 2U);
  return seed;
}

struct Row {
  std::string_view text;
  // A hash of the text with its numeric components left out: rows that may
  // fold have equal skeletons.
  uint64_t skeleton = 0;
  uint32_t rest = 0;  // an id: rows with equal rest text have equal ids
  size_t count = 1;
  // The input rows it stands for, a chain through Folder::m_next from
  // `head` to `tail` (input indices): merging appends a chain, allocating
  // nothing.
  uint32_t head = 0;
  uint32_t tail = 0;
  // The row's numeric components, left to right:
  // m_spans[spans, spans + numerics).
  size_t spans = 0;
  size_t numerics = 0;
  // Once the row has absorbed another: m_values[values, values + numerics),
  // each component's numbers, sorted. Before, each component is one number,
  // its span's value.
  std::optional<size_t> values;
};

class Folder {
 public:
  // Reads the rows and folds their last numeric component as they come
  // (pass 0), so that a row that folds into an earlier one is never stored:
  // 100k rows of a plan keep a few thousand.
  explicit Folder(std::span<const NameRowRef> input) {
    Pass first;
    std::unordered_map<std::string_view, uint32_t, detail::StringHash> rest_ids;
    // Rows often view one string for their rest: known by its address, it
    // is not hashed again.
    std::unordered_map<const char*, uint32_t> rest_at;
    m_next.assign(input.size(), k_end);
    for (const NameRowRef& r : input) {
      Row row;
      row.text = r.name;
      row.head = row.tail = static_cast<uint32_t>(&r - input.data());
      auto seen = rest_at.find(r.rest.data());
      if (seen != rest_at.end()
          && m_rests[seen->second].size() == r.rest.size()) {
        row.rest = seen->second;
      } else {
        row.rest =
            rest_ids.try_emplace(r.rest, static_cast<uint32_t>(m_rests.size()))
                .first->second;
        if (row.rest == m_rests.size()) {
          m_rests.push_back(r.rest);
        }
        rest_at[r.rest.data()] = row.rest;
      }
      row.spans = m_spans.size();
      bool canonical = true;
      // The name's '.'-separated components: one that starts with a digit
      // or a sign is parsed (most do not: "model", "layers", "weight").
      for (size_t start = 0; start <= r.name.size();) {
        size_t end = r.name.find('.', start);
        end = end == std::string_view::npos ? r.name.size() : end;
        const std::string_view part = r.name.substr(start, end - start);
        int64_t value = 0;
        if (!part.empty()
            && ((part[0] >= '0' && part[0] <= '9') || part[0] == '-')
            && parse_number(part, value)) {
          m_spans.push_back({start, end, 0, value});
          // "-07" is the number -7, and prints so.
          canonical =
              canonical && (part[0] != '-' || part == std::to_string(value));
        }
        start = end + 1;
      }
      row.numerics = m_spans.size() - row.spans;
      if (!canonical) {
        print_numbers(row);
      }
      hash_row(row);
      m_passes = std::max(m_passes, row.numerics);
      if (place(row, 0, m_rows, first)) {
        m_spans.resize(
            row.spans);  // its own spans, the last ones, are not needed
      }
    }
    finish(0, m_rows, first);
  }

  std::vector<FoldedRow> run() {
    for (size_t k = 1; k < m_passes; ++k) {
      pass(k);
    }
    std::vector<FoldedRow> out;
    out.reserve(m_rows.size());
    for (const Row& row : m_rows) {
      std::vector<size_t> members;
      members.reserve(row.count);
      for (uint32_t i = row.head; i != k_end; i = m_next[i]) {
        members.push_back(i);
      }
      std::sort(members.begin(), members.end());
      out.push_back({std::string(row.text),
                     std::string(m_rests[row.rest]),
                     row.count,
                     std::move(members)});
    }
    return out;
  }

 private:
  // What a pass keeps while it places rows: groups by a hash of the text
  // outside the component and the rest (a hit is confirmed by comparing the
  // text), and the rows that absorbed others.
  struct Pass {
    std::unordered_multimap<size_t, size_t> groups;
    std::vector<size_t> touched;
  };

  // Folds the k-th numeric component from the right (k = 0 the last).
  void pass(size_t k) {
    std::vector<Row> merged;
    Pass state;
    for (const Row& row : m_rows) {
      place(row, k, merged, state);
    }
    finish(k, merged, state);
    m_rows = std::move(merged);
  }

  // Pass k for `row`: merges it into the row of `merged` it equals outside
  // its k-th numeric component from the right, or appends it. True when it
  // merged.
  bool place(const Row& row, size_t k, std::vector<Row>& merged, Pass& state) {
    if (k >= row.numerics) {
      merged.push_back(row);
      return false;
    }
    const size_t j = row.numerics - 1 - k;
    const Span at = m_spans[row.spans + j];
    const std::string_view before = row.text.substr(0, at.begin);
    const std::string_view after = row.text.substr(at.end);
    // Rows equal outside component j have equal skeletons, rests and other
    // components: hashed from what hash_row kept, not the text.
    uint64_t hash = combine(row.skeleton, row.rest);
    for (size_t i = 0; i < row.numerics; ++i) {
      hash = combine(hash, i == j ? 0 : m_spans[row.spans + i].hash);
    }
    size_t into = SIZE_MAX;
    auto [first, last] = state.groups.equal_range(hash);
    for (auto it = first; it != last; ++it) {
      const Row& g = merged[it->second];
      const Span g_at = m_spans[g.spans + g.numerics - 1 - k];
      if (g.rest == row.rest && g.text.substr(0, g_at.begin) == before
          && g.text.substr(g_at.end) == after) {
        into = it->second;
        break;
      }
    }
    if (into == SIZE_MAX) {
      state.groups.emplace(hash, merged.size());
      merged.push_back(row);
      return false;
    }
    Row& g = merged[into];
    if (!g.values) {
      materialize(g);
    }
    std::vector<int64_t>& values = m_values[*g.values + g.numerics - 1 - k];
    if (m_touched_pass[*g.values]
        != k + 1) {  // the first merge into g in this pass
      m_touched_pass[*g.values] = k + 1;
      state.touched.push_back(into);
    }
    append_values(row, j, values);
    g.count += row.count;
    m_next[g.tail] = row.head;
    g.tail = row.tail;
    return true;
  }

  // After pass k placed every row: the rows that absorbed others printed
  // again.
  void finish(size_t k, std::vector<Row>& merged, const Pass& state) {
    for (size_t index : state.touched) {
      rerender(merged[index], k);
    }
  }

  // Sets row.skeleton (a hash of the texts around its numeric components)
  // and the hash of each numeric component.
  void hash_row(Row& row) {
    uint64_t skeleton = row.numerics;
    size_t from = 0;
    for (size_t i = 0; i < row.numerics; ++i) {
      Span& span = m_spans[row.spans + i];
      span.hash = number_hash(span.value);
      skeleton =
          combine(skeleton,
                  detail::hash_bytes(row.text.substr(from, span.begin - from)));
      from = span.end;
    }
    row.skeleton = combine(skeleton, detail::hash_bytes(row.text.substr(from)));
  }

  // The hash of a component's text when it is one number (printed as a
  // number: equal texts, equal values): its value's 8 bytes hashed, not its
  // digits. A set's text is hashed (see rerender).
  static uint64_t number_hash(int64_t value) {
    return detail::hash_bytes(
        std::string_view(reinterpret_cast<const char*>(&value), sizeof value));
  }

  // Prints `row`'s numbers as numbers ("-07" as "-7"), before any merge.
  void print_numbers(Row& row) {
    std::string text;
    size_t from = 0;
    const size_t spans = m_spans.size();
    for (size_t i = 0; i < row.numerics; ++i) {
      const Span s = m_spans[row.spans + i];
      text += row.text.substr(from, s.begin - from);
      const size_t begin = text.size();
      text += std::to_string(s.value);
      m_spans.push_back({begin, text.size(), 0, s.value});
      from = s.end;
    }
    text += row.text.substr(from);
    row.spans = spans;
    m_texts.push_back(std::move(text));
    row.text = m_texts.back();
  }

  // Gives `row` its own sets of values, one number each from its text.
  void materialize(Row& row) {
    row.values = m_values.size();
    m_touched_pass.resize(m_values.size() + row.numerics, 0);
    for (size_t i = 0; i < row.numerics; ++i) {
      m_values.push_back({m_spans[row.spans + i].value});
    }
  }

  // Appends the values of `row`'s numeric component j to `out`.
  void append_values(const Row& row, size_t j, std::vector<int64_t>& out) {
    if (row.values) {
      const std::vector<int64_t>& own = m_values[*row.values + j];
      out.insert(out.end(), own.begin(), own.end());
      return;
    }
    out.push_back(m_spans[row.spans + j].value);
  }

  // After a pass merged rows into `row`: its set for the k-th numeric
  // component from the right sorted, and its text printed again.
  void rerender(Row& row, size_t k) {
    const size_t j = row.numerics - 1 - k;
    std::vector<int64_t>& values = m_values[*row.values + j];
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    const Span at = m_spans[row.spans + j];
    std::string text(row.text.substr(0, at.begin));
    render_values(values, text);
    const size_t end = text.size();
    text += row.text.substr(at.end);
    // New spans: those after j shift by the change in length.
    const size_t spans = m_spans.size();
    for (size_t i = 0; i < row.numerics; ++i) {
      Span s = m_spans[row.spans + i];
      if (i == j) {
        s.end = end;
        // Rows with equal names merge into a set of one value, which
        // prints as a number: hashed as one.
        s.hash = values.size() == 1
                     ? number_hash(values[0])
                     : detail::hash_bytes(std::string_view(text).substr(
                         at.begin, end - at.begin));
      } else if (i > j) {
        s.begin = s.begin + end - at.end;
        s.end = s.end + end - at.end;
      }
      m_spans.push_back(s);
    }
    row.spans = spans;
    m_texts.push_back(std::move(text));
    row.text = m_texts.back();
  }

  std::vector<Row> m_rows;
  std::vector<std::string_view> m_rests;  // by id
  std::vector<Span> m_spans;
  std::vector<std::vector<int64_t>> m_values;
  std::vector<size_t>
      m_touched_pass;  // per m_values entry: last pass + 1 that merged into it
  std::deque<std::string> m_texts;  // texts of rows that absorbed others
  size_t m_passes = 0;
  // The member chains of the rows: the next input row of the same folded
  // row, or k_end.
  static constexpr uint32_t k_end = UINT32_MAX;
  std::vector<uint32_t> m_next;
};

}  // namespace

std::vector<FoldedRow> fold_row_refs(std::span<const NameRowRef> rows) {
  return Folder(rows).run();
}

}  // namespace shardplan
