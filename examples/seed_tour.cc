// The seed tour: the nine torch.distributed examples of the tutorial tutti
// was created from, in order, on any number of ranks. Each prints
// "Rank R has data ..." with the values the tutorial shows.
//
//   tuttirun -n 4 build/bin/seed_tour
#include <tutti/tutti.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

std::string fmt(float v) {
  char b[32];
  if (v == static_cast<float>(static_cast<long long>(v))) {
    std::snprintf(b, sizeof b, "%lld.", static_cast<long long>(v));
  } else {
    std::snprintf(b, sizeof b, "%g", v);
  }
  return b;
}
std::string tensor(const std::vector<float>& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.size(); ++i) s += (i ? ", " : "") + fmt(t[i]);
  return s + "]";
}
std::string tensor_list(const std::vector<std::vector<float>>& l) {
  std::string s = "[";
  for (std::size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + tensor(l[i]);
  return s + "]";
}
void say(const tutti::Communicator& c, const char* example, const std::string& data) {
  std::printf("%-16s Rank %d has data %s\n", example, c.rank(), data.c_str());
  std::fflush(stdout);
}

constexpr auto F32 = tutti::DataType::Float32;

}  // namespace

int main() {
  try {
    tutti::Communicator world = tutti::init();
    const int rank = world.rank(), size = world.size();
    std::vector<int> all(size);
    for (int r = 0; r < size; ++r) all[r] = r;
    if (rank == 0) std::printf("seed tour on %d ranks\n", size);

    // 1. Point to point, blocking: rank 0 sends [1.] to rank 1.
    {
      auto group = world.new_group(all);
      std::vector<float> t{0.f};
      if (size >= 2) {
        if (rank == 0) {
          t[0] += 1;
          group->send(t.data(), 1, F32, 1);
        } else if (rank == 1) {
          group->recv(t.data(), 1, F32, 0);
        }
      }
      say(world, "p2p_block", tensor(t));
    }
    // 2. Point to point, non-blocking: isend/irecv, then wait().
    {
      auto group = world.new_group(all);
      std::vector<float> t{0.f};
      tutti::Work req;
      if (size >= 2 && rank == 0) {
        t[0] += 1;
        req = group->isend(t.data(), 1, F32, 1);
        std::printf("Rank 0 started sending\n");
      } else if (size >= 2 && rank == 1) {
        req = group->irecv(t.data(), 1, F32, 0);
        std::printf("Rank 1 started receiving\n");
      }
      req.wait();
      say(world, "p2p_unblock", tensor(t));
    }
    // 3. Broadcast [1.] from rank 0.
    {
      auto group = world.new_group(all);
      std::vector<float> t{rank == 0 ? 1.f : 0.f};
      group->broadcast(t.data(), 1, F32, 0);
      say(world, "broadcast", tensor(t));
    }
    // 4. Reduce: every rank holds [1.]; SUM to dst 1 (0 on a world of one).
    {
      auto group = world.new_group(all);
      const int dst = size >= 2 ? 1 : 0;
      std::vector<float> t{1.f};
      group->reduce(t.data(), t.data(), 1, F32, tutti::ReduceOp::SUM, dst);
      say(world, "reduce", tensor(t));
    }
    // 5. All-reduce: every rank holds [1.]; SUM.
    {
      auto group = world.new_group(all);
      std::vector<float> t{1.f};
      group->all_reduce(t.data(), t.data(), 1, F32, tutti::ReduceOp::SUM);
      say(world, "all_reduce", tensor(t));
    }
    // 6. Gather: rank r holds [r]; to dst 1.
    {
      auto group = world.new_group(all);
      const int dst = size >= 2 ? 1 : 0;
      std::vector<float> t{static_cast<float>(rank)};
      std::vector<std::vector<float>> gather_list;
      if (rank == dst) {
        gather_list.assign(size, std::vector<float>{0.f});
        std::vector<void*> ptrs;
        for (auto& g : gather_list) ptrs.push_back(g.data());
        group->gather(t.data(), std::span<void* const>(ptrs), 1, F32, dst);
      } else {
        group->gather(t.data(), std::span<void* const>(), 1, F32, dst);
      }
      say(world, "gather", tensor_list(gather_list));
    }
    // 7. All-gather: rank r holds [r].
    {
      auto group = world.new_group(all);
      std::vector<float> t{static_cast<float>(rank)};
      std::vector<std::vector<float>> gather_list(size, std::vector<float>{0.f});
      std::vector<void*> ptrs;
      for (auto& g : gather_list) ptrs.push_back(g.data());
      group->all_gather(t.data(), std::span<void* const>(ptrs), 1, F32);
      say(world, "all_gather", tensor_list(gather_list));
    }
    // 8. Scatter: rank 0 scatters [[1.], [2.], ...].
    {
      auto group = world.new_group(all);
      std::vector<float> t{0.f};
      std::vector<std::vector<float>> tensor_list_src;
      std::vector<const void*> ptrs;
      if (rank == 0) {
        for (int i = 0; i < size; ++i) tensor_list_src.push_back({static_cast<float>(i + 1)});
        for (auto& x : tensor_list_src) ptrs.push_back(x.data());
      }
      group->scatter(std::span<const void* const>(ptrs), t.data(), 1, F32, 0);
      say(world, "scatter", tensor(t));
    }
    // 9. Reduce-scatter: every rank holds [[0.], [1.], ...]; SUM.
    {
      auto group = world.new_group(all);
      std::vector<float> t{0.f};
      std::vector<std::vector<float>> tl;
      std::vector<const void*> ptrs;
      for (int i = 0; i < size; ++i) tl.push_back({static_cast<float>(i)});
      for (auto& x : tl) ptrs.push_back(x.data());
      group->reduce_scatter(std::span<const void* const>(ptrs), t.data(), 1, F32, tutti::ReduceOp::SUM);
      say(world, "reduce_scatter", tensor(t));
    }
    world.barrier();
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "seed_tour: %s\n", e.what());
    return 1;
  }
  return 0;
}
