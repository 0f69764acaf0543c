// The reshard planner: plans worked by hand, the pathways intermediate
// sharding (docs/reshard.md, "Intermediate sharding"), and a simulation that
// runs every plan on integer arrays across the device grid.
//
// The simulation is an independent model of the collectives: each device
// holds a box of the tensor (per dim [begin, end)) and its values (each
// element starts as its own row-major index; with pending sums, the parts of
// a group add up to it). A step is applied from what it says (op, mesh axes,
// dim, to_dim, transfers) on the device grid; at the end every device must
// hold exactly its target block, and each step's bytes_per_device must equal
// the most bytes a device received in the simulation.

#include "support/test_support.hpp"

#include <shardplan/reshard.hpp>
#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <map>
#include <random>

using namespace shardplan;

namespace {

PartitionSpec spec(std::string_view text) {
  Diagnostics diags;
  std::optional<PartitionSpec> s = parse_spec(text, "test", diags);
  REQUIRE(s);
  return *s;
}

struct Side {
  Mesh mesh;
  DeviceGrid grid;
  std::vector<AxisLink> links;
  ReshardSide view() const { return ReshardSide{&mesh, &grid, links}; }
};

Side side(std::string_view mesh, int64_t devices) {
  Side s;
  s.mesh = test::mesh_of(mesh, devices);
  s.grid = generic_device_grid(s.mesh);
  return s;
}

Manifest one_tensor(const std::vector<int64_t>& shape,
                    std::string_view dtype = "bf16") {
  return test::manifest_of(fmt::format(
      R"({{"params": [{{"name": "w", "shape": [{}], "dtype": "{}"}}]}})",
      fmt::join(shape, ","),
      dtype));
}

ReshardPlan plan_whole(const Manifest& m,
                       const PartitionSpec& from,
                       const PartitionSpec& to,
                       const Side& a,
                       const Side& b,
                       const ReshardOptions& options = {}) {
  const PartitionSpec* f[] = {&from};
  const PartitionSpec* t[] = {&to};
  Diagnostics diags;
  std::optional<ReshardPlan> plan =
      plan_reshard(m, f, t, a.view(), b.view(), options, diags);
  INFO(test::first_error(diags));
  REQUIRE(plan);
  REQUIRE(plan->size() == 1);
  return *plan;
}

TensorReshard plan_one(const Manifest& m,
                       const PartitionSpec& from,
                       const PartitionSpec& to,
                       const Side& a,
                       const Side& b,
                       ReshardOptions options = {}) {
  return plan_whole(m, from, to, a, b, options).tensor(0);
}

std::vector<std::string> ops(const TensorReshard& r) {
  std::vector<std::string> out;
  for (const ReshardStep& s : r.steps) {
    out.emplace_back(to_string(s.op));
  }
  return out;
}

// ---------------------------------------------------------------------------
// The simulator.

using Box = std::vector<std::array<int64_t, 2>>;

struct Buffer {
  Box box;
  std::vector<int64_t> data;  // row-major inside the box
};

int64_t volume(const Box& box) {
  int64_t n = 1;
  for (const auto& [b, e] : box) {
    n *= e - b;
  }
  return n;
}

// Calls f(flat) for every element of `sub`, in row-major order, where flat
// is the element's row-major offset inside `outer` (which must contain sub).
template <typename F>
void for_each_in(const Box& outer, const Box& sub, F&& f) {
  const size_t rank = sub.size();
  std::vector<int64_t> idx(rank);
  for (size_t d = 0; d < rank; ++d) {
    REQUIRE(sub[d][0] >= outer[d][0]);
    REQUIRE(sub[d][1] <= outer[d][1]);
    idx[d] = sub[d][0];
  }
  if (volume(sub) == 0) {
    return;
  }
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) {
      flat = flat * (outer[d][1] - outer[d][0]) + (idx[d] - outer[d][0]);
    }
    f(static_cast<size_t>(flat));
    size_t d = rank;
    while (d-- > 0) {
      if (++idx[d] < sub[d][1]) {
        break;
      }
      idx[d] = sub[d][0];
    }
    if (d == static_cast<size_t>(-1)) {
      return;
    }
  }
}

// Values of `sub` (inside `box`) out of `buf`.
std::vector<int64_t> extract(const Buffer& buf, const Box& sub) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(volume(sub)));
  for_each_in(
      buf.box, sub, [&](size_t flat) { out.push_back(buf.data[flat]); });
  return out;
}

// Concatenates buffers along `dim` (their boxes must be adjacent, in order,
// and equal in the other dims).
Buffer concat(const std::vector<const Buffer*>& parts, size_t dim) {
  Buffer out;
  out.box = parts[0]->box;
  for (size_t k = 1; k < parts.size(); ++k) {
    const Box& b = parts[k]->box;
    for (size_t d = 0; d < b.size(); ++d) {
      if (d == dim) {
        REQUIRE(b[d][0] == out.box[d][1]);
        out.box[d][1] = b[d][1];
      } else {
        REQUIRE(b[d] == out.box[d]);
      }
    }
  }
  out.data.assign(static_cast<size_t>(volume(out.box)), 0);
  for (const Buffer* p : parts) {
    size_t n = 0;
    for_each_in(
        out.box, p->box, [&](size_t flat) { out.data[flat] = p->data[n++]; });
  }
  return out;
}

Buffer slice(const Buffer& buf, size_t dim, int64_t pieces, int64_t k) {
  const int64_t len = buf.box[dim][1] - buf.box[dim][0];
  REQUIRE(len % pieces == 0);
  Buffer out;
  out.box = buf.box;
  out.box[dim][0] = buf.box[dim][0] + k * (len / pieces);
  out.box[dim][1] = out.box[dim][0] + len / pieces;
  out.data = extract(buf, out.box);
  return out;
}

