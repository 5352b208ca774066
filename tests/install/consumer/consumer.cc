// A program outside the tutti tree, built against the installed package.
#include <tutti/tutti.h>

#include <cstdio>

int main() {
  tutti::Communicator comm = tutti::init();
  int v = comm.rank() + 1;
  comm.all_reduce(&v, &v, 1, tutti::DataType::Int32, tutti::ReduceOp::SUM);
  std::printf("consumer rank %d of %d: sum %d\n", comm.rank(), comm.size(), v);
  return 0;
}
