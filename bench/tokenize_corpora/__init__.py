"""Gemma 3 tokenizing: one core's MB/s on source code, Markdown, HTML, changelogs and prose, ids against
llama.cpp (run), and throughput on prose with one core and two processes (speed)."""
