// Where each process of a pp × dp × tp job sits: its pipeline rank, data-parallel replica and
// tensor rank, and the processes it shares a pipeline, a data-parallel group or a tensor group
// with. The numbering is Megatron-LM's, the one the cost model charges (see Parallelism).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/parallelism.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/message.hpp"

namespace pipesched {

//! The processes of one training job: `pipeline` pipeline ranks × `data` replicas × `tensor`
//! tensor ranks. Process g runs tensor rank i of data-parallel replica j of pipeline rank r
//! with g = i + t·(j + d·r) (tensor innermost, as Megatron-LM orders its groups and
//! Parallelism documents), so a tensor group is t consecutive processes (one node) and a
//! pipeline rank's t·d processes are consecutive.
struct ProcessGrid {
  int pipeline = 1;  //!< pipeline ranks p (the schedule's rank count)
  int data = 1;      //!< data-parallel replicas d
  int tensor = 1;    //!< tensor-parallel ranks t

  //! One process's place in the grid.
  struct Coordinates {
    int pipeline = 0;  //!< its pipeline rank r, 0..p−1
    int data = 0;      //!< its data-parallel replica j, 0..d−1
    int tensor = 0;    //!< its tensor rank i, 0..t−1
    friend bool operator==(const Coordinates&, const Coordinates&) = default;
  };

  //! The grid of a cluster plan: `pipeline` ranks, and `parallel`'s data and tensor degrees.
  static ProcessGrid of(const Parallelism& parallel, int pipeline) {
    ProcessGrid g{pipeline, parallel.data, parallel.tensor};
    g.check();
    return g;
  }

  //! Processes in the job: p·d·t.
  int size() const noexcept { return pipeline * data * tensor; }

  //! Throws invalid_argument naming the first degree below 1, or when p·d·t is more
  //! processes than an int counts.
  void check() const {
    auto bad = [](const char* name, int value) {
      const std::string f = std::string("ProcessGrid.") + name;
      throw invalid_argument(
          pipesched::field(f, value) + " is out of range; every degree is 1 or more.", f,
          std::to_string(value));
    };
    if (pipeline < 1) bad("pipeline", pipeline);
    if (data < 1) bad("data", data);
    if (tensor < 1) bad("tensor", tensor);
    const long long processes = static_cast<long long>(pipeline) * data * tensor;
    if (processes > std::numeric_limits<int>::max())
      throw invalid_argument("ProcessGrid: pp " + std::to_string(pipeline) + " × dp " +
                                 std::to_string(data) + " × tp " + std::to_string(tensor) + " = " +
                                 std::to_string(processes) +
                                 " processes is more than an MPI job can hold (2147483647); "
                                 "give smaller degrees.",
                             "ProcessGrid", std::to_string(processes));
  }

  //! Where process `process` sits; throws invalid_argument when it is not 0..size()−1.
  Coordinates coordinates(int process) const {
    check_process(process);
    return {process / (tensor * data), process / tensor % data, process % tensor};
  }

  //! The process at `c`: c.tensor + t·(c.data + d·c.pipeline).
  int process(const Coordinates& c) const {
    if (c.pipeline < 0 || c.pipeline >= pipeline || c.data < 0 || c.data >= data || c.tensor < 0 ||
        c.tensor >= tensor)
      throw invalid_argument("ProcessGrid: coordinates (pipeline " + std::to_string(c.pipeline) +
                                 ", data " + std::to_string(c.data) + ", tensor " +
                                 std::to_string(c.tensor) + ") are outside a grid of " +
                                 describe() + ".",
                             "ProcessGrid.Coordinates", describe_coordinates(c));
    return c.tensor + tensor * (c.data + data * c.pipeline);
  }

  //! The processes of `process`'s pipeline (same replica and tensor rank), by pipeline rank.
  std::vector<int> pipeline_group(int process) const {
    return along(
        process, [](Coordinates& c) -> int& { return c.pipeline; }, pipeline);
  }
  //! The processes of `process`'s data-parallel group (same pipeline rank and tensor rank),
  //! by replica: they hold the same stages and all-reduce their gradients.
  std::vector<int> data_group(int process) const {
    return along(
        process, [](Coordinates& c) -> int& { return c.data; }, data);
  }
  //! The processes of `process`'s tensor-parallel group (same pipeline rank and replica), by
  //! tensor rank: they split each layer of the same stages.
  std::vector<int> tensor_group(int process) const {
    return along(
        process, [](Coordinates& c) -> int& { return c.tensor; }, tensor);
  }

  //! "pp 2 × dp 2 × tp 1 = 4 processes".
  std::string describe() const {
    return "pp " + std::to_string(pipeline) + " × dp " + std::to_string(data) + " × tp " +
           std::to_string(tensor) + " = " + std::to_string(size()) + " processes";
  }

 private:
  void check_process(int process) const {
    check();
    if (process < 0 || process >= size())
      throw invalid_argument(pipesched::field("process", process) + " is outside a grid of " +
                                 describe() + "; processes run from 0 to " +
                                 std::to_string(size() - 1) + ".",
                             "process", std::to_string(process));
  }

  static std::string describe_coordinates(const Coordinates& c) {
    return "(" + std::to_string(c.pipeline) + ", " + std::to_string(c.data) + ", " +
           std::to_string(c.tensor) + ")";
  }

  template <class Axis>
  std::vector<int> along(int process, Axis axis, int extent) const {
    Coordinates c = coordinates(process);
    std::vector<int> group;
    for (int k = 0; k < extent; ++k) {
      axis(c) = k;
      group.push_back(this->process(c));
    }
    return group;
  }
};

}  // namespace pipesched
