#include <shardplan/mesh.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

namespace shardplan {

std::string_view to_string(AxisType type) {
  switch (type) {
    case AxisType::automatic:
      return "auto";
    case AxisType::explicit_:
      return "explicit";
    case AxisType::manual:
      return "manual";
  }
  return "auto";
}

std::optional<AxisType> parse_axis_type(std::string_view text) {
  const std::string lower = to_lower(text);
  if (lower == "auto") {
    return AxisType::automatic;
  }
  if (lower == "explicit") {
    return AxisType::explicit_;
  }
  if (lower == "manual") {
    return AxisType::manual;
  }
  return std::nullopt;
}

int64_t Mesh::num_devices() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes) {
    n *= a.size;  // checked when the mesh was built
  }
  return n;
}

int64_t Mesh::num_slices() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes) {
    n *= a.dcn;
  }
  return n;
}

const MeshAxis* Mesh::find(std::string_view name) const {
  for (const MeshAxis& a : axes) {
    if (a.name == name) {
      return &a;
    }
  }
  return nullptr;
}

int64_t Mesh::index_of(std::string_view name) const {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].name == name) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

std::vector<std::string> Mesh::axis_names() const {
  std::vector<std::string> names;
  names.reserve(axes.size());
  for (const MeshAxis& a : axes) {
    names.push_back(a.name);
  }
  return names;
}

std::vector<int64_t> Mesh::shape() const {
  std::vector<int64_t> s;
  for (const MeshAxis& a : axes) {
    s.push_back(a.size);
  }
  return s;
}

std::vector<int64_t> Mesh::ici_shape() const {
  std::vector<int64_t> s;
  for (const MeshAxis& a : axes) {
    s.push_back(a.ici);
  }
  return s;
}

std::vector<int64_t> Mesh::dcn_shape() const {
  std::vector<int64_t> s;
  for (const MeshAxis& a : axes) {
    s.push_back(a.dcn);
  }
  return s;
}

namespace {

// "--topology v5p-128 has 64 devices" when the count came from a topology
// (MeshOptions::devices_at).
std::string devices_hint(const MeshOptions& options) {
  if (options.devices_at.empty() || !options.num_devices) {
    return "";
  }
  return fmt::format(
      "{} has {} devices", to_string(options.devices_at), *options.num_devices);
}

// The value -1 stands for "fill"; kept apart from real sizes.
constexpr int64_t k_fill = -1;

// "1 name", "3 names", "2 axes".
std::string count_noun(size_t n, std::string_view noun) {
  if (n == 1) {
    return fmt::format("1 {}", noun);
  }
  return noun == "axis" ? fmt::format("{} axes", n)
                        : fmt::format("{} {}s", n, noun);
}

// One "name:size:type" or "size:type" item of a mesh or --dcn string.
struct Item {
  std::string name;  // empty in the positional form
  int64_t size = 0;  // k_fill for -1
  std::optional<AxisType> type;
  size_t offset = 0;       // where the item starts (its first non-space byte)
  size_t size_offset = 0;  // where its size starts
};

// A small cursor over one flag's text that reports errors at byte offsets.
class Scanner {
 public:
  Scanner(std::string_view text, std::string_view source, Diagnostics& diags)
      : m_text(text), m_source(source), m_diags(diags) {}

  size_t pos() const { return m_pos; }
  bool at_end() const { return m_pos >= m_text.size(); }
  char peek() const { return at_end() ? '\0' : m_text[m_pos]; }
  void advance(size_t n = 1) { m_pos = std::min(m_text.size(), m_pos + n); }
  void skip_space() {
    while (!at_end() && is_space(m_text[m_pos])) {
      ++m_pos;
    }
  }
  std::string_view text() const { return m_text; }

