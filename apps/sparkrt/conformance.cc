// `sparkrt conformance`: the backend conformance suite (tests/conformance/)
// run against one plugin. This file reads the command's options; the suite
// opens the backend, decides what to skip and runs the cases.
#include <iostream>
#include <string>

#include "commands.h"
#include "suite.h"

namespace sparkrt::cli {
namespace {

constexpr std::string_view kConformanceUsage =
    "usage: sparkrt conformance [--backend NAME|PATH] [--skip FEATURE:REASON]... [--list]\n"
    "                           [-- doctest options]\n";

int conformance_usage_error(std::string_view message) {
  std::cerr << "sparkrt conformance: " << message << "\n" << kConformanceUsage;
  return 2;
}

std::string feature_names() {
  std::string names;
  for (const conformance::Feature& f : conformance::features())
    names += names.empty() ? f.name : std::string(", ") + f.name;
  return names;
}

}  // namespace

int run_conformance(std::span<const std::string_view> args) {
  conformance::SuiteOptions options;
  bool list = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      options.doctest_args.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--list") {
      list = true;
      continue;
    }
    // --backend and --skip take a value, as --opt=VALUE or --opt VALUE.
    const std::string_view name = arg.substr(0, arg.find('='));
    if (name != "--backend" && name != "--skip") {
      if (!arg.starts_with("-")) {
        return conformance_usage_error("unexpected argument '" + std::string(arg) +
                                       "'; give the backend with --backend");
      }
      return conformance_usage_error("unknown option '" + std::string(arg) +
                                     "'; doctest options go after '--'");
    }
    std::string_view value;
    if (name.size() < arg.size()) {
      value = arg.substr(name.size() + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return conformance_usage_error(std::string(name) + " needs a value");
    }
    if (name == "--backend") {
      if (value.empty()) return conformance_usage_error("--backend needs a name or a plugin path");
      options.backend = value;
      continue;
    }
    const size_t colon = value.find(':');
    const std::string_view feature = value.substr(0, colon);
    if (conformance::find_feature(feature) == nullptr) {
      return conformance_usage_error("--skip: unknown feature '" + std::string(feature) +
                                     "'; the features are " + feature_names());
    }
    if (colon == std::string_view::npos || colon + 1 == value.size()) {
      return conformance_usage_error("--skip " + std::string(feature) +
                                     ": say why the backend cannot offer it: --skip " +
                                     std::string(feature) + ":REASON");
    }
    options.skips.emplace_back(feature, value.substr(colon + 1));
  }
  std::cout.flush();
  return list ? conformance::list_suite() : conformance::run_suite(options);
}

}  // namespace sparkrt::cli
