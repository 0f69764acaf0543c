#include "support/test_support.hpp"

#include <shardplan/tensor.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace shardplan;

namespace {

constexpr int64_t k_max = std::numeric_limits<int64_t>::max();
constexpr int64_t k_2_31 = int64_t{1} << 31;
constexpr int64_t k_2_59 = int64_t{1} << 59;
constexpr int64_t k_2_62 = int64_t{1} << 62;

// A tensor as a test writes it: owns what the TensorInput given to
// Manifest::add views.
struct OwnedTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::optional<LogicalAxes> logical_axes;
  PointerForm pointer_form = PointerForm::none;
  uint32_t params_index = 0;

  operator TensorInput() const {  // NOLINT: implicit, for m.add(make(...))
    return TensorInput{
        name, shape, dtype, logical_axes, pointer_form, params_index};
  }
};

OwnedTensor make(std::string name,
                 std::vector<int64_t> shape,
                 DType dtype = DType::f32) {
  OwnedTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  return t;
}

Location at(std::string pointer) {
  Location loc;
  loc.source = "m.json";
  loc.pointer = std::move(pointer);
  return loc;
}

}  // namespace

TEST_CASE("tensor: canonical names and bits", "[tensor]") {
  struct Row {
    DType dtype;
    const char* name;
    int64_t bits;
  };
  const std::vector<Row> rows = {
      {DType::f64, "f64", 64},
      {DType::f32, "f32", 32},
      {DType::f16, "f16", 16},
      {DType::bf16, "bf16", 16},
      {DType::f8_e4m3, "f8_e4m3", 8},
      {DType::f8_e5m2, "f8_e5m2", 8},
      {DType::f8_e4m3fnuz, "f8_e4m3fnuz", 8},
      {DType::f8_e5m2fnuz, "f8_e5m2fnuz", 8},
      {DType::f8_e8m0, "f8_e8m0", 8},
      {DType::i64, "i64", 64},
      {DType::i32, "i32", 32},
      {DType::i16, "i16", 16},
      {DType::i8, "i8", 8},
      {DType::i4, "i4", 4},
      {DType::u64, "u64", 64},
      {DType::u32, "u32", 32},
      {DType::u16, "u16", 16},
      {DType::u8, "u8", 8},
      {DType::u4, "u4", 4},
      {DType::boolean, "bool", 8},
      {DType::c64, "c64", 64},
      {DType::c128, "c128", 128},
  };
  std::vector<std::string> names;
  for (const Row& row : rows) {
    CAPTURE(row.name);
    CHECK(to_string(row.dtype) == row.name);
    CHECK(dtype_bits(row.dtype) == row.bits);
    // Every canonical name parses back to its dtype.
    CHECK(parse_dtype(row.name) == row.dtype);
    names.emplace_back(row.name);
  }
  CHECK(dtype_names() == names);
}