  // What stands at `offset` for a "got ..." message: "end of input", or the
  // token there (up to a separator), quoted.
  std::string describe(size_t offset) const {
    if (offset >= m_text.size()) {
      return "end of input";
    }
    size_t end = offset;
    auto is_separator = [](char c) {
      return c == ',' || c == ':' || is_space(c);
    };
    if (is_separator(m_text[offset])) {
      end = offset + 1;
    } else {
      while (end < m_text.size() && !is_separator(m_text[end])) {
        ++end;
      }
    }
    return quote(m_text.substr(offset, end - offset));
  }

  // The single character at `offset` for messages: "x", or for non-ASCII
  // "ü" (U+00FC), so invisible characters such as U+00A0 can be told apart;
  // a byte that is not valid UTF-8 is shown as byte 0xff.
  std::string describe_char(size_t offset) const {
    auto byte = [&](size_t i) { return static_cast<unsigned char>(m_text[i]); };
    unsigned char lead = byte(offset);
    if (lead < 0x80U) {
      return quote(m_text.substr(offset, 1));
    }
    size_t length = lead >= 0xF0U   ? 4
                    : lead >= 0xE0U ? 3
                    : lead >= 0xC0U ? 2
                                    : 0;
    uint32_t code = lead & (length == 4 ? 0x07U : length == 3 ? 0x0FU : 0x1FU);
    bool valid = length > 0 && lead < 0xF8U && offset + length <= m_text.size();
    for (size_t i = 1; valid && i < length; ++i) {
      valid = (byte(offset + i) & 0xC0U) == 0x80U;
      code = (code << 6U) | (byte(offset + i) & 0x3FU);
    }
    if (!valid) {
      return fmt::format("byte 0x{:02x}", lead);
    }
    return fmt::format(
        "{} (U+{:04X})", quote(m_text.substr(offset, length)), code);
  }

  Diagnostic& error(size_t offset, std::string code, std::string message) {
    return m_diags.error(
        std::move(code),
        std::move(message),
        location_in_text(std::string(m_source), m_text, offset));
  }