struct Grid {
  const Mesh* mesh;
  const DeviceGrid* grid;
  std::vector<int64_t> coords_of(size_t p) const {
    std::vector<int64_t> c(mesh->axes.size());
    for (size_t k = mesh->axes.size(); k-- > 0;) {
      c[k] = static_cast<int64_t>(p) % mesh->axes[k].size;
      p /= static_cast<size_t>(mesh->axes[k].size);
    }
    return c;
  }
  size_t position(const std::vector<int64_t>& c) const {
    size_t p = 0;
    for (size_t k = 0; k < c.size(); ++k) {
      p = p * static_cast<size_t>(mesh->axes[k].size)
          + static_cast<size_t>(c[k]);
    }
    return p;
  }
  // The devices of p's group over `axes` (major to minor), in group order,
  // and p's index in it.
  std::vector<size_t> group(size_t p,
                            const std::vector<size_t>& axes,
                            int64_t* index) const {
    const std::vector<int64_t> c = coords_of(p);
    int64_t n = 1;
    *index = 0;
    for (size_t a : axes) {
      *index = *index * mesh->axes[a].size + c[a];
      n *= mesh->axes[a].size;
    }
    std::vector<size_t> members;
    for (int64_t k = 0; k < n; ++k) {
      std::vector<int64_t> m = c;
      int64_t rest = k;
      for (size_t i = axes.size(); i-- > 0;) {
        m[axes[i]] = rest % mesh->axes[axes[i]].size;
        rest /= mesh->axes[axes[i]].size;
      }
      members.push_back(position(m));
    }
    return members;
  }
  std::vector<size_t> axis_indices(
      const std::vector<std::string>& names) const {
    std::vector<size_t> out;
    for (const std::string& n : names) {
      const int64_t a = mesh->index_of(n);
      REQUIRE(a >= 0);
      out.push_back(static_cast<size_t>(a));
    }
    return out;
  }
};

// The block device p holds under `s` (full rank).
Box block_of(const Grid& g,
             size_t p,
             const PartitionSpec& s,
             const std::vector<int64_t>& shape) {
  const std::vector<int64_t> c = g.coords_of(p);
  Box box(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t index = 0;
    int64_t n = 1;
    for (const std::string& a : s.dims[d].axes) {
      const size_t k = static_cast<size_t>(g.mesh->index_of(a));
      index = index * g.mesh->axes[k].size + c[k];
      n *= g.mesh->axes[k].size;
    }
    const int64_t len = shape[d] / n;
    box[d] = {index * len, (index + 1) * len};
  }
  return box;
}

std::vector<int64_t> iota_values(const Box& box,
                                 const std::vector<int64_t>& shape) {
  Buffer whole;
  for (int64_t n : shape) {
    whole.box.push_back({0, n});
  }
  whole.data.resize(static_cast<size_t>(volume(whole.box)));
  for (size_t i = 0; i < whole.data.size(); ++i) {
    whole.data[i] = static_cast<int64_t>(i);
  }
  return extract(whole, box);
}

struct SimCase {
  std::vector<int64_t> shape;
  const Side* from = nullptr;
  const Side* to = nullptr;
  PartitionSpec from_spec;
  PartitionSpec to_spec;
  std::vector<std::string> partial;
  bool same_devices = true;
  // The plan's common mesh (ReshardPlan::common), for plans on it.
  const CommonMesh* common = nullptr;
};

