#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// Folding per-tensor rows across layers for text output (plan, reshard).

namespace shardplan {

namespace {

// A name split at its dots; an integer component also holds its value(s).
// `word` views the input row's name, which outlives the fold.
struct Part {
  std::string_view word;        // the component, when not a number
  std::vector<int64_t> values;  // the number(s), sorted; empty for a word
};

struct Row {
  std::vector<Part> parts;
  std::string_view rest;  // views the input row
  size_t count = 1;
};

// An integer component: digits only, no leading zero, fits comfortably.
bool parse_number(std::string_view text, int64_t& value) {
  if (text.empty() || text.size() > 18 || (text.size() > 1 && text[0] == '0')) {
    return false;
  }
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

std::vector<Part> split(std::string_view name) {
  std::vector<Part> parts;
  size_t start = 0;
  for (;;) {
    size_t dot = name.find('.', start);
    std::string_view part = name.substr(start, dot == std::string_view::npos ? dot : dot - start);
    Part p;
    int64_t value = 0;
    if (parse_number(part, value)) {
      p.values.push_back(value);
    } else {
      p.word = part;
    }
    parts.push_back(std::move(p));
    if (dot == std::string_view::npos) {
      break;
    }
    start = dot + 1;
  }
  return parts;
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

// Appends the name, with part `skip` (if any) left as a placeholder.
void render_to(const std::vector<Part>& parts, size_t skip, std::string& out) {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      out += '.';
    }
    if (i == skip) {
      out += '\x1f';
    } else if (parts[i].values.empty()) {
      out += parts[i].word;
    } else {
      render_values(parts[i].values, out);
    }
  }
}

std::string render(const std::vector<Part>& parts) {
  std::string out;
  render_to(parts, SIZE_MAX, out);
  return out;
}

// The index of the k-th numeric part from the right (k = 0 the last), or
// SIZE_MAX.
size_t numeric_part(const std::vector<Part>& parts, size_t k) {
  for (size_t i = parts.size(); i-- > 0;) {
    if (!parts[i].values.empty() && k-- == 0) {
      return i;
    }
  }
  return SIZE_MAX;
}

}  // namespace

std::vector<FoldedRow> fold_rows(const std::vector<NameRow>& input) {
  std::vector<Row> rows;
  rows.reserve(input.size());
  size_t passes = 0;
  for (const NameRow& r : input) {
    Row row{split(r.name), r.rest, 1};
    passes = std::max<size_t>(
        passes, static_cast<size_t>(std::count_if(row.parts.begin(), row.parts.end(),
                                                  [](const Part& p) { return !p.values.empty(); })));
    rows.push_back(std::move(row));
  }
  for (size_t k = 0; k < passes; ++k) {
    std::vector<Row> merged;
    merged.reserve(rows.size());
    std::unordered_map<std::string, size_t> group_of;
    group_of.reserve(rows.size());
    std::string key;
    for (Row& row : rows) {
      const size_t at = numeric_part(row.parts, k);
      if (at == SIZE_MAX) {
        merged.push_back(std::move(row));
        continue;
      }
      key.clear();
      render_to(row.parts, at, key);
      key += '\x1e';
      key += row.rest;
      auto [slot, inserted] = group_of.try_emplace(key, merged.size());
      if (inserted) {
        merged.push_back(std::move(row));
        continue;
      }
      Row& into = merged[slot->second];
      std::vector<int64_t>& values = into.parts[at].values;
      values.insert(values.end(), row.parts[at].values.begin(), row.parts[at].values.end());
      into.count += row.count;
    }
    for (Row& row : merged) {
      for (Part& part : row.parts) {
        if (part.values.size() > 1) {
          std::sort(part.values.begin(), part.values.end());
          part.values.erase(std::unique(part.values.begin(), part.values.end()),
                            part.values.end());
        }
      }
    }
    rows = std::move(merged);
  }
  std::vector<FoldedRow> out;
  out.reserve(rows.size());
  for (Row& row : rows) {
    out.push_back({render(row.parts), std::string(row.rest), row.count});
  }
  return out;
}

}  // namespace shardplan
