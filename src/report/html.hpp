#pragma once

// Internal to report: the pieces of the self-contained HTML reports
// (docs/html.md; report/html_page.cpp): escaping, the page around a
// report (inline CSS and script, no URL of any kind), the device grid, the
// memory bars, sortable tables. The views' renderers are report/html.cpp's.

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report_detail {

// Appends `s` as HTML text or as a double-quoted attribute value: & < > "
// ' and / as character references (so that no input can open a tag, end an
// attribute or spell "//"); a control character or a byte that is not
// part of well-formed UTF-8 as the text "\xNN", as printable() shows it.
void append_html(std::string& out, std::string_view s);
// The same, returned: html("a<b") == "a&lt;b".
std::string html(std::string_view s);

// The colours of the reports, from two published colour-blind-safe sets:
// Okabe & Ito, "Color Universal Design" (2008), for up to eight categories;
// Paul Tol's "iridescent" sequential scheme (Tol, "Colour Schemes",
// SRON/EPS/TN/09-002, 2021) for more.
// The fill of coordinate `c` of an axis of `size`: Okabe-Ito's colours in
// order up to size 8, else iridescent sampled evenly from light to dark.
// REQUIRES: 0 <= c < size
std::string_view coordinate_colour(int64_t c, int64_t size);
// "#000" or "#fff", whichever reads better on `fill` ("#rrggbb").
std::string_view text_colour(std::string_view fill);
// The fill of memory category `category` (params, grads, optimizer,
// gather_buffer, optimizer_step, activations); activation terms take
// activation_colour(i) in turn.
std::string_view category_colour(std::string_view category);
std::string_view activation_colour(size_t i);

// The start of a page titled `title`, with the inline stylesheet, up to
// the opening of <main>; and its end: the inline script (sorting,
// filtering, the axis selector, and the view state of the URL fragment,
// e.g. #sort=bytes&filter=mlp&axis=tp) and the closing tags.
std::string page_start(std::string_view title);
std::string page_end();

// A <section> with a heading: `id` (an element id) and `heading` (text).
std::string section_start(std::string_view id, std::string_view heading);
inline constexpr std::string_view k_section_end = "</section>\n";

// A <ul> of `lines` (escaped), the report's summary under its title.
std::string summary_list(const std::vector<std::string>& lines);

// A table of `rows` (escaped text; the first is the header), columns whose
// cells are numbers right-aligned, not sortable: small tables of figures.
std::string plain_table(const std::vector<std::vector<std::string>>& rows);

// A column of a sortable table: `col` names it in the URL fragment
// (#sort=col), a `numeric` one sorts by its cells' data-sort numbers
// (largest first on the first click).
struct SortColumn {
  std::string_view col;
  std::string_view label;
  bool numeric = false;
};
// The start of a filterable, sortable table, up to its <tbody>: a filter
// box (rows whose data-name contains the text, case-insensitively, stay
// shown; "N of M rows" says how many; `filter_what` names what is typed),
// the scrolling <table id="`table_id`"> (with `table_class` when not
// empty) and a sortable heading per column.
std::string sortable_table_start(std::string_view table_id,
                                 std::string_view table_class,
                                 std::string_view filter_what,
                                 const std::vector<SortColumn>& columns);
inline constexpr std::string_view k_sortable_table_end =
    "</tbody>\n</table>\n</div>\n";

// A numeric cell: the text shown, its value to sort by, and its exact
// value as a tooltip when given.
std::string num_td(std::string_view shown,
                   int64_t value,
                   std::string_view exact = "");
std::string num_td(std::string_view shown, double value);

// A byte count as cells show it: "14.96 GiB", with "16,060,522,496 bytes"
// as its tooltip.
std::string bytes_td(int64_t bytes);

// The device grid of `mesh` (docs/html.md): with a layout on a
// topology, the devices where they sit (TPU: chips by x across and y down,
// a panel per z and slice, cores side by side; GPU: a row per host), hosts
// outlined; and the mesh's own grid (its last axis across, the one before
// down, a block per index of the others). Each cell is a <g class="cell"
// data-device="<id>" data-c="<mesh coordinates>"> coloured by its
// coordinate along the axis the selector chooses (the last by default),
// labelled with its id and that coordinate, with the device's mesh
// coordinates, physical coordinates and host in its <title>. A legend
// names the links of every axis (layout.links). Without a layout, the
// mesh's grid alone, of generic_device_grid. At most k_max_drawn_devices
// devices are drawn.
inline constexpr int64_t k_max_drawn_devices = 4096;
// A page with two grids (reshard's two sides) tells them apart by
// `id_prefix` ("from-": svg#from-grid-mesh, section#sec-from-devices) and
// `heading`.
std::string device_grid_section(const Mesh& mesh,
                                const MeshLayout* layout,
                                const Topology* topology,
                                std::string_view id_prefix = "",
                                std::string_view heading = "Devices");

// The memory per device as stacked bars against usable HBM: the most
// loaded device's bar (data-bar="device") with a segment per category
// (<rect data-category="params" data-bytes="...">; activations a segment
// per saved tensor and per term of the counted stage, each
// data-category="activations" with data-term), a bar per pipeline stage
// when there are stages, and the figures as a table.
std::string memory_section(const MemoryEstimate& memory,
                           const ActivationEstimate* activations);

}  // namespace shardplan::report_detail
