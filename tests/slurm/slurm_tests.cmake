# The main job under Slurm (issue 38): a one-node Slurm from Debian's packages
# (scripts/slurm/one-node-slurm.sh: munged, slurmctld and slurmd under the build tree) runs
# `srun -n 2 --mpi=pmix train_mnist ...` with the flags of train_mnist.np2_converges.
# tests/slurm/srun_main_job.sh checks that the 2 ranks are tasks 0 and 1 of one Slurm job with
# PMIx ranks 0 and 1, that the layout line says 2 ranks, that the replicas stay equal and the
# accuracy passes 80%, and stops the daemons whatever happens. Skipped (77), with the reason,
# where the packages are missing (scripts/install-deps.sh --tests installs them), without root,
# or where the daemons cannot start.
if(TARGET train_mnist)
  add_test(NAME slurm.np2_main_job
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/srun_main_job.sh ${PROJECT_SOURCE_DIR}/scripts/slurm/one-node-slurm.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/slurm_one_node
                   $<TARGET_FILE:train_mnist> --model mlp --epochs 1 --limit-train 12000 --limit-test 2000
                   --check-replicas)
  # Labelled "convergence" too, so that the asan preset leaves it out: under the sanitizers the
  # trainer's code paths are train_mnist.np2_converges's, and the launch is no dtrain code.
  set_tests_properties(slurm.np2_main_job PROPERTIES LABELS "examples;mpi;slurm;convergence" TIMEOUT 480 PROCESSORS 2
                       SKIP_RETURN_CODE 77)
endif()