// Runs the plan from sc.from_spec (each device starts with its block of the
// requested source layout) and checks that every device of sc.to ends with
// its block of sc.to_spec; returns the number of target blocks compared.
size_t simulate(const SimCase& sc,
                const TensorReshard& plan,
                int64_t itemsize) {
  const Grid src{&sc.from->mesh, &sc.from->grid};
  const Grid dst{&sc.to->mesh, &sc.to->grid};
  // A plan on the common mesh runs there: each of its devices starts with
  // what the same device holds on the source.
  Grid cur = src;
  if (plan.on_common_mesh) {
    REQUIRE(sc.common != nullptr);
    cur = Grid{&sc.common->mesh, &sc.common->grid};
  }
  std::map<int64_t, size_t> source_position;
  for (size_t p = 0; p < sc.from->grid.ids.size(); ++p) {
    source_position[sc.from->grid.ids[p]] = p;
  }
  // Buffers by grid position on the current mesh.
  std::vector<Buffer> bufs(cur.grid->ids.size());
  const std::vector<size_t> partial = src.axis_indices(sc.partial);
  for (size_t q = 0; q < bufs.size(); ++q) {
    REQUIRE(source_position.count(cur.grid->ids[q]) == 1);
    const size_t p = source_position[cur.grid->ids[q]];
    bufs[q].box = block_of(src, p, sc.from_spec, sc.shape);
    bufs[q].data = iota_values(bufs[q].box, sc.shape);
    if (!partial.empty()) {
      int64_t index = 0;
      const std::vector<size_t> members = src.group(p, partial, &index);
      const int64_t n = static_cast<int64_t>(members.size());
      for (int64_t& v : bufs[q].data) {
        v = index == 0 ? v - 3 * (n - 1) : 3;
      }
    }
  }
  Grid intermediate{nullptr, nullptr};
  if (plan.intermediate) {
    intermediate = Grid{&plan.intermediate->mesh, &plan.intermediate->grid};
  }
  bool on_target = false;
  std::vector<Buffer> target_bufs;
  for (const ReshardStep& step : plan.steps) {
    INFO("step " << to_string(step.op));
    int64_t most = 0;
    std::vector<Buffer> next = bufs;
    const bool uses_intermediate =
        plan.intermediate && !step.mesh_axes.empty()
        && plan.intermediate->mesh.index_of(step.mesh_axes[0]) >= 0
        && sc.from->mesh.index_of(step.mesh_axes[0]) < 0;
    const Grid& g = uses_intermediate ? intermediate : cur;
    switch (step.op) {
      case ReshardOp::noop:
        break;
      case ReshardOp::all_gather: {
        REQUIRE(step.dim);
        const std::vector<size_t> axes = g.axis_indices(step.mesh_axes);
        for (size_t p = 0; p < bufs.size(); ++p) {
          int64_t index = 0;
          std::vector<const Buffer*> parts;
          int64_t received = 0;
          for (size_t m : g.group(p, axes, &index)) {
            parts.push_back(&bufs[m]);
            received += m == p ? 0 : volume(bufs[m].box) * itemsize;
          }
          next[p] = concat(parts, static_cast<size_t>(*step.dim));
          most = std::max(most, received);
        }
        break;
      }
      case ReshardOp::dynamic_slice: {
        if (!step.dim) {
          // Between meshes: each device slices its target block out of its
          // own (checked at the end).
          REQUIRE(sc.same_devices);
          break;
        }
        const std::vector<size_t> axes = g.axis_indices(step.mesh_axes);
        for (size_t p = 0; p < bufs.size(); ++p) {
          int64_t index = 0;
          const size_t n = g.group(p, axes, &index).size();
          next[p] = slice(bufs[p],
                          static_cast<size_t>(*step.dim),
                          static_cast<int64_t>(n),
                          index);
        }
        break;
      }
      case ReshardOp::all_to_all: {
        REQUIRE(step.dim);
        REQUIRE(step.to_dim);
        const std::vector<size_t> axes = g.axis_indices(step.mesh_axes);
        for (size_t p = 0; p < bufs.size(); ++p) {
          int64_t index = 0;
          const std::vector<size_t> members = g.group(p, axes, &index);
          const int64_t n = static_cast<int64_t>(members.size());
          std::vector<Buffer> pieces;
          int64_t received = 0;
          for (size_t m : members) {
            pieces.push_back(
                slice(bufs[m], static_cast<size_t>(*step.to_dim), n, index));
            received += m == p ? 0 : volume(pieces.back().box) * itemsize;
          }
          std::vector<const Buffer*> parts;
          for (const Buffer& b : pieces) {
            parts.push_back(&b);
          }
          next[p] = concat(parts, static_cast<size_t>(*step.dim));
          most = std::max(most, received);
        }
        break;
      }
      case ReshardOp::reduce_scatter:
      case ReshardOp::all_reduce: {
        const std::vector<size_t> axes = g.axis_indices(step.mesh_axes);
        for (size_t p = 0; p < bufs.size(); ++p) {
          int64_t index = 0;
          const std::vector<size_t> members = g.group(p, axes, &index);
          const int64_t n = static_cast<int64_t>(members.size());
          Buffer sum = step.op == ReshardOp::reduce_scatter ? slice(
                           bufs[p], static_cast<size_t>(*step.dim), n, index)
                                                            : bufs[p];
          for (size_t m : members) {
            if (m == p) {
              continue;
            }
            const std::vector<int64_t> other = extract(bufs[m], sum.box);
            for (size_t i = 0; i < other.size(); ++i) {
              sum.data[i] += other[i];
            }
          }
          const int64_t buffer = volume(bufs[p].box) * itemsize;
          // Ring algorithms: (n-1)/n of the buffer, twice for an all-reduce.
          const int64_t received = (buffer - buffer / n)
                                   * (step.op == ReshardOp::all_reduce ? 2 : 1);
          next[p] = std::move(sum);
          most = std::max(most, received);
        }
        break;
      }
      case ReshardOp::collective_permute:
      case ReshardOp::send_recv: {
        if (step.transfers.empty()) {
          // A permute on one mesh: each device takes its target block from
          // the device that holds it.
          REQUIRE(step.op == ReshardOp::collective_permute);
          for (size_t p = 0; p < bufs.size(); ++p) {
            const Box want = block_of(cur, p, sc.to_spec, sc.shape);
            if (bufs[p].box == want) {
              continue;
            }
            bool found = false;
            for (size_t m = 0; m < bufs.size() && !found; ++m) {
              if (bufs[m].box == want) {
                next[p] = bufs[m];
                found = true;
              }
            }
            REQUIRE(found);
            most = std::max(most, volume(want) * itemsize);
          }
          break;
        }
        // Between meshes: every piece from its listed device, the rest from
        // the device itself.
        std::map<int64_t, size_t> src_pos;
        for (size_t p = 0; p < g.grid->ids.size(); ++p) {
          src_pos[g.grid->ids[p]] = p;
        }
        target_bufs.assign(sc.to->grid.ids.size(), Buffer{});
        for (size_t q = 0; q < target_bufs.size(); ++q) {
          const int64_t id = sc.to->grid.ids[q];
          Buffer& out = target_bufs[q];
          out.box = block_of(dst, q, sc.to_spec, sc.shape);
          out.data.assign(static_cast<size_t>(volume(out.box)), -1);
          std::vector<bool> filled(out.data.size(), false);
          auto put = [&](const Box& box, const std::vector<int64_t>& values) {
            size_t n = 0;
            for_each_in(out.box, box, [&](size_t flat) {
              REQUIRE_FALSE(filled[flat]);
              filled[flat] = true;
              out.data[flat] = values[n++];
            });
          };
          int64_t received = 0;
          for (const Transfer& t : step.transfers) {
            if (t.to_device != id) {
              continue;
            }
            REQUIRE((!sc.same_devices || t.from_device != id));
            REQUIRE(src_pos.count(t.from_device) == 1);
            const Buffer& from = bufs[src_pos[t.from_device]];
            put(t.box, extract(from, t.box));
            CHECK(t.bytes == volume(t.box) * itemsize);
            received += t.bytes;
          }
          // What is left comes from the device's own source buffer.
          bool missing = false;
          for (bool f : filled) {
            missing = missing || !f;
          }
          if (missing) {
            REQUIRE(sc.same_devices);
            REQUIRE(src_pos.count(id) == 1);
            const Buffer& own = bufs[src_pos[id]];
            // The device's own block must cover the rest: take the overlap.
            Box overlap = out.box;
            for (size_t d = 0; d < overlap.size(); ++d) {
              overlap[d][0] = std::max(overlap[d][0], own.box[d][0]);
              overlap[d][1] = std::min(overlap[d][1], own.box[d][1]);
              REQUIRE(overlap[d][0] < overlap[d][1]);
            }
            put(overlap, extract(own, overlap));
          }
          most = std::max(most, received);
        }
        on_target = true;
        break;
      }
    }
    CHECK(step.bytes_per_device == most);
    if (!on_target) {
      bufs = std::move(next);
    }
  }
  // Every device holds its target block with the right values.
  if (!on_target) {
    // Nothing moved between meshes: each device keeps what it needs.
    REQUIRE(sc.same_devices);
    std::map<int64_t, size_t> src_pos;
    for (size_t p = 0; p < cur.grid->ids.size(); ++p) {
      src_pos[cur.grid->ids[p]] = p;
    }
    target_bufs.clear();
    for (size_t q = 0; q < sc.to->grid.ids.size(); ++q) {
      REQUIRE(src_pos.count(sc.to->grid.ids[q]) == 1);
      const Buffer& own = bufs[src_pos[sc.to->grid.ids[q]]];
      Buffer b;
      b.box = block_of(dst, q, sc.to_spec, sc.shape);
      b.data = extract(own, b.box);
      target_bufs.push_back(std::move(b));
    }
  }
  REQUIRE(target_bufs.size() == sc.to->grid.ids.size());
  size_t compared = 0;
  for (size_t q = 0; q < target_bufs.size(); ++q) {
    const Box want = block_of(dst, q, sc.to_spec, sc.shape);
    INFO("target device position " << q);
    REQUIRE(target_bufs[q].box == want);
    CHECK(target_bufs[q].data == iota_values(want, sc.shape));
    ++compared;
  }
  return compared;
}

