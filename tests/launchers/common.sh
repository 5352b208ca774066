# Sourced by the launcher tests: a clean environment and `need`.
#
# Nothing of another launch may leak in: no MASTER_ADDR, no rank variables.
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TUTTI_LAUNCHER \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS TUTTI_JOB_SECRET \
  TUTTI_PMIX TUTTI_RENDEZVOUS_DIR
export TUTTI_TIMEOUT=30

# need TOOL: skip (77) unless TOOL is installed.
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "SKIP: $1 is not installed (scripts/setup.sh installs it)" >&2; exit 77; }
}