 private:
  std::string_view m_text;
  std::string_view m_source;
  Diagnostics& m_diags;
  size_t m_pos = 0;
};

// Parses a size token at the cursor: digits, or "-1". Leading zeros are
// accepted (as Python's int() does).
std::optional<int64_t> parse_size(Scanner& s) {
  size_t start = s.pos();
  bool negative = false;
  if (s.peek() == '-') {
    negative = true;
    s.advance();
  }
  if (!is_digit(s.peek())) {
    s.error(start,
            "mesh.syntax",
            fmt::format("expected an integer axis size, got {}",
                        s.describe(start)));
    return std::nullopt;
  }
  int64_t value = 0;
  bool overflow = false;
  while (is_digit(s.peek())) {
    auto digit = static_cast<int64_t>(s.peek() - '0');
    auto next = checked_mul(value, 10);
    if (next) {
      next = checked_add(*next, digit);
    }
    if (!next) {
      overflow = true;
    } else {
      value = *next;
    }
    s.advance();
  }
  // A size must end at a separator: "2.5", "4x" and "8tp" are not sizes.
  char c = s.peek();
  if (static_cast<unsigned char>(c) >= 0x80U) {
    s.error(s.pos(),
            "mesh.syntax",
            fmt::format("unexpected character {} after the axis size",
                        s.describe_char(s.pos())));
    return std::nullopt;
  }
  if (!s.at_end() && c != ',' && c != ':' && !is_space(c)) {
    s.error(start,
            "mesh.syntax",
            fmt::format("expected an integer axis size, got {}",
                        s.describe(start)));
    return std::nullopt;
  }
  std::string token(s.text().substr(start, s.pos() - start));
  if (overflow) {
    s.error(start,
            "mesh.bad-size",
            fmt::format("axis size {} is too large", quote(token)));
    return std::nullopt;
  }
  if (negative) {
    if (value == 1) {
      return k_fill;
    }
    s.error(start,
            "mesh.bad-size",
            fmt::format("axis size must be at least 1, or -1 to fill, got {}",
                        token));
    return std::nullopt;
  }
  if (value == 0) {
    s.error(start, "mesh.bad-size", "axis size must be at least 1, got 0");
    return std::nullopt;
  }
  return value;
}

// Parses "item (',' item)*" given at `source` (the mesh or DCN factors).
// After an axis's size, its ":TYPE" (auto, explicit or manual), when
// there is one, into item.type. False after an error (reported).
bool read_axis_type(Scanner& s, std::string_view text, Item& item) {
  if (s.peek() != ':') {
    return true;
  }
  s.advance();
  s.skip_space();
  size_t start = s.pos();
  while (is_name_char(s.peek())) {
    s.advance();
  }
  std::string_view word = text.substr(start, s.pos() - start);
  if (word.empty()) {
    s.error(
        start,
        "mesh.axis-type",
        fmt::format("expected an axis type (auto, explicit or manual), got {}",
                    s.describe(start)));
    return false;
  }
  item.type = parse_axis_type(word);
  if (!item.type) {
    Diagnostic& d = s.error(
        start,
        "mesh.axis-type",
        fmt::format("unknown axis type {}; expected auto, explicit or manual",
                    quote(word)));
    std::string near =
        closest_match(to_lower(word), {"auto", "explicit", "manual"});
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
    return false;
  }
  s.skip_space();
  return true;
}

// The items of one mesh string: one form (all named or all positional),
// unique names. False after an error (reported).
bool check_items(Scanner& s,
                 std::string_view text,
                 const std::vector<Item>& items) {
  // One form per string: all named or all positional.
  bool named = !items.front().name.empty();
  for (const Item& item : items) {
    if (item.name.empty() == named) {
      s.error(
          item.offset,
          "mesh.syntax",
          named ? fmt::format("expected a named axis such as \"tp:4\", got {}; "
                              "named and positional axes cannot be mixed",
                              s.describe(item.offset))
                : fmt::format("expected an axis size, got {}; named and "
                              "positional axes cannot be mixed",
                              s.describe(item.offset)));
      return false;
    }
  }
  // Names are unique.
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t j = 0; j < i && named; ++j) {
      if (items[i].name == items[j].name) {
        Location first = location_in_text("", text, items[j].offset);
        s.error(items[i].offset,
                "mesh.duplicate-axis",
                fmt::format("duplicate axis name {} (first at column {})",
                            quote(items[i].name),
                            first.column));
        return false;
      }
    }
  }
  return true;
}

