// Streams and events of the mock: validated handles, per-stream counters and
// a deterministic fake clock.
#include "mock_test_support.h"

using namespace mocktest;
using absl::StatusCode;
using sparkrt::Event;
using sparkrt::Stream;

TEST_CASE("mock streams: handles are distinct, non-zero, and synchronize is counted per stream") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto s1 = dev->create_stream();
  auto s2 = dev->create_stream();
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  CHECK(s1->handle != 0);
  CHECK(s2->handle != 0);
  CHECK(s1->handle != s2->handle);

  REQUIRE_OK(dev->synchronize());
  REQUIRE_OK(dev->synchronize(*s1));
  REQUIRE_OK(dev->synchronize(*s1));
  auto c = mock.counters();
  CHECK(c.syncs == 3);
  CHECK(c.streams_created == 2);
  CHECK(mock.stream_counters({}).syncs == 1);
  CHECK(mock.stream_counters(*s1).syncs == 2);
  CHECK(mock.stream_counters(*s2).syncs == 0);
}

TEST_CASE("mock streams: stream-ordered copies are counted on their stream, blocking ones are not") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto s1 = dev->create_stream();
  auto s2 = dev->create_stream();
  auto a = dev->alloc(256);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  REQUIRE(a.ok());
  std::vector<uint8_t> host(256, 3);
  REQUIRE_OK(dev->copy_d2h_async(*a, host.data(), 16, *s1));
  REQUIRE_OK(dev->copy_d2h_async(*a, host.data(), 16, *s1));
  REQUIRE_OK(dev->copy_d2h_async(*a, host.data(), 16, *s2));
  REQUIRE_OK(dev->copy_d2h(*a, host.data(), 16));
  REQUIRE_OK(dev->copy_h2d_async(host.data(), *a, 16, *s2));
  REQUIRE_OK(dev->copy_d2d_async(*a, *a + 128, 16, *s1));
  REQUIRE_OK(dev->memset_async(*a, 1, 16, *s2));

  auto c1 = mock.stream_counters(*s1);
  auto c2 = mock.stream_counters(*s2);
  auto c0 = mock.stream_counters({});
  CHECK(c1.d2h_async == 2);
  CHECK(c2.d2h_async == 1);
  CHECK(c0.d2h_async == 0);
  CHECK(c2.h2d_async == 1);
  CHECK(c1.d2d_async == 1);
  CHECK(c2.memsets_async == 1);
  auto c = mock.counters();
  CHECK(c.d2h_async == 3);
  CHECK(c.d2h_blocking == 1);
}

TEST_CASE("mock streams: unknown and destroyed streams are errors naming the stream") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto s1 = dev->create_stream();
  auto s2 = dev->create_stream();
  auto a = dev->alloc(64);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  REQUIRE(a.ok());
  REQUIRE_OK(dev->destroy_stream(*s1));
  CHECK(mock.stream_counters(*s1).destroyed == 1);

  const std::string destroyed = "stream " + std::to_string(s1->handle) + " was destroyed";
  const std::string live = "0 (default), " + std::to_string(s2->handle);
  check_error(dev->synchronize(*s1), StatusCode::kInvalidArgument, {destroyed, live});
  check_error(dev->destroy_stream(*s1), StatusCode::kInvalidArgument, {destroyed});

  const Stream bogus{s2->handle + 1000};
  const std::string unknown = "unknown stream " + std::to_string(bogus.handle);
  check_error(dev->synchronize(bogus), StatusCode::kInvalidArgument, {"stream_synchronize", unknown, live});
  std::vector<uint8_t> host(64, 1);
  check_error(dev->copy_h2d_async(host.data(), *a, 64, bogus), StatusCode::kInvalidArgument,
              {"memcpy", unknown});
  check_error(dev->copy_d2h_async(*a, host.data(), 64, *s1), StatusCode::kInvalidArgument,
              {destroyed});
  check_error(dev->memset_async(*a, 0, 64, bogus), StatusCode::kInvalidArgument, {"memset", unknown});
  check_error(dev->destroy_stream({}), StatusCode::kInvalidArgument, {"default stream"});

  auto c = mock.counters();
  CHECK(c.syncs == 0);
  CHECK(c.h2d_async == 0);
  CHECK(c.streams_destroyed == 1);
  CHECK(c.errors == 7);
  // Querying a stream that never existed is NotFound (through the helper it
  // throws, so go through the table).
  SparkrtMockStreamCounters sc{};
  sc.struct_size = SPARKRT_MOCK_STREAM_COUNTERS_SIZE;
  SparkrtError* e = mock.extension().get_stream_counters(mock.native_device(), bogus.handle, &sc);
  REQUIRE(e != nullptr);
  CHECK(mock.extension().error_code(e) == static_cast<int32_t>(StatusCode::kNotFound));
  mock.extension().error_destroy(e);
}