TEST_CASE("tensor: every documented dtype spelling", "[tensor]") {
  const std::vector<std::pair<const char*, DType>> spellings = {
      // NumPy / JAX
      {"float64", DType::f64},
      {"float32", DType::f32},
      {"float16", DType::f16},
      {"bfloat16", DType::bf16},
      {"float8_e4m3fn", DType::f8_e4m3},
      {"float8_e5m2", DType::f8_e5m2},
      {"float8_e4m3fnuz", DType::f8_e4m3fnuz},
      {"float8_e5m2fnuz", DType::f8_e5m2fnuz},
      {"float8_e8m0fnu", DType::f8_e8m0},
      {"int64", DType::i64},
      {"int32", DType::i32},
      {"int16", DType::i16},
      {"int8", DType::i8},
      {"int4", DType::i4},
      {"uint64", DType::u64},
      {"uint32", DType::u32},
      {"uint16", DType::u16},
      {"uint8", DType::u8},
      {"uint4", DType::u4},
      {"bool", DType::boolean},
      {"bool_", DType::boolean},
      {"complex64", DType::c64},
      {"complex128", DType::c128},
      // short names
      {"i64", DType::i64},
      {"i32", DType::i32},
      {"i16", DType::i16},
      {"i8", DType::i8},
      {"i4", DType::i4},
      {"u64", DType::u64},
      {"u32", DType::u32},
      {"u16", DType::u16},
      {"u8", DType::u8},
      {"u4", DType::u4},
      {"c64", DType::c64},
      {"c128", DType::c128},
      {"fp64", DType::f64},
      {"fp32", DType::f32},
      {"fp16", DType::f16},
      {"fp8_e4m3", DType::f8_e4m3},
      {"fp8_e5m2", DType::f8_e5m2},
      {"f8_e4m3", DType::f8_e4m3},
      {"f8_e5m2", DType::f8_e5m2},
      {"f8_e4m3fn", DType::f8_e4m3},
      {"f8e4m3fn", DType::f8_e4m3},
      {"e4m3", DType::f8_e4m3},
      {"e5m2", DType::f8_e5m2},
      // PyTorch: "float" is f32 and "int" is i32, as torch.float / torch.int.
      {"float", DType::f32},
      {"double", DType::f64},
      {"half", DType::f16},
      {"long", DType::i64},
      {"int", DType::i32},
      {"short", DType::i16},
      {"torch.uint8", DType::u8},
      {"torch.bool", DType::boolean},
      {"torch.float8_e4m3fn", DType::f8_e4m3},
      {"torch.float8_e5m2", DType::f8_e5m2},
      {"cfloat", DType::c64},
      {"cdouble", DType::c128},
      // safetensors
      {"F64", DType::f64},
      {"F32", DType::f32},
      {"F16", DType::f16},
      {"BF16", DType::bf16},
      {"F8_E4M3", DType::f8_e4m3},
      {"F8_E5M2", DType::f8_e5m2},
      {"F8_E8M0", DType::f8_e8m0},
      {"I64", DType::i64},
      {"I32", DType::i32},
      {"I16", DType::i16},
      {"I8", DType::i8},
      {"U64", DType::u64},
      {"U32", DType::u32},
      {"U16", DType::u16},
      {"U8", DType::u8},
      {"BOOL", DType::boolean},
      // XLA HLO
      {"pred", DType::boolean},
      {"PRED", DType::boolean},
      {"s64", DType::i64},
      {"S32", DType::i32},
      {"s16", DType::i16},
      {"s8", DType::i8},
      {"s4", DType::i4},
      {"f8e4m3fn", DType::f8_e4m3},
      {"f8e5m2", DType::f8_e5m2},
      {"f8e4m3fnuz", DType::f8_e4m3fnuz},
      {"f8e5m2fnuz", DType::f8_e5m2fnuz},
      {"f8e8m0fnu", DType::f8_e8m0},
      // module prefixes, case and whitespace
      {"torch.bfloat16", DType::bf16},
      {"Torch.BFloat16", DType::bf16},
      {"jnp.float32", DType::f32},
      {"np.int8", DType::i8},
      {"numpy.bool_", DType::boolean},
      {"jax.numpy.int4", DType::i4},
      {"ml_dtypes.float8_e4m3fn", DType::f8_e4m3},
      {"tf.bfloat16", DType::bf16},
      {"torch.float", DType::f32},
      {"torch.int", DType::i32},
      {"torch.long", DType::i64},
      {"  bf16\t", DType::bf16},
      {"\n jnp.bfloat16 \r\n", DType::bf16},
  };
  for (const auto& [text, expected] : spellings) {
    CAPTURE(text);
    CHECK(parse_dtype(text) == expected);
  }
}

TEST_CASE("tensor: unknown dtypes are nullopt", "[tensor]") {
  for (const char* text :
       {"",
        "   ",
        "float128",
        "bfloat",
        "fp8",
        "torch.",
        "jnp.",
        "torch.torch.float32",
        "int 32",
        "float32x",
        "f 32",
        "b f16",
        "F8_E4M3_",
        "complex",
        "xfloat32",
        "pytorch.float32",
        "float32float32float32float32float32float32float32float32"}) {
    CAPTURE(text);
    CHECK_FALSE(parse_dtype(text).has_value());
  }
  // A NUL byte inside is not a spelling either.
  CHECK_FALSE(parse_dtype(std::string_view("f32\0", 4)).has_value());
}

