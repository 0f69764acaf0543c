#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

// `shardplan manifest` and `manifest --model list` as JSON and text.

namespace shardplan::report_detail {

std::string manifest_json(const ManifestReport& report,
                          const Diagnostics& diags) {
  const Manifest& manifest = report.manifest;
  ordered_json j = header("manifest");
  j["source"] = manifest.source;
  j["summary"] = {{"tensors", manifest.size()},
                  {"parameters", manifest.total_elements()},
                  {"bytes", manifest.total_bytes()}};
  ordered_json params = ordered_json::array();
  for (const Tensor& t : manifest.tensors()) {
    ordered_json e;
    e["name"] = t.name;
    e["shape"] = t.shape;
    e["dtype"] = std::string(to_string(t.dtype));
    if (t.logical_axes) {
      ordered_json axes = ordered_json::array();
      for (const auto& a : *t.logical_axes) {
        axes.push_back(a ? ordered_json(*a) : ordered_json(nullptr));
      }
      e["logical_axes"] = std::move(axes);
    }
    params.push_back(std::move(e));
  }
  j["params"] = std::move(params);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

TableDoc manifest_doc(const ManifestReport& report) {
  const Manifest& manifest = report.manifest;
  TableDoc doc;
  doc.title = "shardplan manifest " + manifest.source;
  doc.lines.push_back(
      fmt::format("manifest {}: {} tensors, {} parameters, {} bytes ({})",
                  manifest.source,
                  with_commas(static_cast<int64_t>(manifest.size())),
                  with_commas(manifest.total_elements()),
                  with_commas(manifest.total_bytes()),
                  human_bytes(manifest.total_bytes())));

  struct Totals {
    int64_t tensors = 0;
    int64_t elements = 0;
    int64_t bytes = 0;
  };
  std::map<std::string, Totals> by_dtype;
  for (const Tensor& t : manifest.tensors()) {
    Totals& s = by_dtype[std::string(to_string(t.dtype))];
    ++s.tensors;
    s.elements += t.num_elements;  // sums bounded by the manifest totals
    s.bytes += t.num_bytes;
  }
  std::vector<std::vector<std::string>> rows = {
      {"dtype", "tensors", "parameters", "bytes", ""}};
  for (const auto& [dtype, s] : by_dtype) {
    rows.push_back({dtype,
                    with_commas(s.tensors),
                    with_commas(s.elements),
                    with_commas(s.bytes),
                    human_bytes(s.bytes)});
  }
  doc.tables.push_back({"", std::move(rows)});

  std::vector<size_t> order(manifest.size());
  std::iota(order.begin(), order.end(), size_t{0});
  size_t top = std::min<size_t>(10, order.size());
  const auto& tensors = manifest.tensors();
  std::partial_sort(order.begin(),
                    order.begin() + static_cast<std::ptrdiff_t>(top),
                    order.end(),
                    [&](size_t a, size_t b) {
                      if (tensors[a].num_bytes != tensors[b].num_bytes) {
                        return tensors[a].num_bytes > tensors[b].num_bytes;
                      }
                      return a < b;
                    });
  std::vector<std::vector<std::string>> big = {
      {"tensor", "shape", "dtype", "bytes", ""}};
  for (size_t i = 0; i < top; ++i) {
    const Tensor& t = tensors[order[i]];
    big.push_back({std::string(t.name),
                   shape_text(t.shape),
                   std::string(to_string(t.dtype)),
                   with_commas(t.num_bytes),
                   human_bytes(t.num_bytes)});
  }
  doc.tables.push_back({"largest tensors", std::move(big)});
  return doc;
}

std::string manifest_text(const ManifestReport& report) {
  return table_doc_text(manifest_doc(report));
}

std::string model_list_json(const ModelListReport& report) {
  ordered_json j = header("manifest");
  ordered_json list = ordered_json::array();
  for (const BuiltinModel& m : report.models) {
    list.push_back({{"name", m.name},
                    {"architecture", m.architecture},
                    {"parameters", m.parameters},
                    {"tensors", m.tensors}});
  }
  j["models"] = std::move(list);
  j["diagnostics"] = ordered_json::array();
  return dump(j);
}

TableDoc model_list_doc(const ModelListReport& report) {
  TableDoc doc;
  doc.title = "shardplan manifest --model list";
  std::vector<std::vector<std::string>> rows = {
      {"model", "architecture", "parameters", "tensors"}};
  for (const BuiltinModel& m : report.models) {
    rows.push_back({m.name,
                    m.architecture,
                    with_commas(m.parameters),
                    with_commas(m.tensors)});
  }
  doc.tables.push_back({"", std::move(rows)});
  return doc;
}

std::string model_list_text(const ModelListReport& report) {
  return table_doc_text(model_list_doc(report));
}

}  // namespace shardplan::report_detail
