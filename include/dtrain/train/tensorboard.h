// Scalars as TensorBoard event files, the format `tensorboard --logdir DIR` watches: one
// file per writer, a TFRecord stream of `Event` protocol buffers. Buffered; flush() (and
// the destructor) hands them to the file, so TensorBoard sees them while training runs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace dtrain::train {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and in it a new file named as TensorFlow names them,
  // events.out.tfevents.<unix seconds>.<hostname>[.<suffix>], which starts with the
  // file-version event. Several writers (ranks) in one directory need different suffixes.
  // Throws dtrain::Error naming the directory or file when either cannot be created.
  explicit TensorBoardWriter(const std::filesystem::path& dir, std::string_view suffix = {});
  ~TensorBoardWriter();  // flushes; a failure there is logged, not thrown
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One point of the curve `tag` at `step`, stamped with the wall time now. TensorBoard
  // stores scalars as float, so `value` is rounded to float.
  void add_scalar(std::string_view tag, double value, std::int64_t step);
  // Writes the buffered events to the file. Throws dtrain::Error naming it on failure.
  void flush();

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace dtrain::train