TEST_CASE("tensor: bytes_for rounds sub-byte dtypes up", "[tensor]") {
  CHECK(bytes_for(4096 * 4096, DType::bf16) == 33554432);
  CHECK(bytes_for(3, DType::i4) == 2);  // 12 bits -> 2 bytes
  CHECK(bytes_for(1, DType::u4) == 1);
  CHECK(bytes_for(16, DType::i4) == 8);
  CHECK(bytes_for(17, DType::i4) == 9);
  CHECK(bytes_for(10, DType::boolean) == 10);
  CHECK(bytes_for(3, DType::c128) == 48);
  CHECK(bytes_for(0, DType::c128) == 0);
  CHECK(bytes_for(0, DType::i4) == 0);
}

TEST_CASE("tensor: bytes_for overflow edges", "[tensor]") {
  // n * bits overflows but n * bits / 8 does not:
  // (2^63 - 1) x 4 bits = ceil((2^63 - 1) / 2) = 2^62 bytes.
  CHECK(bytes_for(k_max, DType::i4) == k_2_62);
  CHECK(bytes_for(k_max, DType::u8) == k_max);
  CHECK(bytes_for(k_max, DType::boolean) == k_max);
  CHECK_FALSE(bytes_for(k_max, DType::bf16).has_value());
  // 2^62 - 1 bf16 = 2^63 - 2 bytes fits; 2^62 bf16 = 2^63 does not.
  CHECK(bytes_for(k_2_62 - 1, DType::bf16) == k_max - 1);
  CHECK_FALSE(bytes_for(k_2_62, DType::bf16).has_value());
  // 2^62 f32 = 2^64 bytes.
  CHECK_FALSE(bytes_for(k_2_62, DType::f32).has_value());
  // (2^63 - 1) / 16 c128 elements: 576460752303423487 x 16 = 2^63 - 16.
  CHECK(bytes_for(k_max / 16, DType::c128) == k_max - 15);
  CHECK_FALSE(bytes_for(k_max / 16 + 1, DType::c128).has_value());
}

TEST_CASE("tensor: add fills counts and totals", "[tensor]") {
  Manifest m;
  Diagnostics diags;
  REQUIRE(m.add(make("w", {4096, 4096}, DType::bf16), diags, at("/params/0")));
  REQUIRE(m.add(make("scalar", {}, DType::f32), diags, at("/params/1")));
  REQUIRE(m.add(make("packed", {3}, DType::i4), diags, at("/params/2")));
  REQUIRE(m.add(make("empty", {0, 1024}, DType::f64), diags, at("/params/3")));
  REQUIRE(m.add(make("mask", {7}, DType::boolean), diags, at("/params/4")));
  CHECK_FALSE(diags.has_errors());
  REQUIRE(m.size() == 5);
  CHECK(m.tensors()[0].num_elements == 16777216);
  CHECK(m.tensors()[0].num_bytes == 33554432);
  CHECK(m.tensors()[1].num_elements == 1);
  CHECK(m.tensors()[1].num_bytes == 4);
  CHECK(m.tensors()[2].num_bytes == 2);
  CHECK(m.tensors()[3].num_elements == 0);
  CHECK(m.tensors()[3].num_bytes == 0);
  CHECK(m.tensors()[4].num_bytes == 7);
  CHECK(m.total_elements() == 16777216 + 1 + 3 + 0 + 7);
  CHECK(m.total_bytes() == 33554432 + 4 + 2 + 0 + 7);
  // Order is kept, and find() sees every tensor.
  CHECK(m.tensors()[2].name == "packed");
  REQUIRE(m.find("mask") != nullptr);
  CHECK(m.find("mask")->shape == std::vector<int64_t>{7});
  CHECK(m.find("Mask") == nullptr);
  CHECK(m.find("") == nullptr);
}

TEST_CASE("tensor: a zero dim wins over huge dims", "[tensor]") {
  Manifest m;
  Diagnostics diags;
  CHECK(
      m.add(make("a", {k_max, k_max, 0}, DType::c128), diags, at("/params/0")));
  CHECK(m.add(make("b", {0, k_max, k_max}), diags, at("/params/1")));
  CHECK_FALSE(diags.has_errors());
  CHECK(m.total_elements() == 0);
  CHECK(m.total_bytes() == 0);
}

