// The launcher environments (bootstrap/launch_env.h): Slurm host lists, derived
// ports, tasks per node, precedence and conflicts between launchers'
// variables, and where each launch meets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "bootstrap/launch_env.h"
#include "bootstrap/pmix.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

using Hosts = std::vector<std::string>;

ErrorKind kind_of(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.kind();
  }
  return ErrorKind::Internal;
}

TEST(SlurmHostlist, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expand_slurm_hostlist("node1"), Hosts{"node1"});
  EXPECT_EQ(expand_slurm_hostlist("n[01-04,07]"), (Hosts{"n01", "n02", "n03", "n04", "n07"}));
  EXPECT_EQ(expand_slurm_hostlist("n[8-11]"), (Hosts{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("login1,gpu[3,5],cpu-[1-2]-ib"),
            (Hosts{"login1", "gpu3", "gpu5", "cpu-1-ib", "cpu-2-ib"}));
  EXPECT_EQ(expand_slurm_hostlist("a[1-2]b[3-4]"), (Hosts{"a1b3", "a1b4", "a2b3", "a2b4"}));
  EXPECT_EQ(expand_slurm_hostlist("rack1-n[1]"), Hosts{"rack1-n1"});
}

TEST(SlurmHostlist, RefusesMalformedLists) {
  for (const char* bad : {"n[1-", "n[a-b]", "n[3-1]", "n[[1]]", "n]1[", "a,,b", "", "n[]"}) {
    std::string what;
    EXPECT_EQ(kind_of([&] { expand_slurm_hostlist(bad); }, &what), ErrorKind::InvalidArgument) << bad;
  }
}

TEST(SlurmPort, DerivedFromJobAndStep) {
  EXPECT_EQ(slurm_rendezvous_port(0, 0), 12000);
  EXPECT_EQ(slurm_rendezvous_port(1, 0), 12064);
  EXPECT_EQ(slurm_rendezvous_port(1, 1), 12065);
  EXPECT_EQ(slurm_rendezvous_port(312500, 0), 12000);  // 312500·64 = 20000000
  for (unsigned long long j : {1ull, 77ull, 123456789ull, (1ull << 40)}) {
    int p = slurm_rendezvous_port(j, 3);
    EXPECT_GE(p, 12000);
    EXPECT_LT(p, 32000);
  }
}

TEST(SlurmTasksPerNode, ParsesRepeats) {
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), -1);
  EXPECT_EQ(slurm_tasks_on_node("x", 0), -1);
}

TEST(LaunchEnv, NothingSetIsAJobOfOne) {
  auto l = parse_launch_env({});
  EXPECT_EQ(l.launcher, "");
  EXPECT_EQ(l.rank, -1);
  EXPECT_EQ(l.size, -1);
  EXPECT_TRUE(l.conflict.empty());
}

TEST(LaunchEnv, Torchrun) {
  auto l = parse_launch_env({{"RANK", "5"},
                             {"WORLD_SIZE", "8"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "4"},
                             {"GROUP_RANK", "1"},
                             {"MASTER_ADDR", "host0"},
                             {"MASTER_PORT", "29500"}});
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.size, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.rendezvous, LaunchEnv::Rendezvous::Master);
  EXPECT_EQ(l.master_addr, "host0");
  EXPECT_EQ(l.master_port, 29500);
  EXPECT_TRUE(l.conflict.empty());
  // Without MASTER_ADDR nothing is guessed: init fails naming it.
  l = parse_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(l.master_addr, "");
  EXPECT_EQ(l.master_port, -1);
}

TEST(LaunchEnv, SlurmDerivesAddressAndPort) {
  EnvMap env{{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "1"},
             {"SLURM_NODEID", "1"},
             {"SLURM_JOB_ID", "1234"},
             {"SLURM_STEP_ID", "2"},
             {"SLURM_STEP_NODELIST", "n[07-08]"},
             {"SLURM_JOB_NODELIST", "n[01-08]"},
             {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}};
  auto l = parse_launch_env(env);
  EXPECT_EQ(l.launcher, "Slurm");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.size, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.master_addr, "n07");  // the step's first host, not the job's
  EXPECT_EQ(l.master_port, slurm_rendezvous_port(1234, 2));
  EXPECT_NE(l.master_from.find("SLURM_STEP_NODELIST=n[07-08]"), std::string::npos) << l.master_from;
  EXPECT_EQ(l.job_key, "slurm-job-1234.2");
  // MASTER_PORT wins over the derived port; MASTER_ADDR over the host list.
  env["MASTER_PORT"] = "31000";
  env["MASTER_ADDR"] = "10.0.0.9";
  l = parse_launch_env(env);
  EXPECT_EQ(l.master_addr, "10.0.0.9");
  EXPECT_EQ(l.master_port, 31000);
  EXPECT_EQ(l.job_key, "");  // the user's port: no collision to guard against
  // Only the job's node list (e.g. an older Slurm): its first host.
  l = parse_launch_env(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "gpu[3,5]"}});
  EXPECT_EQ(l.master_addr, "gpu3");
  EXPECT_EQ(l.master_port, slurm_rendezvous_port(9, 0));
}

