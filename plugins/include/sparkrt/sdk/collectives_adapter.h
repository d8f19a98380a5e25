// sparkrt.collectives.v1 (sparkrt/extensions/collectives.h) from a C++ class:
// what plugin_sdk.h does for the device calls, for the collectives table.
// The adapter owns the boundary: it checks each args struct's struct_size,
// catches exceptions so none crosses the C ABI, and turns the class's
// absl::Status into a SparkrtError that the table's error functions (the
// plugin table's own) read and release. The class implements behaviour only,
// as static functions, so the table needs no object and outlives nothing:
//
//   struct MyCollectives {
//     // Optional: put before each call's name in the adapter's own errors.
//     static constexpr const char* kCallPrefix = "collectives ";
//     static absl::Status library(SparkrtCollectivesLibraryArgs& args);
//     static absl::Status get_unique_id(SparkrtUniqueIdArgs& args);
//     static absl::Status comm_init_all(SparkrtCommInitAllArgs& args);
//     static absl::Status comm_init_rank(SparkrtCommInitRankArgs& args);
//     static absl::Status comm_destroy(SparkrtComm comm);
//     static absl::Status comm_abort(SparkrtComm comm);
//     static absl::Status comm_status(SparkrtComm comm);
//     static absl::Status collective(const SparkrtCollectiveArgs& args);
//     static absl::Status group_start();
//     static absl::Status group_end();
//   };
//
//   const void* MyBackend::extension(std::string_view name) {
//     if (name == SPARKRT_COLLECTIVES_EXTENSION_NAME)
//       return sdk::collectives_extension<MyCollectives>();
//     return nullptr;
//   }
//
// The args a call receives have passed the size check, so every field of
// this header's struct is there; the out fields are the class's to fill.
// What a backend does when one of its devices closes (ending that device's
// communicators) stays in the device, whose teardown order it depends on.
#ifndef SPARKRT_SDK_COLLECTIVES_ADAPTER_H_
#define SPARKRT_SDK_COLLECTIVES_ADAPTER_H_

#include <concepts>

#include "absl/status/status.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/plugin_sdk.h"

namespace sparkrt::sdk {

// A class the adapter can make a table of (see above).
template <typename C>
concept CollectivesImpl = requires(SparkrtCollectivesLibraryArgs& library,
                                   SparkrtUniqueIdArgs& unique_id, SparkrtCommInitAllArgs& all,
                                   SparkrtCommInitRankArgs& rank, SparkrtComm comm,
                                   const SparkrtCollectiveArgs& op) {
  { C::library(library) } -> std::same_as<absl::Status>;
  { C::get_unique_id(unique_id) } -> std::same_as<absl::Status>;
  { C::comm_init_all(all) } -> std::same_as<absl::Status>;
  { C::comm_init_rank(rank) } -> std::same_as<absl::Status>;
  { C::comm_destroy(comm) } -> std::same_as<absl::Status>;
  { C::comm_abort(comm) } -> std::same_as<absl::Status>;
  { C::comm_status(comm) } -> std::same_as<absl::Status>;
  { C::collective(op) } -> std::same_as<absl::Status>;
  { C::group_start() } -> std::same_as<absl::Status>;
  { C::group_end() } -> std::same_as<absl::Status>;
};

namespace detail {

template <CollectivesImpl C>
struct CollectivesAdapter {
  static constexpr const char* prefix() {
    if constexpr (requires { C::kCallPrefix; }) return C::kCallPrefix;
    else return "";
  }
  static CallName name(const char* call) { return CallName(prefix(), call); }

  static SparkrtError* library(SparkrtCollectivesLibraryArgs* a) {
    return guard(name("library"), a, SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE,
                 [&] { return C::library(*a); });
  }
  static SparkrtError* get_unique_id(SparkrtUniqueIdArgs* a) {
    return guard(name("get_unique_id"), a, SPARKRT_UNIQUE_ID_ARGS_SIZE,
                 [&] { return C::get_unique_id(*a); });
  }
  static SparkrtError* comm_init_all(SparkrtCommInitAllArgs* a) {
    return guard(name("comm_init_all"), a, SPARKRT_COMM_INIT_ALL_ARGS_SIZE,
                 [&] { return C::comm_init_all(*a); });
  }
  static SparkrtError* comm_init_rank(SparkrtCommInitRankArgs* a) {
    return guard(name("comm_init_rank"), a, SPARKRT_COMM_INIT_RANK_ARGS_SIZE,
                 [&] { return C::comm_init_rank(*a); });
  }
  static SparkrtError* comm_destroy(SparkrtCommArgs* a) {
    return guard(name("comm_destroy"), a, SPARKRT_COMM_ARGS_SIZE,
                 [&] { return C::comm_destroy(a->comm); });
  }
  static SparkrtError* comm_abort(SparkrtCommArgs* a) {
    return guard(name("comm_abort"), a, SPARKRT_COMM_ARGS_SIZE,
                 [&] { return C::comm_abort(a->comm); });
  }
  static SparkrtError* comm_status(SparkrtCommArgs* a) {
    return guard(name("comm_status"), a, SPARKRT_COMM_ARGS_SIZE,
                 [&] { return C::comm_status(a->comm); });
  }
  static SparkrtError* collective(SparkrtCollectiveArgs* a) {
    return guard(name("collective"), a, SPARKRT_COLLECTIVE_ARGS_SIZE,
                 [&] { return C::collective(*a); });
  }
  static SparkrtError* group_start(SparkrtGroupArgs* a) {
    return guard(name("group_start"), a, SPARKRT_GROUP_ARGS_SIZE, [] { return C::group_start(); });
  }
  static SparkrtError* group_end(SparkrtGroupArgs* a) {
    return guard(name("group_end"), a, SPARKRT_GROUP_ARGS_SIZE, [] { return C::group_end(); });
  }
};

}  // namespace detail

// The table of `C`, built once, with the SDK's error functions.
template <CollectivesImpl C>
const SparkrtCollectivesExtension* collectives_extension() {
  using A = detail::CollectivesAdapter<C>;
  static constexpr SparkrtCollectivesExtension table = {
      SPARKRT_COLLECTIVES_EXTENSION_SIZE,
      &detail::error_code,
      &detail::error_message,
      &detail::error_destroy,
      &A::library,
      &A::get_unique_id,
      &A::comm_init_all,
      &A::comm_init_rank,
      &A::comm_destroy,
      &A::comm_abort,
      &A::comm_status,
      &A::collective,
      &A::group_start,
      &A::group_end,
  };
  return &table;
}

}  // namespace sparkrt::sdk

#endif  // SPARKRT_SDK_COLLECTIVES_ADAPTER_H_
