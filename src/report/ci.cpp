#include "report/html.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// What CI reads: diagnostics as GitHub Actions workflow commands and as
// Markdown tables, with the findings of one kind folded past the first few;
// and the documents of an input error (exit 2) in those formats.

namespace shardplan::report_detail {

namespace {

// GitHub workflow command escaping (actions/toolkit, command.ts).
std::string github_data(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '\r':
        out += "%0D";
        break;
      case '\n':
        out += "%0A";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string github_property(std::string_view s) {
  std::string out;
  for (char c : github_data(s)) {
    switch (c) {
      case ':':
        out += "%3A";
        break;
      case ',':
        out += "%2C";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A Markdown table cell: pipes escaped, newlines as spaces.
std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string_view severity_word(Severity severity) {
  return severity == Severity::error     ? "error"
         : severity == Severity::warning ? "warning"
                                         : "notice";
}

// What a folded finding is listed by: its tensor, else where it points.
std::string finding_name(const Diagnostic& d) {
  if (d.tensor) {
    return quote(*d.tensor);
  }
  return to_string(d.location);
}

// The findings of one kind (severity and code), in order.
struct Kind {
  std::vector<size_t> members;  // indices into diags.items()
};

// Every kind of `diags` and, per diagnostic, its kind and its place in it.
struct Kinds {
  std::vector<Kind> kinds;      // in order of first appearance
  std::vector<size_t> kind_of;  // per diagnostic
  std::vector<size_t> rank;     // per diagnostic: 0 for its kind's first
};

Kinds kinds_of(const Diagnostics& diags) {
  Kinds out;
  std::unordered_map<std::string, size_t> index;
  const std::vector<Diagnostic>& items = diags.items();
  out.kind_of.reserve(items.size());
  out.rank.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Diagnostic& d = items[i];
    std::string key =
        fmt::format("{}\x1f{}", severity_word(d.severity), d.code);
    auto [it, added] = index.try_emplace(std::move(key), out.kinds.size());
    if (added) {
      out.kinds.emplace_back();
    }
    Kind& kind = out.kinds[it->second];
    out.kind_of.push_back(it->second);
    out.rank.push_back(kind.members.size());
    kind.members.push_back(i);
  }
  return out;
}

// Whether a kind of `count` findings is folded: past k_shown_per_kind, when
// folding saves a line (one more would take the summary's place).
bool folds(size_t count) {
  return count > k_shown_per_kind + 1;
}

// A GitHub annotation: `kind` (error, warning, notice) at `loc`, titled
// with the code.
std::string annotation(std::string_view kind,
                       const Location& loc,
                       std::string_view code,
                       std::string_view message) {
  std::vector<std::string> props;
  std::string text(message);
  // Annotations point at files; a flag (--mesh) has none: it leads the
  // message, with its column.
  if (!loc.source.empty() && !loc.source.starts_with("--")) {
    props.push_back("file=" + github_property(loc.source));
    if (loc.line > 0) {
      props.push_back(fmt::format("line={}", loc.line));
      props.push_back(fmt::format("col={}", loc.column));
    }
  } else if (!loc.source.empty()) {
    text = fmt::format("{}: {}", to_string(loc), text);
  }
  props.push_back("title="
                  + github_property(fmt::format("shardplan {}", code)));
  return fmt::format(
      "::{} {}::{}\n", kind, fmt::join(props, ","), github_data(text));
}

// A Markdown table of `rows` (indices into diags.items()).
std::string findings_table(const Diagnostics& diags,
                           const std::vector<size_t>& rows) {
  std::string out = "| code | tensor | where | message |\n|---|---|---|---|\n";
  for (size_t i : rows) {
    const Diagnostic& d = diags.items()[i];
    const std::string where = to_string(d.location);
    out += fmt::format("| `{}` | {} | {} | {} |\n",
                       d.code,
                       d.tensor ? fmt::format("`{}`", md_cell(*d.tensor)) : "",
                       where.empty() ? "" : fmt::format("`{}`", md_cell(where)),
                       md_cell(message_with_hint(d)));
  }
  return out;
}

}  // namespace

std::string github_annotations(const Diagnostics& diags) {
  const Kinds kinds = kinds_of(diags);
  const std::vector<Diagnostic>& items = diags.items();
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Diagnostic& d = items[i];
    const Kind& kind = kinds.kinds[kinds.kind_of[i]];
    const size_t rank = kinds.rank[i];
    if (!folds(kind.members.size()) || rank < k_shown_per_kind) {
      std::string message = message_with_hint(d);
      if (d.tensor && message.find(*d.tensor) == std::string::npos) {
        message = fmt::format("tensor {}: {}", quote(*d.tensor), message);
      }
      out += annotation(severity_word(d.severity), d.location, d.code, message);
      continue;
    }
    if (rank > k_shown_per_kind) {
      continue;  // folded into the summary at the first folded one
    }
    // The rest of the kind, in one annotation at the first of them.
    const size_t rest = kind.members.size() - k_shown_per_kind;
    constexpr size_t k_names = 5;
    std::vector<std::string> names;
    for (size_t m = k_shown_per_kind;
         m < kind.members.size() && names.size() < k_names;
         ++m) {
      std::string name = finding_name(items[kind.members[m]]);
      if (!name.empty()) {
        names.push_back(std::move(name));
      }
    }
    std::string message = fmt::format("and {} more {} {}s",
                                      with_commas(static_cast<int64_t>(rest)),
                                      d.code,
                                      severity_word(d.severity));
    if (!names.empty()) {
      message += fmt::format(": {}", fmt::join(names, ", "));
      if (rest > names.size()) {
        message +=
            fmt::format(" and {} others",
                        with_commas(static_cast<int64_t>(rest - names.size())));
      }
    }
    message += "; shardplan's stderr lists every one";
    out += annotation(severity_word(d.severity), d.location, d.code, message);
  }
  return out;
}

std::string markdown_findings(const Diagnostics& diags) {
  const Kinds kinds = kinds_of(diags);
  const std::vector<Diagnostic>& items = diags.items();
  // A pull request comment holds at most 65,536 characters: the rows of a
  // severity stop at k_max_rows, the rest counted.
  constexpr size_t k_max_rows = 50;
  std::string out;
  for (Severity severity : {Severity::error, Severity::warning}) {
    const size_t count = severity == Severity::error ? diags.error_count()
                                                     : diags.warning_count();
    if (count == 0) {
      continue;
    }
    out += fmt::format("\n### {} ({})\n\n",
                       severity == Severity::error ? "Errors" : "Warnings",
                       with_commas(static_cast<int64_t>(count)));
    size_t rows_left = k_max_rows;
    size_t listed = 0;   // in a table
    size_t counted = 0;  // in a folded kind's "... and N more"
    // The first few of each kind, in order, in one table.
    std::vector<size_t> shown;
    for (size_t i = 0; i < items.size() && rows_left > 0; ++i) {
      const Kind& kind = kinds.kinds[kinds.kind_of[i]];
      if (items[i].severity == severity
          && (!folds(kind.members.size())
              || kinds.rank[i] < k_shown_per_kind)) {
        shown.push_back(i);
        --rows_left;
      }
    }
    out += findings_table(diags, shown);
    listed += shown.size();
    // The rest of each folded kind, collapsed.
    for (const Kind& kind : kinds.kinds) {
      const Diagnostic& first = items[kind.members.front()];
      if (first.severity != severity || !folds(kind.members.size())) {
        continue;
      }
      const size_t rest = kind.members.size() - k_shown_per_kind;
      out += fmt::format(
          "\n<details><summary>{} more <code>{}</code> {}s</summary>\n\n",
          with_commas(static_cast<int64_t>(rest)),
          html(first.code),
          severity_word(severity));
      std::vector<size_t> rows;
      for (size_t m = k_shown_per_kind;
           m < kind.members.size() && rows_left > 0;
           ++m) {
        rows.push_back(kind.members[m]);
        --rows_left;
      }
      if (!rows.empty()) {
        out += findings_table(diags, rows);
        listed += rows.size();
      }
      if (rows.size() < rest) {
        out +=
            fmt::format("\n... and {} more.\n",
                        with_commas(static_cast<int64_t>(rest - rows.size())));
        counted += rest - rows.size();
      }
      out += "\n</details>\n";
    }
    // Beyond the rows, of kinds not folded.
    const size_t unlisted = count - std::min(count, listed + counted);
    if (unlisted > 0) {
      out += fmt::format(
          "\n{} not listed here; shardplan's stderr lists "
          "every one.\n",
          with_commas(static_cast<int64_t>(unlisted)));
    }
  }
  return out;
}

std::string github_input_errors(std::string_view command,
                                const Diagnostics& diags) {
  return github_annotations(diags)
         + fmt::format("shardplan {}: {}; bad input: nothing was checked\n",
                       command,
                       verdict(diags));
}

std::string markdown_input_errors(std::string_view command,
                                  const Diagnostics& diags) {
  return fmt::format(
             "## shardplan {}: :x: bad input\n\nThe inputs could not be "
             "read as given: nothing was checked (exit code 2).\n",
             command)
         + markdown_findings(diags);
}

}  // namespace shardplan::report_detail
