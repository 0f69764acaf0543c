#include "support/check_invariants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace shardplan::test {

namespace {

using nlohmann::json;

void flatten(const json& j, std::vector<int64_t>& out) {
  if (j.is_array()) {
    for (const json& e : j) {
      flatten(e, out);
    }
  } else {
    out.push_back(j.get<int64_t>());
  }
}

void check_mesh(const json& mesh,
                std::map<std::string, int64_t>& sizes,
                std::vector<std::string>& bad) {
  int64_t product = 1;
  for (const json& axis : mesh.at("axes")) {
    const int64_t size = axis.at("size").get<int64_t>();
    product *= size;
    sizes[axis.at("name").get<std::string>()] = size;
    if (axis.at("ici").get<int64_t>() * axis.at("dcn").get<int64_t>() != size) {
      bad.push_back(fmt::format("mesh axis {}: ici x dcn != size",
                                axis.at("name").dump()));
    }
  }
  if (product != mesh.at("devices").get<int64_t>()) {
    bad.push_back(fmt::format("mesh: product of sizes {} != devices {}",
                              product,
                              mesh.at("devices").dump()));
  }
}

void check_tensor(const json& t,
                  const std::map<std::string, int64_t>& sizes,
                  int64_t devices,
                  std::vector<std::string>& bad) {
  const std::string name = t.at("name").get<std::string>();
  const json& spec = t.at("spec");
  if (spec.is_null()) {
    if (t.at("valid").get<bool>()) {
      bad.push_back(fmt::format("{}: valid without a spec", name));
    }
    return;
  }
  const json& shape = t.at("shape");
  if (spec.size() != shape.size()) {
    bad.push_back(fmt::format(
        "{}: spec of {} entries for rank {}", name, spec.size(), shape.size()));
    return;
  }
  std::set<std::string> used;
  int64_t split = 1;
  bool even = true;
  for (size_t d = 0; d < spec.size(); ++d) {
    std::vector<std::string> axes;
    if (spec[d].is_string()) {
      axes.push_back(spec[d].get<std::string>());
    } else if (spec[d].is_array()) {
      axes = spec[d].get<std::vector<std::string>>();
    }
    int64_t shards = 1;
    for (const std::string& a : axes) {
      if (!used.insert(a).second) {
        bad.push_back(fmt::format("{}: axis {} used twice", name, a));
      }
      auto it = sizes.find(a);
      if (it == sizes.end()) {
        bad.push_back(fmt::format("{}: axis {} not in the mesh", name, a));
        return;
      }
      shards *= it->second;
    }
    split *= shards;
    even = even && shape[d].get<int64_t>() % shards == 0;
  }
  const int64_t replicas = t.at("replicas").get<int64_t>();
  if (replicas * split != devices) {
    bad.push_back(fmt::format("{}: replicas {} x shards {} != devices {}",
                              name,
                              replicas,
                              split,
                              devices));
  }
  if (!even) {
    return;
  }
  const int64_t bytes_per_device = t.at("bytes_per_device").get<int64_t>();
  const std::string dtype = t.at("dtype").get<std::string>();
  if (dtype == "i4" || dtype == "u4") {
    // Half a byte per element, rounded up per shard (docs/memory.md): a
    // shard of 49 elements holds 25 bytes, so the shards' bytes can add up
    // to more than the tensor's.
    int64_t elements = 1;
    for (const json& dim : shape) {
      elements *= dim.get<int64_t>();
    }
    const int64_t shard = elements / split;
    if (bytes_per_device != (shard + 1) / 2) {
      bad.push_back(fmt::format(
          "{}: bytes per device {} for {} elements of {}, expected {}",
          name,
          bytes_per_device,
          shard,
          dtype,
          (shard + 1) / 2));
    }
  } else if (bytes_per_device * devices
             != t.at("bytes").get<int64_t>() * replicas) {
    bad.push_back(fmt::format(
        "{}: bytes per device x devices != bytes x replicas", name));
  }
}

void check_memory(const json& m, std::vector<std::string>& bad) {
  const json& p = m.at("per_device");
  const int64_t total = p.at("total").get<int64_t>();
  // The optimizer step runs after the backward: the peak holds the larger.
  const int64_t transient = std::max(
      p.at("gather_buffer").get<int64_t>() + p.at("activations").get<int64_t>(),
      p.at("optimizer_step").get<int64_t>());
  if (p.at("params").get<int64_t>() + p.at("grads").get<int64_t>()
          + p.at("optimizer").get<int64_t>() + transient
      != total) {
    bad.push_back("memory: per_device parts do not sum to total");
  }
  if (m.at("max_device_total").get<int64_t>() != total) {
    bad.push_back("memory: max_device_total != per_device.total");
  }
  if (m.at("min_device_total").get<int64_t>() > total) {
    bad.push_back("memory: min_device_total > max_device_total");
  }
  if (m.at("hbm_bytes").is_null()) {
    if (!m.at("fits").is_null() || !m.at("capacity_bytes").is_null()) {
      bad.push_back("memory: fits or capacity without HBM");
    }
    return;
  }
  const auto hbm = static_cast<double>(m.at("hbm_bytes").get<int64_t>());
  const int64_t capacity = m.at("capacity_bytes").get<int64_t>();
  if (capacity
      != static_cast<int64_t>(
          std::floor(hbm * (1 - m.at("headroom").get<double>())))) {
    bad.push_back("memory: capacity_bytes != floor(hbm x (1 - headroom))");
  }
  if (m.at("fits").get<bool>() != (total <= capacity)) {
    bad.push_back("memory: fits disagrees with total and capacity");
  }
  if (std::abs(m.at("utilization").get<double>()
               - static_cast<double>(total) / hbm)
      > 1e-12) {
    bad.push_back("memory: utilization != total / hbm");
  }
}

}  // namespace

