# The main job under Slurm (issue 38): a one-node Slurm from Debian's packages
# (scripts/slurm/one-node-slurm.sh: munged, slurmctld and slurmd under the build tree) runs
# `srun -n 2 --mpi=pmix train_mnist ...`. The job is a short variant of the README's main job
# (`--model cnn --epochs 3` on 2 ranks): the same CNN and 3 epochs on the first 12000 of the
# 60000 training images and 2000 test images, a fifth of its training, hence the name's
# "_short" (about 30-50 s on 2 vCPUs; test accuracy near 89%, the full job's about 92%).
# tests/slurm/srun_main_job.sh checks that the 2 ranks are tasks 0 and 1 of one Slurm job with
# PMIx ranks 0 and 1, that the layout line says 2 ranks, that the replicas stay equal and the
# final test accuracy passes 85% (chance: 10%), and stops the daemons whatever happens. Skipped
# (77), with the reason, where the packages are missing (scripts/install-deps.sh --tests
# installs them), without root, or where the daemons cannot start; DTRAIN_REQUIRE_SLURM=1
# makes that a failure where slurmctld is installed.
if(TARGET train_mnist)
  add_test(NAME slurm.np2_main_job_short
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/srun_main_job.sh ${PROJECT_SOURCE_DIR}/scripts/slurm/one-node-slurm.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/slurm_one_node
                   $<TARGET_FILE:train_mnist> --model cnn --epochs 3 --limit-train 12000 --limit-test 2000
                   --check-replicas)
  # Labelled "convergence" too, so that the asan preset leaves it out: a learning-outcome run
  # (3 CNN epochs would take minutes under the sanitizers), whose trainer code paths the other
  # np2 and CNN tests run there, and whose launch through Slurm is no dtrain code.
  set_tests_properties(slurm.np2_main_job_short PROPERTIES LABELS "examples;mpi;slurm;convergence" TIMEOUT 480
                       PROCESSORS 2 SKIP_RETURN_CODE 77 RESOURCE_LOCK one_node_slurm)
  # Elastic relaunch through srun steps (tests/slurm/srun_elastic.sh): 4 tasks on 2 fake hosts,
  # host b's lost at update 25 of 100, the job relaunched on host a's 2 and finished, every
  # sample of the epoch taken once. Skipped as above where Slurm cannot start.
  add_test(NAME slurm.np4_elastic_lose_a_host
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/srun_elastic.sh ${PROJECT_SOURCE_DIR}/scripts/slurm/one-node-slurm.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/slurm_elastic ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:train_mnist> --model mlp --hidden 64,64 --epochs 1 --limit-train 9600
                   --limit-test 1000 --batch-size 96 --checkpoint-every 10 --timeout 60 --no-rollback --threads 1)
  set_tests_properties(slurm.np4_elastic_lose_a_host PROPERTIES LABELS "examples;mpi;slurm;elastic" TIMEOUT 480
                       PROCESSORS 2 SKIP_RETURN_CODE 77 RESOURCE_LOCK one_node_slurm)
endif()