TEST_CASE("tensor: a tensor with a dim of 0 is added with a located warning",
          "[tensor]") {
  Manifest m;
  Diagnostics diags;
  // [4, 0, 0] bf16: 4 x 0 x 0 = 0 elements, 0 bytes; the first 0 is dim 1.
  REQUIRE(m.add(make("w", {4, 0, 0}, DType::bf16), diags, at("/params/0")));
  REQUIRE(m.add(make("b", {4}, DType::bf16), diags, at("/params/1")));
  REQUIRE(m.size() == 2);
  CHECK(m.tensors()[0].num_bytes == 0);
  CHECK(m.total_bytes() == 8);  // b: 4 x 2 bytes
  CHECK_FALSE(diags.has_errors());
  REQUIRE(diags.items().size() == 1);  // one per tensor, none for b
  const Diagnostic& d = diags.items()[0];
  CHECK(d.severity == Severity::warning);
  CHECK(render(d)
        == "m.json:/params/0/shape/1: warning: dim 1 of \"w\" is 0: the "
           "tensor has no elements (shape [4, 0, 0]); it takes 0 bytes on "
           "every device [manifest.empty-tensor]");
  CHECK(d.tensor == "w");
  CHECK(d.dim == 1);
  // A source with no pointer (a built-in model, a flag) is named alone.
  CHECK(m.add(make("e", {0}), diags, Location::of("--model tiny")));
  REQUIRE(diags.items().size() == 2);
  CHECK(diags.items()[1].location.source == "--model tiny");
  CHECK(diags.items()[1].location.pointer.empty());
}

TEST_CASE("tensor: add reports bad tensors and leaves the manifest unchanged",
          "[tensor]") {
  Manifest m;
  Diagnostics diags;
  OwnedTensor w = make("w", {8, 8});
  // Set by the reader; add() keeps it as given.
  w.pointer_form = PointerForm::params;
  w.params_index = 0;
  REQUIRE(m.add(w, diags, at("/params/0")));
  REQUIRE(m.find("w")->pointer() == "/params/0");

  SECTION("empty name") {
    CHECK_FALSE(m.add(make("", {8}), diags, at("/params/1")));
    CHECK(test::first_error(diags)
          == "m.json:/params/1: error: tensor name is empty [manifest.name]");
    CHECK_FALSE(diags.items()[0].tensor.has_value());
  }
  SECTION("duplicate name") {
    CHECK_FALSE(m.add(make("w", {2}), diags, at("/params/1")));
    CHECK(test::first_error(diags)
          == "m.json:/params/1: error: duplicate tensor name \"w\" "
             "(first at /params/0) [manifest.duplicate-name]");
    CHECK(diags.items()[0].tensor == "w");
    CHECK(m.find("w")->shape == std::vector<int64_t>{8, 8});
  }
  SECTION("negative dims, each reported") {
    CHECK_FALSE(m.add(make("x", {4, -3, -1}), diags, at("/params/1")));
    REQUIRE(diags.error_count() == 2);
    CHECK(render(diags.items()[0])
          == "m.json:/params/1/shape/1: error: dim 1 of \"x\" is -3; dims "
             "must be >= 0 [manifest.bad-dim]");
    CHECK(diags.items()[0].dim == 1);
    CHECK(diags.items()[0].tensor == "x");
    CHECK(diags.items()[1].location.pointer == "/params/1/shape/2");
  }
  SECTION("negative dim without a pointer keeps the location") {
    Location flag;
    flag.source = "--shape";
    CHECK_FALSE(m.add(make("x", {-3}), diags, flag));
    CHECK(test::first_error(diags)
          == "--shape: error: dim 0 of \"x\" is -3; dims must be >= 0 "
             "[manifest.bad-dim]");
  }
  SECTION("logical axes of the wrong rank") {
    OwnedTensor t = make("x", {4, 4});
    t.logical_axes = LogicalAxes{"embed", std::nullopt, "mlp"};
    CHECK_FALSE(m.add(t, diags, at("/params/1")));
    CHECK(test::first_error(diags)
          == "m.json:/params/1/logical_axes: error: \"x\" has 3 logical axes "
             "for rank 2 [manifest.logical-axes]");
  }
  SECTION("too many elements: [2^31, 2^31, 2] = 2^63") {
    CHECK_FALSE(m.add(
        make("x", {k_2_31, k_2_31, 2}, DType::u8), diags, at("/params/1")));
    CHECK(test::first_error(diags)
          == "m.json:/params/1: error: \"x\" has more elements than fit in 64 "
             "bits: 4611686018427387904 x 2 overflows [manifest.overflow]");
  }
  SECTION("too many bytes: 2^62 f32") {
    CHECK_FALSE(m.add(make("x", {k_2_62}, DType::f32), diags, at("/params/1")));
    CHECK(test::first_error(diags)
          == "m.json:/params/1: error: bytes of \"x\" overflow 64 bits: "
             "4611686018427387904 elements x 4 bytes [manifest.overflow]");
  }
  SECTION("total overflow") {
    // 64 + (2^63 - 1 - 64) = 2^63 - 1 elements; i4 keeps the bytes small:
    // ceil((2^63 - 65) / 2) = 2^62 - 32.
    CHECK(m.add(make("big", {k_max - 64}, DType::i4), diags, at("/params/1")));
    CHECK(m.total_bytes() == 256 + k_2_62 - 32);
    CHECK(m.total_elements() == k_max);
    CHECK_FALSE(m.add(make("one", {1}, DType::u8), diags, at("/params/2")));
    CHECK(test::first_error(diags)
          == "m.json:/params/2: error: total elements of the manifest overflow "
             "64 bits at \"one\": 9223372036854775807 + 1 [manifest.overflow]");
    CHECK(m.size() == 2);
  }
  SECTION("total bytes overflow, elements fit") {
    // 256 + 16 x (2^59 - 17) = 2^63 - 16 bytes; 16 more overflow.
    CHECK(
        m.add(make("big", {k_2_59 - 17}, DType::c128), diags, at("/params/1")));
    CHECK(m.total_bytes() == k_max - 15);
    CHECK_FALSE(m.add(make("one", {1}, DType::c128), diags, at("/params/2")));
    CHECK(test::first_error(diags)
          == "m.json:/params/2: error: total bytes of the manifest overflow 64 "
             "bits at \"one\": 9223372036854775792 + 16 [manifest.overflow]");
  }
  if (diags.has_errors()) {
    // Nothing of a rejected tensor is kept.
    CHECK(m.find("x") == nullptr);
    CHECK(m.find("one") == nullptr);
    CHECK(m.tensors().back().name != "one");
  }
}