std::optional<std::vector<Item>> parse_items(std::string_view text,
                                             std::string_view source,
                                             Diagnostics& diags) {
  Scanner s(text, source, diags);
  std::vector<Item> items;
  s.skip_space();
  if (s.at_end()) {
    s.error(0,
            "mesh.syntax",
            "empty mesh; expected axes such as \"dp:2,tp:4\" or sizes such as "
            "\"2,4\"");
    return std::nullopt;
  }
  while (true) {
    s.skip_space();
    Item item;
    item.offset = s.pos();
    char c = s.peek();
    if (is_name_start(c)) {
      size_t start = s.pos();
      while (is_name_char(s.peek())) {
        s.advance();
      }
      item.name = std::string(text.substr(start, s.pos() - start));
      if (static_cast<unsigned char>(s.peek()) >= 0x80U) {
        s.error(s.pos(),
                "mesh.syntax",
                fmt::format("invalid character {} in axis name; names are "
                            "[A-Za-z_][A-Za-z0-9_]*",
                            s.describe_char(s.pos())));
        return std::nullopt;
      }
      s.skip_space();
      if (s.peek() != ':') {
        s.error(
            s.pos(),
            "mesh.syntax",
            fmt::format("expected \":\" and a size after axis name {}, got {}",
                        quote(item.name),
                        s.describe(s.pos())));
        return std::nullopt;
      }
      s.advance();
      s.skip_space();
    } else if (!is_digit(c) && c != '-') {
      if (c == ',' || s.at_end()) {
        s.error(s.pos(),
                "mesh.syntax",
                fmt::format("expected an axis, got {}", s.describe(s.pos())));
      } else {
        s.error(s.pos(),
                "mesh.syntax",
                fmt::format("expected an axis name or size, got {}",
                            s.describe_char(s.pos())));
      }
      return std::nullopt;
    }
    item.size_offset = s.pos();
    auto size = parse_size(s);
    if (!size) {
      return std::nullopt;
    }
    item.size = *size;
    s.skip_space();
    if (!read_axis_type(s, text, item)) {
      return std::nullopt;
    }
    if (items.size() == k_max_axes) {
      s.error(item.offset,
              "mesh.too-many-axes",
              fmt::format("a mesh has at most {} axes", k_max_axes));
      return std::nullopt;
    }
    items.push_back(std::move(item));
    if (s.at_end()) {
      break;
    }
    if (s.peek() != ',') {
      s.error(s.pos(),
              "mesh.syntax",
              fmt::format("expected \",\" between axes, got {}",
                          s.describe(s.pos())));
      return std::nullopt;
    }
    s.advance();
    s.skip_space();
    if (s.at_end()) {
      s.error(s.pos(),
              "mesh.syntax",
              "expected an axis after \",\", got end of input");
      return std::nullopt;
    }
  }

  if (!check_items(s, text, items)) {
    return std::nullopt;
  }
  return items;
}

// Checks the names of a positional mesh ("dp,fsdp,tp"), given at `source`.
std::optional<std::vector<std::string>> check_axis_names(
    const std::vector<std::string>& names,
    const std::string& source,
    Diagnostics& diags) {
  // Rebuild the flag's text so errors can point into it.
  std::string text;
  std::vector<size_t> offsets;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) {
      text += ',';
    }
    offsets.push_back(text.size());
    text += names[i];
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    size_t bad = n.size();
    if (n.empty() || !is_name_start(n[0])) {
      bad = 0;
    } else {
      for (size_t k = 0; k < n.size(); ++k) {
        if (!is_name_char(n[k])) {
          bad = k;
          break;
        }
      }
    }
    if (bad < n.size() || n.empty()) {
      diags.error("mesh.syntax",
                  n.empty() ? fmt::format("empty axis name in {}", source)
                            : fmt::format("invalid axis name {}; names are "
                                          "[A-Za-z_][A-Za-z0-9_]*",
                                          quote(n)),
                  location_in_text(source, text, offsets[i] + bad));
      return std::nullopt;
    }
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == n) {
        diags.error(
            "mesh.duplicate-axis",
            fmt::format("duplicate axis name {} in {}", quote(n), source),
            location_in_text(source, text, offsets[i]));
        return std::nullopt;
      }
    }
  }
  return names;
}

std::string join_sizes(const std::vector<int64_t>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += (i ? " x " : "") + std::to_string(sizes[i]);
  }
  return out;
}

