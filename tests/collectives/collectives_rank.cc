// One rank of a clique that spans processes, for two_process_test.cc:
//
//   sparkrt_collectives_rank ID_FILE RANK NUM_RANKS SEED [exit-after-join]
//
// Rank 0 makes the unique id on cpu device 0 and writes it to ID_FILE (by
// rename, so a reader never sees half of it); the other ranks wait for the
// file. Each rank joins on cpu device RANK, all-reduces (sum) and
// all-gathers data made from SEED and its rank, and checks both results
// against what every rank's data must give. Prints "rank R: ok" and exits 0;
// exits 1 with the error otherwise. exit-after-join: leaves right after
// joining, so the others' first collective loses a peer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sparkrt/communicator.h"
#include "sparkrt/device.h"

namespace {

constexpr uint32_t kCount = 4099;

std::vector<int32_t> rank_data(uint64_t seed, int rank) {
  std::mt19937_64 gen(seed * 1000003 + rank);
  std::uniform_int_distribution<int32_t> dist(-1000000, 1000000);
  std::vector<int32_t> v(kCount);
  for (auto& x : v) x = dist(gen) | 1;  // never zero
  return v;
}

int fail(int rank, const std::string& what) {
  std::cerr << "rank " << rank << ": " << what << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: sparkrt_collectives_rank ID_FILE RANK NUM_RANKS SEED [exit-after-join]\n";
    return 2;
  }
  const std::string id_file = argv[1];
  const int rank = std::atoi(argv[2]), n = std::atoi(argv[3]);
  const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  const bool exit_after_join = argc > 5 && std::string(argv[5]) == "exit-after-join";

  auto dev = sparkrt::Device::open({.backend = "cpu", .device_index = rank});
  if (!dev.ok()) return fail(rank, dev.status().ToString());
  sparkrt::UniqueId id;
  if (rank == 0) {
    auto made = sparkrt::Communicator::unique_id(**dev);
    if (!made.ok()) return fail(rank, made.status().ToString());
    id = *made;
    const std::string tmp = id_file + ".tmp";
    std::ofstream(tmp) << id.to_hex() << "\n";
    if (std::rename(tmp.c_str(), id_file.c_str()) != 0) return fail(rank, "rename failed");
  } else {
    std::string text;
    for (int tries = 0; tries < 3000 && text.empty(); ++tries) {
      std::ifstream in(id_file);
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      if (text.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto read = sparkrt::UniqueId::from_hex(text);
    if (!read.ok()) return fail(rank, read.status().ToString());
    id = *read;
  }
  auto comm = sparkrt::Communicator::create_rank(**dev, n, rank, id);
  if (!comm.ok()) return fail(rank, comm.status().ToString());
  if (exit_after_join) {
    std::cout << "rank " << rank << ": joined, leaving\n";
    std::_Exit(0);  // as a crash would: nothing torn down
  }

  const std::vector<int32_t> mine = rank_data(seed, rank);
  std::vector<int32_t> sum(kCount, 0), gathered(uint64_t{kCount} * static_cast<uint64_t>(n), 0);
  std::vector<std::vector<int32_t>> all;
  for (int r = 0; r < n; ++r) {
    all.push_back(rank_data(seed, r));
    for (uint32_t i = 0; i < kCount; ++i)
      sum[i] = static_cast<int32_t>(static_cast<uint32_t>(sum[i]) + static_cast<uint32_t>(all[r][i]));
    std::copy(all[r].begin(), all[r].end(), gathered.begin() + static_cast<uint64_t>(r) * kCount);
  }
  sparkrt::Device& d = **dev;
  auto send = d.alloc(kCount * 4);
  auto recv = d.alloc(kCount * 4);
  auto gather = d.alloc(uint64_t{kCount} * n * 4);
  if (!send.ok() || !recv.ok() || !gather.ok()) return fail(rank, "alloc failed");
  absl::Status s = d.copy_h2d(mine, *send);
  if (s.ok()) s = d.memset(*recv, 0xa5, kCount * 4);
  if (s.ok()) s = d.memset(*gather, 0xa5, uint64_t{kCount} * n * 4);
  if (s.ok())
    s = (*comm)->all_reduce(*send, *recv, kCount, sparkrt::DataType::kI32, sparkrt::ReduceOp::kSum);
  if (s.ok()) s = (*comm)->all_gather(*send, *gather, kCount, sparkrt::DataType::kI32);
  if (!s.ok()) return fail(rank, s.ToString());
  std::vector<int32_t> got_sum(kCount), got_gather(uint64_t{kCount} * n);
  if (!d.copy_d2h(*recv, got_sum).ok() || !d.copy_d2h(*gather, got_gather).ok())
    return fail(rank, "copy_d2h failed");
  if (got_sum != sum) return fail(rank, "all_reduce result differs from the sum of every rank's data");
  if (got_gather != gathered) return fail(rank, "all_gather result differs from every rank's data");
  s = (*comm)->destroy();
  if (!s.ok()) return fail(rank, s.ToString());
  std::cout << "rank " << rank << ": ok\n";
  return d.close().ok() ? 0 : 1;
}
