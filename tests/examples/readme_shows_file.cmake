# Fails unless README contains SOURCE verbatim, from its first line that is not a comment
# to its end: the README's library example is a program the tests compile and run.
#   -DREADME=<README.md> -DSOURCE=<a source file>
file(READ "${SOURCE}" source)
string(REGEX REPLACE "^(//[^\n]*\n)+\n?" "" body "${source}")
file(READ "${README}" readme)
string(FIND "${readme}" "${body}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} does not show ${SOURCE} verbatim (from its first line of code): copy the file's "
                      "code into the README's library example")
endif()
message("${README} shows ${SOURCE}")