// Resolves the DCN factors of each mesh axis.
bool apply_dcn(Mesh& mesh,
               std::string_view mesh_text,
               const MeshOptions& options,
               Diagnostics& diags) {
  const MeshSources& src = options.sources;
  std::vector<int64_t> dcn(mesh.axes.size(), 1);
  if (!options.dcn.empty()) {
    std::string_view text = options.dcn;
    auto items = parse_items(text, src.dcn, diags);
    if (!items) {
      return false;
    }
    bool named = !items->front().name.empty();
    if (!named && items->size() != mesh.axes.size()) {
      diags.error("mesh.axis-count",
                  fmt::format("{} gives {} but the mesh has {}",
                              src.dcn,
                              count_noun(items->size(), "factor"),
                              count_noun(mesh.axes.size(), "axis")),
                  location_in_text(src.dcn, text, 0));
      return false;
    }
    std::optional<size_t> fill;
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& item = (*items)[i];
      if (item.type) {
        diags.error(
            "mesh.syntax",
            fmt::format(
                "{} takes no axis types; give them in {}", src.dcn, src.mesh),
            location_in_text(src.dcn, text, item.size_offset));
        return false;
      }
      size_t axis = i;
      if (named) {
        int64_t index = mesh.index_of(item.name);
        if (index < 0) {
          Diagnostic& d =
              diags.error("mesh.unknown-axis",
                          fmt::format("{} names axis {}, which the mesh lacks",
                                      src.dcn,
                                      quote(item.name)),
                          location_in_text(src.dcn, text, item.offset));
          std::string near = closest_match(item.name, mesh.axis_names());
          if (!near.empty()) {
            d.hint = fmt::format("did you mean {}?", quote(near));
          }
          return false;
        }
        axis = static_cast<size_t>(index);
      }
      if (item.size == k_fill) {
        if (fill) {
          diags.error("mesh.multiple-fill",
                      fmt::format("only one {} factor may be -1", src.dcn),
                      location_in_text(src.dcn, text, item.size_offset));
          return false;
        }
        fill = axis;
        continue;
      }
      dcn[axis] = item.size;
    }
    if (fill) {
      if (!options.num_slices) {
        diags.error("mesh.fill-needs-devices",
                    fmt::format("cannot fill a -1 DCN factor without a slice "
                                "count; give {}, or every factor",
                                src.topology),
                    location_in_text(src.dcn, text, 0));
        return false;
      }
      int64_t known = 1;
      for (size_t i = 0; i < dcn.size(); ++i) {
        known =
            i == *fill ? known : known * dcn[i];  // <= num_devices, no overflow
      }
      if (*options.num_slices % known != 0) {
        diags.error(
            "mesh.fill-indivisible",
            fmt::format("cannot fill -1: {} slices are not divisible by {}, "
                        "the product of the other DCN factors",
                        *options.num_slices,
                        known),
            location_in_text(src.dcn, text, 0));
        return false;
      }
      dcn[*fill] = *options.num_slices / known;
    }
    for (size_t i = 0; i < dcn.size(); ++i) {
      if (mesh.axes[i].size % dcn[i] != 0) {
        diags.error(
            "mesh.dcn",
            fmt::format("DCN factor {} of axis {} does not divide its size {}",
                        dcn[i],
                        quote(mesh.axes[i].name),
                        mesh.axes[i].size),
            location_in_text(src.dcn, text, 0));
        return false;
      }
    }
    auto slices = checked_product(dcn);
    if (options.num_slices && slices != options.num_slices) {
      diags.error(
          "mesh.dcn",
          fmt::format("DCN factors multiply to {} ({}) but the topology has "
                      "{} slices",
                      slices ? std::to_string(*slices) : "more than 2^63",
                      join_sizes(dcn),
                      *options.num_slices),
          location_in_text(src.dcn, text, 0));
      return false;
    }
  } else if (options.num_slices && *options.num_slices > 1) {
    // eformer's create_mesh: the first axis divisible by the slice count.
    int64_t slices = *options.num_slices;
    auto it = std::find_if(
        mesh.axes.begin(), mesh.axes.end(), [&](const MeshAxis& a) {
          return a.size % slices == 0;
        });
    if (it == mesh.axes.end()) {
      diags.error(
          "mesh.dcn",
          fmt::format("no mesh axis size is divisible by the {} slices of "
                      "the topology ({}); give {}",
                      slices,
                      join_sizes(mesh.shape()),
                      src.dcn),
          location_in_text(src.mesh, mesh_text, 0));
      return false;
    }
    dcn[static_cast<size_t>(it - mesh.axes.begin())] = slices;
  }
  for (size_t i = 0; i < dcn.size(); ++i) {
    mesh.axes[i].dcn = dcn[i];
    mesh.axes[i].ici = mesh.axes[i].size / dcn[i];
  }
  return true;
}

}  // namespace