// Whether specs `a` and `b` give every device of `s` the same block of
// `shape` (both full rank).
bool same_layout(const Side& s,
                 const PartitionSpec& a,
                 const PartitionSpec& b,
                 const std::vector<int64_t>& shape) {
  REQUIRE(a.dims.size() == shape.size());
  REQUIRE(b.dims.size() == shape.size());
  const Grid g{&s.mesh, &s.grid};
  for (size_t p = 0; p < s.grid.ids.size(); ++p) {
    if (block_of(g, p, a, shape) != block_of(g, p, b, shape)) {
      return false;
    }
  }
  return true;
}

// A random spec for `shape` on `mesh`: each axis goes to a random dim or
// nowhere, in a random order, keeping every dim divisible.
PartitionSpec random_spec(std::mt19937& rng,
                          const Mesh& mesh,
                          const std::vector<int64_t>& shape,
                          const std::vector<std::string>& exclude = {}) {
  PartitionSpec s;
  s.dims.resize(shape.size());
  std::vector<size_t> order(mesh.axes.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> shards(shape.size(), 1);
  for (size_t a : order) {
    const MeshAxis& axis = mesh.axes[a];
    if (std::find(exclude.begin(), exclude.end(), axis.name) != exclude.end()) {
      continue;
    }
    const size_t d =
        std::uniform_int_distribution<size_t>(0, shape.size())(rng);
    if (d == shape.size() || shape[d] % (shards[d] * axis.size) != 0) {
      continue;
    }
    shards[d] *= axis.size;
    s.dims[d].axes.push_back(axis.name);
  }
  return s;
}

std::string mesh_text(std::mt19937& rng,
                      const std::vector<std::string>& names,
                      int64_t devices) {
  // Factor `devices` over the axes at random.
  std::vector<int64_t> sizes(names.size(), 1);
  int64_t rest = devices;
  for (int64_t f = 2; rest > 1;) {
    if (rest % f == 0) {
      sizes[std::uniform_int_distribution<size_t>(0, names.size() - 1)(rng)] *=
          f;
      rest /= f;
    } else {
      ++f;
    }
  }
  std::string out;
  for (size_t k = 0; k < names.size(); ++k) {
    out += fmt::format("{}{}:{}", k == 0 ? "" : ",", names[k], sizes[k]);
  }
  return out;
}

}  // namespace

TEST_CASE("reshard: moving fsdp to another dim is one all_to_all",
          "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = one_tensor({1024, 4096});
  const TensorReshard r =
      plan_one(m, spec("fsdp,None"), spec("None,fsdp"), s, s);
  REQUIRE(ops(r) == std::vector<std::string>{"all_to_all"});
  CHECK(r.steps[0].mesh_axes == std::vector<std::string>{"fsdp"});
  CHECK(r.steps[0].dim == 0);
  CHECK(r.steps[0].to_dim == 1);
  // Each device holds 128 x 4096 x 2 = 1 MiB and keeps an eighth of it.
  CHECK(r.from_bytes_per_device == 1048576);
  CHECK(r.steps[0].bytes_per_device == 1048576 / 8 * 7);
  // Naive: gather the 8 MiB array (7 MiB received), then slice.
  CHECK(r.naive.bytes_per_device == 7 * 1048576);
  // The source stays (no donate): 1 MiB + 1 MiB at the all_to_all.
  CHECK(r.cost.peak_bytes_per_device == 2 * 1048576);
  CHECK(r.naive.peak_bytes_per_device == 1048576 + 8 * 1048576 + 1048576);
}

TEST_CASE(
    "reshard: dropping minor axes is an all_gather and adding them a "
    "dynamic_slice",
    "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = one_tensor({1024, 4096});
  const TensorReshard gather =
      plan_one(m, spec("(fsdp,tp),None"), spec("fsdp,None"), s, s);
  REQUIRE(ops(gather) == std::vector<std::string>{"all_gather"});
  CHECK(gather.steps[0].mesh_axes == std::vector<std::string>{"tp"});
  CHECK(gather.steps[0].dim == 0);
  // 32 x 4096 x 2 = 256 KiB per device, three more of them gathered.
  CHECK(gather.steps[0].bytes_per_device == 3 * 262144);

  const TensorReshard sliced =
      plan_one(m, spec("None,None"), spec("fsdp,tp"), s, s);
  REQUIRE(ops(sliced)
          == std::vector<std::string>{"dynamic_slice", "dynamic_slice"});
  CHECK(sliced.steps[0].mesh_axes == std::vector<std::string>{"fsdp"});
  CHECK(sliced.steps[1].mesh_axes == std::vector<std::string>{"tp"});
  CHECK(sliced.cost.bytes_per_device == 0);
  CHECK(sliced.cost.seconds == 0);
}

TEST_CASE(
    "reshard: the same spec is a noop and reordered axes a "
    "collective_permute",
    "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = one_tensor({1024, 4096});
  const TensorReshard same =
      plan_one(m, spec("fsdp,tp"), spec("fsdp,tp"), s, s);
  REQUIRE(ops(same) == std::vector<std::string>{"noop"});
  CHECK(same.cost.bytes_per_device == 0);
  CHECK(same.cost.peak_bytes_per_device == same.from_bytes_per_device);

  const TensorReshard swapped =
      plan_one(m, spec("(fsdp,tp),None"), spec("(tp,fsdp),None"), s, s);
  REQUIRE(ops(swapped) == std::vector<std::string>{"collective_permute"});
  CHECK(swapped.steps[0].bytes_per_device == swapped.from_bytes_per_device);
}

TEST_CASE("reshard: pending sums become a reduce_scatter", "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = one_tensor({1024, 4096});
  ReshardOptions options;
  options.partial = {"tp"};
  const TensorReshard r =
      plan_one(m, spec("fsdp,None"), spec("fsdp,tp"), s, s, options);
  REQUIRE(ops(r) == std::vector<std::string>{"reduce_scatter"});
  CHECK(r.steps[0].dim == 1);
  // 1 MiB summed over 4 devices: 3/4 of it received.
  CHECK(r.steps[0].bytes_per_device == 786432);
  const TensorReshard ar =
      plan_one(m, spec("fsdp,None"), spec("fsdp,None"), s, s, options);
  REQUIRE(ops(ar) == std::vector<std::string>{"all_reduce"});
  CHECK(ar.steps[0].bytes_per_device == 2 * 786432);
}

