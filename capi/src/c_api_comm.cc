// The C API's communicators: sparkrt::Communicator behind handles.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "c_api_internal.h"
#include "sparkrt/communicator.h"

using sparkrt::Communicator;
using sparkrt::DataType;
using sparkrt::DevicePtr;
using sparkrt::ReduceOp;
using sparkrt::Stream;
using sparkrt::capi::dev;
using sparkrt::capi::guarded;
using sparkrt::capi::to_c;

struct sparkrt_comm {
  std::unique_ptr<Communicator> comm;
};

namespace {

DataType type_of(int32_t v) { return static_cast<DataType>(v); }
ReduceOp op_of(int32_t v) { return static_cast<ReduceOp>(v); }

// The C++ enums are 8 bits wide: a value beyond them is refused here, naming
// it, rather than wrapped onto another one; the C++ call refuses the rest.
absl::Status check_width(const char* function, int32_t type, int32_t op) {
  if (type < 0 || type > 255)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: data type %d is not a SparkrtDataType", function, type));
  if (op < 0 || op > 255)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: reduce op %d is not a SparkrtReduceOp", function, op));
  return absl::OkStatus();
}

// Takes over a callback's error.
absl::Status from_c(sparkrt_status* s) {
  if (s == nullptr) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s->code), s->message);
  sparkrt_status_free(s);
  return out;
}

}  // namespace

extern "C" {

sparkrt_status* sparkrt_comm_library(sparkrt_device* device, const char** out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    std::lock_guard<std::mutex> lock(device->mu);
    if (!device->comm_library) {
      auto lib = Communicator::library(dev(device));
      if (!lib.ok()) return lib.status();
      device->comm_library = *std::move(lib);
    }
    *out = device->comm_library->c_str();
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_comm_create_all(sparkrt_device* const* devices, int32_t count,
                                        sparkrt_comm** comms) {
  SPARKRT_C_REQUIRE(devices);
  SPARKRT_C_REQUIRE(comms);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (count < 1)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: count is %d; give at least one device", fn, count));
    std::vector<sparkrt::Device*> devs;
    for (int32_t i = 0; i < count; ++i) {
      if (devices[i] == nullptr)
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: devices[%d] is NULL; pass open devices", fn, i));
      devs.push_back(devices[i]->device.get());
    }
    auto made = Communicator::create_all(devs);
    if (!made.ok()) return made.status();
    std::vector<std::unique_ptr<sparkrt_comm>> handles;
    for (auto& c : *made) handles.push_back(std::make_unique<sparkrt_comm>(sparkrt_comm{std::move(c)}));
    for (int32_t i = 0; i < count; ++i) comms[i] = handles[i].release();
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_comm_unique_id(sparkrt_device* device, SparkrtUniqueId* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    auto id = Communicator::unique_id(dev(device));
    if (!id.ok()) return id.status();
    static_assert(sizeof(out->bytes) == sizeof(id->bytes));
    std::memcpy(out->bytes, id->bytes.data(), sizeof(out->bytes));
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_comm_create_rank(sparkrt_device* device, int32_t num_ranks, int32_t rank,
                                         const SparkrtUniqueId* id, sparkrt_comm** out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(id);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    sparkrt::UniqueId uid;
    std::memcpy(uid.bytes.data(), id->bytes, uid.bytes.size());
    auto c = Communicator::create_rank(dev(device), num_ranks, rank, uid);
    if (!c.ok()) return c.status();
    *out = new sparkrt_comm{*std::move(c)};
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_comm_destroy(sparkrt_comm* comm) {
  if (comm == nullptr) return nullptr;
  sparkrt_status* st = guarded(__func__, [&] { return comm->comm->destroy(); });
  delete comm;
  return st;
}

sparkrt_status* sparkrt_comm_abort(sparkrt_comm* comm) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&] { return comm->comm->abort(); });
}

sparkrt_status* sparkrt_comm_status(sparkrt_comm* comm) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&] { return comm->comm->status(); });
}

int32_t sparkrt_comm_rank(const sparkrt_comm* comm) {
  return comm == nullptr ? -1 : comm->comm->rank();
}

int32_t sparkrt_comm_size(const sparkrt_comm* comm) {
  return comm == nullptr ? 0 : comm->comm->size();
}

sparkrt_status* sparkrt_comm_group(sparkrt_device* device, sparkrt_group_fn fn, void* user_data) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(fn);
  return guarded(__func__, [&] {
    return Communicator::group(dev(device), [&] { return from_c(fn(user_data)); });
  });
}

sparkrt_status* sparkrt_all_reduce(sparkrt_comm* comm, SparkrtDevicePtr send,
                                   SparkrtDevicePtr recv, size_t count, int32_t type,
                                   int32_t op, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, op); !st.ok()) return st;
    return comm->comm->all_reduce(DevicePtr(send), DevicePtr(recv), count, type_of(type), op_of(op),
                                  Stream{stream});
  });
}

sparkrt_status* sparkrt_all_gather(sparkrt_comm* comm, SparkrtDevicePtr send,
                                   SparkrtDevicePtr recv, size_t count, int32_t type,
                                   SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, 0); !st.ok()) return st;
    return comm->comm->all_gather(DevicePtr(send), DevicePtr(recv), count, type_of(type),
                                  Stream{stream});
  });
}

sparkrt_status* sparkrt_reduce_scatter(sparkrt_comm* comm, SparkrtDevicePtr send,
                                       SparkrtDevicePtr recv, size_t count, int32_t type,
                                       int32_t op, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, op); !st.ok()) return st;
    return comm->comm->reduce_scatter(DevicePtr(send), DevicePtr(recv), count, type_of(type),
                                      op_of(op), Stream{stream});
  });
}

sparkrt_status* sparkrt_broadcast(sparkrt_comm* comm, SparkrtDevicePtr send,
                                  SparkrtDevicePtr recv, size_t count, int32_t type,
                                  int32_t root, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, 0); !st.ok()) return st;
    return comm->comm->broadcast(DevicePtr(send), DevicePtr(recv), count, type_of(type), root,
                                 Stream{stream});
  });
}

sparkrt_status* sparkrt_send(sparkrt_comm* comm, SparkrtDevicePtr send, size_t count,
                             int32_t type, int32_t peer, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, 0); !st.ok()) return st;
    return comm->comm->send(DevicePtr(send), count, type_of(type), peer, Stream{stream});
  });
}

sparkrt_status* sparkrt_recv(sparkrt_comm* comm, SparkrtDevicePtr recv, size_t count,
                             int32_t type, int32_t peer, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(comm);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    if (auto st = check_width(fn, type, 0); !st.ok()) return st;
    return comm->comm->recv(DevicePtr(recv), count, type_of(type), peer, Stream{stream});
  });
}

size_t sparkrt_data_type_size(int32_t type) {
  return sparkrt_dtype_size(type);
}

}  // extern "C"
