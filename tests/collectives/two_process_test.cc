// Two processes, one rank each, joined by a unique id passed through a file
// (sparkrt_collectives_rank), on the cpu backend.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "status_checks.h"
#include "subprocess.h"

namespace {

using sparkrt::testing::ProcessResult;
using sparkrt::testing::run_process;

std::string temp_id_file() {
  char path[] = "/tmp/sparkrt_unique_idXXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::remove(path);  // rank 0 creates it: an empty file must not be read as an id
  return path;
}

// Runs ranks 0..args.size()-1 at once; args[r] are rank r's extra arguments.
std::vector<ProcessResult> run_ranks(const std::vector<std::string>& extra, uint64_t seed,
                                     const std::map<std::string, std::optional<std::string>>& env) {
  const std::string id_file = temp_id_file();
  const int n = static_cast<int>(extra.size());
  std::vector<ProcessResult> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::vector<std::string> argv = {SPARKRT_COLLECTIVES_RANK, id_file, std::to_string(r),
                                       std::to_string(n), std::to_string(seed)};
      if (!extra[r].empty()) argv.push_back(extra[r]);
      results[r] = run_process(argv, env);
    });
  for (auto& t : threads) t.join();
  std::remove(id_file.c_str());
  return results;
}

}  // namespace

TEST_CASE("collectives: two processes, one rank each, from a unique id in a file (cpu)") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  const auto results = run_ranks({"", ""}, seed, {{"SPARKRT_COLLECTIVE_TIMEOUT_S", "60"}});
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank ", r, " stdout: ", results[r].out, " stderr: ", results[r].err);
    CHECK(results[r].exit_code == 0);
    CHECK(results[r].out.find("rank " + std::to_string(r) + ": ok") != std::string::npos);
  }
}

TEST_CASE("collectives: a process that leaves after joining fails the other rank, no hang") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  const auto start = std::chrono::steady_clock::now();
  // The timeout is the backstop; the lost connection must fail rank 0 first.
  const auto results =
      run_ranks({"", "exit-after-join"}, seed, {{"SPARKRT_COLLECTIVE_TIMEOUT_S", "120"}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("rank 0 stderr: ", results[0].err, " rank 1 stdout: ", results[1].out);
  CHECK(results[1].exit_code == 0);
  CHECK(results[0].exit_code == 1);
  CHECK(results[0].err.find("rank 0:") != std::string::npos);
  CHECK(seconds < 60);
}
