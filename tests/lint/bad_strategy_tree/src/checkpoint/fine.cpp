// Names no kind: a comment may say PipelineStrategy.
int layout_stages = 1;