// The mesh's names against --axis-names (`names`, empty when not given):
// a named mesh uses exactly those names, a mesh of sizes needs one name
// per size. False after an error (reported).
bool check_mesh_names(const std::vector<Item>& items,
                      const std::vector<std::string>& names,
                      std::string_view text,
                      const MeshSources& src,
                      Diagnostics& diags) {
  const bool named = !items.front().name.empty();
  if (named) {
    // With --axis-names, the named form must use exactly those names
    // (eformer's parse_mesh_from_string); the mesh order is the string's.
    if (!names.empty()) {
      for (const Item& item : items) {
        if (std::find(names.begin(), names.end(), item.name) == names.end()) {
          diags.error("mesh.unknown-axis",
                      fmt::format("axis {} is not in {} ({})",
                                  quote(item.name),
                                  src.axis_names,
                                  fmt::join(names, ",")),
                      location_in_text(src.mesh, text, item.offset));
          return false;
        }
      }
      if (items.size() != names.size()) {
        diags.error("mesh.axis-count",
                    fmt::format("the mesh has {} but {} has {}",
                                count_noun(items.size(), "axis"),
                                src.axis_names,
                                count_noun(names.size(), "name")),
                    location_in_text(src.mesh, text, 0));
        return false;
      }
    }
  } else {
    if (names.empty()) {
      diags.error("mesh.axis-count",
                  src.axis_names.empty()
                      ? std::string("a mesh of sizes has no axis names; name "
                                    "the axes: \"dp:2,tp:4\"")
                      : fmt::format("a mesh of sizes needs {} with {}, or "
                                    "name the axes: \"dp:2,tp:4\"",
                                    src.axis_names,
                                    count_noun(items.size(), "name")),
                  location_in_text(src.mesh, text, items.front().offset));
      return false;
    }
    if (names.size() != items.size()) {
      diags.error("mesh.axis-count",
                  fmt::format("the mesh has {} but {} has {}",
                              count_noun(items.size(), "size"),
                              src.axis_names,
                              count_noun(names.size(), "name")),
                  location_in_text(src.mesh, text, items.front().offset));
      return false;
    }
  }

  return true;
}