TEST_CASE("tensor: many tensors", "[tensor]") {
  constexpr size_t k_count = 200000;
  Manifest m;
  m.reserve(k_count);
  Diagnostics diags;
  for (size_t i = 0; i < k_count; ++i) {
    REQUIRE(
        m.add(make("layers." + std::to_string(i) + ".w", {4, 2}, DType::bf16),
              diags,
              at("/params/" + std::to_string(i))));
  }
  CHECK(m.size() == k_count);
  CHECK(m.total_bytes() == static_cast<int64_t>(k_count) * 16);
  REQUIRE(m.find("layers.123456.w") != nullptr);
  CHECK(m.find("layers.123456.w")->pointer().empty());
  CHECK(m.find("layers.123456.w") == &m.tensors()[123456]);
  CHECK_FALSE(m.add(make("layers.7.w", {1}), diags, at("/params/x")));
  CHECK(test::first_error(diags)
        == "m.json:/params/x: error: duplicate tensor name \"layers.7.w\" "
           "[manifest.duplicate-name]");
}

TEST_CASE("tensor: a copy of a manifest owns its names and dims", "[tensor]") {
  Diagnostics diags;
  std::optional<Manifest> copy;
  Manifest moved;
  {
    Manifest m;
    OwnedTensor w = make("layers.0.attention.wq", {4096, 128}, DType::bf16);
    w.logical_axes = LogicalAxes{"embed", std::nullopt};
    w.pointer_form = PointerForm::key;
    REQUIRE(m.add(w, diags, at("/layers.0.attention.wq")));
    REQUIRE(m.add(make("scalar", {}), diags, at("/scalar")));
    copy = m;
    moved = std::move(m);
  }  // `m` is gone: the copy's views must not point into it
  for (const Manifest* m : {&*copy, &moved}) {
    REQUIRE(m->size() == 2);
    const Tensor& t = m->tensors()[0];
    CHECK(t.name == "layers.0.attention.wq");
    CHECK(t.shape == std::vector<int64_t>{4096, 128});
    REQUIRE(t.logical_axes.has_value());
    CHECK(*t.logical_axes == LogicalAxes{"embed", std::nullopt});
    CHECK(t.pointer() == "/layers.0.attention.wq");
    CHECK(t.num_bytes == 4096 * 128 * 2);
    CHECK(m->find("scalar") == &m->tensors()[1]);
    CHECK(m->tensors()[1].shape.empty());
    CHECK(m->total_bytes() == 4096 * 128 * 2 + 4);
  }
  // A manifest moved from can be reused.
  Manifest from = moved;
  Manifest to = std::move(from);
  CHECK(to.find("scalar") == &to.tensors()[1]);
  CHECK(from.find("scalar") == nullptr);  // NOLINT(bugprone-use-after-move)
  REQUIRE(from.add(make("again", {1}), diags, at("/again")));
  CHECK(from.find("again") == &from.tensors().back());
  // The copy takes more tensors, and its index still finds the first ones.
  REQUIRE(copy->add(make("b", {3}), diags, at("/b")));
  CHECK(copy->find("layers.0.attention.wq") == &copy->tensors()[0]);
  CHECK_FALSE(copy->add(make("scalar", {1}), diags, at("/x")));
  CHECK(test::first_error(diags)
        == "m.json:/x: error: duplicate tensor name \"scalar\" "
           "[manifest.duplicate-name]");
}

