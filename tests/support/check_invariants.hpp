#pragma once

// The invariant checker, run on the JSON of every golden
// case and property run, like bloaty's CheckConsistency: parts add up to
// their totals, whatever the input.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace shardplan::test {

// Every invariant `doc` (a JSON document shardplan wrote) breaks, one line
// each; empty when it holds them all:
// - schema_version is 1 and command is a string;
// - mesh: the product of the axis sizes is `devices`, each size is ici x dcn;
// - device_ids: every id once, as many as devices;
// - tensors: a spec has the tensor's rank and names each mesh axis at most
//   once; replicas x prod(shards) = devices; when every dim divides, bytes
//   per device x devices = bytes x replicas;
// - memory: the per-device parts sum to the total; max >= min; fits and
//   utilization follow from the total, capacity and HBM;
// - summary: tensors, errors and warnings count what the document lists.
std::vector<std::string> check_invariants(const nlohmann::json& doc);

}  // namespace shardplan::test