std::optional<Mesh> parse_mesh(std::string_view text,
                               const MeshOptions& options,
                               Diagnostics& diags) {
  const MeshSources& src = options.sources;
  auto items = parse_items(text, src.mesh, diags);
  if (!items) {
    return std::nullopt;
  }
  bool named = !items->front().name.empty();
  std::vector<std::string> names;
  if (!options.axis_names.empty()) {
    auto checked = check_axis_names(options.axis_names, src.axis_names, diags);
    if (!checked) {
      return std::nullopt;
    }
    names = *checked;
  }

  if (!check_mesh_names(*items, names, text, src, diags)) {
    return std::nullopt;
  }
  Mesh mesh;
  const Item* fill = nullptr;
  int64_t known = 1;
  for (size_t i = 0; i < items->size(); ++i) {
    const Item& item = (*items)[i];
    MeshAxis axis;
    axis.name = named ? item.name : names[i];
    axis.size = item.size;
    axis.type = item.type.value_or(AxisType::automatic);
    if (item.size == k_fill) {
      if (fill != nullptr) {
        Location first = location_in_text("", text, fill->size_offset);
        diags.error(
            "mesh.multiple-fill",
            fmt::format("only one axis size may be -1; the size at column {} "
                        "is -1 already",
                        first.column),
            location_in_text(src.mesh, text, item.size_offset));
        return std::nullopt;
      }
      fill = &item;
    } else {
      auto product = checked_mul(known, item.size);
      if (!product || *product > k_max_devices) {
        diags.error(
            "mesh.bad-size",
            fmt::format("axis sizes multiply to more than {} devices, the "
                        "most shardplan accepts",
                        k_max_devices),
            location_in_text(src.mesh, text, item.size_offset));
        return std::nullopt;
      }
      known = *product;
    }
    mesh.axes.push_back(std::move(axis));
  }

  if (options.num_devices
      && (*options.num_devices < 1 || *options.num_devices > k_max_devices)) {
    diags.error("mesh.device-count",
                fmt::format("the device count must be between 1 and {}, got {}",
                            k_max_devices,
                            *options.num_devices),
                Location::of(src.devices));
    return std::nullopt;
  }

  if (fill != nullptr) {
    if (!options.num_devices) {
      diags.error("mesh.fill-needs-devices",
                  fmt::format("cannot fill -1 without a device count; give {} "
                              "or {}",
                              src.devices,
                              src.topology),
                  location_in_text(src.mesh, text, fill->size_offset));
      return std::nullopt;
    }
    if (*options.num_devices % known != 0) {
      Diagnostic& d = diags.error(
          "mesh.fill-indivisible",
          fmt::format("cannot fill -1: {} devices are not divisible by {}, "
                      "the product of the other axes",
                      *options.num_devices,
                      known),
          location_in_text(src.mesh, text, fill->size_offset));
      d.hint = devices_hint(options);
      return std::nullopt;
    }
    auto index = static_cast<size_t>(fill - items->data());
    mesh.axes[index].size = *options.num_devices / known;
  } else if (options.num_devices && known != *options.num_devices
             && !options.count_may_differ) {
    Diagnostic& d = diags.error(
        "mesh.device-count",
        fmt::format("the mesh needs {} devices ({}) but there are {}",
                    known,
                    join_sizes(mesh.shape()),
                    *options.num_devices),
        location_in_text(src.mesh, text, items->front().offset));
    d.hint = devices_hint(options);
    return std::nullopt;
  }

  if (!apply_dcn(mesh, text, options, diags)) {
    return std::nullopt;
  }
  return mesh;
}

size_t mesh_axis_offset(std::string_view text, size_t index) {
  size_t at = 0;
  for (size_t k = 0; k < index; ++k) {
    at = text.find(',', at);
    if (at == std::string_view::npos) {
      return 0;
    }
    ++at;
  }
  while (at < text.size() && is_space(text[at])) {
    ++at;
  }
  return at;
}

std::string to_string(const Mesh& mesh) {
  std::string out;
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    const MeshAxis& a = mesh.axes[i];
    out += fmt::format("{}{}:{}", i ? "," : "", a.name, a.size);
    if (a.type != AxisType::automatic) {
      out += fmt::format(":{}", to_string(a.type));
    }
  }
  return out;
}

std::string dcn_string(const Mesh& mesh) {
  std::string out;
  for (const MeshAxis& a : mesh.axes) {
    if (a.dcn != 1) {
      out += fmt::format("{}{}:{}", out.empty() ? "" : ",", a.name, a.dcn);
    }
  }
  return out;
}

std::string_view to_string(AxisRole role) {
  switch (role) {
    case AxisRole::data:
      return "data";
    case AxisRole::tensor:
      return "tensor";
    case AxisRole::sequence:
      return "sequence";
    case AxisRole::expert:
      return "expert";
    case AxisRole::stage:
      return "stage";
  }
  return "data";
}

std::vector<std::string_view> default_role_axes(AxisRole role) {
  switch (role) {
    case AxisRole::data:
      return {"dp", "data", "fsdp", "fsdp_transpose"};
    case AxisRole::tensor:
      return {
          "tp", "tensor", "tensor_transpose", "tensor_sequence", "model", "mp"};
    case AxisRole::sequence:
      return {"sp", "cp", "context", "context_usp_ulysses", "sequence"};
    case AxisRole::expert:
      return {"ep", "expert"};
    case AxisRole::stage:
      return {"pp", "stage", "pipeline"};
  }
  return {};
}