TEST(LaunchEnv, OpenMpiMeetsThroughAFileNamedAfterTheJob) {
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
             {"OMPI_MCA_ess_base_jobid", "123"},  {"OMPI_MCA_orte_hnp_uri", "123.0;tcp://127.0.0.1:4000"}};
  auto l = parse_launch_env(env);
  EXPECT_EQ(l.launcher, "Open MPI");
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.rendezvous, LaunchEnv::Rendezvous::File);
  EXPECT_EQ(l.rendezvous_file.rfind("/tmp/tutti-rendezvous-", 0), 0u) << l.rendezvous_file;
  auto other = env;
  other["OMPI_MCA_orte_hnp_uri"] = "123.0;tcp://127.0.0.1:4001";  // another mpirun
  EXPECT_NE(parse_launch_env(other).rendezvous_file, l.rendezvous_file);
  env["TUTTI_RENDEZVOUS_DIR"] = "/shared/scratch";
  EXPECT_EQ(parse_launch_env(env).rendezvous_file.rfind("/shared/scratch/tutti-rendezvous-", 0), 0u);
  env["MASTER_ADDR"] = "h";
  env["MASTER_PORT"] = "5";
  EXPECT_EQ(parse_launch_env(env).rendezvous, LaunchEnv::Rendezvous::Master);
}

TEST(LaunchEnv, OpenMpiMeetsThroughPmixWhenMpirunServesIt) {
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"},
             {"OMPI_COMM_WORLD_SIZE", "2"},
             {"OMPI_MCA_ess_base_jobid", "77"},
             {"OMPI_MCA_orte_hnp_uri", "76.0;tcp://127.0.0.1:4000"},
             {"PMIX_NAMESPACE", "77"},
             {"PMIX_RANK", "1"},
             {"PMIX_SERVER_URI4", "76.0;tcp4://127.0.0.1:4001"}};
  auto l = parse_launch_env(env);
  EXPECT_EQ(l.rendezvous, LaunchEnv::Rendezvous::Pmix);
  // The file, should libpmix not load here.
  EXPECT_EQ(l.rendezvous_file.rfind("/tmp/tutti-rendezvous-", 0), 0u) << l.rendezvous_file;
  env["TUTTI_PMIX"] = "0";
  EXPECT_EQ(parse_launch_env(env).rendezvous, LaunchEnv::Rendezvous::File);
  env["TUTTI_PMIX"] = "1";
  EXPECT_EQ(parse_launch_env(env).rendezvous, LaunchEnv::Rendezvous::Pmix);
  env["TUTTI_PMIX"] = "yes";
  std::string what;
  EXPECT_EQ(kind_of([&] { parse_launch_env(env); }, &what), ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("TUTTI_PMIX='yes'"), std::string::npos) << what;
  env.erase("TUTTI_PMIX");
  env["MASTER_ADDR"] = "h";
  env["MASTER_PORT"] = "5";
  EXPECT_EQ(parse_launch_env(env).rendezvous, LaunchEnv::Rendezvous::Master);
  // Hydra's and Slurm's PMIx variables change nothing for them.
  l = parse_launch_env(
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"PMI_FD", "7"}, {"PMIX_NAMESPACE", "x"}, {"PMIX_RANK", "0"}});
  EXPECT_EQ(l.rendezvous, LaunchEnv::Rendezvous::Pmi);
}

// Under a PMIx namespace whose server is gone, the rendezvous fails at once
// naming the call and its status. In a child process (gtest's threadsafe
// death-test style: a fresh exec), so that libpmix never initializes here.
TEST(PmixRendezvous, WithoutItsServerFailsNamingTheCall) {
  if (!pmix_unavailable().empty()) GTEST_SKIP() << "PMIx: " << pmix_unavailable();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("PMIX_NAMESPACE", "tutti-unit-test", 1);
        ::setenv("PMIX_RANK", "1", 1);
        for (const char* v : {"PMIX_SERVER_URI", "PMIX_SERVER_URI2", "PMIX_SERVER_URI21", "PMIX_SERVER_URI3",
                              "PMIX_SERVER_URI4", "PMIX_SERVER_URI41", "PMIX_SYSTEM_TMPDIR", "PMIX_SERVER_TMPDIR"})
          ::unsetenv(v);
        try {
          pmix_exchange(1, "", deadline_after(std::chrono::seconds(10)));
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::fflush(stderr);
          ::_exit(e.kind() == ErrorKind::PeerLost ? 3 : 4);
        }
        ::_exit(5);
      },
      ::testing::ExitedWithCode(3), "PMIx_Init failed: PMIX_ERR_[A-Z_]+ \\(");
}

