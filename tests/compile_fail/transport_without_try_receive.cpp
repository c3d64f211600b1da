// expect: a transport needs `std::optional<tensor> try_receive
// A transport that cannot poll is named in the error.
#include <chrono>
#include <vector>

#include "pipesched/exec/concepts.hpp"

struct BlockingOnly {
  void send(int, int, const pipesched::MessageKey&, std::vector<double>&&) {}
  std::vector<double> receive(int, const pipesched::MessageKey&, std::chrono::duration<double>) {
    return {};
  }
  void abort() {}
};

static_assert(pipesched::check_transport<BlockingOnly, std::vector<double>>());

int main() {}