bool has_default_role(AxisRole role, std::string_view axis) {
  const std::vector<std::string_view> names = default_role_axes(role);
  return std::find(names.begin(), names.end(), axis) != names.end();
}

namespace {

// A role's list of axis names in `roles`, const or not.
template <typename Roles>
auto& role_list(Roles& roles, AxisRole role) {
  switch (role) {
    case AxisRole::data:
      return roles.data;
    case AxisRole::tensor:
      return roles.tensor;
    case AxisRole::sequence:
      return roles.sequence;
    case AxisRole::expert:
      return roles.expert;
    case AxisRole::stage:
      return roles.stage;
  }
  return roles.data;
}

}  // namespace

const std::vector<std::string>& AxisRoles::of(AxisRole role) const {
  return role_list(*this, role);
}

std::vector<std::string>& AxisRoles::of(AxisRole role) {
  return role_list(*this, role);
}

std::optional<AxisRole> AxisRoles::role_of(std::string_view axis) const {
  for (AxisRole role : k_axis_roles) {
    const std::vector<std::string>& names = of(role);
    if (std::find(names.begin(), names.end(), axis) != names.end()) {
      return role;
    }
  }
  return std::nullopt;
}

int64_t AxisRoles::size(const Mesh& mesh, AxisRole role) const {
  int64_t n = 1;
  for (const std::string& name : of(role)) {
    if (const MeshAxis* axis = mesh.find(name)) {
      n *= axis->size;  // the mesh's product fits (parse_mesh checked it)
    }
  }
  return n;
}

const Location& AxisRoleSources::of(AxisRole role) const {
  return role_list(*this, role);
}

std::optional<AxisRoles> resolve_axis_roles(const Mesh& mesh,
                                            const AxisRoles& given,
                                            const AxisRoleSources& sources,
                                            Diagnostics& diags) {
  const std::vector<std::string> names = mesh.axis_names();
  // The role each axis was given, to refuse an axis given twice.
  std::vector<std::optional<AxisRole>> claimed(names.size());
  bool ok = true;
  for (AxisRole role : k_axis_roles) {
    for (const std::string& name : given.of(role)) {
      const int64_t index = mesh.index_of(name);
      if (index < 0) {
        Diagnostic& d =
            diags.error("mesh.role-axis",
                        fmt::format("{} axis {} is not an axis of the mesh {}",
                                    to_string(role),
                                    quote(name),
                                    to_string(mesh)),
                        sources.of(role));
        const std::string best = closest_match(name, names);
        d.hint = best.empty() ? fmt::format("the mesh's axes are {}",
                                            fmt::join(names, ", "))
                              : fmt::format("did you mean {}?", quote(best));
        ok = false;
        continue;
      }
      std::optional<AxisRole>& slot = claimed[static_cast<size_t>(index)];
      if (slot && *slot != role) {
        diags
            .error("mesh.role-twice",
                   fmt::format("axis {} is given as a {} axis and as a {} axis",
                               quote(name),
                               to_string(*slot),
                               to_string(role)),
                   sources.of(role))
            .hint = fmt::format("an axis has one role; {} names it too",
                                to_string(sources.of(*slot)));
        ok = false;
        continue;
      }
      slot = role;
    }
  }
  if (!ok) {
    return std::nullopt;
  }
  AxisRoles out;
  for (size_t i = 0; i < names.size(); ++i) {
    std::optional<AxisRole> role = claimed[i];
    if (!role) {
      for (AxisRole r : k_axis_roles) {
        if (!given.of(r).empty()) {
          continue;  // the caller named this role's axes
        }
        const std::vector<std::string_view> defaults = default_role_axes(r);
        if (std::find(defaults.begin(), defaults.end(), names[i])
            != defaults.end()) {
          role = r;
          break;
        }
      }
    }
    if (role) {
      out.of(*role).push_back(names[i]);
    }
  }
  return out;
}

}  // namespace shardplan