std::vector<std::string> check_invariants(const json& doc) {
  std::vector<std::string> bad;
  if (!doc.is_object() || doc.value("schema_version", 0) != 1
      || !doc.contains("command") || !doc.at("command").is_string()) {
    bad.push_back("no schema_version 1 or command");
    return bad;
  }
  std::map<std::string, int64_t> sizes;
  int64_t devices = 0;
  if (doc.contains("mesh")) {
    check_mesh(doc.at("mesh"), sizes, bad);
    devices = doc.at("mesh").at("devices").get<int64_t>();
  }
  if (doc.contains("device_ids")) {
    std::vector<int64_t> ids;
    flatten(doc.at("device_ids"), ids);
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      bad.push_back("device_ids: an id appears twice");
    }
    if (static_cast<int64_t>(ids.size()) != devices) {
      bad.push_back(fmt::format(
          "device_ids: {} ids for {} devices", ids.size(), devices));
    }
  }
  if (doc.contains("tensors") && doc.contains("mesh")) {
    for (const json& t : doc.at("tensors")) {
      check_tensor(t, sizes, devices, bad);
    }
  }
  if (doc.contains("memory")) {
    check_memory(doc.at("memory"), bad);
  }
  if (doc.contains("summary") && doc.contains("tensors")
      && doc.contains("diagnostics")) {
    const json& s = doc.at("summary");
    size_t errors = 0;
    size_t warnings = 0;
    for (const json& d : doc.at("diagnostics")) {
      errors += d.at("severity") == "error" ? 1U : 0U;
      warnings += d.at("severity") == "warning" ? 1U : 0U;
    }
    if (s.at("tensors").get<size_t>() != doc.at("tensors").size()
        || s.at("errors").get<size_t>() != errors
        || s.at("warnings").get<size_t>() != warnings) {
      bad.push_back("summary: counts differ from tensors[] and diagnostics[]");
    }
  }
  return bad;
}

}  // namespace shardplan::test
