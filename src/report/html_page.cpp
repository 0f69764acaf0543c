#include "report/html.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

// The pieces of the HTML reports (report/html.hpp). The page holds no URL:
// no src, href other than "#...", url(), @import or "//" (a test reads
// every page for them), so it opens the same offline, from a file, in a
// mail or a CI artifact.

namespace shardplan::report_detail {

namespace {

// Okabe & Ito, "Color Universal Design: How to make figures and
// presentations that are friendly to colorblind people" (2008): their
// eight colours, black last.
constexpr std::array<std::string_view, 8> k_okabe_ito = {"#E69F00",
                                                         "#56B4E9",
                                                         "#009E73",
                                                         "#F0E442",
                                                         "#0072B2",
                                                         "#D55E00",
                                                         "#CC79A7",
                                                         "#000000"};

// Paul Tol, "Colour Schemes" (SRON/EPS/TN/09-002, issue 3.2, 2021),
// figure 22: the sequential scheme "iridescent", 23 colours, light to
// dark; it works in colour-blind vision.
constexpr std::array<std::string_view, 23> k_iridescent = {
    "#FEFBE9", "#FCF7D5", "#F5F3C1", "#EAF0B5", "#DDECBF", "#D0E7CA",
    "#C2E3D2", "#B5DDD8", "#A8D8DC", "#9BD2E1", "#8DCBE4", "#81C4E7",
    "#7BBCE7", "#7EB2E4", "#88A5DD", "#9398D2", "#9B8AC4", "#9D7DB2",
    "#9A709E", "#906388", "#805770", "#684957", "#46353A"};

// Paul Tol's qualitative scheme "light" (same note, figure 6), for the
// terms of the activations.
constexpr std::array<std::string_view, 9> k_tol_light = {"#77AADD",
                                                         "#99DDFF",
                                                         "#44BB99",
                                                         "#BBCC33",
                                                         "#AAAA00",
                                                         "#EEDD88",
                                                         "#EE8866",
                                                         "#FFAABB",
                                                         "#DDDDDD"};

// The stylesheet: readable at 1280x800, printable (controls hidden, colours
// kept, rows not split across pages).
constexpr std::string_view k_css = R"CSS(
:root{--fg:#1b1b1b;--muted:#555;--line:#d0d0d0;--hi:#fff1a8}
*{box-sizing:border-box}
[hidden]{display:none!important}
figure{margin:6px 0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;color:var(--fg);background:#fff;margin:0}
main{max-width:1260px;margin:0 auto;padding:14px 18px 40px}
h1{font-size:20px;margin:0 0 6px}
h2{font-size:16px;margin:22px 0 8px;padding-bottom:3px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:14px 0 6px}
ul.summary{list-style:none;margin:0;padding:0;color:var(--muted)}
ul.summary li:first-child{color:var(--fg)}
.verdict{display:inline-block;margin-top:6px;padding:1px 8px;border:1px solid currentColor;border-radius:3px;font-weight:600}
.verdict.ok{color:#00603d}
.verdict.bad{color:#a40000}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:3px 8px;border-bottom:1px solid #e6e6e6;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0;z-index:1}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th.sort{cursor:pointer;user-select:none;white-space:nowrap}
th.sort:hover{background:#e8e8e8}
th[aria-sort=ascending]::after{content:" \25B2"}
th[aria-sort=descending]::after{content:" \25BC"}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12px}
td.name{max-width:560px;overflow-wrap:anywhere}
td.mono{white-space:nowrap}
ol.steps{margin:0;padding-left:18px}
td.name details ul{margin:4px 0;padding-left:18px;max-height:240px;overflow:auto}
summary{cursor:pointer}
tr:target,li:target{background:var(--hi)}
.sev-error{color:#a40000;font-weight:600}
.sev-warning{color:#7a4d00;font-weight:600}
.sev-info{color:var(--muted)}
.controls{margin:6px 0;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
.controls input{font:inherit;padding:2px 6px;width:320px}
.controls select{font:inherit}
.muted{color:var(--muted)}
svg{display:block;max-width:100%;height:auto}
svg text{font-family:inherit;font-size:11px}
.cell rect{stroke:#444;stroke-width:.5}
.cell text{font-size:10px;text-anchor:middle;pointer-events:none}
.host{fill:none;stroke:#000;stroke-width:2;stroke-dasharray:6 3}
.panel-label{font-size:12px;fill:#333}
.seg{stroke:#fff;stroke-width:.5}
.swatch{display:inline-block;width:12px;height:12px;border:1px solid #0004;vertical-align:-2px;margin-right:4px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:4px 0;font-size:13px}
.scroll{max-height:640px;overflow:auto;border:1px solid #e6e6e6}
@media print{
  .controls,input,select{display:none}
  main{max-width:none;padding:0}
  .scroll{max-height:none;overflow:visible;border:0}
  th{position:static}
  h2,h3{break-after:avoid}
  tr,g.cell,figure{break-inside:avoid}
  *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
}
)CSS";

// The script: sortable columns (click a header), the filter boxes, the axis
// selector of the device grids, and the state of the URL fragment:
// #sort=col[,col...] clicks those headers in turn, #filter=text types the
// text in the first filter box, #axis=name chooses that axis in every grid.
// Written without a "//" anywhere (the page must not contain one).
constexpr std::string_view k_script = R"JS(
(function () {
  'use strict';
  window.addEventListener('error', function (e) {
    document.body.setAttribute('data-error', String(e.message));
  });
  function sortKey(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) { return numeric ? -Infinity : ''; }
    var v = cell.getAttribute('data-sort');
    if (numeric) { return v === null ? -Infinity : parseFloat(v); }
    return v === null ? cell.textContent.trim() : v;
  }
  function sortBy(th) {
    var table = th.closest('table');
    var body = table.tBodies[0];
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.classList.contains('num');
    var now = th.getAttribute('aria-sort');
    var dir = now ? (now === 'ascending' ? 'descending' : 'ascending')
                  : (numeric ? 'descending' : 'ascending');
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      h.removeAttribute('aria-sort');
    });
    th.setAttribute('aria-sort', dir);
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, i) { r.dataset.order = r.dataset.order || i; });
    rows.sort(function (a, b) {
      var x = sortKey(a, index, numeric), y = sortKey(b, index, numeric);
      var c = numeric ? (x < y ? -1 : (x > y ? 1 : 0))
                      : String(x).localeCompare(String(y), undefined, {numeric: true});
      if (c === 0) { return a.dataset.order - b.dataset.order; }
      return dir === 'ascending' ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function filter(input) {
    var table = document.getElementById(input.dataset.table);
    var q = input.value.trim().toLowerCase();
    var shown = 0, total = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var name = (r.dataset.name || r.textContent).toLowerCase();
      var ok = q === '' || name.indexOf(q) >= 0;
      r.hidden = !ok;
      total += 1;
      shown += ok ? 1 : 0;
    });
    var count = document.getElementById(input.dataset.table + '-count');
    if (count) { count.textContent = shown + ' of ' + total + ' rows'; }
  }
  function colourBy(select) {
    var opt = select.options[select.selectedIndex];
    var axis = parseInt(select.value, 10);
    var name = opt.dataset.name;
    var fills = opt.dataset.fills.split(' ');
    var inks = opt.dataset.inks.split(' ');
    var grid = document.getElementById(select.dataset.grid);
    grid.querySelectorAll('g.cell').forEach(function (g) {
      var c = parseInt(g.dataset.c.split(',')[axis], 10);
      g.querySelector('rect').setAttribute('fill', fills[c]);
      var label = g.querySelector('text.coord');
      if (label) {
        label.textContent = name + ' ' + c;
        label.setAttribute('fill', inks[c]);
      }
      var id = g.querySelector('text.id');
      if (id) { id.setAttribute('fill', inks[c]); }
    });
    var legend = document.getElementById(select.dataset.grid + '-legend');
    if (legend) {
      legend.textContent = '';
      fills.forEach(function (f, c) {
        var item = document.createElement('span');
        var sw = document.createElement('span');
        sw.className = 'swatch';
        sw.style.background = f;
        item.appendChild(sw);
        item.appendChild(document.createTextNode(name + ' ' + c));
        legend.appendChild(item);
      });
    }
    document.querySelectorAll('tr[data-axis]').forEach(function (r) {
      r.style.background = r.dataset.axis === name ? 'var(--hi)' : '';
    });
  }
  document.querySelectorAll('th.sort').forEach(function (th) {
    th.addEventListener('click', function () { sortBy(th); });
  });
  document.querySelectorAll('input.filter').forEach(function (input) {
    input.addEventListener('input', function () { filter(input); });
  });
  document.querySelectorAll('select.axis').forEach(function (select) {
    select.addEventListener('change', function () {
      document.querySelectorAll('select.axis').forEach(function (other) {
        if (other !== select) {
          other.value = select.value;
          colourBy(other);
        }
      });
      colourBy(select);
    });
  });
  function applyFragment() {
    var text = location.hash.replace(/^#/, '');
    text.split('&').forEach(function (part) {
      var at = part.indexOf('=');
      if (at < 0) { return; }
      var key = part.slice(0, at);
      var value = decodeURIComponent(part.slice(at + 1));
      if (key === 'sort') {
        value.split(',').forEach(function (col) {
          var th = document.querySelector('th.sort[data-col="' + CSS.escape(col) + '"]');
          if (th) { th.click(); }
        });
      } else if (key === 'filter') {
        var input = document.querySelector('input.filter');
        if (input) {
          input.value = value;
          input.dispatchEvent(new Event('input'));
        }
      } else if (key === 'axis') {
        var select = document.querySelector('select.axis');
        if (select) {
          Array.prototype.forEach.call(select.options, function (o) {
            if (o.dataset.name === value) { select.value = o.value; }
          });
          select.dispatchEvent(new Event('change'));
        }
      }
    });
  }
  document.querySelectorAll('select.axis').forEach(colourBy);
  applyFragment();
  window.addEventListener('hashchange', applyFragment);
  document.body.setAttribute('data-ready', '1');
})();
)JS";

// "#rrggbb" -> its relative luminance's rough value in [0, 1].
double luminance(std::string_view fill) {
  auto channel = [&](size_t at) {
    int value = 0;
    for (size_t i = at; i < at + 2 && i < fill.size(); ++i) {
      const char c = fill[i];
      value = value * 16
              + (c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : 0);
    }
    const double s = value / 255.0;
    return s <= 0.03928 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
}

}  // namespace

void append_html(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0 || u < 0x20 || u == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", u);
      ++i;
      continue;
    }
    switch (s[i]) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '/':
        out += "&#47;";
        break;
      default:
        out.append(s.substr(i, n));
        break;
    }
    i += n;
  }
}

std::string html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_html(out, s);
  return out;
}

std::string_view coordinate_colour(int64_t c, int64_t size) {
  assert(c >= 0 && c < size);
  if (size <= static_cast<int64_t>(k_okabe_ito.size())) {
    return k_okabe_ito[static_cast<size_t>(c)];
  }
  const auto last = static_cast<double>(k_iridescent.size() - 1);
  const double at =
      static_cast<double>(c) * last / static_cast<double>(size - 1);
  return k_iridescent[static_cast<size_t>(std::lround(at))];
}

std::string_view text_colour(std::string_view fill) {
  return luminance(fill) > 0.22 ? "#000" : "#fff";
}

std::string_view category_colour(std::string_view category) {
  if (category == "params") {
    return "#0072B2";
  }
  if (category == "grads") {
    return "#56B4E9";
  }
  if (category == "optimizer") {
    return "#E69F00";
  }
  if (category == "gather_buffer") {
    return "#CC79A7";
  }
  if (category == "optimizer_step") {
    return "#D55E00";
  }
  return "#009E73";  // activations
}

std::string_view activation_colour(size_t i) {
  return k_tol_light[i % k_tol_light.size()];
}

std::string page_start(std::string_view title) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
      "charset=\"utf-8\">\n<meta name=\"viewport\" "
      "content=\"width=device-width, initial-scale=1\">\n<meta "
      "name=\"generator\" content=\"shardplan ";
  append_html(out, shardplan_version());
  out += "\">\n<title>";
  append_html(out, title);
  out += "</title>\n<style>";
  out += k_css;
  out += "</style>\n</head>\n<body>\n<main>\n";
  return out;
}

std::string page_end() {
  std::string out = "</main>\n<script>";
  out += k_script;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

std::string section_start(std::string_view id, std::string_view heading) {
  return fmt::format(
      "<section id=\"sec-{}\">\n<h2>{}</h2>\n", html(id), html(heading));
}

std::string summary_list(const std::vector<std::string>& lines) {
  std::string out = "<ul class=\"summary\">\n";
  for (const std::string& line : lines) {
    out += "<li>";
    append_html(out, line);
    out += "</li>\n";
  }
  out += "</ul>\n";
  return out;
}

std::string plain_table(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) {
    return "";
  }
  const size_t cols = rows.front().size();
  std::vector<bool> numeric(cols, true);
  for (size_t r = 1; r < rows.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const std::string& cell = rows[r][c];
      if (!cell.empty() && cell != "-"
          && cell.find_first_not_of("0123456789,.% ") != std::string::npos
          && !(cell.size() > 1
               && (cell.ends_with(" B") || cell.ends_with("iB")
                   || cell.ends_with(" s") || cell.ends_with("ms")
                   || cell.ends_with("us")))) {
        numeric[c] = false;
      }
    }
  }
  std::string out = "<table>\n<thead><tr>";
  for (size_t c = 0; c < cols; ++c) {
    out += numeric[c] ? "<th class=\"num\">" : "<th>";
    append_html(out, rows[0][c]);
    out += "</th>";
  }
  out += "</tr></thead>\n<tbody>\n";
  for (size_t r = 1; r < rows.size(); ++r) {
    out += "<tr>";
    for (size_t c = 0; c < cols; ++c) {
      out += numeric[c] ? "<td class=\"num\">" : "<td>";
      append_html(out, rows[r][c]);
      out += "</td>";
    }
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  return out;
}

namespace {

// A <th> that sorts its table: `col` names it in the URL fragment, a
// `numeric` column sorts by its cells' data-sort numbers.
std::string sortable_th(std::string_view col,
                        std::string_view label,
                        bool numeric) {
  return fmt::format(R"(<th class="sort{}" data-col="{}" title="sort">{}</th>)",
                     numeric ? " num" : "",
                     html(col),
                     html(label));
}

// A filter box for table `table_id`: rows whose data-name contains the
// text (case-insensitively) stay shown, and "N of M rows" says how many.
std::string filter_box(std::string_view table_id, std::string_view what) {
  return fmt::format(
      "<div class=\"controls\"><label>filter by {}: <input class=\"filter\" "
      "type=\"search\" data-table=\"{}\" placeholder=\"part of a "
      "name\"></label><span class=\"muted\" id=\"{}-count\"></span></div>\n",
      html(what),
      html(table_id),
      html(table_id));
}

}  // namespace

std::string sortable_table_start(std::string_view table_id,
                                 std::string_view table_class,
                                 std::string_view filter_what,
                                 const std::vector<SortColumn>& columns) {
  std::string out = filter_box(table_id, filter_what);
  out += fmt::format("<div class=\"scroll\">\n<table id=\"{}\"{}>\n<thead><tr>",
                     html(table_id),
                     table_class.empty()
                         ? std::string()
                         : fmt::format(" class=\"{}\"", html(table_class)));
  for (const SortColumn& c : columns) {
    out += sortable_th(c.col, c.label, c.numeric);
  }
  out += "</tr></thead>\n<tbody>\n";
  return out;
}

std::string num_td(std::string_view shown,
                   int64_t value,
                   std::string_view exact) {
  std::string out = fmt::format("<td class=\"num\" data-sort=\"{}\"", value);
  if (!exact.empty()) {
    out += " title=\"";
    append_html(out, exact);
    out += '"';
  }
  out += '>';
  append_html(out, shown);
  out += "</td>";
  return out;
}

std::string num_td(std::string_view shown, double value) {
  std::string out = fmt::format("<td class=\"num\" data-sort=\"{}\">",
                                std::isfinite(value) ? value : 0);
  append_html(out, shown);
  out += "</td>";
  return out;
}

std::string bytes_td(int64_t bytes) {
  return num_td(
      human_bytes(bytes), bytes, fmt::format("{} bytes", with_commas(bytes)));
}

// ---------------------------------------------------------------------------
// The device grid

namespace {

// A device as the grids draw it.
struct GridDevice {
  std::vector<int64_t> coords;  // along each mesh axis
  std::string where;  // physical place, host: the tooltip's second part
  int64_t host = -1;  // -1: unknown
};

// A cell at a place of a panel (a block of the grid, drawn side by side
// with the others, wrapping).
struct Placed {
  int64_t id = 0;
  size_t panel = 0;
  int64_t col = 0;
  int64_t row = 0;
};

struct Panel {
  std::string label;
  int64_t cols = 1;
  int64_t rows = 1;
};

// The <select> options of the axes: each with the fills and text colours of
// its coordinates.
std::string axis_select(const Mesh& mesh, std::string_view grid_id) {
  std::string out = fmt::format(
      "<label>colour by mesh axis: <select class=\"axis\" "
      "data-grid=\"{}\">",
      html(grid_id));
  for (size_t k = 0; k < mesh.axes.size(); ++k) {
    const MeshAxis& a = mesh.axes[k];
    std::string fills;
    std::string inks;
    for (int64_t c = 0; c < a.size; ++c) {
      const std::string_view fill = coordinate_colour(c, a.size);
      if (c > 0) {
        fills += ' ';
        inks += ' ';
      }
      fills += fill;
      inks += text_colour(fill);
    }
    fmt::format_to(std::back_inserter(out),
                   "<option value=\"{}\" data-name=\"{}\" data-fills=\"{}\" "
                   "data-inks=\"{}\"{}>{} ({})</option>",
                   k,
                   html(a.name),
                   fills,
                   inks,
                   k + 1 == mesh.axes.size() ? " selected" : "",
                   html(a.name),
                   a.size);
  }
  out += "</select></label>";
  return out;
}

// The SVG of `cells` in `panels`, each cell coloured by its coordinate along
// the last mesh axis; hosts outlined when `outline_hosts`.
std::string grid_svg(std::string_view id,
                     const Mesh& mesh,
                     const std::vector<Panel>& panels,
                     const std::vector<Placed>& cells,
                     const std::vector<GridDevice>& devices,
                     bool outline_hosts,
                     std::string_view caption) {
  const int64_t count = static_cast<int64_t>(cells.size());
  // Cells wide enough for "fsdp 12" under the id, narrower for more
  // devices (the coordinate in a smaller font), and past 1024 devices the
  // id alone.
  const int64_t cell_w = count <= 256 ? 52 : (count <= 1024 ? 40 : 24);
  const int64_t cell = count <= 256 ? 38 : (count <= 1024 ? 32 : 20);
  const bool labels = count <= 1024;
  constexpr int64_t k_width = 1220;
  constexpr int64_t k_gap = 18;
  constexpr int64_t k_label = 18;  // a panel's label above it
  // Panels left to right, wrapping at k_width.
  struct At {
    int64_t x = 0;
    int64_t y = 0;
  };
  std::vector<At> at(panels.size());
  int64_t x = 0;
  int64_t y = 0;
  int64_t line_height = 0;
  int64_t width = 0;
  for (size_t p = 0; p < panels.size(); ++p) {
    const int64_t w = panels[p].cols * cell_w;
    const int64_t h = panels[p].rows * cell + k_label;
    if (x > 0 && x + w > k_width) {
      x = 0;
      y += line_height + k_gap;
      line_height = 0;
    }
    at[p] = {x, y + k_label};
    x += w + k_gap;
    width = std::max(width, x - k_gap);
    line_height = std::max(line_height, h);
  }
  const int64_t height = y + line_height;
  const size_t last = mesh.axes.size() - 1;
  const int64_t last_size = mesh.axes[last].size;
  std::string out = fmt::format(
      "<figure>\n<svg id=\"{}\" class=\"grid\" width=\"{}\" height=\"{}\" "
      "viewBox=\"-2 -2 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      html(id),
      width + 4,
      height + 4,
      width + 4,
      height + 4,
      html(caption));
  for (size_t p = 0; p < panels.size(); ++p) {
    if (!panels[p].label.empty()) {
      fmt::format_to(
          std::back_inserter(out),
          "<text class=\"panel-label\" x=\"{}\" y=\"{}\">{}</text>\n",
          at[p].x,
          at[p].y - 5,
          html(panels[p].label));
    }
  }
  const std::vector<std::string> names = mesh.axis_names();
  for (const Placed& c : cells) {
    const GridDevice& d = devices[static_cast<size_t>(c.id)];
    const int64_t cx = at[c.panel].x + c.col * cell_w;
    const int64_t cy = at[c.panel].y + c.row * cell;
    const int64_t coord = d.coords[last];
    const std::string_view fill = coordinate_colour(coord, last_size);
    const std::string_view ink = text_colour(fill);
    std::string mesh_coords;
    for (size_t k = 0; k < d.coords.size(); ++k) {
      mesh_coords +=
          fmt::format("{}{} {}", k > 0 ? ", " : "", names[k], d.coords[k]);
    }
    fmt::format_to(
        std::back_inserter(out),
        "<g class=\"cell\" data-device=\"{}\" data-c=\"{}\"><title>device {}; "
        "mesh {}{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "fill=\"{}\"/>",
        c.id,
        fmt::join(d.coords, ","),
        c.id,
        html(mesh_coords),
        d.where.empty() ? std::string() : "; " + html(d.where),
        cx,
        cy,
        cell_w,
        cell,
        fill);
    if (labels) {
      fmt::format_to(
          std::back_inserter(out),
          "<text class=\"id\" x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>"
          "<text class=\"coord\" x=\"{}\" y=\"{}\" "
          "fill=\"{}\"{}>{} {}</text>",
          cx + cell_w / 2,
          cy + cell / 2 - 2,
          ink,
          c.id,
          cx + cell_w / 2,
          cy + cell / 2 + 10,
          ink,
          count <= 256 ? "" : " style=\"font-size:8px\"",
          html(names[last]),
          coord);
    } else {
      fmt::format_to(std::back_inserter(out),
                     "<text class=\"id\" x=\"{}\" y=\"{}\" fill=\"{}\" "
                     "style=\"font-size:8px\">{}</text>",
                     cx + cell_w / 2,
                     cy + cell / 2 + 3,
                     ink,
                     c.id);
    }
    out += "</g>\n";
  }
  if (outline_hosts) {
    // Each host's cells in each panel: their bounding box (a host's devices
    // form a block of its panel).
    struct Box {
      int64_t x0 = INT64_MAX, y0 = INT64_MAX, x1 = INT64_MIN, y1 = INT64_MIN;
    };
    std::map<std::pair<size_t, int64_t>, Box> boxes;
    for (const Placed& c : cells) {
      const int64_t host = devices[static_cast<size_t>(c.id)].host;
      if (host < 0) {
        continue;
      }
      Box& b = boxes[{c.panel, host}];
      b.x0 = std::min(b.x0, c.col);
      b.y0 = std::min(b.y0, c.row);
      b.x1 = std::max(b.x1, c.col + 1);
      b.y1 = std::max(b.y1, c.row + 1);
    }
    for (const auto& [key, b] : boxes) {
      fmt::format_to(
          std::back_inserter(out),
          "<rect class=\"host\" data-host=\"{}\" x=\"{}\" y=\"{}\" "
          "width=\"{}\" height=\"{}\"><title>host {}</title></rect>\n",
          key.second,
          at[key.first].x + b.x0 * cell_w + 1,
          at[key.first].y + b.y0 * cell + 1,
          (b.x1 - b.x0) * cell_w - 2,
          (b.y1 - b.y0) * cell - 2,
          key.second);
    }
  }
  out += "</svg>\n<figcaption class=\"muted\">";
  append_html(out, caption);
  out += "</figcaption>\n</figure>\n";
  return out;
}

// The mesh's own grid: its last axis across, the one before down, a panel
// per index of the others (as text output draws it). A last axis longer
// than 32 wraps into rows of 32.
void mesh_panels(const Mesh& mesh,
                 const DeviceGrid& grid,
                 std::vector<Panel>& panels,
                 std::vector<Placed>& cells) {
  const size_t rank = grid.shape.size();
  const int64_t cols = rank >= 1 ? grid.shape[rank - 1] : 1;
  const int64_t rows = rank >= 2 ? grid.shape[rank - 2] : 1;
  const int64_t blocks = static_cast<int64_t>(grid.ids.size()) / (cols * rows);
  constexpr int64_t k_wrap = 32;
  const int64_t wraps = (cols + k_wrap - 1) / k_wrap;
  const int64_t shown_cols = std::min(cols, k_wrap);
  const std::vector<std::string> names = mesh.axis_names();
  for (int64_t b = 0; b < blocks; ++b) {
    Panel panel;
    panel.cols = shown_cols;
    panel.rows = rows * wraps;
    if (rank > 2) {
      int64_t rest = b;
      std::string label;
      for (size_t k = rank - 2; k-- > 0;) {
        std::string part = fmt::format("{} {}", names[k], rest % grid.shape[k]);
        if (!label.empty()) {
          part += ", ";
          part += label;
        }
        label = std::move(part);
        rest /= grid.shape[k];
      }
      panel.label = label;
    }
    panels.push_back(panel);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const auto index = static_cast<size_t>((b * rows + r) * cols + c);
        cells.push_back({grid.ids[index],
                         panels.size() - 1,
                         c % k_wrap,
                         r * wraps + c / k_wrap});
      }
    }
  }
}

// The devices where they sit: TPU chips by x and y, a panel per z and
// slice; GPUs a row per host, hosts wrapping into panels of 16 rows.
void physical_panels(const Topology& t,
                     std::vector<Panel>& panels,
                     std::vector<Placed>& cells,
                     std::vector<GridDevice>& devices) {
  if (t.kind == TopologyKind::tpu) {
    const TpuSlice& s = t.tpu;
    const int64_t cores = s.cores_per_chip;
    for (int64_t slice = 0; slice < s.num_slices; ++slice) {
      for (int64_t z = 0; z < s.chips[2]; ++z) {
        Panel panel;
        panel.cols = s.chips[0] * cores;
        panel.rows = s.chips[1];
        std::vector<std::string> parts;
        if (s.num_slices > 1) {
          parts.push_back(fmt::format("slice {}", slice));
        }
        if (!is_2d(s.chip)) {
          parts.push_back(fmt::format("z {}", z));
        }
        panel.label = fmt::format("{}", fmt::join(parts, ", "));
        panels.push_back(panel);
      }
    }
    for (const TpuDevice& d : tpu_devices(s)) {
      if (d.id < 0 || d.id >= static_cast<int64_t>(devices.size())) {
        continue;
      }
      const size_t panel =
          static_cast<size_t>(d.slice_index * s.chips[2] + d.coords[2]);
      cells.push_back(
          {d.id, panel, d.coords[0] * cores + d.core_on_chip, d.coords[1]});
      GridDevice& g = devices[static_cast<size_t>(d.id)];
      g.host = d.process_index;
      g.where = fmt::format(
          "chip ({}, {}, {}){}{}; host {}",
          d.coords[0],
          d.coords[1],
          d.coords[2],
          cores > 1 ? fmt::format(" core {}", d.core_on_chip) : std::string(),
          s.num_slices > 1 ? fmt::format(" of slice {}", d.slice_index)
                           : std::string(),
          d.process_index);
    }
    return;
  }
  const int64_t per_host = std::max<int64_t>(t.gpus_per_host, 1);
  const int64_t hosts = (t.gpus + per_host - 1) / per_host;
  constexpr int64_t k_rows = 16;
  for (int64_t first = 0; first < hosts; first += k_rows) {
    Panel panel;
    panel.cols = per_host;
    panel.rows = std::min(k_rows, hosts - first);
    panel.label =
        fmt::format("hosts {}..{}, GPUs across", first, first + panel.rows - 1);
    panels.push_back(panel);
  }
  for (int64_t id = 0; id < t.gpus && id < static_cast<int64_t>(devices.size());
       ++id) {
    const int64_t host = id / per_host;
    cells.push_back(
        {id, static_cast<size_t>(host / k_rows), id % per_host, host % k_rows});
    GridDevice& g = devices[static_cast<size_t>(id)];
    g.host = host;
    g.where = fmt::format("host {} GPU {}; NVLink domain {}",
                          host,
                          id % per_host,
                          id / std::max<int64_t>(t.nvlink_domain, 1));
  }
}

}  // namespace

std::string device_grid_section(const Mesh& mesh,
                                const MeshLayout* layout,
                                const Topology* topology,
                                std::string_view id_prefix,
                                std::string_view heading) {
  const std::string physical_id = std::string(id_prefix) + "grid-physical";
  const std::string mesh_id = std::string(id_prefix) + "grid-mesh";
  std::string out = section_start(std::string(id_prefix) + "devices", heading);
  const int64_t n = mesh.num_devices();
  if (n > k_max_drawn_devices) {
    out += fmt::format(
        "<p>{} devices: too many to draw (at most {}); see --format "
        "json.</p>\n",
        with_commas(n),
        with_commas(k_max_drawn_devices));
    out += k_section_end;
    return out;
  }
  const DeviceGrid grid =
      layout != nullptr ? layout->grid : generic_device_grid(mesh);
  // Each device's mesh coordinates, from the row-major grid.
  int64_t max_id = 0;
  for (int64_t id : grid.ids) {
    max_id = std::max(max_id, id);
  }
  std::vector<GridDevice> devices(static_cast<size_t>(max_id) + 1);
  for (size_t i = 0; i < grid.ids.size(); ++i) {
    std::vector<int64_t> coords(grid.shape.size());
    size_t rest = i;
    for (size_t k = grid.shape.size(); k-- > 0;) {
      const auto size = static_cast<size_t>(grid.shape[k]);
      coords[k] = static_cast<int64_t>(rest % size);
      rest /= size;
    }
    devices[static_cast<size_t>(grid.ids[i])].coords = std::move(coords);
  }

  const bool physical = layout != nullptr && topology != nullptr;
  out += "<div class=\"controls\">";
  out += axis_select(mesh, physical ? physical_id : mesh_id);
  out +=
      "<span class=\"muted\">each cell: device id, and its coordinate "
      "along the axis; hover for the rest</span></div>\n";
  out += "<div class=\"legend\" id=\"";
  out += physical ? physical_id : mesh_id;
  out += "-legend\">";
  const MeshAxis& last = mesh.axes.back();
  for (int64_t c = 0; c < last.size; ++c) {
    fmt::format_to(std::back_inserter(out),
                   "<span><span class=\"swatch\" style=\"background:{}\">"
                   "</span>{} {}</span>",
                   coordinate_colour(c, last.size),
                   html(last.name),
                   c);
  }
  out += "</div>\n";

  if (physical) {
    std::vector<Panel> panels;
    std::vector<Placed> cells;
    physical_panels(*topology, panels, cells, devices);
    out += "<h3>Where the devices sit</h3>\n";
    out += grid_svg(physical_id,
                    mesh,
                    panels,
                    cells,
                    devices,
                    true,
                    fmt::format("{} devices of {} where they sit: {}; dashed "
                                "outlines are hosts",
                                n,
                                topology->name,
                                topology->kind == TopologyKind::tpu
                                    ? (topology->tpu.cores_per_chip > 1
                                           ? "chip x across (its cores side "
                                             "by side), y down, a panel per "
                                             "z and slice"
                                           : "chip x across, y down, a panel "
                                             "per z and slice")
                                    : "a row per host, its GPUs across"));
    // The links of each axis: a legend of what its collectives use.
    out +=
        "<h3>Links per mesh axis</h3>\n<table>\n<thead><tr><th>axis</th>"
        "<th class=\"num\">size</th><th>link</th><th>shape</th>"
        "<th>physical axes</th><th class=\"num\">bandwidth</th>"
        "<th class=\"num\">latency</th></tr></thead>\n<tbody>\n";
    for (const AxisLink& l : layout->links) {
      const bool none = l.link == LinkClass::none;
      fmt::format_to(
          std::back_inserter(out),
          "<tr data-axis=\"{}\"><td>{}</td><td class=\"num\">{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td></tr>\n",
          html(l.axis),
          html(l.axis),
          l.ring_size,
          html(to_string(l.link)),
          none ? "-" : (l.wraparound ? "ring (wraparound)" : "line"),
          l.physical_axes.empty()
              ? std::string("-")
              : html(fmt::format("{}", fmt::join(l.physical_axes, "+"))),
          none ? "-" : html(rate_text(l.bytes_per_s)),
          none ? "-" : html(seconds_text(l.latency_s)));
    }
    out +=
        "</tbody>\n</table>\n<p class=\"muted\">ici: the torus's "
        "chip-to-chip links; dcn: between slices; nvlink: inside a "
        "GPU node; network: between GPU nodes; mixed: more than one. "
        "Bandwidth is what one device sends per second along the "
        "axis.</p>\n";
  }
  std::vector<Panel> panels;
  std::vector<Placed> cells;
  mesh_panels(mesh, grid, panels, cells);
  out += physical ? "<h3>The mesh's grid</h3>\n" : "";
  const std::vector<std::string> names = mesh.axis_names();
  out += grid_svg(mesh_id,
                  mesh,
                  panels,
                  cells,
                  devices,
                  false,
                  fmt::format("device ids as the mesh holds them ({}): {} "
                              "across{}",
                              fmt::join(names, " x "),
                              names.back(),
                              names.size() > 1 ? fmt::format(
                                  ", {} down", names[names.size() - 2])
                                               : std::string()));
  if (physical) {
    // The second grid follows the same selector.
    const size_t at = out.rfind("<figure>");
    out.insert(at,
               "<div class=\"controls\" hidden>" + axis_select(mesh, mesh_id)
                   + "</div>\n");
  }
  out += k_section_end;
  return out;
}

// ---------------------------------------------------------------------------
// Memory bars

namespace {

struct Segment {
  std::string category;  // params, grads, ..., activations
  std::string term;      // an activation's term; empty for the others
  std::string label;
  int64_t bytes = 0;
  std::string_view fill;
};

// The activations of the counted stage by saved tensor and term: each
// saved tensor (in HBM) times its layers and the microbatches in flight,
// then the embedding, the head, MTP and the recompute buffer; the rounding
// of the fractional in-flight count goes to the last layer term. Empty
// when they do not add up to `total` (a single segment is drawn then).
std::vector<Segment> activation_segments(const ActivationEstimate& a,
                                         int64_t stage,
                                         int64_t total) {
  std::vector<Segment> out;
  if (a.per_stage.empty()) {
    return out;
  }
  const StageActivations& st = a.per_stage[static_cast<size_t>(
      std::clamp<int64_t>(stage, 0, std::ssize(a.per_stage) - 1))];
  size_t colour = 0;
  int64_t layers = 0;
  auto add_kind = [&](const std::optional<LayerActivations>& kind,
                      int64_t count,
                      std::string_view what) {
    if (!kind || count == 0) {
      return;
    }
    for (const SavedTensor& t : kind->saved) {
      if (t.offloaded) {
        continue;
      }
      const auto bytes = static_cast<int64_t>(
          std::llround(static_cast<double>(t.bytes_per_layer)
                       * static_cast<double>(count) * st.in_flight));
      out.push_back({"activations",
                     fmt::format("{} layers: {}", what, t.name),
                     fmt::format("{} ({} {} layers)", t.name, count, what),
                     bytes,
                     activation_colour(colour++)});
      layers += bytes;
    }
  };
  add_kind(a.dense, st.dense_layers, "dense");
  add_kind(a.moe, st.moe_layers, "moe");
  if (out.empty() || layers > st.layers_bytes
      || st.layers_bytes - layers > 1024 * static_cast<int64_t>(out.size())) {
    out.clear();
    if (st.layers_bytes > 0) {
      out.push_back({"activations",
                     "layers",
                     "decoder layers",
                     st.layers_bytes,
                     activation_colour(colour++)});
    }
  } else {
    out.back().bytes += st.layers_bytes - layers;
  }
  const std::pair<const char*, int64_t> rest[] = {
      {"embedding", st.embedding_bytes},
      {"head (logits)", st.logits_bytes},
      {"mtp", st.mtp_bytes},
      {"recompute", st.recompute_bytes}};
  for (const auto& [name, bytes] : rest) {
    if (bytes > 0) {
      out.push_back(
          {"activations", name, name, bytes, activation_colour(colour++)});
    }
  }
  int64_t sum = 0;
  for (const Segment& s : out) {
    sum += s.bytes;
  }
  if (sum != total) {
    out.clear();
  }
  return out;
}

std::vector<Segment> model_segments(int64_t params,
                                    int64_t grads,
                                    int64_t optimizer,
                                    int64_t gather_buffer,
                                    int64_t optimizer_step,
                                    bool step_peak) {
  std::vector<Segment> out = {
      {"params", "", "weights", params, category_colour("params")},
      {"grads", "", "grads", grads, category_colour("grads")},
      {"optimizer", "", "optimizer", optimizer, category_colour("optimizer")}};
  if (step_peak) {
    out.push_back({"optimizer_step",
                   "",
                   "optimizer step",
                   optimizer_step,
                   category_colour("optimizer_step")});
  } else {
    out.push_back({"gather_buffer",
                   "",
                   "gather buffer",
                   gather_buffer,
                   category_colour("gather_buffer")});
  }
  return out;
}

// One bar: `segments` left to right over `scale` bytes in `width` pixels,
// at height `y`; its label above it.
void append_bar(std::string& out,
                std::string_view bar,
                std::string_view label,
                const std::vector<Segment>& segments,
                int64_t total,
                double scale,
                int64_t y) {
  constexpr double k_width = 1000;
  constexpr int64_t k_left = 10;
  constexpr int64_t k_height = 26;
  fmt::format_to(std::back_inserter(out),
                 "<g class=\"bar\" data-bar=\"{}\" data-total=\"{}\">"
                 "<text x=\"{}\" y=\"{}\">{}: {}</text>\n",
                 html(bar),
                 total,
                 k_left,
                 y - 5,
                 html(label),
                 html(human_bytes(total)));
  double x = k_left;
  for (const Segment& s : segments) {
    if (s.bytes <= 0) {
      continue;
    }
    const double w = static_cast<double>(s.bytes) / scale * k_width;
    fmt::format_to(
        std::back_inserter(out),
        "<rect class=\"seg\" data-category=\"{}\"{} "
        "data-bytes=\"{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" "
        "height=\"{}\" fill=\"{}\"><title>{}: {} ({} bytes)</title>"
        "</rect>\n",
        s.category,
        s.term.empty() ? std::string() : " data-term=\"" + html(s.term) + "\"",
        s.bytes,
        x,
        y,
        std::max(w, 0.5),
        k_height,
        s.fill,
        html(s.label),
        html(human_bytes(s.bytes)),
        with_commas(s.bytes));
    // A segment wide enough carries its name.
    if (w > 70) {
      fmt::format_to(std::back_inserter(out),
                     "<text x=\"{:.2f}\" y=\"{}\" fill=\"{}\" "
                     "style=\"pointer-events:none\">{}</text>\n",
                     x + 4,
                     y + 17,
                     text_colour(s.fill),
                     html(s.label.substr(0, static_cast<size_t>(w / 7))));
    }
    x += w;
  }
  out += "</g>\n";
}

}  // namespace

std::string memory_section(const MemoryEstimate& m,
                           const ActivationEstimate* a) {
  std::string out = section_start("memory", "Memory per device");
  const bool peak = step_is_peak(m);
  std::vector<Segment> device = model_segments(m.per_device.params,
                                               m.per_device.grads,
                                               m.per_device.optimizer,
                                               m.gather_buffer,
                                               m.optimizer_step,
                                               peak);
  if (m.activations_counted && !peak) {
    std::vector<Segment> acts =
        a != nullptr ? activation_segments(*a, m.stage, m.activations)
                     : std::vector<Segment>();
    if (acts.empty()) {
      acts.push_back({"activations",
                      "",
                      "activations",
                      m.activations,
                      category_colour("activations")});
    }
    device.insert(device.end(), acts.begin(), acts.end());
  }
  // The bars' scale: the largest of the totals and HBM, a little more.
  int64_t top = std::max<int64_t>(m.max_device_total, 1);
  for (const GroupMemory& g : m.stages) {
    top = std::max(top, g.total);
  }
  if (m.hbm_bytes) {
    top = std::max(top, *m.hbm_bytes);
  }
  const double scale = static_cast<double>(top) * 1.04;
  const bool stages = m.placement.stages > 1 && !m.stages.empty();
  const int64_t bars = 1 + (stages ? std::ssize(m.stages) : 0);
  constexpr int64_t k_pitch = 50;
  const int64_t height = 30 + bars * k_pitch + 10;
  fmt::format_to(std::back_inserter(out),
                 "<figure>\n<svg id=\"memory-bars\" width=\"1040\" "
                 "height=\"{}\" viewBox=\"0 0 1040 {}\" role=\"img\" "
                 "aria-label=\"memory per device\">\n",
                 height,
                 height);
  int64_t y = 30;
  append_bar(out,
             "device",
             stages ? fmt::format("most loaded device (stage {})", m.stage)
                    : std::string("each device"),
             device,
             m.max_device_total,
             scale,
             y);
  if (stages) {
    const int64_t per_stage = m.placement.layers / m.placement.stages;
    for (const GroupMemory& g : m.stages) {
      y += k_pitch;
      std::vector<Segment> segs =
          model_segments(g.per_device.params,
                         g.per_device.grads,
                         g.per_device.optimizer,
                         g.gather_buffer,
                         g.optimizer_step,
                         g.optimizer_step > g.gather_buffer + g.activations);
      if (m.activations_counted
          && !(g.optimizer_step > g.gather_buffer + g.activations)) {
        segs.push_back({"activations",
                        "",
                        "activations",
                        g.activations,
                        category_colour("activations")});
      }
      std::string label = fmt::format("stage {}", g.stage);
      if (per_stage > 0) {
        label += fmt::format(" (layers {}-{})",
                             g.stage * per_stage,
                             (g.stage + 1) * per_stage - 1);
      }
      if (m.placement.expert_ranks > 1) {
        label += fmt::format(", expert rank {}", g.expert_rank);
      }
      append_bar(out,
                 fmt::format("stage {}", g.stage),
                 label,
                 segs,
                 g.total,
                 scale,
                 y);
    }
  }
  // The capacity lines.
  auto line = [&](int64_t bytes, std::string_view what, bool dashed) {
    const double x = 10 + static_cast<double>(bytes) / scale * 1000;
    fmt::format_to(
        std::back_inserter(out),
        "<g class=\"capacity\" data-bytes=\"{}\"><line x1=\"{:.2f}\" "
        "y1=\"12\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#000\" "
        "stroke-width=\"2\"{}/><text x=\"{:.2f}\" y=\"10\" "
        "text-anchor=\"end\">{} {}</text></g>\n",
        bytes,
        x,
        x,
        height - 4,
        dashed ? " stroke-dasharray=\"4 3\"" : "",
        x - 2,
        html(what),
        html(human_bytes(bytes)));
  };
  if (m.capacity_bytes) {
    line(*m.capacity_bytes, "usable HBM", false);
  }
  out += "</svg>\n</figure>\n";

  // The same figures as text.
  std::string legend =
      "<table>\n<thead><tr><th></th><th>category</th>"
      "<th class=\"num\">bytes</th><th class=\"num\"></th>"
      "<th class=\"num\">of usable HBM</th></tr></thead>\n"
      "<tbody>\n";
  auto legend_row =
      [&](std::string_view fill, std::string_view name, int64_t bytes) {
        fmt::format_to(
            std::back_inserter(legend),
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            fill.empty()
                ? std::string()
                : fmt::format("<span class=\"swatch\" style=\"background:{}\">"
                              "</span>",
                              fill),
            html(name),
            with_commas(bytes),
            html(human_bytes(bytes)),
            m.capacity_bytes && *m.capacity_bytes > 0
                ? fmt::format("{:.1f}%",
                              100.0 * static_cast<double>(bytes)
                                  / static_cast<double>(*m.capacity_bytes))
                : std::string("-"));
      };
  for (const Segment& s : device) {
    legend_row(s.fill,
               s.category == "activations" && !s.term.empty()
                   ? "activations: " + s.label
                   : s.label,
               s.bytes);
  }
  legend_row("", "total", m.max_device_total);
  if (m.capacity_bytes) {
    legend_row("",
               fmt::format("usable HBM ({} HBM, {:g}% kept free)",
                           human_bytes(*m.hbm_bytes),
                           m.headroom * 100),
               *m.capacity_bytes);
  }
  legend += "</tbody>\n</table>\n";
  out += legend;
  out += "<p>";
  append_html(out, capacity_line(m, a));
  out += "</p>\n";
  if (const std::string step = optimizer_step_line(m); !step.empty()) {
    out += "<p class=\"muted\">" + html(step) + "</p>\n";
  }
  if (m.gather_buffer > 0 && !peak) {
    out += "<p class=\"muted\">"
           + html(fmt::format("gather buffer: {} gathered over {} at use",
                              gather_units_text(m),
                              fmt::join(m.gather_axes, ",")))
           + "</p>\n";
  }
  if (m.placement.placed()) {
    out += "<p class=\"muted\">" + html(placement_line(m)) + "</p>\n";
  }
  out += k_section_end;
  return out;
}

}  // namespace shardplan::report_detail
