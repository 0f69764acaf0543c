#include "report/renderers.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <array>
#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

// The formats, the views, and the one table of renderers
// (docs/architecture.md): which view renders in which format, and with what. A
// new format is an enumerator of Format and its name here, its renderers in a
// file of their own, and a line in k_renderers per view that has it.

namespace shardplan {

using namespace report_detail;

namespace {

// Renders `report` (whose view the table entry names) with `diags`.
using RenderFn = Document (*)(const Report& report, const Diagnostics& diags);

// An entry for a renderer of an R that returns its document whole; the
// renderer takes the diagnostics or not.
template <typename R, auto render_fn>
Document whole(const Report& report, const Diagnostics& diags) {
  const R& r = std::get<R>(report);
  if constexpr (std::is_invocable_v<decltype(render_fn),
                                    const R&,
                                    const Diagnostics&>) {
    return Document(render_fn(r, diags));
  } else {
    return Document(render_fn(r));
  }
}

// An entry for a renderer of an R that hands its document to a WriteText in
// pieces: nothing is formatted until the document is written. The document
// keeps a copy of the report (references to what it reports on), so a
// report built in the call's argument list does not dangle.
template <typename R, auto write_fn>
Document streamed(const Report& report, const Diagnostics& diags) {
  return Document([r = std::get<R>(report), &diags](const WriteText& write) {
    write_fn(r, diags, write);
  });
}

// The views that are a few lines and tables, as pages.
std::string topology_list_html(const TopologyListReport& report) {
  return table_doc_html(topology_list_doc(report));
}
std::string topology_show_html(const TopologyShowReport& report) {
  return table_doc_html(topology_show_doc(report));
}
std::string manifest_html(const ManifestReport& report) {
  return table_doc_html(manifest_doc(report));
}
std::string model_list_html(const ModelListReport& report) {
  return table_doc_html(model_list_doc(report));
}

struct Renderer {
  View view;
  Format format;
  RenderFn render;
};

// Every view has text and json (checked below).
constexpr Renderer k_renderers[] = {
    {View::mesh, Format::text, whole<MeshReport, mesh_text>},
    {View::mesh, Format::json, whole<MeshReport, mesh_json>},
    {View::mesh, Format::html, whole<MeshReport, mesh_html>},
    {View::topology_list,
     Format::text,
     whole<TopologyListReport, topology_list_text>},
    {View::topology_list,
     Format::json,
     whole<TopologyListReport, topology_list_json>},
    {View::topology_show,
     Format::text,
     whole<TopologyShowReport, topology_show_text>},
    {View::topology_show,
     Format::json,
     whole<TopologyShowReport, topology_show_json>},
    {View::manifest, Format::text, whole<ManifestReport, manifest_text>},
    {View::manifest, Format::json, whole<ManifestReport, manifest_json>},
    {View::model_list, Format::text, whole<ModelListReport, model_list_text>},
    {View::model_list, Format::json, whole<ModelListReport, model_list_json>},
    {View::preset_list,
     Format::text,
     whole<PresetListReport, preset_list_text>},
    {View::preset_list,
     Format::json,
     whole<PresetListReport, preset_list_json>},
    {View::plan, Format::text, whole<CheckReport, plan_text>},
    {View::plan, Format::json, streamed<CheckReport, write_check_json>},
    {View::plan, Format::markdown, whole<CheckReport, check_markdown>},
    {View::plan, Format::github, whole<CheckReport, check_github>},
    {View::plan, Format::html, whole<CheckReport, check_html>},
    {View::explain, Format::text, whole<ExplainReport, explain_text>},
    {View::explain, Format::json, whole<ExplainReport, explain_json>},
    {View::check, Format::text, whole<CheckReport, check_text>},
    {View::check, Format::json, streamed<CheckReport, write_check_json>},
    {View::check, Format::markdown, whole<CheckReport, check_markdown>},
    {View::check, Format::github, whole<CheckReport, check_github>},
    {View::check, Format::html, whole<CheckReport, check_html>},
    {View::memory, Format::text, whole<CheckReport, memory_text>},
    {View::memory, Format::json, streamed<CheckReport, write_check_json>},
    {View::memory, Format::html, whole<CheckReport, check_html>},
    {View::reshard, Format::text, whole<ReshardReport, reshard_text>},
    {View::reshard, Format::json, streamed<ReshardReport, write_reshard_json>},
    {View::reshard, Format::html, whole<ReshardReport, reshard_html>},
    {View::search, Format::text, whole<SearchReport, search_text>},
    {View::search, Format::json, whole<SearchReport, search_json>},
    // The paste-back formats (docs/paste-back.md); search writes its winner's
    // with plan's (src/cli/search.cpp).
    {View::mesh, Format::jax, whole<MeshReport, mesh_jax>},
    {View::mesh, Format::maxtext, whole<MeshReport, mesh_maxtext>},
    {View::plan, Format::jax, whole<CheckReport, plan_jax>},
    {View::plan, Format::maxtext, whole<CheckReport, plan_maxtext>},
    {View::check, Format::jax, whole<CheckReport, plan_jax>},
    {View::check, Format::maxtext, whole<CheckReport, plan_maxtext>},
    {View::search, Format::html, whole<SearchReport, search_html>},
    {View::topology_list,
     Format::html,
     whole<TopologyListReport, topology_list_html>},
    {View::topology_show,
     Format::html,
     whole<TopologyShowReport, topology_show_html>},
    {View::manifest, Format::html, whole<ManifestReport, manifest_html>},
    {View::model_list, Format::html, whole<ModelListReport, model_list_html>},
};

constexpr const Renderer* find_renderer(View view, Format format) {
  for (const Renderer& renderer : k_renderers) {
    if (renderer.view == view && renderer.format == format) {
      return &renderer;
    }
  }
  return nullptr;
}

constexpr bool every_view_has_text_and_json() {
  for (View view : k_views) {
    if (find_renderer(view, Format::text) == nullptr
        || find_renderer(view, Format::json) == nullptr) {
      return false;
    }
  }
  return true;
}
static_assert(every_view_has_text_and_json());
// The last View and Format: a new enumerator is a -Wswitch error here until
// it says whether it is the last, and the lists below must then run from
// the first enumerator to the last, in order.
constexpr bool is_last(View view) {
  switch (view) {
    case View::mesh:
    case View::topology_list:
    case View::topology_show:
    case View::manifest:
    case View::model_list:
    case View::preset_list:
    case View::plan:
    case View::explain:
    case View::check:
    case View::memory:
    case View::reshard:
      return false;
    case View::search:
      return true;
  }
  return false;
}
constexpr bool is_last(Format format) {
  switch (format) {
    case Format::text:
    case Format::json:
    case Format::markdown:
    case Format::github:
    case Format::jax:
    case Format::maxtext:
      return false;
    case Format::html:
      return true;
  }
  return false;
}
template <typename Enum, size_t N>
constexpr bool lists_every(const std::array<Enum, N>& values) {
  for (size_t i = 0; i < N; ++i) {
    if (values[i] != static_cast<Enum>(i)) {
      return false;
    }
  }
  return N > 0 && is_last(values.back());
}
static_assert(lists_every(k_views), "k_views lists every View, in order");
static_assert(lists_every(k_formats), "k_formats lists every Format, in order");

struct ViewOf {
  View operator()(const MeshReport&) const { return View::mesh; }
  View operator()(const TopologyListReport&) const {
    return View::topology_list;
  }
  View operator()(const TopologyShowReport&) const {
    return View::topology_show;
  }
  View operator()(const ManifestReport&) const { return View::manifest; }
  View operator()(const ModelListReport&) const { return View::model_list; }
  View operator()(const PresetListReport&) const { return View::preset_list; }
  View operator()(const ExplainReport&) const { return View::explain; }
  View operator()(const CheckReport& report) const {
    assert(report.view == View::check || report.view == View::memory
           || report.view == View::plan);
    return report.view;
  }
  View operator()(const ReshardReport&) const { return View::reshard; }
  View operator()(const SearchReport&) const { return View::search; }
};

}  // namespace

std::string_view to_string(Format format) {
  switch (format) {
    case Format::text:
      return "text";
    case Format::json:
      return "json";
    case Format::markdown:
      return "markdown";
    case Format::github:
      return "github";
    case Format::jax:
      return "jax";
    case Format::maxtext:
      return "maxtext";
    case Format::html:
      return "html";
  }
  return "text";
}

std::optional<Format> parse_format(std::string_view name) {
  for (Format format : k_formats) {
    if (to_string(format) == name) {
      return format;
    }
  }
  return std::nullopt;
}

std::string_view report_detail::command_name(View view) {
  switch (view) {
    case View::mesh:
      return "mesh";
    case View::topology_list:
    case View::topology_show:
      return "topology";
    case View::manifest:
    case View::model_list:
      return "manifest";
    case View::preset_list:
    case View::plan:
    case View::explain:
      return "plan";
    case View::check:
      return "check";
    case View::memory:
      return "memory";
    case View::reshard:
      return "reshard";
    case View::search:
      return "search";
  }
  return "";
}

View view_of(const Report& report) {
  return std::visit(ViewOf{}, report);
}

bool can_render(const Report& report, Format format, Diagnostics& diags) {
  if (format != Format::maxtext) {
    return true;
  }
  if (const auto* mesh = std::get_if<MeshReport>(&report)) {
    return maxtext_names_ok(mesh->mesh, nullptr, diags);
  }
  if (const auto* check = std::get_if<CheckReport>(&report)) {
    return maxtext_names_ok(check->mesh, check->rules, diags);
  }
  return true;
}

bool has_renderer(View view, Format format) {
  return find_renderer(view, format) != nullptr;
}

std::vector<Format> formats_of(std::initializer_list<View> views) {
  std::vector<Format> formats;
  for (Format format : k_formats) {
    for (View view : views) {
      if (has_renderer(view, format)) {
        formats.push_back(format);
        break;
      }
    }
  }
  return formats;
}

void Document::write(const WriteText& write) const {
  if (m_stream) {
    m_stream(write);
  } else {
    write(m_text);
  }
}

std::string Document::str() const {
  if (!m_stream) {
    return m_text;
  }
  std::string out;
  m_stream([&out](std::string_view piece) { out += piece; });
  return out;
}

std::string input_error_document(std::string_view command,
                                 Format format,
                                 const Diagnostics& diags) {
  switch (format) {
    case Format::text:
      return "";
    case Format::json:
      return diagnostics_json(command, diags);
    case Format::markdown:
      return markdown_input_errors(command, diags);
    case Format::github:
      return github_input_errors(command, diags);
    case Format::jax:
    case Format::maxtext:
    case Format::html:
      return "";  // the errors go to stderr; nothing to paste back
  }
  return "";
}

Document render(const Report& report, Format format, const Diagnostics& diags) {
  const View view = view_of(report);
  for (Format chosen : {format, Format::text}) {
    if (const Renderer* renderer = find_renderer(view, chosen)) {
      return renderer->render(report, diags);
    }
  }
  assert(false);  // every view has text (the static_assert above)
  return Document(std::string());
}

}  // namespace shardplan