TEST_CASE("mock events: record, wait, synchronize and a deterministic elapsed time") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto s = dev->create_stream();
  auto a = dev->alloc(64);
  auto e1 = dev->create_event();
  auto e2 = dev->create_event();
  REQUIRE(s.ok());
  REQUIRE(a.ok());
  REQUIRE(e1.ok());
  REQUIRE(e2.ok());
  CHECK(e1->handle != e2->handle);

  REQUIRE_OK(dev->record_event(*e1, *s));
  std::vector<uint8_t> host(64, 9);
  for (int i = 0; i < 4; ++i) REQUIRE_OK(dev->copy_h2d_async(host.data(), *a, 64, *s));
  REQUIRE_OK(dev->memset_async(*a, 0, 8, *s));
  REQUIRE_OK(dev->record_event(*e2, *s));
  REQUIRE_OK(dev->wait_event({}, *e2));
  REQUIRE_OK(dev->synchronize_event(*e2));

  // One fake microsecond per copy, memset or launch between the records.
  auto ms = dev->elapsed_ms(*e1, *e2);
  REQUIRE(ms.ok());
  CHECK(*ms == doctest::Approx(0.005));
  auto back = dev->elapsed_ms(*e2, *e1);
  REQUIRE(back.ok());
  CHECK(*back == doctest::Approx(-0.005));

  auto c = mock.counters();
  CHECK(c.events_created == 2);
  CHECK(c.events_recorded == 2);
  CHECK(c.event_waits == 1);
  CHECK(c.event_syncs == 1);
  CHECK(mock.stream_counters(*s).events_recorded == 2);
  CHECK(mock.stream_counters({}).event_waits == 1);
}

TEST_CASE("mock events: unknown, destroyed and unrecorded events are errors naming the event") {
  auto dev = open_mock();
  auto e1 = dev->create_event();
  auto e2 = dev->create_event();
  REQUIRE(e1.ok());
  REQUIRE(e2.ok());
  const Event bogus{e2->handle + 50};
  const std::string unknown = "unknown event " + std::to_string(bogus.handle);
  check_error(dev->record_event(bogus), StatusCode::kInvalidArgument, {"event_record", unknown});
  check_error(dev->synchronize_event(bogus), StatusCode::kInvalidArgument, {unknown});
  check_error(dev->wait_event({}, bogus), StatusCode::kInvalidArgument, {unknown});
  check_error(dev->destroy_event(bogus), StatusCode::kInvalidArgument, {unknown});
  check_error(dev->elapsed_ms(*e1, bogus).status(), StatusCode::kInvalidArgument, {unknown});

  REQUIRE_OK(dev->record_event(*e1));
  check_error(dev->elapsed_ms(*e1, *e2).status(), StatusCode::kFailedPrecondition,
              {"event " + std::to_string(e2->handle) + " has not been recorded"});

  REQUIRE_OK(dev->destroy_event(*e1));
  check_error(dev->record_event(*e1), StatusCode::kInvalidArgument,
              {"event " + std::to_string(e1->handle) + " was destroyed"});
  // An event on an unknown stream names the stream.
  check_error(dev->record_event(*e2, Stream{777}), StatusCode::kInvalidArgument,
              {"unknown stream 777"});
}