TEST_CASE("tensor: names and dims stay put as the manifest grows", "[tensor]") {
  Manifest m;  // no reserve: the tensor list and the index regrow
  Diagnostics diags;
  REQUIRE(m.add(make("first", {1, 2, 3}), diags, at("/params/0")));
  const char* name = m.tensors()[0].name.data();
  const int64_t* dims = m.tensors()[0].shape.data();
  std::string long_name(100000, 'x');  // larger than a chunk of the arena
  REQUIRE(m.add(make(long_name, {5}), diags, at("/params/1")));
  for (int i = 2; i < 5000; ++i) {
    REQUIRE(m.add(make("t" + std::to_string(i), {i}), diags, at("/params/i")));
  }
  CHECK(m.tensors()[0].name.data() == name);
  CHECK(m.tensors()[0].shape.data() == dims);
  CHECK(m.tensors()[0].name == "first");
  CHECK(m.tensors()[1].name == long_name);
  CHECK(m.find("t4999")->shape == std::vector<int64_t>{4999});
  CHECK(m.find(long_name) == &m.tensors()[1]);
}

TEST_CASE("tensor: the name index finds every name as it fills and grows",
          "[tensor]") {
  // Short and long names, many sharing prefixes, through every table size
  // from the smallest (the index is up to 7/8 full and wraps around).
  Manifest m;
  Diagnostics diags;
  std::vector<std::string> names;
  for (int i = 0; i < 3000; ++i) {
    names.push_back(i % 3 == 0
                        ? std::to_string(i)
                        : "model.layers." + std::to_string(i % 61)
                              + ".mlp.experts." + std::to_string(i) + ".w");
    REQUIRE(m.add(make(names.back(), {1}), diags, at("/params/i")));
    if (i % 97 == 0 || i < 40) {
      for (size_t j = 0; j < names.size(); ++j) {
        REQUIRE(m.find(names[j]) == &m.tensors()[j]);
      }
      CHECK(m.find(names.back() + "x") == nullptr);
      CHECK(m.find("x" + names.back()) == nullptr);
    }
  }
  for (size_t j = 0; j < names.size(); j += 7) {
    CHECK_FALSE(m.add(make(names[j], {2}), diags, at("/params/d")));
  }
  CHECK(m.size() == names.size());
}

TEST_CASE("tensor: floating and FP8 dtypes", "[tensor]") {
  // Every f8 is floating; f8_e8m0 (exponent only, MX scales) holds no values.
  for (DType d : {DType::f8_e4m3,
                  DType::f8_e5m2,
                  DType::f8_e4m3fnuz,
                  DType::f8_e5m2fnuz}) {
    CHECK(is_fp8(d));
    CHECK(is_floating(d));
  }
  CHECK(is_floating(DType::f8_e8m0));
  CHECK_FALSE(is_fp8(DType::f8_e8m0));
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_fp8(DType::bf16));
  CHECK_FALSE(is_floating(DType::i8));
  CHECK_FALSE(is_floating(DType::boolean));
  CHECK_FALSE(is_floating(DType::c64));  // complex: not a training dtype
}