TEST_CASE("reshard: donate frees the source as the first step consumes it",
          "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = one_tensor({1024, 4096});
  ReshardOptions donate;
  donate.donate = true;
  // fsdp,None -> None,tp: the cheapest plan slices tp then gathers fsdp.
  const TensorReshard kept =
      plan_one(m, spec("fsdp,None"), spec("None,tp"), s, s);
  const TensorReshard freed =
      plan_one(m, spec("fsdp,None"), spec("None,tp"), s, s, donate);
  REQUIRE(ops(kept) == ops(freed));
  REQUIRE(ops(kept) == std::vector<std::string>{"dynamic_slice", "all_gather"});
  // 1 MiB source; 256 KiB after the slice; 2 MiB after the gather.
  CHECK(kept.cost.peak_bytes_per_device == 1048576 + 262144 + 2097152);
  CHECK(freed.cost.peak_bytes_per_device == 262144 + 2097152);
}

TEST_CASE("reshard: the intermediate sharding of the pathways docstring",
          "[reshard][intermediate]") {
  // [fsdp:8, tp:1] -> [fsdp:1, tp:4] goes through
  // [fsdp_split:4, fsdp_replica:2, tp:1] (docs/reshard.md; MaxText's
  // variant).
  const Side a = side("fsdp:8,tp:1", 8);
  const Side b = side("fsdp:1,tp:4", 4);
  std::optional<IntermediateSharding> im = find_intermediate_sharding(
      a.mesh, a.grid, spec("fsdp,tp"), b.mesh, spec("fsdp,tp"));
  REQUIRE(im);
  REQUIRE(im->mesh.axes.size() == 3);
  CHECK(im->mesh.axes[0].name == "fsdp_intermediate_split");
  CHECK(im->mesh.axes[0].size == 4);
  CHECK(im->mesh.axes[1].name == "fsdp_intermediate_replica");
  CHECK(im->mesh.axes[1].size == 2);
  CHECK(im->mesh.axes[2].name == "tp");
  CHECK(to_short(im->spec) == "fsdp_intermediate_split,tp");
  CHECK(im->replicated_axes
        == std::vector<std::string>{"fsdp_intermediate_replica"});
  // Split major, replica minor: replica groups are neighbours {0,1}, {2,3}...
  CHECK(im->grid.ids == a.grid.ids);

  // Not when a dim is already compatible, or the target has more shards.
  CHECK_FALSE(find_intermediate_sharding(a.mesh,
                                         a.grid,
                                         spec("fsdp,None"),
                                         side("fsdp:4", 4).mesh,
                                         spec("fsdp,None")));
  CHECK_FALSE(find_intermediate_sharding(
      b.mesh, b.grid, spec("None,tp"), a.mesh, spec("fsdp,None")));
  // Nor on a tuple of axes (the pathways TODO).
  const Side c = side("x:2,y:4", 8);
  CHECK_FALSE(find_intermediate_sharding(
      c.mesh, c.grid, spec("(x,y),None"), b.mesh, spec("None,tp")));
}

TEST_CASE(
    "reshard: a plan through the intermediate gathers neighbours then sends",
    "[reshard]") {
  const Side a = side("fsdp:8,tp:1", 8);
  const Side b = side("fsdp:1,tp:4", 4);
  const Manifest m = one_tensor({64, 64}, "f32");
  ReshardOptions options;
  options.transfers = true;
  options.same_devices = false;
  const TensorReshard r =
      plan_one(m, spec("fsdp,tp"), spec("fsdp,tp"), a, b, options);
  REQUIRE(r.intermediate);
  REQUIRE(ops(r) == std::vector<std::string>{"all_gather", "send_recv"});
  CHECK(r.steps[0].mesh_axes
        == std::vector<std::string>{"fsdp_intermediate_replica"});
  // 8 x 64 x 4 = 2 KiB per source device, one neighbour's received.
  CHECK(r.steps[0].bytes_per_device == 2048);
  // Each target device receives its 64 x 16 column block: 4 KiB, from the
  // four replica-0 devices (ids 0, 2, 4, 6), a 16 x 16 piece from each: 4
  // target devices x 4 pieces = 16 transfers.
  CHECK(r.steps[1].bytes_per_device == 4096);
  REQUIRE(r.steps[1].transfers.size() == 16);
  for (const Transfer& t : r.steps[1].transfers) {
    CHECK(t.from_device % 2 == 0);
    CHECK(t.bytes == 16 * 16 * 4);
  }
  SimCase sc{{64, 64}, &a, &b, spec("fsdp,tp"), spec("fsdp,tp"), {}, false};
  CHECK(simulate(sc, r, 4) == 4);  // a block per target device
}

TEST_CASE(
    "reshard: a mesh change that only narrows shards is a local "
    "dynamic_slice",
    "[reshard]") {
  // Replicated on 8 devices to tp:4,dp:2 over the same devices: no traffic.
  const Side a = side("x:8", 8);
  const Side b = side("dp:2,tp:4", 8);
  const Manifest m = one_tensor({8, 8}, "f32");
  const ReshardPlan whole =
      plan_whole(m, spec("None,None"), spec("None,tp"), a, b);
  const TensorReshard& r = whole.tensor(0);
  REQUIRE(ops(r) == std::vector<std::string>{"dynamic_slice"});
  CHECK(r.steps[0].mesh_axes == std::vector<std::string>{"tp"});
  CHECK(r.cost.bytes_per_device == 0);
  // x:8 is dp:2,tp:4 re-labelled: the slice runs on that common mesh.
  REQUIRE(whole.common);
  CHECK(r.on_common_mesh);
  CHECK(whole.common->from_axes
        == std::vector<std::vector<std::string>>{{"dp", "tp"}});
  SimCase sc{{8, 8},
             &a,
             &b,
             spec("None,None"),
             spec("None,tp"),
             {},
             true,
             &*whole.common};
  CHECK(simulate(sc, r, 4) == 8);
}

