int dtrain_catch_run(int argc, char** argv);

int main(int argc, char** argv) { return dtrain_catch_run(argc, argv); }
