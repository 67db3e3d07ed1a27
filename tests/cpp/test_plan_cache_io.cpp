// SPDX-License-Identifier: Apache-2.0
// The on-disk plan cache against hostile files: special files at the cache path are ignored without
// blocking, unknown engine ids are reported and skipped, and write failures carry the OS reason.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "opendnn/opendnn.h"
#include "plan/plan_cache.h"

using namespace opendnn;

namespace {

class PlanCacheIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("opendnn-plan-cache-io-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ::setenv("OPENDNN_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // x -> relu -> y, validated.
  static Graph make_graph() {
    Graph g;
    g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 8}).set_uid(1));
    g.relu(x, NodeAttrs().set_name("act"))->set_output(true).set_uid(2);
    EXPECT_TRUE(g.validate().is_good());
    return g;
  }
  std::filesystem::path dir_;
};

TEST_F(PlanCacheIo, FifoAtTheCachePathIsIgnoredAndNeverBlocks) {
  Graph g = make_graph();
  std::string path = plan_cache::cache_path(g, Target{});
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  ::testing::internal::CaptureStderr();
  auto planned = std::async(std::launch::async, [&] { return g.build({HeurMode::A, HeurMode::FALLBACK}); });
  if (planned.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // Unblock a reader stuck in open() so the test can end, then fail.
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    planned.wait();
    (void)::testing::internal::GetCapturedStderr();
    FAIL() << "build() blocked on a FIFO at the plan-cache path";
  }
  Status s = planned.get();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.is_good()) << s.to_string();
  EXPECT_NE(err.find("ignoring plan cache file"), std::string::npos) << err;
  EXPECT_NE(err.find("a FIFO, not a regular file"), std::string::npos) << err;
}

TEST_F(PlanCacheIo, UnknownEngineIdsAreReportedAndSkipped) {
  Graph g = make_graph();
  std::string path = plan_cache::cache_path(g, Target{});
  auto fp = plan_cache::graph_fingerprint(g);
  ASSERT_TRUE(plan_cache::write(path, fp, "cpu", {{987654, 0, 1.0}, {kReferenceEngineId, 0, 2.0}}).is_good());
  std::vector<plan_cache::Entry> got;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(plan_cache::read(path, fp, "cpu", got));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("engine id 987654, which no registered engine has"), std::string::npos) << err;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].engine_id, kReferenceEngineId);
}

TEST_F(PlanCacheIo, WriteFailuresNameTheOsReason) {
  // The target is a directory: the rename fails, and the message says why.
  std::string path = (dir_ / "taken").string();
  std::filesystem::create_directories(dir_ / "taken" / "inside");
  Status s = plan_cache::write(path, 1, "cpu", {});
  ASSERT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("cannot write " + path + ": Is a directory"), std::string::npos) << s.message();
  // The folder cannot be created (a file is in the way).
  { std::ofstream(dir_ / "file") << "x"; }
  s = plan_cache::write((dir_ / "file" / "plans.txt").string(), 1, "cpu", {});
  ASSERT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s.message();
}

}  // namespace
