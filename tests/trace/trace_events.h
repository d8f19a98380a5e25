// Reads a trace written by sparkrt::trace with a validating JSON parser, so a
// malformed file fails the test that reads it.
#ifndef SPARKRT_TESTS_TRACE_TRACE_EVENTS_H_
#define SPARKRT_TESTS_TRACE_TRACE_EVENTS_H_

#include <doctest/doctest.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace tracetest {

struct TraceEvent {
  std::string ph, name, cat;
  double ts = 0, dur = 0;
  int pid = -1;  // 1: the host; others: a device, with a track per stream
  uint64_t tid = 0;
  boost::property_tree::ptree args;

  std::string arg(const std::string& key) const { return args.get<std::string>(key, ""); }
  // An array argument such as "grid", as "3,2,1".
  std::string list(const std::string& key) const {
    std::string out;
    if (auto a = args.get_child_optional(key))
      for (const auto& [k, v] : *a) out += (out.empty() ? "" : ",") + v.data();
    return out;
  }
};

inline std::vector<TraceEvent> read_trace(const std::string& path) {
  boost::property_tree::ptree root;
  try {
    boost::property_tree::read_json(path, root);
  } catch (const boost::property_tree::json_parser_error& e) {
    FAIL("not valid JSON: ", e.what());
  }
  std::vector<TraceEvent> events;
  for (const auto& [key, e] : root.get_child("traceEvents")) {
    TraceEvent t;
    t.ph = e.get<std::string>("ph");
    t.name = e.get<std::string>("name");
    t.cat = e.get<std::string>("cat", "");
    t.ts = e.get<double>("ts", 0);
    t.dur = e.get<double>("dur", 0);
    t.pid = e.get<int>("pid");
    t.tid = e.get<uint64_t>("tid");
    if (auto a = e.get_child_optional("args")) t.args = *a;
    events.push_back(std::move(t));
  }
  return events;
}

// The host's complete events named `name`.
inline std::vector<TraceEvent> spans(const std::vector<TraceEvent>& events,
                                     const std::string& name) {
  std::vector<TraceEvent> out;
  for (const auto& e : events)
    if (e.ph == "X" && e.pid == 1 && e.name == name) out.push_back(e);
  return out;
}

// The devices' complete events named `name`, in the order written.
inline std::vector<TraceEvent> device_spans(const std::vector<TraceEvent>& events,
                                            const std::string& name) {
  std::vector<TraceEvent> out;
  for (const auto& e : events)
    if (e.ph == "X" && e.pid != 1 && e.name == name) out.push_back(e);
  return out;
}

}  // namespace tracetest

#endif  // SPARKRT_TESTS_TRACE_TRACE_EVENTS_H_