TEST_CASE("reshard: a cross-mesh plan sends exactly the overlap", "[reshard]") {
  // 4 devices to 2 others: each target device gets two source blocks.
  const Side a = side("x:4", 4);
  const Side b = side("y:2", 2);
  const Manifest m = one_tensor({8, 6}, "i32");
  ReshardOptions options;
  options.transfers = true;
  options.same_devices = false;
  const TensorReshard r =
      plan_one(m, spec("x,None"), spec("y,None"), a, b, options);
  REQUIRE(ops(r) == std::vector<std::string>{"send_recv"});
  // Rows 0-3 to the first: 4 x 6 x 4 B = 96 B, from devices 0 and 1.
  CHECK(r.steps[0].bytes_per_device == 96);
  REQUIRE(r.steps[0].transfers.size() == 4);
  CHECK(r.steps[0].transfers[0].from_device == 0);
  CHECK(r.steps[0].transfers[1].from_device == 1);
  CHECK(r.steps[0].transfers[0].box == Box{{0, 2}, {0, 6}});
  SimCase sc{{8, 6}, &a, &b, spec("x,None"), spec("y,None"), {}, false};
  CHECK(simulate(sc, r, 4) == 2);
}

TEST_CASE("reshard: the book's all_gather on a v5e-32 mesh X:8,Y:4",
          "[reshard]") {
  Topology t = test::topology_of("v5e-32");
  Diagnostics diags;
  Side s;
  s.mesh = test::mesh_of("X:8,Y:4", 32);
  std::optional<MeshLayout> layout =
      layout_mesh(t, s.mesh, test::flag_layout(), diags);
  REQUIRE(layout);
  s.grid = layout->grid;
  s.links = layout->links;
  const Manifest m = one_tensor({2048, 8192});
  const TensorReshard r = plan_one(m, spec("Y,None"), spec("None,None"), s, s);
  REQUIRE(ops(r) == std::vector<std::string>{"all_gather"});
  CHECK(r.steps[0].bytes_per_device == 3 * 8388608);
  CHECK(r.steps[0].link == LinkClass::ici);
  CHECK(r.steps[0].seconds == Approx(3 * 8388608.0 / 4.5e10));
}

TEST_CASE("reshard: random plans on one mesh survive the simulation",
          "[reshard]") {
  std::mt19937 rng(20261121);
  const std::vector<std::vector<int64_t>> shapes{
      {12}, {8, 6}, {4, 6, 8}, {16, 4}, {6, 12, 2}};
  size_t blocks = 0;  // target blocks the simulation compared
  std::map<std::string, int> op_count;
  int moved = 0;  // trials whose source and target layouts differ
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t devices =
        std::vector<int64_t>{4, 6, 8, 12, 16}[static_cast<size_t>(trial % 5)];
    const Side s = side(mesh_text(rng, {"a", "b", "c"}, devices), devices);
    const std::vector<int64_t>& shape =
        shapes[static_cast<size_t>(trial) % shapes.size()];
    std::vector<std::string> partial;
    if (trial % 4 == 0) {
      partial.push_back(s.mesh.axes[static_cast<size_t>(trial / 4) % 3].name);
    }
    const PartitionSpec from = random_spec(rng, s.mesh, shape, partial);
    const PartitionSpec to = random_spec(rng, s.mesh, shape);
    ReshardOptions options;
    options.partial = partial;
    const Manifest m = one_tensor(shape, "i32");
    INFO(to_string(s.mesh) << " " << to_short(from) << " -> " << to_short(to)
                           << " partial "
                           << fmt::format("{}", fmt::join(partial, ",")));
    const TensorReshard r = plan_one(m, from, to, s, s, options);
    // The plan is for the layouts requested, and the simulation starts from
    // the requested source and ends on the requested target.
    CHECK(same_layout(s, r.from, from, shape));
    CHECK(same_layout(s, r.to, to, shape));
    SimCase sc{shape, &s, &s, from, to, partial, true};
    blocks += simulate(sc, r, 4);
    // Never worse than gathering everything.
    CHECK(r.cost.bytes_per_device <= r.naive.bytes_per_device);
    for (const ReshardStep& step : r.steps) {
      ++op_count[std::string(to_string(step.op))];
    }
    moved += !partial.empty() || !same_layout(s, from, to, shape) ? 1 : 0;
  }
  // Every device's block of every trial: 300 trials cycle through 4, 6, 8,
  // 12 and 16 devices, 60 x (4 + 6 + 8 + 12 + 16) = 2760.
  CHECK(blocks == 2760);
  // The trials reach every op the one-mesh planner emits (each a branch of
  // the simulation), and most of them move data.
  std::string ops_seen;
  for (const auto& [op, n] : op_count) {
    ops_seen += fmt::format("{} {}; ", op, n);
  }
  INFO("ops: " << ops_seen);
  for (const char* op : {"noop",
                         "all_gather",
                         "dynamic_slice",
                         "all_to_all",
                         "reduce_scatter",
                         "all_reduce",
                         "collective_permute"}) {
    CHECK(op_count[op] > 0);
  }
  CHECK(moved > 150);
}

