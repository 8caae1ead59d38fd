// The Catch2 v2 implementation, compiled once for every test executable.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int dtrain_catch_run(int argc, char** argv) { return Catch::Session().run(argc, argv); }
