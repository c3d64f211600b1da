// The main of a GoogleTest program run under mpirun: rank 0 prints the run, the other ranks
// print only their failed assertions (prefixed with the rank), and the job fails when any
// rank failed. `min_processes`: fewer processes is a usage error (exit 2).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "pipesched/transport/mpi/mpi_session.hpp"

namespace pipesched::testing_support {

// GoogleTest calls OnTestPartResult holding its UnitTest's (non-recursive) mutex, which
// UnitTest::current_test_info() takes too: asking it from there deadlocks the process at its
// first failed assertion. The test's name is kept from OnTestStart instead.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { test_ = "(between tests)"; }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::printf("[rank %d] %s:%d: failure in %s\n%s\n", rank_,
                  r.file_name() ? r.file_name() : "?", r.line_number(), test_.c_str(), r.message());
      std::fflush(stdout);
    }
  }

 private:
  int rank_;
  std::string test_ = "(between tests)";
};

inline int run_mpi_tests(int argc, char** argv, int min_processes) {
  mpi::Session session(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.size() < min_processes) {
    std::fprintf(stderr, "%s: needs %d or more processes; run it as `mpirun -np %d %s`\n", argv[0],
                 min_processes, min_processes, argv[0]);
    return 2;
  }
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(session.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  int any = failed, worst = 0;
  MPI_Allreduce(&any, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (session.rank() == 0 && worst != 0 && failed == 0)
    std::printf("another rank reported failures (see its output above)\n");
  return worst;
}

}  // namespace pipesched::testing_support