TEST(LaunchEnv, HydraMeetsThroughPmi) {
  auto l = parse_launch_env(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"PMI_FD", "7"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"}});
  EXPECT_EQ(l.launcher, "hydra");
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.rendezvous, LaunchEnv::Rendezvous::Pmi);
  EXPECT_EQ(l.pmi_fd, 7);
}

TEST(LaunchEnv, DisagreeingLaunchersAreNamed) {
  // A stale RANK inside an srun step.
  auto l = parse_launch_env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(
      l.conflict.rfind("RANK=3, WORLD_SIZE=4 (torchrun) disagrees with SLURM_PROCID=1, SLURM_NTASKS=4 (Slurm)", 0), 0u)
      << l.conflict;
  // WORLD_SIZE against Open MPI's size.
  l = parse_launch_env(
      {{"RANK", "1"}, {"WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(l.conflict.find("WORLD_SIZE=8 (torchrun) disagrees with OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4"),
            std::string::npos)
      << l.conflict;
  // Agreeing variables are fine.
  l = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}});
  EXPECT_TRUE(l.conflict.empty()) << l.conflict;
  // torchrun (or tuttirun) inside an srun step: their variables describe the ranks.
  l = parse_launch_env(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"TORCHELASTIC_RUN_ID", "x"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_TRUE(l.conflict.empty()) << l.conflict;
  EXPECT_EQ(l.rank, 5);
  l = parse_launch_env({{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"TUTTI_LAUNCHER", "tuttirun"},
                        {"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "2"}});
  EXPECT_TRUE(l.conflict.empty()) << l.conflict;
  // mpirun/mpiexec inside an allocation: Slurm's variables are the daemon's.
  l = parse_launch_env(
      {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_TRUE(l.conflict.empty()) << l.conflict;
  EXPECT_EQ(l.rank, 3);
  l = parse_launch_env({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_TRUE(l.conflict.empty()) << l.conflict;
}

// Malformed rank variables are reported, not thrown: init throws them only
// when it needs the rank from the environment (a caller that passes rank and
// size is not failed by a stale export).
TEST(LaunchEnv, MalformedRankVariablesAreReportedNotThrown) {
  auto l = parse_launch_env({{"RANK", "0"}});
  EXPECT_NE(l.rank_error.find("WORLD_SIZE is not set but RANK is"), std::string::npos) << l.rank_error;
  EXPECT_EQ(l.rank, -1);
  EXPECT_EQ(l.launcher, "");
  l = parse_launch_env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
  EXPECT_NE(l.rank_error.find("RANK is not set but WORLD_SIZE is"), std::string::npos) << l.rank_error;
  EXPECT_EQ(l.master_addr, "h");
  l = parse_launch_env({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(l.rank_error.find("SLURM_PROCID='x'"), std::string::npos) << l.rank_error;
  EXPECT_EQ(l.rank, -1);  // nothing about the ranks is trusted
  l = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_TRUE(l.rank_error.empty()) << l.rank_error;
  EXPECT_EQ(l.rank, 1);
}

TEST(LaunchEnv, LocalNumberingThatContradictsItselfIsReported) {
  auto l = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "7"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(l.rank_error.find("LOCAL_RANK 7 is not below LOCAL_WORLD_SIZE 2"), std::string::npos) << l.rank_error;
  l = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
  EXPECT_NE(l.rank_error.find("LOCAL_WORLD_SIZE 4 exceeds WORLD_SIZE 2"), std::string::npos) << l.rank_error;
  l = parse_launch_env({{"OMPI_COMM_WORLD_RANK", "0"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  EXPECT_NE(l.rank_error.find("OMPI_COMM_WORLD_LOCAL_RANK 3 is not below OMPI_COMM_WORLD_LOCAL_SIZE 3"),
            std::string::npos)
      << l.rank_error;
  l = parse_launch_env({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(l.rank_error.find("LOCAL_RANK 2 is not below LOCAL_WORLD_SIZE 2"), std::string::npos) << l.rank_error;
  l = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_TRUE(l.rank_error.empty()) << l.rank_error;
  EXPECT_EQ(l.local_rank, 1);
}

TEST(LaunchEnv, MalformedValuesAreInvalidArguments) {
  EXPECT_EQ(kind_of([&] {
              parse_launch_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "n[1-"}});
            }),
            ErrorKind::InvalidArgument);
}

}  // namespace
}  // namespace tutti::detail