TEST_CASE(
    "reshard: random plans between meshes and device sets survive the "
    "simulation",
    "[reshard]") {
  std::mt19937 rng(20261122);
  const std::vector<std::vector<int64_t>> shapes{
      {24}, {8, 12}, {4, 6, 8}, {48, 2}};
  size_t blocks = 0;  // target blocks the simulation compared
  std::map<std::string, int> op_count;
  int through_intermediate = 0;
  int on_common = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t from_devices =
        std::vector<int64_t>{4, 8, 12, 16}[static_cast<size_t>(trial % 4)];
    const int64_t to_devices =
        std::vector<int64_t>{2, 4, 6, 8}[static_cast<size_t>(trial / 4 % 4)];
    const Side a = side(mesh_text(rng, {"a", "b"}, from_devices), from_devices);
    const Side b =
        side(mesh_text(rng, {"c", "d", "e"}, to_devices), to_devices);
    const std::vector<int64_t>& shape =
        shapes[static_cast<size_t>(trial) % shapes.size()];
    std::vector<std::string> partial;
    if (trial % 5 == 0) {
      partial.push_back("b");
    }
    const PartitionSpec from = random_spec(rng, a.mesh, shape, partial);
    const PartitionSpec to = random_spec(rng, b.mesh, shape);
    ReshardOptions options;
    options.partial = partial;
    options.transfers = true;
    options.same_devices = trial % 2 == 0;  // ids 0..N-1 shared, or disjoint
    const Manifest m = one_tensor(shape, "i32");
    INFO(to_string(a.mesh) << " " << to_short(from) << " -> "
                           << to_string(b.mesh) << " " << to_short(to)
                           << " same devices " << options.same_devices);
    const ReshardPlan whole = plan_whole(m, from, to, a, b, options);
    const TensorReshard& r = whole.tensor(0);
    // The plan is for the layouts requested, and the simulation starts from
    // the requested source and ends on the requested target.
    CHECK(same_layout(a, r.from, from, shape));
    CHECK(same_layout(b, r.to, to, shape));
    SimCase sc{shape,
               &a,
               &b,
               from,
               to,
               partial,
               options.same_devices,
               whole.common ? &*whole.common : nullptr};
    blocks += simulate(sc, r, 4);
    for (const ReshardStep& step : r.steps) {
      ++op_count[std::string(to_string(step.op))];
    }
    through_intermediate += r.intermediate ? 1 : 0;
    on_common += r.on_common_mesh ? 1 : 0;
  }
  // Every target device's block of every trial: the target has 2, 4, 6, 8
  // devices for trial / 4 % 4 = 0..3, a cycle of 16 trials; 200 trials are 12
  // cycles (12 x 4 x (2 + 4 + 6 + 8) = 960) and trials 192-199 (4 x 2 + 4 x
  // 4 = 24): 984.
  CHECK(blocks == 984);
  std::string ops_seen;
  for (const auto& [op, n] : op_count) {
    ops_seen += fmt::format("{} {}; ", op, n);
  }
  INFO("ops: " << ops_seen);
  CHECK(op_count["send_recv"] > 0);
  CHECK(op_count["all_gather"] > 0);
  CHECK(through_intermediate > 0);
  // Both kinds of plan were simulated: collectives on a common mesh (the
  // plain reshapes of --devices always have one when the device counts
  // match) and transfers between meshes.
  CHECK(on_common > 10);
  CHECK(on_common < 190);
}

TEST_CASE("reshard: identical tensors are planned once and totals add up",
          "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  std::string json = R"({"params": [)";
  for (int i = 0; i < 6; ++i) {
    json += fmt::format(
        R"({}{{"name": "l{}", "shape": [1024, 4096], "dtype": "bf16"}})",
        i == 0 ? "" : ",",
        i);
  }
  json += "]}";
  const Manifest m = test::manifest_of(json);
  const PartitionSpec from = spec("fsdp,None");
  const PartitionSpec to = spec("None,fsdp");
  std::vector<const PartitionSpec*> f(6, &from), t(6, &to);
  Diagnostics diags;
  std::optional<ReshardPlan> plan =
      plan_reshard(m, f, t, s.view(), s.view(), {}, diags);
  REQUIRE(plan);
  REQUIRE(plan->size() == 6);
  CHECK(plan->plans.size() == 1);
  CHECK(plan->plan_of == std::vector<uint32_t>(6, 0));
  // Equal specs held by different objects (a specs file has one per tensor)
  // share the plan too.
  std::vector<PartitionSpec> froms(6, from), tos(6, to);
  for (size_t i = 0; i < 6; ++i) {
    f[i] = &froms[i];
    t[i] = &tos[i];
  }
  std::optional<ReshardPlan> copies =
      plan_reshard(m, f, t, s.view(), s.view(), {}, diags);
  REQUIRE(copies);
  CHECK(copies->plans.size() == 1);
  CHECK(copies->totals.bytes_per_device == plan->totals.bytes_per_device);
  f.assign(6, &from);
  t.assign(6, &to);
  CHECK(plan->totals.bytes_per_device == 6 * (1048576 / 8 * 7));
  // All six sources stay; the last all_to_all adds its own output on top of
  // five finished targets: 6 MiB + 5 MiB + 1 MiB.
  CHECK(plan->totals.peak_bytes_per_device == 12 * 1048576);
  ReshardOptions donate;
  donate.donate = true;
  std::optional<ReshardPlan> freed =
      plan_reshard(m, f, t, s.view(), s.view(), donate, diags);
  REQUIRE(freed);
  // With donation a tensor's source goes as its target comes: 7 MiB at most.
  CHECK(freed->totals.peak_bytes_per_device == 7 * 1048576);
}

TEST_CASE(
    "reshard: byte counts past int64 are an error that names the manifest",
    "[reshard]") {
  // 1.5 x 2^62 bytes summed over 4 devices: the source and the all_reduce's
  // output together pass 2^63.
  const Side s = side("a:4", 4);
  Manifest m = one_tensor({6917529027641081856}, "i8");
  m.source = "big.json";
  const PartitionSpec none = spec("None");
  const PartitionSpec* f[] = {&none};
  ReshardOptions options;
  options.partial = {"a"};
  Diagnostics diags;
  CHECK_FALSE(plan_reshard(m, f, f, s.view(), s.view(), options, diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "reshard.overflow");
  CHECK(diags.items()[0].location.source == "big.json");
}

// ---------------------------------------------------------------------------
// Issue 17: meshes on topologies, the peak of a no-op.

namespace {

// `mesh` (with --dcn `dcn`) laid on the catalogue topology `name`.
Side placed(std::string_view name,
            std::string_view mesh,
            std::string dcn = "") {
  const Topology t = test::topology_of(name);
  Side s;
  s.mesh = test::mesh_of(mesh, t.devices(), std::move(dcn));
  Diagnostics diags;
  std::optional<MeshLayout> layout =
      layout_mesh(t, s.mesh, test::flag_layout(), diags);
  INFO(test::first_error(diags));
  REQUIRE(layout);
  s.grid = layout->grid;
  s.links = layout->links;
  return s;
}

}  // namespace

TEST_CASE("reshard: a no-op from two slices to one holds the tensor once",
          "[reshard]") {
  // 2xv5p-512 with dp over DCN to slice 0 alone, fsdp,tp kept: every target
  // device already holds its block, which becomes the target as it is.
  const Side a = placed("2xv5p-512", "dp:2,fsdp:64,tp:4", "dp:2");
  const Side b = placed("v5p-512", "fsdp:64,tp:4");
  ReshardOptions options;
  options.same_devices = true;  // slice 0 keeps its ids
  const PartitionSpec kept = spec("fsdp,tp");
  const TensorReshard r =
      plan_one(one_tensor({8192, 8192}), kept, kept, a, b, options);
  REQUIRE(ops(r) == std::vector<std::string>{"noop"});
  // 8192 x 8192 x 2 B / (64 x 4) = 524,288 B, held once (not source plus an
  // equal target: 1 MiB).
  CHECK(r.cost.bytes_per_device == 0);
  CHECK(r.cost.peak_bytes_per_device == 524288);

  // Three such tensors: the sources kept are the targets, 3 x 512 KiB
  // (counting each target again beside its source gave 5 x 512 KiB).
  const Manifest m = test::manifest_of(R"({"params": [
      {"name": "a", "shape": [8192, 8192], "dtype": "bf16"},
      {"name": "b", "shape": [8192, 8192], "dtype": "bf16"},
      {"name": "c", "shape": [8192, 8192], "dtype": "bf16"}]})");
  std::vector<const PartitionSpec*> specs(3, &kept);
  for (const bool donate : {false, true}) {
    options.donate = donate;
    Diagnostics diags;
    std::optional<ReshardPlan> plan =
        plan_reshard(m, specs, specs, a.view(), b.view(), options, diags);
    REQUIRE(plan);
    CHECK(plan->totals.peak_bytes_per_device == 3 * 524288);
  }
}

TEST_CASE("reshard: a no-op on one mesh counts each tensor once in totals",
          "[reshard]") {
  const Side s = side("fsdp:8,tp:4", 32);
  const Manifest m = test::manifest_of(R"({"params": [
      {"name": "a", "shape": [1024, 4096], "dtype": "bf16"},
      {"name": "n", "shape": [4096], "dtype": "bf16"}]})");
  const PartitionSpec a = spec("fsdp,tp");
  const PartitionSpec n = spec("None");
  std::vector<const PartitionSpec*> specs{&a, &n};
  Diagnostics diags;
  std::optional<ReshardPlan> plan =
      plan_reshard(m, specs, specs, s.view(), s.view(), {}, diags);
  REQUIRE(plan);
  // 1024 x 4096 x 2 B / 32 = 262,144 B and the replicated 4096 x 2 = 8,192
  // B: 270,336 B, each held once. The naive plan gathers the first (8 MiB
  // beside its 256 KiB source and 8 KiB norm) and slices it back.
  CHECK(plan->totals.peak_bytes_per_device == 262144 + 8192);
}

