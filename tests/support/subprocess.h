// Runs a program in a child process with a modified environment and
// captures its exit code, stdout and stderr. For tests of behaviour that
// depends on the environment at process start.
#ifndef SPARKRT_TESTS_SUPPORT_SUBPROCESS_H_
#define SPARKRT_TESTS_SUPPORT_SUBPROCESS_H_

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace sparkrt::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when the child did not exit normally
  std::string out;
  std::string err;
};

// `env`: variables to set (value) or remove (nullopt); the rest is inherited.
inline ProcessResult run_process(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::optional<std::string>>& env) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v) vars[k] = *v;
    else vars.erase(k);
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  char out_path[] = "/tmp/sparkrt_test_outXXXXXX";
  char err_path[] = "/tmp/sparkrt_test_errXXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  ProcessResult result;
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data()) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out_fd);
  close(err_fd);
  auto slurp = [](const char* path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::remove(path);
    return ss.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

}  // namespace sparkrt::testing

#endif  // SPARKRT_TESTS_SUPPORT_SUBPROCESS_H_
