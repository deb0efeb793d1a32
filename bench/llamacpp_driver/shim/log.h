// Stand-in for llama.cpp's common/log.h when compiling common/ngram-cache.cpp alone.
// The only logging ngram-cache.cpp does is LOG_DBG per drafted token, hidden at the default verbosity.
#pragma once
#define LOG_DBG(...) ((void) 0)