TEST_CASE("reshard: two slices to one takes every piece inside slice 0",
          "[reshard]") {
  // 2xv5e-16, dp over DCN, a:16 on JAX's ring order of each slice (0, 1, 2,
  // 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4: not linear in the ids, so
  // no common mesh) to slice 0 as a:4,b:4 (ids row-major). Target d needs
  // row block d, which slice 0 holds on ring[d] and slice 1 on ring[d] + 16.
  const Topology from_t = test::topology_of("2xv5e-16");
  const Topology to_t = test::topology_of("v5e-16");
  const Side a = placed("2xv5e-16", "dp:2,a:16", "dp:2");
  const Side b = placed("v5e-16", "a:4,b:4");
  ReshardOptions options;
  options.from_topology = &from_t;
  options.to_topology = &to_t;
  options.transfers = true;
  const ReshardPlan whole = plan_whole(one_tensor({16, 1024}, "f32"),
                                       spec("a,None"),
                                       spec("(a,b),None"),
                                       a,
                                       b,
                                       options);
  CHECK_FALSE(whole.common);
  const TensorReshard& r = whole.tensor(0);
  REQUIRE(r.steps.size() == 1);
  const ReshardStep& step = r.steps[0];
  // One row of 1024 f32 = 4,096 B per device, from slice 0 only.
  CHECK(step.bytes_per_device == 4096);
  for (const Transfer& t : step.transfers) {
    CHECK(t.from_device < 16);
  }
  // All over ICI: the longest route is 15 <- 4, chip (3,3) from (0,1), 3 +
  // 2 = 5 hops; 12 pieces of 4 KiB load no link past 5 us x 4.5e10 B/s, so
  // the time is the latency floor, 5 x 1 us (over DCN it was 10 us).
  CHECK(step.link == LinkClass::ici);
  CHECK(step.seconds == Approx(5e-6));
  SimCase sc{{16, 1024}, &a, &b, r.from, r.to, {}, true};
  simulate(sc, r, 4);
}

TEST_CASE("reshard: a common mesh plans collectives between meshes",
          "[reshard]") {
  // v5p-128 (4x4x4, every axis a ring). fsdp:64 and dp:4,fsdp:16 lay the
  // same devices: fsdp:64 runs over the target's fsdp then dp (major to
  // minor), so keeping fsdp,None on the smaller fsdp gathers over dp.
  const Topology t = test::topology_of("v5p-128");
  const Side a = placed("v5p-128", "fsdp:64");
  const Side b = placed("v5p-128", "dp:4,fsdp:16");
  ReshardOptions options;
  options.from_topology = &t;
  options.to_topology = &t;
  const ReshardPlan whole = plan_whole(one_tensor({4096, 4096}),
                                       spec("fsdp,None"),
                                       spec("fsdp,None"),
                                       a,
                                       b,
                                       options);
  REQUIRE(whole.common);
  CHECK(to_string(whole.common->mesh) == "dp:4,fsdp:16");
  CHECK(whole.common->from_axes
        == std::vector<std::vector<std::string>>{{"fsdp", "dp"}});
  const TensorReshard& r = whole.tensor(0);
  CHECK(r.on_common_mesh);
  REQUIRE(ops(r) == std::vector<std::string>{"all_gather"});
  CHECK(r.steps[0].mesh_axes == std::vector<std::string>{"dp"});
  // 4096 x 4096 x 2 B / 64 = 524,288 B per shard; three more arrive:
  // 1,572,864 B. dp is a ring of 4 (both ways, 2 x 9e10 B/s): the book's
  // V / W = 4 x 524,288 / 1.8e11 = 11.6508 us (a send_recv at 540 GB/s was
  // 2.9 us).
  CHECK(r.steps[0].bytes_per_device == 1572864);
  CHECK(r.steps[0].seconds == Approx(4 * 524288 / 1.8e11));
  // The same plan on a tensor small enough to simulate.
  const ReshardPlan small = plan_whole(one_tensor({64, 4}, "i32"),
                                       spec("fsdp,None"),
                                       spec("fsdp,None"),
                                       a,
                                       b,
                                       options);
  REQUIRE(small.tensor(0).on_common_mesh);
  SimCase sc{{64, 4}, &a, &b, r.from, r.to, {}, true, &*small.common};
  simulate(sc, small.tensor(0), 4);
}
